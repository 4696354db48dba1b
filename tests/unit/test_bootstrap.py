"""The in-box bootstrap: its JSON writer, its header reader, and its parts that
run with real pipes and processes (signals, returned files, inputs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pybox._core import wire
from pybox._core.wire import Frame, FrameDecoder
from pybox._inbox import bootstrap_source

NAMESPACE: dict[str, Any] = {"__name__": "pybox_bootstrap_under_test"}
exec(compile(bootstrap_source(), "bootstrap.py", "exec"), NAMESPACE)
dumps: Callable[[object], str] = NAMESPACE["dumps"]
parse_header: Callable[[bytes], dict[str, Any]] = NAMESPACE["parse_header"]


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -9,
        2**40,
        1.5,
        "",
        'quote " and backslash \\',
        "tab\tnewline\ncr\rbell\x07del\x7f",
        "unicode é 中文 🐍",
        "lone surrogate \udcff from a non-UTF-8 file name",
        [],
        {"path": "a/b", "reason": "symbolic link", "nested": [1, {"x": None}]},
    ],
)
def test_dumps_is_json(value: object) -> None:
    text = dumps(value)
    assert text.isascii()
    assert json.loads(text) == value


def test_dumps_refuses_unknown_types() -> None:
    with pytest.raises(TypeError):
        dumps(object())


def test_header_round_trip() -> None:
    chunks = list(
        wire.encode_payload(
            argv=["/usr/bin/python3", "job.py"],
            code_name="job.py",
            code=b"print(1)",
            inputs=(wire.PayloadFile("sales data.csv", b"abc"), wire.PayloadFile("é", b"")),
            backstop_s=32.0,
            collect_outputs=True,
            max_files=7,
            max_file_bytes=1024,
            args=("a b", "tab\there", "new\nline", ""),
            env=(("GREETING", "hi\tthere\n"), ("EMPTY", "")),
            stdin=b"line 1\n",
        )
    )
    first = chunks[0]
    assert first[:4] == wire.MAGIC
    size = int.from_bytes(first[4:8], "big")
    header = parse_header(first[8 : 8 + size])
    assert header == {
        "version": wire.VERSION,
        "argv": ["/usr/bin/python3", "job.py"],
        "code_name": "job.py",
        "code_size": 8,
        "inputs": [{"name": "sales data.csv", "size": 3}, {"name": "é", "size": 0}],
        "backstop_s": 32.0,
        "collect_outputs": True,
        "max_files": 7,
        "max_file_bytes": 1024,
        "args": ["a b", "tab\there", "new\nline", ""],
        "env": [("GREETING", "hi\tthere\n"), ("EMPTY", "")],
        "stdin_size": 7,
    }
    assert chunks[1:] == [b"print(1)", b"abc", b"", b"line 1\n"]


def test_header_fields_cannot_smuggle_lines() -> None:
    with pytest.raises(ValueError, match="tab or newline"):
        list(
            wire.encode_payload(
                argv=["/usr/bin/python3", "main.py"],
                code_name="main.py",
                code=b"",
                inputs=(wire.PayloadFile("x\nmax_files\t0", b""),),
                backstop_s=1.0,
                collect_outputs=False,
                max_files=1,
                max_file_bytes=1,
            )
        )


def test_bootstrap_does_not_import_json() -> None:
    # json (with re and enum) costs about 10 ms of start-up inside the box.
    import ast

    tree = ast.parse(bootstrap_source())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert "json" not in imported
    assert "re" not in imported


# --- PID 1 and the program's signals (issue 12) -------------------------------------------

SIGNAL_PROBE = """
import os, signal, sys
namespace = {"__name__": "probe"}
exec(compile(sys.stdin.read(), "bootstrap.py", "exec"), namespace)
defaults = (*namespace["ignore_signals"](), signal.SIGCHLD)
for name in sys.argv[1:]:
    os.kill(os.getpid(), getattr(signal, name))
print("alive", signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL, flush=True)
# The program's interpreter gets every one of them back at its default.
pid, out_r, err_r = namespace["spawn"](
    sys.executable,
    [sys.executable, "-I", "-S", "-c",
     "import signal; print(all(signal.getsignal(s) == signal.SIG_DFL for s in "
     "(signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGQUIT, signal.SIGALRM)))"],
    dict(os.environ), None, defaults,
)
print(os.read(out_r, 100).decode().strip(), flush=True)
os.waitpid(pid, 0)
"""

PROGRAM_SIGNALS = [
    "SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGPIPE", "SIGQUIT",
    "SIGALRM", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGVTALRM", "SIGPROF", "SIGWINCH",
]  # fmt: skip


def test_pid1_ignores_every_signal_a_program_can_send() -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", SIGNAL_PROBE, *PROGRAM_SIGNALS],
        input=bootstrap_source().encode(),
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split("\n")[:2] == ["alive True", "True"]


# --- returned files: never follow a link, bounded, capped (issue 12) ---------------------


def run_outputs(tmp_path: Path, max_files: int = 100, max_bytes: int = 1 << 20) -> list[Frame]:
    """The bootstrap's send_outputs over a real pipe, with OUTPUT at tmp_path/output."""
    box: dict[str, Any] = {"__name__": "pybox_bootstrap_under_test"}
    exec(compile(bootstrap_source(), "bootstrap.py", "exec"), box)
    box["OUTPUT"] = str(tmp_path / "output")
    return _frames(box, lambda link: box["send_outputs"](link, max_files, max_bytes))


def _frames(box: dict[str, Any], send: Callable[[Any], None]) -> list[Frame]:
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    link = box["Link"](in_r, out_w)
    received = bytearray()

    def read() -> None:
        while part := os.read(out_r, 65536):
            received.extend(part)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        send(link)
    finally:
        os.close(out_w)
        reader.join(timeout=60)
        for fd in (in_r, in_w, out_r):
            os.close(fd)
    return list(FrameDecoder().feed(bytes(received)))


def files_done(frames: list[Frame]) -> dict[str, Any]:
    assert frames[-1].kind == wire.K_FILES_DONE
    return frames[-1].json()


def sent_paths(frames: list[Frame]) -> list[str]:
    return [f.json()["path"] for f in frames if f.kind == wire.K_FILE]


def test_output_folder_replaced_by_a_link_returns_nothing(tmp_path: Path) -> None:
    (tmp_path / "output").symlink_to("/")
    frames = run_outputs(tmp_path)
    assert sent_paths(frames) == []
    assert files_done(frames) == {
        "problem": "the output folder was replaced by a link; nothing returned",
        "files_sent": 0,
        "files_skipped": [],
        "files_skipped_more": 0,
    }


def test_output_folder_removed_returns_nothing(tmp_path: Path) -> None:
    assert "was removed" in files_done(run_outputs(tmp_path))["problem"]


def test_links_inside_are_skipped_never_followed(tmp_path: Path) -> None:
    out = tmp_path / "output"
    (out / "sub").mkdir(parents=True)
    (out / "a.txt").write_text("a")
    (out / "sub" / "b.txt").write_text("bb")
    (out / "root").symlink_to("/")
    (out / "sub" / "passwd").symlink_to("/etc/passwd")
    os.mkfifo(out / "pipe")
    frames = run_outputs(tmp_path)
    assert sent_paths(frames) == ["a.txt", "sub/b.txt"]
    assert [f.data for f in frames if f.kind == wire.K_DATA] == [b"a", b"bb"]
    report = files_done(frames)
    assert report["files_sent"] == 2
    assert sorted((s["path"], s["reason"]) for s in report["files_skipped"]) == [
        ("pipe", "not a regular file"),
        ("root", "symbolic link"),
        ("sub/passwd", "symbolic link"),
    ]


def test_depth_and_path_length_are_bounded(tmp_path: Path) -> None:
    out = tmp_path / "output"
    deep = out.joinpath(*["d"] * 40)
    deep.mkdir(parents=True)
    (deep / "deep.txt").write_text("x")
    long_dir = out.joinpath(*["L" * 200] * 6)
    long_dir.mkdir(parents=True)
    (long_dir / "far.txt").write_text("x")
    (out / "top.txt").write_text("t")
    frames = run_outputs(tmp_path)
    assert sent_paths(frames) == ["top.txt"]
    reasons = {s["reason"] for s in files_done(frames)["files_skipped"]}
    assert reasons == {"nested deeper than 32 folders; not searched", "path longer than 1024 bytes"}


def test_many_files_are_capped_with_a_count(tmp_path: Path) -> None:
    out = tmp_path / "output"
    out.mkdir()
    for i in range(3000):
        (out / f"f{i:05d}").write_bytes(b"x")
    frames = run_outputs(tmp_path, max_files=10)
    assert len(sent_paths(frames)) == 10
    report = files_done(frames)
    assert report["files_sent"] == 10
    assert len(report["files_skipped"]) == 100
    assert report["files_skipped_more"] == 3000 - 10 - 100
    assert len(frames[-1].data) < wire.MAX_JSON_FRAME_BYTES


def test_skipped_list_is_capped_by_size_too(tmp_path: Path) -> None:
    out = tmp_path / "output"
    out.mkdir()
    # Paths near 1024 bytes of characters JSON escapes twelve-fold: 100 would pass 256 KiB.
    folder = out.joinpath(*["\U0001f40d" * 62] * 3)
    folder.mkdir(parents=True)
    for i in range(100):
        (folder / (f"{i:03d}" + "\U0001f40d" * 59)).write_bytes(b"x")
    frames = run_outputs(tmp_path, max_files=0)
    report = files_done(frames)
    assert 0 < len(report["files_skipped"]) < 100
    assert len(report["files_skipped"]) + report["files_skipped_more"] == 100
    assert len(frames[-1].data) <= 256 * 1024 + 1024


def test_a_failure_after_the_exit_report_is_reported_not_raised(tmp_path: Path) -> None:
    box: dict[str, Any] = {"__name__": "pybox_bootstrap_under_test"}
    exec(compile(bootstrap_source(), "bootstrap.py", "exec"), box)
    box["ACK_WAIT_S"] = 0.05

    def broken(*_: object) -> None:
        raise OSError(36, "File name too long")

    box["send_outputs"] = broken
    header = {"collect_outputs": True, "max_files": 1, "max_file_bytes": 1}
    frames = _frames(box, lambda link: box["finish"](link, header, False))
    assert [f.kind for f in frames] == [wire.K_ERROR]
    assert frames[0].json() == {"message": "OSError: [Errno 36] File name too long"}


def test_inputs_are_linked_into_the_working_folder(tmp_path: Path) -> None:
    box: dict[str, Any] = {"__name__": "pybox_bootstrap_under_test"}
    exec(compile(bootstrap_source(), "bootstrap.py", "exec"), box)
    for name in ("INPUT", "WORK"):
        box[name] = str(tmp_path / name.lower())
        os.mkdir(box[name])
    in_r, in_w = os.pipe()
    os.write(in_w, b"a,bX=1")
    link = box["Link"](in_r, os.pipe()[1])
    header: dict[str, Any] = {
        "inputs": [{"name": "data.csv", "size": 3}, {"name": "helper.py", "size": 3}],
        "stdin_size": 0,
    }
    box["unpack_inputs"](link, header)
    assert (tmp_path / "work" / "data.csv").read_text() == "a,b"
    assert (tmp_path / "work" / "helper.py").read_text() == "X=1"
    assert os.path.samefile(tmp_path / "work" / "data.csv", tmp_path / "input" / "data.csv")


def test_bootstrap_walks_within_pybox_path_checks() -> None:
    from pybox._boxes.outputs import MAX_PATH_BYTES, MAX_PATH_DEPTH

    assert NAMESPACE["MAX_PATH_BYTES"] == MAX_PATH_BYTES
    assert NAMESPACE["MAX_DEPTH"] == MAX_PATH_DEPTH


# --- One file, linted whole (issue 30) -----------------------------------------------------


def test_the_bootstrap_is_one_file_and_the_box_runs_it_as_written() -> None:
    from pybox._inbox import BOOTSTRAP_PATH

    assert BOOTSTRAP_PATH.name == "bootstrap.py"
    assert not sorted(p.name for p in BOOTSTRAP_PATH.parent.glob("bootstrap_*.py"))
    assert bootstrap_source() == BOOTSTRAP_PATH.read_text(encoding="utf-8")


def test_the_bootstrap_compiles_alone_and_imports_only_the_standard_library() -> None:
    import ast

    from pybox._inbox import BOOTSTRAP_PATH

    text = BOOTSTRAP_PATH.read_text(encoding="utf-8")
    compile(text, "bootstrap.py", "exec")
    imported: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import in the box's PID 1"
            imported.add(node.module or "")
    assert imported
    # The SHA-256 module's name differs between Python versions (_sha256, then _sha2).
    stdlib = set(sys.stdlib_module_names) | {"_sha2", "_sha256"}
    assert not sorted(name for name in imported if name.split(".")[0] not in stdlib)


def test_the_bootstrap_is_linted_whole() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    ignores = config["tool"]["ruff"]["lint"]["per-file-ignores"]
    # No undefined-name exemption: a name no section defines is a lint error.
    assert not {k: v for k, v in ignores.items() if "bootstrap" in k and "F821" in v}
    assert not [k for k in ignores if "bootstrap_" in k]
