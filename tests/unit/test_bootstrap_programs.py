"""The bootstrap's protocol 2 (programs one after another) over real pipes.

The bootstrap runs in a child process with its folders in a temporary
directory, and where this machine allows it, as PID 1 of a PID namespace of
its own (`unshare`), as in a box: there, ending a program kills everything
else in the namespace, a double-forked daemon too.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pybox._core import wire
from pybox._core.wire import Frame, FrameDecoder, PayloadFile
from pybox._inbox import bootstrap_source

PYTHON = sys.executable
DRIVER = """
import ctypes, os, sys
# Orphans come back to this process, as they would to PID 1 in a box.
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
namespace = {"__name__": "pybox_bootstrap_under_test"}
exec(compile(open(sys.argv[1]).read(), "bootstrap.py", "exec"), namespace)
root = sys.argv[2]
namespace["ROOT"] = root
for name in ("WORK", "INPUT", "OUTPUT"):
    namespace[name] = os.path.join(root, name.lower())
# Never the host's own /tmp: a sandbox's bootstrap empties these between programs.
namespace["TEMP_DIRS"] = (os.path.join(root, "tmp"), os.path.join(root, "shm"))
sys.argv = ["bootstrap", *sys.argv[3:]]
link = namespace["Link"](0, 1)
try:
    code = namespace["main"](link)
except namespace["ControllerGone"]:
    code = 124
except BaseException as exc:
    link.send_json(b"E", {"message": "%s: %s" % (type(exc).__name__, exc)})
    code = 125
os._exit(code)
"""


# An IPC namespace too: the bootstrap as PID 1 removes every SysV IPC object it sees.
UNSHARE = ("--user", "--map-root-user", "--pid", "--ipc", "--fork", "--mount-proc")


def _unshare_works() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        done = subprocess.run(
            [unshare, *UNSHARE, PYTHON, "-c",
             "import os; print(os.getpid())"],
            capture_output=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == b"1"


AS_PID1 = _unshare_works()


class Bootstrap:
    """The host's side: payloads in, frames out, with a deadline on every read."""

    def __init__(
        self,
        tmp_path: Path,
        protocol: int,
        *,
        pid1: bool,
        wait_s: float = 20,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        source = tmp_path / "bootstrap.py"
        source.write_text(bootstrap_source())
        self.root = tmp_path / "box"
        self.root.mkdir()
        argv = [PYTHON, "-I", "-S", "-c", DRIVER, str(source), str(self.root)]
        argv += [PYTHON, "main.py", str(protocol), f"{wait_s:g}", *extra_args]
        if pid1:
            argv = ["unshare", *UNSHARE, *argv]
        self.protocol = protocol
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.decoder = FrameDecoder()
        self.pending: list[Frame] = []

    def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def program(self, code: bytes, *, timeout_s: float = 10, **kwargs: Any) -> None:
        fields: dict[str, Any] = {
            "argv": [PYTHON, kwargs.pop("code_name", "main.py")],
            "inputs": (),
            "backstop_s": timeout_s,
            "collect_outputs": False,
            "max_files": 10,
            "max_file_bytes": 1 << 20,
            "version": self.protocol,
        }
        fields.update(kwargs)
        fields["code_name"] = fields["argv"][-1]
        self.send(b"".join(wire.encode_payload(code=code, **fields)))

    def frame(self, timeout_s: float = 15) -> Frame:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        fd = self.process.stdout.fileno()
        while not self.pending:
            left = deadline - time.monotonic()
            assert left > 0, "no frame from the bootstrap in time"
            if select.select([fd], [], [], left)[0]:
                data = os.read(fd, 65536)
                assert data, "the bootstrap ended"
                self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    def until_exit(self) -> tuple[bytes, dict[str, Any]]:
        """Frames up to the exit report: the program's stdout and the report."""
        out = bytearray()
        while True:
            frame = self.frame()
            if frame.kind == wire.K_STDOUT:
                out += frame.data
            elif frame.kind == wire.K_EXIT:
                return bytes(out), frame.json()
            elif frame.kind == wire.K_ERROR:
                raise AssertionError(f"the bootstrap failed: {frame.json()}")

    def end(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        return self.process.wait(timeout=15)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=15)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
        self.end_leftovers()

    def end_leftovers(self) -> None:
        """End what the bootstrap under test left on the host (outside a PID namespace
        nothing ends a prestarted interpreter when the bootstrap refuses a payload):
        only processes whose working directory is inside this test's box."""
        root = str(self.root.resolve())
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cwd = os.readlink(entry / "cwd")
            except OSError:
                continue
            if cwd == root or cwd.startswith(root + os.sep):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except OSError:
                    pass


@pytest.fixture(params=[False, True] if AS_PID1 else [False], ids=["child", "pid1"][: 1 + AS_PID1])
def box(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bootstrap]:
    bootstrap = Bootstrap(tmp_path, wire.MANY_PROGRAMS, pid1=request.param)
    try:
        yield bootstrap
    finally:
        bootstrap.close()


def ready(box: Bootstrap) -> dict[str, Any]:
    frame = box.frame()
    assert frame.kind == wire.K_READY, frame
    return frame.json()


def test_programs_run_one_after_another_and_files_stay(box: Bootstrap) -> None:
    assert ready(box)["version"] == wire.MANY_PROGRAMS
    box.program(b"import os\nopen('note.txt', 'w').write('kept')\nprint(os.getpid())\n")
    first_out, first = box.until_exit()
    assert first == {"exit_code": 0, "backstop": False, "stopped": False}
    box.send(wire.ACK)
    assert ready(box)["version"] == wire.MANY_PROGRAMS  # the box is clear again
    box.program(b"import os, sys\nprint(os.getpid(), open('note.txt').read())\nsys.exit(3)\n")
    second_out, second = box.until_exit()
    assert second["exit_code"] == 3
    pid, note = second_out.split()
    assert note == b"kept" and pid != first_out.strip()  # a fresh process
    box.send(wire.ACK)
    ready(box)
    # pybox closing the box between programs ends it with the last program's status.
    assert box.end() == 3


def test_each_program_has_its_own_deadline(box: Bootstrap) -> None:
    ready(box)
    box.program(b"import time\nprint('started', flush=True)\ntime.sleep(60)\n", timeout_s=0.5)
    out, report = box.until_exit()
    assert out == b"started\n" and report["backstop"] is True and report["exit_code"] == -9
    box.send(wire.ACK)
    ready(box)
    box.program(b"import time\ntime.sleep(0.7)\nprint('in time')\n", timeout_s=5)
    assert box.until_exit() == (b"in time\n", {"exit_code": 0, "backstop": False, "stopped": False})


def test_stop_ends_the_program_and_the_box_goes_on(box: Bootstrap) -> None:
    ready(box)
    box.program(b"import time\nprint('waiting', flush=True)\ntime.sleep(60)\n", timeout_s=30)
    assert box.frame().kind == wire.K_STARTED
    printed = b""
    while printed != b"waiting\n":
        frame = box.frame()
        assert frame.kind == wire.K_STDOUT
        printed += frame.data
    started = time.monotonic()
    box.send(wire.STOP)
    _, report = box.until_exit()
    assert report == {"exit_code": -9, "backstop": False, "stopped": True}
    assert time.monotonic() - started < 3
    # A STOP that crosses the exit report on its way is harmless before the ACK.
    box.send(wire.STOP + wire.ACK)
    ready(box)
    box.program(b"print('next')\n")
    assert box.until_exit()[0] == b"next\n"


def test_a_later_programs_inputs_replace_earlier_ones(box: Bootstrap) -> None:
    ready(box)
    box.program(b"print(open('data.csv').read())\n", inputs=(PayloadFile("data.csv", b"one"),))
    assert box.until_exit()[0] == b"one\n"
    box.send(wire.ACK)
    ready(box)
    inputs = (PayloadFile("data.csv", b"two"),)
    code = b"import os\nprint(open('data.csv').read(), open(os.environ['X']).read())\n"
    box.program(code, inputs=inputs, code_name="job.py", env=(("X", "/dev/null"),))
    assert box.until_exit()[0] == b"two \n"


def test_returned_files_come_after_each_program(box: Bootstrap) -> None:
    ready(box)
    box.program(b"open('../output/a.txt', 'w').write('A')\n", collect_outputs=True)
    box.until_exit()
    file_frame = box.frame()
    assert file_frame.kind == wire.K_FILE and file_frame.json() == {"path": "a.txt", "size": 1}
    assert box.frame().data == b"A"
    assert box.frame().json()["files_sent"] == 1
    box.send(wire.ACK)
    ready(box)


def test_a_payload_for_another_protocol_is_refused(box: Bootstrap) -> None:
    ready(box)
    box.program(b"print(1)\n", version=wire.ONE_PROGRAM)
    frame = box.frame()
    assert frame.kind == wire.K_ERROR
    assert "protocol 1" in frame.json()["message"]
    assert box.process.wait(timeout=15) == 125


def test_a_child_left_running_is_gone_before_the_next_program(box: Bootstrap) -> None:
    ready(box)
    code = b"import subprocess, sys\np = subprocess.Popen(['sleep', '60'])\nprint(p.pid)\n"
    box.program(code)
    out, _ = box.until_exit()
    box.send(wire.ACK)
    ready(box)
    check = f"import os\nprint(os.path.exists('/proc/{int(out)}'))\n".encode()
    box.program(check)
    assert box.until_exit()[0] == b"False\n"


@pytest.mark.skipif(not AS_PID1, reason="needs a PID namespace of its own (unshare)")
def test_a_daemon_of_the_first_program_is_gone_in_the_second(tmp_path: Path) -> None:
    box = Bootstrap(tmp_path, wire.MANY_PROGRAMS, pid1=True)
    try:
        ready(box)
        daemon = (
            b"import os, time\n"
            b"if os.fork() == 0:\n"
            b"    os.setsid()\n"
            b"    if os.fork() == 0:\n"
            b"        open('daemon.pid', 'w').write(str(os.getpid()))\n"
            b"        time.sleep(60)\n"
            b"    os._exit(0)\n"
            b"while not os.path.exists('daemon.pid'):\n"
            b"    time.sleep(0.01)\n"
        )
        box.program(daemon)
        box.until_exit()
        box.send(wire.ACK)
        ready(box)
        check = b"import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        box.program(check)
        out, _ = box.until_exit()
        pids = json.loads(out)
        daemon_pid = int((box.root / "work" / "daemon.pid").read_text())
        assert daemon_pid not in pids
    finally:
        box.close()


def test_protocol_1_runs_one_program_and_ends(tmp_path: Path) -> None:
    box = Bootstrap(tmp_path, wire.ONE_PROGRAM, pid1=False)
    try:
        assert ready(box)["version"] == wire.ONE_PROGRAM
        box.program(b"import sys\nprint('once')\nsys.exit(4)\n")
        out, report = box.until_exit()
        assert (out, report) == (b"once\n", {"exit_code": 4, "backstop": False})
        box.send(wire.ACK)
        assert box.process.wait(timeout=15) == 4
    finally:
        box.close()


def test_each_program_gets_its_own_stdin_and_arguments(box: Bootstrap) -> None:
    echo = b"import sys\nprint(sys.argv[1:], sys.stdin.read())\n"
    ready(box)
    box.program(echo, stdin=b"first", args=("a",))
    assert box.until_exit()[0] == b"['a'] first\n"
    box.send(wire.ACK)
    ready(box)
    box.program(echo, stdin=b"second", args=("b", "c"))
    assert box.until_exit()[0] == b"['b', 'c'] second\n"


def test_a_first_program_that_starts_isolated_replaces_the_pre_started_interpreter(
    box: Bootstrap,
) -> None:
    # The pre-started interpreter is a plain `python main.py`; pybox's own program
    # must run in one started `-I -S`, never in it.
    ready(box)
    probe = b"import sys\nprint(sys.flags.isolated, sys.flags.no_site)\n"
    box.program(probe, argv=[PYTHON, "-I", "-S", "main.py"])
    out, report = box.until_exit()
    assert (out, report["exit_code"]) == (b"1 1\n", 0)
    box.send(wire.ACK)
    ready(box)
    box.program(probe)  # the caller's next program: a plain start again
    out, report = box.until_exit()
    assert (out, report["exit_code"]) == (b"0 0\n", 0)


@pytest.mark.skipif(
    not AS_PID1, reason="needs unshare: the bootstrap as PID 1 of its own namespaces"
)
def test_a_programs_sysv_ipc_objects_are_gone_before_the_next(tmp_path: Path) -> None:
    """As PID 1 (of an IPC namespace of its own here, as in a box) the bootstrap
    removes the SysV IPC objects a program left (not as PID 1 it touches none)."""
    box = Bootstrap(tmp_path, wire.MANY_PROGRAMS, pid1=True)
    try:
        ready(box)
        leave = (
            b"import ctypes\nlibc = ctypes.CDLL(None)\n"
            b"print([libc.shmget(0x5059, 4096, 0o1600), libc.semget(0x5059, 1, 0o1600),"
            b" libc.msgget(0x5059, 0o1600)])\n"
        )
        box.program(leave)
        made, report = box.until_exit()
        assert report["exit_code"] == 0 and b"-1" not in made, made
        box.send(wire.ACK)
        ready(box)
        look = (
            b"import ctypes\nlibc = ctypes.CDLL(None)\n"
            b"print([libc.shmget(0x5059, 0, 0), libc.semget(0x5059, 0, 0),"
            b" libc.msgget(0x5059, 0)])\n"
        )
        box.program(look)
        found, _ = box.until_exit()
        assert found.strip() == b"[-1, -1, -1]"
        box.send(wire.ACK)
        ready(box)
    finally:
        box.close()
