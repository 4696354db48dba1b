"""The two ends of a program's handshake with the in-box bootstrap: the payload
pybox sends (code, inputs, limits the bootstrap enforces too) and the check of
the ready report the bootstrap sends first (its kernel's view of PID 1)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pybox._core import wire
from pybox._core.errors import SandboxError
from pybox._core.limits import Limits
from pybox._core.receipt import Unknown
from pybox._core.request import RunRequest
from pybox._core.runtimes import RuntimeChoice

BACKSTOP_GRACE_S = 2.0


def program_payload(
    request: RunRequest,
    limits: Limits,
    *,
    python_path: str,
    collect_outputs: bool,
    protocol: int,
    isolation: RuntimeChoice,
    token: str = "",
) -> Iterator[bytes]:
    """The payload's chunks, in the order the bootstrap reads them."""
    return wire.encode_payload(
        # pybox's own programs start isolated (`-I -S`): the bootstrap takes only
        # these two argv shapes, and starts exactly the one it was given.
        argv=[python_path, *request.interpreter_flags, request.code_name],
        code_name=request.code_name,
        code=request.code,
        inputs=tuple(wire.PayloadFile(i.name, i.data) for i in request.inputs),
        backstop_s=limits.timeout_s + BACKSTOP_GRACE_S,
        collect_outputs=collect_outputs,
        max_files=limits.output_files,
        max_file_bytes=limits.output_files_bytes,
        args=tuple(request.argv),
        env=tuple(request.env),
        stdin=request.stdin_bytes,
        version=protocol,
        require_status=isolation.kernel_status_required,
        token=token,
    )


def check_ready(report: dict[str, Any], isolation: RuntimeChoice) -> list[Unknown]:
    """Refuse a box whose kernel does not report the confinement its lane requires;
    what the bootstrap could not do for itself comes back as unknowns.

    The bootstrap refuses to hand the code over too (the payload may be on its way
    already); this says why in pybox's own words, with the lane's reason.
    """
    status = report.get("status")
    observed = status if isinstance(status, dict) else {}
    for name, value in isolation.kernel_status_required:
        if observed.get(name) != value:
            raise SandboxError(
                f"The box's kernel reports {name} {observed.get(name)!r} for its PID 1; "
                f"pybox requires {value!r} (its seccomp filter and no-new-privileges, "
                "applied by the engine). The program was not run. The engine did not "
                "apply the box's confinement: run `pybox doctor`."
            )
    if report.get("nondumpable") is True:
        return []
    return [
        Unknown(
            "the bootstrap's protection from the program",
            "the box reports PID 1 could not make itself non-dumpable, so the "
            "program may be able to trace it (everything the box reports is "
            "untrusted either way)",
        )
    ]
