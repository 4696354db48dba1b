"""A sandbox's egress: its network and proxy made before its box, recorded with
it (`limits["egress"]`), the CA bundle handed to each program, the hosts each
program reached (the proxy's counts after it, less those before it) put in its
receipt, and all of it removed after the box."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pybox._boxes.egress import CA_MAX_BYTES, EgressNetwork, EgressRequest, plan_of
from pybox._boxes.record import RunOutcome
from pybox._core.egress import CA_BUNDLE_NAME, NONE, EgressPlan, ProxyTally
from pybox._core.errors import InvalidRequest
from pybox._core.images import ImageRecord
from pybox._core.receipt import Unknown
from pybox._core.request import InputFile, RunRequest

if TYPE_CHECKING:
    from pybox._features.store import SandboxRow
    from pybox._orchestration.session import Session


def open_egress(
    session: Session, egress: EgressRequest, sandbox_id: str, image: ImageRecord, expires_at: int
) -> EgressNetwork | None:
    if egress.mode == NONE:
        return None
    net = EgressNetwork(
        session.box_context(),
        egress,
        box_id=sandbox_id,
        image_id=image.image_id,
        python_path=image.python_path,
        expires_at=expires_at,
    )
    try:
        net.open()
    except BaseException:
        net.close()
        raise
    return net


def egress_record(row: SandboxRow) -> dict[str, Any] | None:
    record = row.limits.get("egress")
    return record if isinstance(record, dict) else None


def plan_for(row: SandboxRow) -> EgressPlan | None:
    record = egress_record(row)
    return None if record is None else plan_of(record)


def with_ca_bundle(row: SandboxRow, request: RunRequest) -> RunRequest:
    """Each program of a `packages` sandbox finds the machine's CA bundle in its inputs."""
    record = egress_record(row)
    path = record.get("ca_bundle") if record else None
    if not path:
        return request
    try:
        with open(str(path), "rb") as handle:
            data = handle.read(CA_MAX_BYTES + 1)
    except OSError as exc:
        raise InvalidRequest(f"The CA bundle {path} cannot be read: {exc.strerror}.") from None
    return replace(
        request, inputs=(*request.inputs, InputFile(CA_BUNDLE_NAME, data[:CA_MAX_BYTES]))
    )


@dataclass(frozen=True)
class HostsBefore:
    """The proxy's counts as a sandbox's run starts: its receipt is the difference."""

    tally: ProxyTally | None = None
    unknown: tuple[Unknown, ...] = ()


def hosts_before(session: Session, row: SandboxRow) -> HostsBefore | None:
    """Asked of the proxy before each program of a `packages` sandbox (None: no egress)."""
    record = egress_record(row)
    if record is None:
        return None
    net = EgressNetwork.from_record(session.box_context(), row.sandbox_id, record)
    unknown: list[Unknown] = []
    tally = net.tally_or_unknown(unknown)
    return HostsBefore(tally, tuple(unknown))


def with_hosts_reached(
    session: Session, row: SandboxRow, before: HostsBefore | None, outcome: RunOutcome
) -> RunOutcome:
    record = egress_record(row)
    if record is None or before is None:
        return outcome
    net = EgressNetwork.from_record(session.box_context(), row.sandbox_id, record)
    unknown: list[Unknown] = list(before.unknown)
    seen = net.observed_or_unknown(before.tally, unknown)
    receipt = outcome.receipt
    receipt = replace(
        receipt,
        observed_by_pybox=replace(receipt.observed_by_pybox, egress=seen),
        unknown=(*receipt.unknown, *unknown),
    )
    return replace(outcome, receipt=receipt)


def close_egress(session: Session, row: SandboxRow) -> list[str]:
    record = egress_record(row)
    if record is None:
        return []
    return EgressNetwork.from_record(session.box_context(), row.sandbox_id, record).close()
