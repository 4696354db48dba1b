"""Every front end: request -> prepare -> run -> present, limits resolved once per run,
returned files staged by one helper (fake engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import InvalidRequest
from pybox._core.limits import LimitRequest, Limits, Policy
from pybox._core.repair import RepairGoal, RepairModel
from pybox._core.request import PreparedRun, RunRequest
from pybox._features.repair.loop import RepairJob, RepairLoop
from pybox._frontends import api
from pybox._frontends.cli import _exec, main
from pybox._orchestration.session import Session
from pybox._orchestration.staging import OutputStaging, stage_outputs
from tests.fake_model import scripted
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.test_repair_loop import FIXED, fixed_when_marked


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> list[LimitRequest]:
    """Every `Policy.resolve` call, in order."""
    calls: list[LimitRequest] = []
    resolve = Policy.resolve

    def counting(self: Policy, request: LimitRequest) -> Limits:
        calls.append(request)
        return resolve(self, request)

    monkeypatch.setattr(Policy, "resolve", counting)
    return calls


def _client(monkeypatch: pytest.MonkeyPatch, session: Session) -> api.Client:
    monkeypatch.setattr(Session, "open", classmethod(lambda cls, *a, **k: session))
    return api.Client(warm_pool=False)


# -- limits resolved once per run -----------------------------------------------------


def test_a_session_run_resolves_limits_once(
    session: Session, engine: FakeEngine, resolved: list[LimitRequest]
) -> None:
    engine.script = Script(stdout=b"1\n")
    session.run(session.prepare(RunRequest(code=b"print(1)")))
    assert len(resolved) == 1
    session.run(RunRequest(code=b"print(1)"))  # a bare request is prepared once, inside run
    assert len(resolved) == 2


def test_the_cli_resolves_limits_once(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    session: Session,
    engine: FakeEngine,
    resolved: list[LimitRequest],
) -> None:
    monkeypatch.setattr(_exec, "open_session", lambda args: session)
    engine.script = Script(stdout=b"1\n", files=[("a.txt", b"A")])
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    assert main(["exec", str(program), "--pids", "64", "--output", str(tmp_path / "out")]) == 0
    assert len(resolved) == 1 and resolved[0].pids == 64
    assert (tmp_path / "out" / "a.txt").read_bytes() == b"A"


def test_the_api_resolves_limits_once(
    monkeypatch: pytest.MonkeyPatch,
    session: Session,
    engine: FakeEngine,
    resolved: list[LimitRequest],
) -> None:
    engine.script = Script(stdout=b"1\n", files=[("a.txt", b"A")])
    result = _client(monkeypatch, session).run(
        "print(1)", collect_outputs=True, input_bytes=1024**2
    )
    assert result.ok
    assert [(f.path, f.data) for f in result.output_files] == [("a.txt", b"A")]
    assert len(resolved) == 1 and resolved[0].input_bytes == 1024**2


def test_repair_resolves_once_per_run_plus_its_own_check(
    tmp_path: Path, session: Session, engine: FakeEngine, resolved: list[LimitRequest]
) -> None:
    engine.script_for = fixed_when_marked
    model = RepairModel.command(scripted(tmp_path / "model", [FIXED]))
    job = RepairJob(code=b"print('hello'\n", goal=RepairGoal.exit0(), model=model)
    loop = RepairLoop(session, job, {})
    assert len(resolved) == 1  # the job's check before anything runs
    report = loop.run()
    runs = 1 + len(report.rounds)  # the original, then each proposal
    assert len(resolved) == 1 + runs


def test_a_bad_request_leaves_no_staging_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, session: Session, engine: FakeEngine
) -> None:
    client = _client(monkeypatch, session)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(InvalidRequest):
        client.run("print(1)", output_dir=work / "out", pids=1)
    assert list(work.iterdir()) == []
    assert engine.calls == []  # refused before the engine was asked anything


# -- the staging helper ---------------------------------------------------------------


def _prepared(session: Session, collect: bool = True) -> PreparedRun:
    return session.prepare(RunRequest(code=b"print(1)", collect_outputs=collect))


def test_no_staging_without_returned_files(session: Session) -> None:
    assert stage_outputs(_prepared(session, collect=False)) is None
    assert session.stage_outputs(_prepared(session, collect=False)) is None


def test_staging_beside_a_destination_publishes_in_one_rename(
    tmp_path: Path, session: Session, engine: FakeEngine
) -> None:
    engine.script = Script(files=[("dir/b.txt", b"B")])
    destination = tmp_path / "out"
    prepared = _prepared(session)
    staging = session.stage_outputs(prepared, destination)
    assert staging is not None and staging.destination == destination
    assert staging.files_dir.parent == tmp_path and not destination.exists()
    outcome = session.run(prepared, files_dir=staging.files_dir)
    assert [(f.path, data) for f, data in staging.read(outcome.output_files)] == [
        ("dir/b.txt", b"B")
    ]
    assert staging.publish() == destination
    assert (destination / "dir" / "b.txt").read_bytes() == b"B"
    assert not staging.files_dir.exists()


def test_staging_refuses_a_destination_that_holds_files(tmp_path: Path, session: Session) -> None:
    (tmp_path / "work" / "out").mkdir(parents=True)
    (tmp_path / "work" / "out" / "keep").write_text("mine")
    with pytest.raises(InvalidRequest, match="not empty"):
        session.stage_outputs(_prepared(session), tmp_path / "work" / "out")
    assert [p.name for p in (tmp_path / "work").iterdir()] == ["out"]


def test_staging_kept_under_a_folder_is_named_by_the_run_id(
    tmp_path: Path, session: Session
) -> None:
    prepared = _prepared(session)
    staging = session.stage_outputs(prepared, keep_under=tmp_path)
    assert staging == OutputStaging(tmp_path / prepared.run_id)
    assert staging.files_dir.is_dir()
    with pytest.raises(ValueError, match="no destination"):
        staging.publish()


def test_temporary_staging_is_discarded(session: Session) -> None:
    staging = session.stage_outputs(_prepared(session))
    assert staging is not None and staging.destination is None
    assert staging.files_dir.name.startswith(".pybox-staging-")  # owner-named, swept if killed
    staging.discard()
    assert not staging.files_dir.exists()


def test_the_marker_runs_before_publishing(tmp_path: Path, state: StateStore) -> None:
    marked: list[list[Path]] = []
    prepared = RunRequest(code=b"", collect_outputs=True)
    session = Session(FakeEngine(), state, Policy(), owner="testhost:1:1")
    staging = stage_outputs(session.prepare(prepared), tmp_path / "out", marker=marked.append)
    assert staging is not None
    (staging.files_dir / "f").write_bytes(b"x")
    staging.publish()
    assert marked == [[staging.files_dir / "f"]]
