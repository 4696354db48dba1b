"""A sandbox's file operations as pybox's own programs in its box (host side).

Each operation is a program pybox writes (`pybox/_inbox/sandbox_files.py`), run
like any other under the box's seal, with the caller's path checked here first
and again in the box. It starts isolated from the workspace (`python -I -S`,
`PROGRAM_FILES`), so nothing the agent's code left there (a user site under
HOME, a `.pth`, a module named like the standard library's) runs in it. What
the box answers is still untrusted: only its outcome kind (from a fixed set) is
read, and the message pybox gives is its own, naming the caller's path, never
the box's words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pybox._adapters.host_files import create_new_file, replace_file
from pybox._boxes.record import RunOutcome
from pybox._core.errors import InvalidRequest, SandboxError
from pybox._core.receipt import Status
from pybox._core.request import PROGRAM_EXEC, PROGRAM_FILES, RunRequest
from pybox._inbox import inbox_program

FILES_PROGRAM = "_pybox_files.py"
EXEC_PROGRAM = "_pybox_exec.py"
MAX_LISTED = 2000

_REFUSALS = {
    "outside": "leaves the sandbox's workspace",
    "link": "goes through a link; pybox never follows links in a sandbox",
    "not_a_folder": "goes through something that is not a folder",
    "not_a_file": "is not a regular file",
    "missing": "does not exist in the sandbox",
    "too_big": "is larger than the most that can be read at once",
}


@dataclass(frozen=True)
class SandboxFile:
    path: str  # relative to the workspace, as the box listed it (untrusted)
    kind: str  # file, folder, link or other
    size_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "size_bytes": self.size_bytes}


def save_on_host(destination: Path, data: bytes, *, replace: bool) -> None:
    """A file copied out of a sandbox, written on the host: new (FileExistsError if
    anything, a link included, has that name), or with `replace` put in place of
    whatever has the name in one rename (a link is replaced, never written
    through). Never through a name the box or anyone else could have guessed."""
    if replace:
        replace_file(destination, data)
    else:
        create_new_file(destination, data)


def write_request(path: str, data: bytes) -> RunRequest:
    return _request(("write", path), stdin=data)


def read_request(path: str, max_bytes: int) -> RunRequest:
    return _request(("read", path, str(max_bytes)))


def list_request(path: str) -> RunRequest:
    return _request(("list", path, str(MAX_LISTED)))


def unpack_request(folder: str, tar_bytes: bytes) -> RunRequest:
    return _request(("unpack", folder), stdin=tar_bytes)


def digest_request(folder: str, max_entries: int, skip_names: tuple[str, ...] = ()) -> RunRequest:
    """Every file, folder and link under `folder` with its mode and sha256, as JSON on
    stdout, paths relative to `folder` (read it with `experiments.tree.entries_from_json`).
    Names matching one of `skip_names` (fnmatch, at any depth) are left out."""
    return _request(("digest", folder, str(max_entries), *skip_names))


def pack_request(paths: tuple[str, ...], max_bytes: int) -> RunRequest:
    """A tar of the named regular files (relative to the workspace) on stdout, refused
    with `too_big` before anything is written if together they hold over `max_bytes`."""
    return _request(("pack", str(max_bytes)), stdin=json.dumps(list(paths)).encode())


def exec_request(argv: tuple[str, ...]) -> RunRequest:
    """pybox's wrapper, started isolated, replaces itself with the command; the
    command gets the run's environment as it is (the sandbox's libraries too)."""
    return RunRequest(
        code=inbox_program("sandbox_exec"), code_name=EXEC_PROGRAM, argv=argv, program=PROGRAM_EXEC
    )


def _request(argv: tuple[str, ...], stdin: bytes = b"") -> RunRequest:
    return RunRequest(
        code=inbox_program("sandbox_files"),
        code_name=FILES_PROGRAM,
        argv=argv,
        stdin_bytes=stdin,
        program=PROGRAM_FILES,
    )


def outcome_report(outcome: RunOutcome, path: str, what: str) -> dict[str, Any]:
    """The operation's report, or a clear error. A refusal names the caller's path."""
    report: dict[str, Any] | None = None
    for line in reversed(outcome.stderr.decode("utf-8", "replace").splitlines()[-5:]):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("ok"), bool):
            report = value
            break
    receipt = outcome.receipt
    if report is None and receipt.status is Status.SANDBOX_ERROR and receipt.cause.quote is None:
        # pybox's own words on why (a full workspace, for one): no box text in them.
        raise SandboxError(f"The sandbox could not {what} {path!r}. {receipt.cause.summary}")
    if report is None or receipt.exit_code not in (0, 3):
        raise SandboxError(
            f"The sandbox could not {what} {path!r}: its program ended {receipt.status.value}"
            f" (exit code {receipt.exit_code}) without a report. The receipt of run "
            f"{receipt.run_id} says more."
        )
    if report["ok"]:
        return report
    kind = str(report.get("error"))
    if kind in _REFUSALS:
        raise InvalidRequest(f"Cannot {what} {path!r}: it {_REFUSALS[kind]}.")
    raise SandboxError(
        f"The sandbox could not {what} {path!r} (the box reported an error of kind "
        f"{kind[:40]!r}). The receipt of run {receipt.run_id} says more."
    )


def listed_files(outcome: RunOutcome) -> tuple[SandboxFile, ...]:
    """The box's listing, checked for shape (it is untrusted)."""
    try:
        raw = json.loads(outcome.stdout)
    except ValueError:
        raise SandboxError("The sandbox's file listing was not JSON.") from None
    if not isinstance(raw, list) or len(raw) > MAX_LISTED:
        raise SandboxError("The sandbox's file listing did not have the expected shape.")
    files = []
    for item in raw:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("path"), str)
            or item.get("kind") not in ("file", "folder", "link", "other")
            or not isinstance(item.get("size_bytes"), int)
        ):
            raise SandboxError("The sandbox's file listing did not have the expected shape.")
        files.append(SandboxFile(item["path"][:1024], item["kind"], item["size_bytes"]))
    return tuple(files)
