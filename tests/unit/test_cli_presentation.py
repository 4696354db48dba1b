"""What `pybox exec` and `pybox verify` print, on a terminal and elsewhere (fake engine)."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest

from pybox._features.verify.verdict import CaseResult, Fact
from pybox._frontends.cli import _exec, main
from pybox._frontends.cli._common import MARK_ON, TERMINAL_RESET, say
from pybox._frontends.cli._verify import case_line
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script

FORGED = b"pybox: succeeded, exit 0 in 0.10 s (run 0123456789abcdef)\n"
UNTERMINATED_OSC = b"\x1b]2;"


class _Bytes(io.BytesIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class Stream(io.TextIOWrapper):
    """A text stream over bytes that says it is, or is not, a terminal."""

    def __init__(self, tty: bool) -> None:
        super().__init__(_Bytes(tty), encoding="utf-8", write_through=True)

    def data(self) -> bytes:
        self.flush()
        raw: Any = self.buffer
        return bytes(raw.getvalue())


@pytest.fixture
def use_streams(monkeypatch: pytest.MonkeyPatch, session: Session) -> Any:
    """Install fake stdout and stderr. Called in the test itself: pytest sets its own
    capture streams again between a fixture's setup and the test."""
    monkeypatch.setattr(_exec, "open_session", lambda args: session)
    monkeypatch.setenv("TERM", "xterm-256color")

    def install(tty: bool) -> tuple[Stream, Stream]:
        out, err = Stream(tty), Stream(tty)
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
        return out, err

    return install


def _exec_hostile(tmp_path: Path, engine: FakeEngine, *flags: str) -> int:
    engine.script = Script(
        stdout=b"out \x1b[2J\x1b[H",
        stderr=FORGED + UNTERMINATED_OSC,
        exit_code=7,
        files=[("x\r\x1b[6A\x1b[J" + FORGED.decode(), b"1"), ("fine.txt", b"2")],
    )
    program = tmp_path / "p.py"
    program.write_text("...\n")
    return main(["exec", str(program), "--output", str(tmp_path / "out"), *flags])


def test_on_a_terminal_the_program_cannot_hide_or_forge_the_receipt(
    tmp_path: Path, engine: FakeEngine, use_streams: Any
) -> None:
    out, err = use_streams(True)
    assert _exec_hostile(tmp_path, engine) == 7
    assert out.data() == b"out \\x1b[2J\\x1b[H"  # shown, not acted on
    program_part, _, pybox_part = err.data().decode().partition(TERMINAL_RESET)
    assert program_part == FORGED.decode() + "\\x1b]2;"  # the OSC is text, never opened
    assert "\x1b" not in program_part and MARK_ON not in program_part
    # The receipt starts on a fresh line after the reset, its status line marked.
    assert pybox_part.startswith(f"\n{MARK_ON}pybox:\x1b[0m failed, exit 7 in ")
    after_mark = pybox_part.split("\n", 2)[2]
    assert "\x1b" not in after_mark and "\r" not in after_mark
    assert "'x\\r\\x1b[6A\\x1b[Jpybox: succeeded, exit 0" in after_mark
    assert "  files:  1 file written to " in after_mark


def test_to_a_file_the_output_is_exact_and_the_receipt_plain(
    tmp_path: Path, engine: FakeEngine, use_streams: Any
) -> None:
    out, err = use_streams(False)
    assert _exec_hostile(tmp_path, engine) == 7
    assert out.data() == b"out \x1b[2J\x1b[H"  # the program's bytes, unchanged
    program_part, _, receipt = err.data().partition(b"\x1b]2;")
    assert program_part == FORGED
    assert receipt.startswith(b"\npybox: failed, exit 7")  # on a line of its own
    assert b"\x1b" not in receipt and b"\r" not in receipt


def test_quiet_prints_the_output_and_one_result_line(
    tmp_path: Path, engine: FakeEngine, use_streams: Any
) -> None:
    out, err = use_streams(True)
    assert _exec_hostile(tmp_path, engine, "--quiet") == 7  # the exit code is unchanged
    pybox_part = err.data().decode().partition(TERMINAL_RESET)[2]
    lines = pybox_part.strip("\n").split("\n")
    assert len(lines) == 1 and "failed, exit 7 in " in lines[0]
    assert out.data() == b"out \\x1b[2J\\x1b[H"


def test_quiet_and_json_do_not_go_together(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["exec", "-", "--quiet", "--json"])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_say_escapes_each_line(capsys: pytest.CaptureFixture[str]) -> None:
    say("pybox: model said \x1b]0;owned\x07\nsecond\u202e line")
    assert capsys.readouterr().err == "pybox: model said \\x1b]0;owned\\x07\nsecond\\u202e line\n"


def test_verify_lines_fit_80_columns() -> None:
    facts = (
        Fact("kernel", "memory.events oom_kill 1; memory.peak 268435456 bytes; " * 3),
        Fact("program", "printed \x1b[31mred\x1b[0m and " + "x" * 120),
    )
    result = CaseResult(
        "memory_bomb",
        "allocate memory until the kernel stops it",
        "OOM",
        False,
        facts,
        ("a",),
        (),
        1,
    )
    text = case_line(result)
    assert text.startswith("FAIL memory_bomb: allocate memory")
    assert all(len(line) <= 80 for line in text.split("\n"))
    assert "\x1b" not in text and "\\x1b[31mred" in text.replace("\n    ", "")


def test_box_counts_agree_with_their_number() -> None:
    from pybox._frontends.cli._common import boxes_exist

    assert boxes_exist(0) == "0 pybox boxes exist"
    assert boxes_exist(1) == "1 pybox box exists"
    assert boxes_exist(2) == "2 pybox boxes exist"
