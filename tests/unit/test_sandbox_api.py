"""`pybox.Sandbox`, the Python API of sandboxes, against a stand-in for the feature.

What is tested is the front end: what it asks the sandboxes feature for, in
which order, what it refuses before asking, and what it hands back. The
feature itself runs on the real engine in tests/integration/test_sandbox_fronts.py.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest

import pybox
from pybox._core.errors import (
    InvalidRequest,
    LimitExceeded,
    RequestRejected,
    SandboxBusy,
    SandboxError,
    SandboxNotFound,
)
from pybox._core.limits import LIMIT_FIELDS, LimitRequest
from pybox._features.sandboxes.records import RUN_PROGRAM
from pybox._frontends.api import _sandbox
from pybox._frontends.api._results import RunResult
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine
from tests.unit.fake_sandboxes import FakeSandboxes, scripted


@pytest.fixture
def fake(
    monkeypatch: pytest.MonkeyPatch, session: Session, engine: FakeEngine
) -> Iterator[FakeSandboxes]:
    sandboxes = FakeSandboxes(session, engine)
    opened: list[tuple[object, object]] = []

    def open_session(config_path: object, environ: object) -> Session:
        opened.append((config_path, environ))
        return session

    monkeypatch.setattr(_sandbox, "_open", open_session)
    monkeypatch.setattr(Session, "sandboxes", lambda self: sandboxes)
    sandboxes.opened = opened  # type: ignore[attr-defined]
    yield sandboxes


def kinds(fake: FakeSandboxes) -> list[str]:
    return [call[0] for call in fake.calls]


# -- the public surface -------------------------------------------------------------


def test_sandbox_and_its_errors_are_public() -> None:
    for name in ("Sandbox", "SandboxInfo", "SandboxFile", "SandboxNotFound", "SandboxBusy"):
        assert name in pybox.__all__ and getattr(pybox, name) is not None, name
    assert pybox.Sandbox is _sandbox.Sandbox
    assert pybox.SandboxNotFound is SandboxNotFound and pybox.SandboxBusy is SandboxBusy
    # Refusals, as the command line's exit code 2 and the API's callers expect.
    assert issubclass(SandboxNotFound, RequestRejected)
    assert issubclass(SandboxBusy, RequestRejected)


def test_the_limit_keywords_are_those_of_client_run() -> None:
    shown = inspect.signature(pybox.Sandbox).parameters
    assert [f.attr for f in LIMIT_FIELDS] == [
        name for name in shown if name in {f.attr for f in LIMIT_FIELDS}
    ]
    assert {"image", "libraries", "config_path", "environ"} <= set(shown)
    assert all(shown[f.attr].kind is inspect.Parameter.KEYWORD_ONLY for f in LIMIT_FIELDS)
    assert "memory_bytes" in (pybox.Sandbox.__init__.__doc__ or "")


# -- create and the end -------------------------------------------------------------


def test_create_asks_for_the_image_limits_and_libraries(fake: FakeSandboxes) -> None:
    sb = pybox.Sandbox(image="data", libraries=["attrs>=23"], timeout_s=5, memory_bytes=2**28)
    assert fake.calls == [
        ("create", "data", LimitRequest(timeout_s=5, memory_bytes=2**28), ("attrs>=23",))
    ]
    assert sb.sandbox_id.startswith("sbx-")
    info = sb.info()
    assert info.sandbox_id == sb.sandbox_id and info.limits.memory_bytes == 2**28
    assert sb.destroy() is True


def test_an_unknown_keyword_is_refused_before_anything_is_created(fake: FakeSandboxes) -> None:
    with pytest.raises(InvalidRequest, match="memory_mib"):
        pybox.Sandbox(memory_mib=256)  # type: ignore[call-arg]
    assert fake.calls == [] and fake.opened == []  # type: ignore[attr-defined]


def test_a_limit_over_the_ceiling_is_refused(fake: FakeSandboxes) -> None:
    with pytest.raises(LimitExceeded):
        pybox.Sandbox(memory_bytes=2**40)
    assert fake.kept == {}


def test_leaving_the_with_block_destroys_what_it_created(fake: FakeSandboxes) -> None:
    with pybox.Sandbox() as sb:
        assert fake.kept[sb.sandbox_id].live
    assert not fake.kept[sb.sandbox_id].live
    assert kinds(fake) == ["create", "destroy"]


def test_an_error_in_the_block_still_destroys_it(fake: FakeSandboxes) -> None:
    with pytest.raises(ZeroDivisionError), pybox.Sandbox() as sb:
        _ = 1 / 0
    assert not fake.kept[sb.sandbox_id].live


def test_destroy_is_idempotent_and_says_whether_it_was_live(fake: FakeSandboxes) -> None:
    with pybox.Sandbox() as sb:
        assert sb.destroy() is True
        assert sb.destroy() is False
    assert kinds(fake) == ["create", "destroy", "destroy"]  # not a third time on leaving


def test_attach_uses_a_sandbox_without_creating_or_destroying_it(fake: FakeSandboxes) -> None:
    made = pybox.Sandbox()
    with pybox.Sandbox.attach(made.sandbox_id, config_path="x.toml", environ={"A": "1"}) as sb:
        assert sb.sandbox_id == made.sandbox_id
        scripted(fake.engine, stdout=b"hi\n")
        assert sb.exec(["echo", "hi"]).stdout == "hi\n"
    assert fake.kept[made.sandbox_id].live  # only let go of
    assert kinds(fake) == ["create", "exec"]
    assert fake.opened[-1] == ("x.toml", {"A": "1"})  # type: ignore[attr-defined]
    assert "attached" in repr(sb) and made.sandbox_id in repr(sb)
    assert sb.destroy() is True  # explicitly, it may


def test_attach_to_an_unknown_or_destroyed_sandbox_is_refused(fake: FakeSandboxes) -> None:
    with pytest.raises(SandboxNotFound, match="sbx-000000000bad"):
        pybox.Sandbox.attach("sbx-000000000bad")
    gone = pybox.Sandbox()
    gone.destroy()
    with pytest.raises(SandboxNotFound, match="destroyed"):
        pybox.Sandbox.attach(gone.sandbox_id)
    with pytest.raises(SandboxNotFound, match="not int"):
        pybox.Sandbox.attach(7)  # type: ignore[arg-type]


# -- programs -----------------------------------------------------------------------


def test_run_is_a_fresh_program_with_its_timeout_and_gives_a_run_result(
    fake: FakeSandboxes,
) -> None:
    sb = pybox.Sandbox()
    scripted(fake.engine, stdout=b"42\n", stderr=b"warn\n", exit_code=3)
    result = sb.run("print(6*7)", timeout_s=2.5)
    assert isinstance(result, RunResult)
    assert (result.stdout, result.stderr, result.exit_code, result.status) == (
        "42\n",
        "warn\n",
        3,
        "failed",
    )
    assert result.stdout_bytes == b"42\n" and not result.ok
    assert result.receipt.exit_code == 3
    _, _, request = fake.calls[-1]
    assert request.code == b"print(6*7)" and request.code_name == RUN_PROGRAM
    assert request.limits == LimitRequest(timeout_s=2.5)
    assert sb.run(b"pass").receipt is not None
    assert fake.calls[-1][2].limits == LimitRequest()  # no timeout: the sandbox's own


def test_run_installs_and_writes_first(fake: FakeSandboxes) -> None:
    sb = pybox.Sandbox()
    sb.run("import attrs", libraries=["attrs"], files={"a.txt": "A", "/pybox/work/b": b"\x00"})
    assert kinds(fake) == ["create", "install", "write_file", "write_file", "run"]
    assert fake.kept[sb.sandbox_id].files == {"a.txt": b"A", "b": b"\x00"}


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"../etc/passwd": "x"}, "leaves the sandbox's workspace"),
        ({"/etc/passwd": "x"}, "outside the sandbox's workspace"),
        ({"ok.txt": 3}, "must be str or bytes"),
        ([("a", "b")], "files must be a mapping"),
    ],
)
def test_bad_files_are_refused_before_anything_is_installed_or_written(
    fake: FakeSandboxes, files: Any, message: str
) -> None:
    sb = pybox.Sandbox()
    with pytest.raises(InvalidRequest, match=message):
        sb.run("pass", libraries=["attrs"], files=files)
    assert kinds(fake) == ["create"]


def test_run_refuses_code_that_is_not_text(fake: FakeSandboxes) -> None:
    sb = pybox.Sandbox()
    with pytest.raises(InvalidRequest, match="code must be str or bytes"):
        sb.run(42)  # type: ignore[arg-type]


def test_exec_takes_a_list_of_words_never_one_string(fake: FakeSandboxes) -> None:
    sb = pybox.Sandbox()
    for wrong in ("ls -l", b"ls", 7):
        with pytest.raises(InvalidRequest, match="list of strings"):
            sb.exec(wrong)  # type: ignore[arg-type]
    scripted(fake.engine, stdout=b"a.txt\n")
    result = sb.exec(("ls", "-1"), timeout_s=4)
    assert result.stdout == "a.txt\n" and result.ok
    assert fake.calls[-1] == ("exec", sb.sandbox_id, ["ls", "-1"], 4)


# -- files and packages -------------------------------------------------------------


def test_files_round_trip_and_paths_are_confined(fake: FakeSandboxes) -> None:
    sb = pybox.Sandbox()
    sb.write_file("notes/a.txt", "héllo")
    assert sb.read_file("notes/a.txt") == "héllo".encode()
    sb.write_file("raw.bin", b"\xff\x00")
    listing = sb.list_files()
    assert [(f.path, f.size_bytes) for f in listing] == [("notes/a.txt", 6), ("raw.bin", 2)]
    assert isinstance(listing, list) and listing.complete is True
    assert [f.path for f in sb.list_files("notes")] == ["notes/a.txt"]
    for escape in ("../../etc/passwd", "/etc/passwd", "a/../../b"):
        with pytest.raises(InvalidRequest):
            sb.read_file(escape)
        with pytest.raises(InvalidRequest):
            sb.write_file(escape, "x")
    with pytest.raises(InvalidRequest, match="must be str or bytes"):
        sb.write_file("x", 3)  # type: ignore[arg-type]


def test_an_incomplete_listing_says_so(fake: FakeSandboxes) -> None:
    sb = pybox.Sandbox()
    fake.listing = ((_sandbox.SandboxFile("a", "file", 1),), False)
    listing = sb.list_files()
    assert list(listing) == [_sandbox.SandboxFile("a", "file", 1)]
    assert listing.complete is False


def test_install_hands_back_what_was_installed(fake: FakeSandboxes) -> None:
    sb = pybox.Sandbox()
    assert sb.install(["attrs==23.2.0"]) == {"requested": ["attrs==23.2.0"], "packages": []}


def test_errors_of_the_feature_reach_the_caller_as_they_are(fake: FakeSandboxes) -> None:
    sb = pybox.Sandbox()
    fake.fail_with = SandboxBusy("Sandbox is busy; retry.")
    with pytest.raises(SandboxBusy):
        sb.read_file("a")
    fake.fail_with = SandboxError("its box broke")
    with pytest.raises(SandboxError):
        sb.run("pass")
    sb.destroy()
    with pytest.raises(SandboxNotFound, match="destroyed"):
        sb.run("pass")
