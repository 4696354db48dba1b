"""A run request and its validation (pure). Bad input changes nothing."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pybox._core.errors import InvalidRequest
from pybox._core.images import check_image_name
from pybox._core.limits import LimitRequest, Limits

CODE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\.py")
MAX_NAME_BYTES = 255
MAX_INPUTS = 1000


@dataclass(frozen=True)
class InputFile:
    """A file the program finds read-only in its input folder."""

    name: str
    data: bytes


@dataclass(frozen=True)
class RunRequest:
    code: bytes
    code_name: str = "main.py"
    inputs: tuple[InputFile, ...] = ()
    limits: LimitRequest = field(default_factory=LimitRequest)
    image: str = "stdlib"
    collect_outputs: bool = False
    env: tuple[tuple[str, str], ...] = ()


def check_input_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidRequest(f"Input file names must be strings, not {type(name).__name__}.")
    problem = None
    if not name or name in (".", ".."):
        problem = "is empty or a dot entry"
    elif "/" in name or "\\" in name:
        problem = "contains a path separator; give a plain file name"
    elif any(ord(c) < 32 or ord(c) == 127 for c in name):
        problem = "contains control characters"
    elif len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        problem = f"is longer than {MAX_NAME_BYTES} bytes"
    if problem:
        raise InvalidRequest(f"Input file name {name!r} {problem}.")
    return name


def check_request(request: RunRequest, limits: Limits) -> None:
    """Refuse a request that cannot run as asked, before anything is created."""
    if not isinstance(request.code, bytes):
        raise InvalidRequest(f"The code must be bytes, not {type(request.code).__name__}.")
    if not isinstance(request.code_name, str) or not CODE_NAME_RE.fullmatch(request.code_name):
        raise InvalidRequest(
            f"The program's file name {request.code_name!r} is not usable: use letters, digits, "
            "'_', '-' or '.', ending in .py (for example main.py)."
        )
    check_image_name(request.image)
    if len(request.inputs) > MAX_INPUTS:
        raise InvalidRequest(
            f"{len(request.inputs)} input files were given; the most is {MAX_INPUTS}."
        )
    seen: set[str] = set()
    for item in request.inputs:
        name = check_input_name(item.name)
        if not isinstance(item.data, bytes):
            raise InvalidRequest(
                f"Input file {name!r} must hold bytes, not {type(item.data).__name__}."
            )
        if name in seen:
            raise InvalidRequest(f"Input file name {name!r} is given twice; names must be unique.")
        seen.add(name)
    total = len(request.code) + sum(len(item.data) for item in request.inputs)
    if total > limits.input_bytes:
        raise InvalidRequest(
            f"The code and inputs are {total} bytes; the maximum is {limits.input_bytes} bytes "
            "(input_mib). Send less, or ask the operator to raise ceilings.input_mib."
        )
    # The code and inputs live in the box's writable tmpfs, next to what the program writes.
    if total > limits.writable_bytes // 2:
        raise InvalidRequest(
            f"The code and inputs are {total} bytes; they must fit in half of the box's "
            f"writable space ({limits.writable_bytes} bytes). Ask for more writable space "
            "(writable_mib) or send less."
        )
