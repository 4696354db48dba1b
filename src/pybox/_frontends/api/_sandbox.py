"""`pybox.Sandbox`: a sandbox that keeps its workspace between runs, from Python.

A thin handle on the sandboxes of one state directory (`Session.sandboxes()`):
the store, not this object, says what the sandbox is, so another process can
`Sandbox.attach` to it by id. Every run is still a fresh process under the same
seal as a one-shot box, with its own receipt; a failing program is a result.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from pybox._core.errors import InvalidRequest, SandboxNotFound
from pybox._core.limit_surfaces import limit_request_from_keywords
from pybox._core.limits import LimitRequest
from pybox._core.request import RunRequest
from pybox._features.sandboxes.fileops import SandboxFile
from pybox._features.sandboxes.paths import workspace_path
from pybox._features.sandboxes.records import LIVE_STATES, RUN_PROGRAM, SandboxInfo
from pybox._frontends.api._options import LimitOptions, _limit_keywords
from pybox._frontends.api._results import RunResult, _result
from pybox._orchestration.session import Session

if TYPE_CHECKING:
    from pybox._features.sandboxes.service import Sandboxes

__all__ = ["FileListing", "Sandbox", "SandboxFile", "SandboxInfo"]


class FileListing(list[SandboxFile]):
    """`Sandbox.list_files`'s answer: a list of `SandboxFile`s (names as pybox's
    own file program listed them in the box, started isolated from the workspace:
    still untrusted text) and whether the box listed them all."""

    def __init__(self, files: Iterable[SandboxFile], complete: bool) -> None:
        super().__init__(files)
        self.complete = complete


def _as_bytes(data: object, what: str) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise InvalidRequest(f"The {what} must be str or bytes, not {type(data).__name__}.")


class Sandbox:
    """A sealed sandbox whose workspace keeps files and installed packages between runs.

        with pybox.Sandbox(image="stdlib", timeout_s=10) as sb:
            sb.write_file("data.csv", "a,b\\n1,2\\n")
            result = sb.run("print(open('data.csv').read())")

    Creating one starts its box and verifies its posture (no network, read-only
    root, non-root user, capped memory, CPU and processes); `libraries` are
    installed by a separate box before it is handed over. The limit keywords
    are the sandbox's for its whole life: a run may ask for a shorter
    `timeout_s`, never more. Variables and processes do not persist: each run
    is a fresh process, and nothing it started is left running.

    Leaving a `with` block destroys a sandbox this object created (its box
    removed and the removal confirmed by the engine). One this object only
    attached to (`Sandbox.attach`) is let go of, not destroyed: call
    `destroy()` for that. A sandbox nobody destroys lives until its idle time
    or lifetime (operator settings) runs out, and is then swept away.
    """

    @_limit_keywords
    def __init__(
        self,
        *,
        image: str = "stdlib",
        libraries: Sequence[str] = (),
        egress: str = "none",
        runtime: str | None = None,
        config_path: str | None = None,
        environ: Mapping[str, str] | None = None,
        **limits: Unpack[LimitOptions],
    ) -> None:
        """Create a sandbox from the recorded image `image`. A limit above the
        operator's ceiling raises `LimitExceeded` before anything is created, and
        an `egress` mode the operator does not allow ("packages": the registries
        only, through pybox's proxy; "open") raises `EgressRefused`. `runtime` is
        its isolation lane for its whole life ("runc", "gvisor"; None: the
        operator's default); one the operator does not allow raises
        `RuntimeNotAllowed`."""
        request = limit_request_from_keywords(limits)  # unknown keywords first
        session = _open(config_path, environ)
        try:
            info = session.sandboxes().create(
                image=image,
                limits=request,
                libraries=tuple(libraries),
                egress=egress,
                runtime=runtime,
            )
        except BaseException:
            session.close()
            raise
        self._adopt(session, info, created=True)

    def _adopt(self, session: Session, info: SandboxInfo, *, created: bool) -> None:
        self._session = session
        self._sandboxes: Sandboxes = session.sandboxes()
        self._id = info.sandbox_id
        self._created = created
        self._destroyed = False
        self._finalizer = weakref.finalize(self, session.close)

    @classmethod
    def attach(
        cls,
        sandbox_id: str,
        *,
        config_path: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Sandbox:
        """A handle on a live sandbox another process (or object) created, by its
        id; nothing is created. An unknown or destroyed id raises `SandboxNotFound`.

        Leaving a `with` block over an attached sandbox does not destroy it;
        call `destroy()` to do so."""
        if not isinstance(sandbox_id, str):
            raise SandboxNotFound(
                f"A sandbox id is a string such as 'sbx-0123456789ab', not "
                f"{type(sandbox_id).__name__}."
            )
        session = _open(config_path, environ)
        try:
            info = session.sandboxes().get(sandbox_id)
            if info.state not in LIVE_STATES:
                raise SandboxNotFound(
                    f"Sandbox {sandbox_id} is {info.state} ({info.reason}); it cannot be "
                    "attached to. Create a new one with pybox.Sandbox()."
                )
        except BaseException:
            session.close()
            raise
        sandbox = cls.__new__(cls)
        sandbox._adopt(session, info, created=False)
        return sandbox

    # -- what it is -----------------------------------------------------------------

    @property
    def sandbox_id(self) -> str:
        return self._id

    def info(self) -> SandboxInfo:
        """The sandbox's record as the store has it now: state, limits, expiry, runs."""
        return self._sandboxes.get(self._id)

    def __repr__(self) -> str:
        how = "created" if self._created else "attached"
        return f"<pybox.Sandbox {self._id} ({how})>"

    # -- programs -------------------------------------------------------------------

    def run(
        self,
        code: str | bytes,
        *,
        timeout_s: float | None = None,
        libraries: Sequence[str] = (),
        files: Mapping[str, str | bytes] | None = None,
    ) -> RunResult:
        """Run Python `code` as a fresh process in the sandbox, its working folder
        the workspace; returns the same `RunResult` as `Client.run`.

        `libraries` are installed first (by a separate box), `files` written into
        the workspace first (path -> content). `timeout_s` may only lower the
        sandbox's own timeout."""
        program = _as_bytes(code, "code")
        if files is not None and not isinstance(files, Mapping):
            raise InvalidRequest(
                f"files must be a mapping of path -> str or bytes, not {type(files).__name__}."
            )
        # Every path and content checked before anything is installed or written.
        contents = [
            (workspace_path(path), _as_bytes(data, f"content of {path!r}"))
            for path, data in (files or {}).items()
        ]
        if libraries:
            self.install(libraries)
        for path, data in contents:
            self._sandboxes.write_file(self._id, path, data)
        request = RunRequest(
            code=program,
            code_name=RUN_PROGRAM,
            limits=LimitRequest(timeout_s=timeout_s),
        )
        return _result(self._sandboxes.run(self._id, request), (), None)

    def exec(self, argv: Sequence[str], *, timeout_s: float | None = None) -> RunResult:
        """Run a command given as a list of arguments (never a shell string: for a
        shell, pass ["sh", "-c", "..."] yourself) in the workspace."""
        if isinstance(argv, str | bytes):
            raise InvalidRequest(
                f"exec takes the command as a list of strings, not one string: for example "
                f'["ls", "-l"] rather than {argv[:40]!r}.'
            )
        if not isinstance(argv, Sequence):
            raise InvalidRequest(
                f"exec takes the command as a list of strings, not {type(argv).__name__}."
            )
        outcome = self._sandboxes.exec(self._id, list(argv), timeout_s=timeout_s)
        return _result(outcome, (), None)

    # -- files and packages ---------------------------------------------------------

    def write_file(self, path: str, data: str | bytes) -> None:
        """Write a file in the workspace (folders made as needed; a file there is
        replaced). `path` is relative to the workspace or under /pybox/work;
        '..' and links are refused."""
        self._sandboxes.write_file(self._id, path, _as_bytes(data, "file's content"))

    def read_file(self, path: str) -> bytes:
        """A file's bytes from the workspace (at most the sandbox's output cap)."""
        return self._sandboxes.read_file(self._id, path)

    def list_files(self, path: str = "") -> FileListing:
        """The files and folders under `path` (default: the whole workspace); links
        are listed, never followed. `.complete` is False when the listing was cut."""
        files, complete = self._sandboxes.list_files(self._id, path)
        return FileListing(files, complete)

    def install(self, libraries: Sequence[str]) -> dict[str, Any]:
        """Install packages (names and version specifiers only) from the operator's
        index, by a separate box; the sandbox itself never gets a network. Returns
        what was installed: names, versions and wheel hashes."""
        return self._sandboxes.install(self._id, libraries)

    # -- the end --------------------------------------------------------------------

    def destroy(self) -> bool:
        """Destroy the sandbox: its box removed, the removal confirmed by the engine.
        Idempotent; True when it was live until now."""
        _, was_live = self._sandboxes.destroy(self._id)
        self._destroyed = True
        self._finalizer()
        return was_live

    def close(self) -> None:
        """Let go of the sandbox without destroying it (it stays for `attach`)."""
        self._finalizer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._created and not self._destroyed:
            self.destroy()
        else:
            self.close()


def _open(config_path: str | None, environ: Mapping[str, str] | None) -> Session:
    return Session.open(os.environ if environ is None else environ, config_path)
