"""A run box's spec through a backend's translations (pybox._core.seal), for tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pybox._core.posture import RunBoxSpec
from pybox._core.seal import BoxFacts, PostureReport, Requirement, SealTranslation, check
from pybox._engine.docker_seal import DOCKER_SEAL


def requirements(spec: RunBoxSpec, seal: SealTranslation = DOCKER_SEAL) -> tuple[Requirement, ...]:
    return seal.requirements(spec.box())


def create_body(spec: RunBoxSpec, seal: SealTranslation = DOCKER_SEAL) -> dict[str, Any]:
    return seal.create_request(spec.box())


def verify(
    spec: RunBoxSpec, document: Mapping[str, Any], seal: SealTranslation = DOCKER_SEAL
) -> PostureReport:
    return check(spec.box(), BoxFacts(seal, document))
