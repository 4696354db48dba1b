"""A sandbox's commands and files: each one of pybox's own programs in its box,
run through `Sandboxes.run` like the agent's code (same lock, same seal, its own
receipt in the store)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybox._boxes.record import RunOutcome
from pybox._core.errors import InvalidRequest, LimitExceeded, SandboxError
from pybox._core.limits import LimitRequest
from pybox._features.sandboxes import fileops
from pybox._features.sandboxes.fileops import SandboxFile
from pybox._features.sandboxes.paths import workspace_path

if TYPE_CHECKING:
    from pybox._features.sandboxes.service import Sandboxes

MAX_ARGS = 256
MAX_ARG_BYTES = 16384


def exec_command(
    sandboxes: Sandboxes,
    sandbox_id: str,
    argv: Any,
    *,
    timeout_s: float | None = None,
    **options: Any,
) -> RunOutcome:
    """A command given as an argument list, never a shell string (an agent that
    wants a shell passes ["sh", "-c", ...] itself)."""
    request = fileops.exec_request(check_argv(argv))
    if timeout_s is not None:
        request = _with_timeout(request, timeout_s)
    return sandboxes.run(sandbox_id, request, kind="sandbox.exec", **options)


def check_argv(argv: Any) -> tuple[str, ...]:
    """A command as a non-empty list of strings, each without NUL and bounded."""
    if not isinstance(argv, list | tuple) or not argv:
        raise InvalidRequest(
            "A command is given as a non-empty list of strings, for example "
            '["ls", "-l"]; for a shell, pass ["sh", "-c", "..."] yourself.'
        )
    if len(argv) > MAX_ARGS:
        raise InvalidRequest(f"The command has {len(argv)} arguments; the most is {MAX_ARGS}.")
    for index, item in enumerate(argv):
        if not isinstance(item, str) or "\0" in item:
            raise InvalidRequest(f"Argument {index} of the command is not a string without NUL.")
        if len(item.encode("utf-8", "surrogateescape")) > MAX_ARG_BYTES:
            raise InvalidRequest(f"Argument {index} is over {MAX_ARG_BYTES} bytes.")
    if not argv[0]:
        raise InvalidRequest("The command's name (its first argument) is empty.")
    return tuple(argv)


def write_file(sandboxes: Sandboxes, sandbox_id: str, path: object, data: bytes) -> dict[str, Any]:
    relative = workspace_path(path)
    if not isinstance(data, bytes):
        raise InvalidRequest(f"The file's content must be bytes, not {type(data).__name__}.")
    limits = sandboxes.get(sandbox_id).limits
    if len(data) > limits.input_bytes:
        raise LimitExceeded(
            f"The file is {len(data)} bytes; the sandbox takes at most {limits.input_bytes} "
            "bytes in one write."
        )
    outcome = sandboxes.run(
        sandbox_id, fileops.write_request(relative, data), kind="sandbox.write_file"
    )
    report = fileops.outcome_report(outcome, relative, "write")
    return {"path": relative, "size_bytes": len(data), "run_id": outcome.receipt.run_id} | (
        {} if report.get("size_bytes") == len(data) else {"box_reported_bytes": "differs"}
    )


def read_file(sandboxes: Sandboxes, sandbox_id: str, path: object) -> bytes:
    relative = workspace_path(path)
    max_bytes = sandboxes.get(sandbox_id).limits.output_bytes
    outcome = sandboxes.run(
        sandbox_id, fileops.read_request(relative, max_bytes), kind="sandbox.read_file"
    )
    report = fileops.outcome_report(outcome, relative, "read")
    size = report.get("size_bytes")
    if not isinstance(size, int) or size != len(outcome.stdout):
        raise SandboxError(
            f"The sandbox's answer for {relative!r} was incomplete ({len(outcome.stdout)} bytes "
            f"arrived). The receipt of run {outcome.receipt.run_id} says more."
        )
    return outcome.stdout


def list_files(
    sandboxes: Sandboxes, sandbox_id: str, path: object = ""
) -> tuple[tuple[SandboxFile, ...], bool]:
    """The files under `path` (the whole workspace by default), never following a
    link, and whether the listing is complete."""
    relative = workspace_path(path, folder_ok=True)
    outcome = sandboxes.run(sandbox_id, fileops.list_request(relative), kind="sandbox.list_files")
    report = fileops.outcome_report(outcome, relative or ".", "list")
    return fileops.listed_files(outcome), report.get("complete") is True


def _with_timeout(request: Any, timeout_s: float) -> Any:
    from dataclasses import replace

    return replace(request, limits=LimitRequest(timeout_s=timeout_s))
