"""A stand-in for `pybox._features.sandboxes.service.Sandboxes`, for testing the
front ends (API and CLI) without an engine or a store.

Its runs are real runs of the fake engine (tests/unit/fake_engine.py), so what
the front ends get back is a real `RunOutcome` with a real receipt. Paths go
through the real `workspace_path`, so confinement errors are the real ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from pybox._boxes.record import RunOutcome
from pybox._core.errors import InvalidRequest, SandboxNotFound
from pybox._core.limits import LimitRequest
from pybox._core.request import RunRequest
from pybox._features.sandboxes.fileops import SandboxFile
from pybox._features.sandboxes.paths import workspace_path
from pybox._features.sandboxes.records import SandboxInfo
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script


@dataclass
class Kept:
    info: SandboxInfo
    files: dict[str, bytes] = field(default_factory=dict)
    live: bool = True


class FakeSandboxes:
    def __init__(self, session: Session, engine: FakeEngine) -> None:
        self.session = session
        self.engine = engine
        self.kept: dict[str, Kept] = {}
        self.calls: list[tuple[Any, ...]] = []
        self.listing: tuple[tuple[SandboxFile, ...], bool] | None = None  # forced answer
        self.fail_with: Exception | None = None  # raised by the next operation
        self._count = 0

    # -- create, list, destroy ------------------------------------------------------

    def create(
        self,
        *,
        image: str = "stdlib",
        limits: LimitRequest | None = None,
        libraries: tuple[str, ...] | list[str] = (),
        say: Any = None,
        egress: str | None = None,
        runtime: str | None = None,
    ) -> SandboxInfo:
        self._maybe_fail()
        self.runtime = runtime
        resolved = self.session.policy.resolve(limits or LimitRequest())  # refusals are real
        self.session.egress_request(egress)  # refusals are real
        self.egress = egress
        self._count += 1
        sandbox_id = f"sbx-{self._count:012x}"
        now = time.time()
        info = SandboxInfo(
            sandbox_id=sandbox_id,
            image=image,
            image_id="sha256:" + "0" * 64,
            limits=resolved,
            state="ready",
            reason="box started, posture verified",
            created_at=now,
            last_used_at=now,
            expires_at=now + 8 * 3600,
            idle_ttl_s=1800.0,
            libraries=tuple(libraries),
            runs=0,
        )
        self.calls.append(("create", image, limits, tuple(libraries)))
        self.kept[sandbox_id] = Kept(info)
        return info

    def get(self, sandbox_id: str) -> SandboxInfo:
        return self._kept(sandbox_id, live=False).info

    def list(self) -> list[SandboxInfo]:
        self._maybe_fail()
        return [kept.info for kept in self.kept.values() if kept.live]

    def destroy(self, sandbox_id: str) -> tuple[SandboxInfo, bool]:
        self._maybe_fail()
        kept = self._kept(sandbox_id, live=False)
        self.calls.append(("destroy", sandbox_id))
        was_live, kept.live = kept.live, False
        kept.info = replace(kept.info, state="destroyed", reason="destroy requested")
        return kept.info, was_live

    # -- programs -------------------------------------------------------------------

    def run(self, sandbox_id: str, request: RunRequest, **options: Any) -> RunOutcome:
        self._kept(sandbox_id)
        self.calls.append(("run", sandbox_id, request))
        return self._outcome(request.code, request.limits, options)

    def exec(
        self, sandbox_id: str, argv: Any, *, timeout_s: float | None = None, **options: Any
    ) -> RunOutcome:
        self._kept(sandbox_id)
        self.calls.append(("exec", sandbox_id, list(argv), timeout_s))
        return self._outcome(b"pass", LimitRequest(timeout_s=timeout_s), options)

    def _outcome(self, code: bytes, limits: LimitRequest, options: dict[str, Any]) -> RunOutcome:
        """A real run of the fake engine, doing what `engine.script` says."""
        prepared = self.session.prepare(RunRequest(code=code, limits=limits))
        return self.session.run(prepared, on_event=options.get("on_event"))

    # -- files ----------------------------------------------------------------------

    def write_file(self, sandbox_id: str, path: object, data: bytes) -> dict[str, Any]:
        relative = workspace_path(path)
        kept = self._kept(sandbox_id)
        assert isinstance(data, bytes)
        self.calls.append(("write_file", sandbox_id, relative, data))
        kept.files[relative] = data
        return {"path": relative, "size_bytes": len(data), "run_id": "0" * 16}

    def read_file(self, sandbox_id: str, path: object) -> bytes:
        relative = workspace_path(path)
        kept = self._kept(sandbox_id)
        self.calls.append(("read_file", sandbox_id, relative))
        if relative not in kept.files:
            raise InvalidRequest(f"Cannot read {relative!r}: it does not exist in the sandbox.")
        return kept.files[relative]

    def list_files(
        self, sandbox_id: str, path: object = ""
    ) -> tuple[tuple[SandboxFile, ...], bool]:
        relative = workspace_path(path, folder_ok=True)
        kept = self._kept(sandbox_id)
        self.calls.append(("list_files", sandbox_id, relative))
        if self.listing is not None:
            return self.listing
        files = tuple(
            SandboxFile(name, "file", len(data))
            for name, data in sorted(kept.files.items())
            if not relative or name.startswith(relative + "/")
        )
        return files, True

    def install(self, sandbox_id: str, libraries: Any, say: Any = None) -> dict[str, Any]:
        self._kept(sandbox_id)
        self.calls.append(("install", sandbox_id, list(libraries)))
        return {"requested": list(libraries), "packages": []}

    # -- internals ------------------------------------------------------------------

    def _kept(self, sandbox_id: str, *, live: bool = True) -> Kept:
        self._maybe_fail()
        kept = self.kept.get(sandbox_id)
        if kept is None:
            raise SandboxNotFound(f"No sandbox {sandbox_id!r} is known here.")
        if live and not kept.live:
            raise SandboxNotFound(f"Sandbox {sandbox_id} is destroyed (destroy requested).")
        return kept

    def _maybe_fail(self) -> None:
        if self.fail_with is not None:
            failure, self.fail_with = self.fail_with, None
            raise failure


def scripted(engine: FakeEngine, **script: Any) -> None:
    """What the fake box does in the next run."""
    engine.script = Script(**script)
