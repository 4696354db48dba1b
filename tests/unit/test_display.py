"""The one escaping helper, and the receipt's human rendering built on it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from pybox._core.display import (
    escape_lines,
    escape_text,
    neutralise_output,
    neutralise_text,
    noun,
    plural,
    quoted,
)
from pybox._core.receipt import Receipt, ReturnedFileDigest, SkippedFile, Unknown
from pybox._core.request import RunRequest
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script

BIDI = [
    "\u061c",
    "\u200e",
    "\u200f",
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
]
# What a terminal acts on, besides the bidirectional controls.
CONTROLS = ["\x1b", "\r", "\n", "\x07", "\x08", "\x00", "\x7f", "\x9b", "\x9d", "\u2028"]


@pytest.mark.parametrize("char", BIDI + CONTROLS + ["\u200b", "\u200d", "\ufeff", "\xa0"])
def test_escape_text_leaves_no_character_a_terminal_acts_on(char: str) -> None:
    shown = escape_text(f"a{char}b")
    assert char not in shown
    assert shown.isprintable() and shown.isascii()
    assert shown.startswith("a\\") and shown.endswith("b")


def test_escape_text_spells_escapes_the_python_way() -> None:
    assert escape_text("x\x1b[6A\r\x1b[J\n") == "x\\x1b[6A\\r\\x1b[J\\n"
    assert escape_text("evil\u202etxt.py") == "evil\\u202etxt.py"
    assert escape_text("bad\udcffbyte") == "bad\\xffbyte"  # an undecodable byte
    assert escape_text("tag\U000e0041") == "tag\\U000e0041"


def test_escape_text_keeps_printable_text_and_is_idempotent() -> None:
    for text in ("résumé 数据.csv", 'a "quoted" \\ path', '{"k": "\\u001b"}', ""):
        assert escape_text(text) == text
    hostile = "a\x1b]2;\u202e\r\n"
    assert escape_text(escape_text(hostile)) == escape_text(hostile)


def test_escape_lines_keeps_line_breaks_only() -> None:
    assert escape_lines("one\x1b[2J\ntwo\r") == "one\\x1b[2J\ntwo\\r"


def test_neutralise_output_keeps_ordinary_text() -> None:
    text = "col\tcol\nline\r\nemoji 👩\u200d💻 done\n".encode()
    assert neutralise_output(text) == text


def test_neutralise_output_shows_what_a_terminal_would_act_on() -> None:
    data = b"pybox: succeeded\n\x1b]2;title\x07\x1b[8m\rover\x1b\\" + "\u202e".encode()
    shown = neutralise_output(data)
    assert b"\x1b" not in shown and b"\r" not in shown and b"\x07" not in shown
    assert "\u202e".encode() not in shown
    assert shown == b"pybox: succeeded\n\\x1b]2;title\\x07\\x1b[8m\\rover\\x1b\\\\u202e"


def test_neutralise_output_shows_undecodable_bytes_and_c1_controls() -> None:
    assert neutralise_output(b"a\xff\xc2\x9bb") == b"a\\xff\\x9bb"
    assert neutralise_text("\x9b6A") == "\\x9b6A"


def test_plural_and_quoted() -> None:
    assert plural(1, "file") == "1 file"
    assert plural(0, "file") == "0 files"
    assert plural(2, "box", "boxes") == "2 boxes"
    assert quoted("it's\x1b") == "'it\\'s\\x1b'"


# -- the receipt's human lines --------------------------------------------------------

HOSTILE_NAME = "x\r\x1b[6A\x1b[Jpybox: succeeded, exit 0"


def _receipt(session: Session, engine: FakeEngine, tmp_path: Path, **script: object) -> Receipt:
    engine.script = Script(**script)  # type: ignore[arg-type]
    files_dir = tmp_path / "staging"
    files_dir.mkdir()
    request = RunRequest(code=b"...", collect_outputs=True)
    return session.run(request, files_dir=files_dir).receipt


def _assert_inert(lines: list[str]) -> None:
    for line in lines:
        assert line.isprintable(), line
        assert not any(char in line for char in BIDI + CONTROLS)


def test_a_hostile_output_name_cannot_redraw_the_receipt(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    receipt = _receipt(
        session,
        engine,
        tmp_path,
        exit_code=7,
        files=[(HOSTILE_NAME, b"x"), ("ok\u202etxt.py", b"y")],
    )
    lines = receipt.summary_lines()
    _assert_inert(lines)
    assert lines[0].startswith("pybox: failed, exit 7")
    assert [line for line in lines if line.startswith("pybox:")] == [lines[0]]
    assert "; 0 files returned" in next(line for line in lines if line.startswith("  output:"))
    [skipped] = [line for line in lines if line.startswith("  skipped:")]
    assert "'x\\r\\x1b[6A\\x1b[Jpybox: succeeded, exit 0' (control characters" in skipped
    assert "'ok\\u202etxt.py' (bidirectional or invisible format characters" in skipped


def test_skipped_files_are_summarised_on_one_line(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    receipt = _receipt(session, engine, tmp_path, files=[(f"bad\x07{i}", b"") for i in range(50)])
    lines = receipt.summary_lines()
    skipped = [line for line in lines if "skipped" in line]
    assert len(skipped) == 1
    assert skipped[0].startswith("  skipped: 50 output files not returned: 'bad\\x070'")
    assert skipped[0].count("'bad\\x07") == 3
    assert skipped[0].endswith("; 47 more in the receipt")
    assert len(receipt.reported_by_program.output_files_skipped) == 50  # all kept in the record


def test_more_skipped_files_than_listed_are_not_summarised_as_the_listed_count(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    # 150 skipped, 100 listed: "100 output files not returned" would be false.
    receipt = _receipt(session, engine, tmp_path, files=[(f"bad\x07{i}", b"") for i in range(150)])
    lines = receipt.summary_lines()
    [skipped] = [line for line in lines if line.startswith("  skipped:")]
    assert skipped.startswith(
        "  skipped: 100 output files listed as not returned, and more (see unknown): 'bad\\x070'"
    )
    assert skipped.endswith("; 97 more listed in the receipt")
    assert "  unknown: the other skipped files: 50 more files were not returned" in "\n".join(lines)


def test_every_box_sourced_field_of_the_summary_is_escaped(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    receipt = _receipt(session, engine, tmp_path)
    program = dataclasses.replace(
        receipt.reported_by_program,
        output_files=(ReturnedFileDigest("a\u2066b", 1, "0" * 64),),
        output_files_skipped=(SkippedFile("s\u202e", "because\x1b[2J"),),
    )
    hostile = dataclasses.replace(
        receipt,
        reported_by_program=program,
        cause=dataclasses.replace(receipt.cause, summary="the box said \x1b]0;hi"),
        unknown=(Unknown("a fact", "\n\x1b[1Apybox: ok"),),
    )
    _assert_inert(hostile.summary_lines())
    assert "'s\\u202e' (because\\x1b[2J)" in "\n".join(hostile.summary_lines())


def test_noun_is_the_word_for_its_count() -> None:
    assert noun(1, "setting") == "setting"
    assert noun(0, "setting") == "settings"
    assert noun(2, "leftover box", "leftover boxes") == "leftover boxes"


def test_no_message_in_the_source_says_a_word_with_s_in_brackets() -> None:
    """ "1 setting(s)" reads badly: every count in a message picks its word."""

    src = Path(__file__).resolve().parents[2] / "src" / "pybox"
    found = []
    for path in src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value.replace("http(s)", "")
                if "(s)" in text or "(es)" in text:
                    found.append(f"{path.relative_to(src)}:{node.lineno}: {text[:60]!r}")
    assert not found, found


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("plain.txt", None),
        ("données/été.csv", None),
        ("名前.py", None),
        ("with space", None),
        ("nbsp\u00a0x", None),  # an unusual space: left to each place's own checks
        ("a\nb", "control characters"),
        ("del\x7f", "control characters"),
        ("c1\x9b", "control characters"),
        ("ok\u202etxt.exe", "bidirectional or invisible format characters"),
        *(
            (f"x{chr(code)}y", "bidirectional or invisible format characters")
            for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x61C)
        ),
        ("zw\u200bsp", "bidirectional or invisible format characters"),
        ("joiner\u200d", "bidirectional or invisible format characters"),
        ("soft\u00adhyphen", "bidirectional or invisible format characters"),
        ("bom\ufeff", "bidirectional or invisible format characters"),
        ("tag\U000e0041", "bidirectional or invisible format characters"),
        ("para\u2029", "bidirectional or invisible format characters"),
    ],
)
def test_names_with_controls_or_format_characters_are_refused(
    name: str, problem: str | None
) -> None:
    from pybox._core.display import name_problem

    assert name_problem(name) == problem
    if problem is not None:  # and where such a name is shown, it is shown escaped
        assert escape_text(name).isprintable()
