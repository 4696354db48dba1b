"""What the box is, proven from inside it on the real engine."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pybox._boxes.record import RunOutcome
from pybox._core.limits import MIB, LimitRequest
from pybox._core.posture import BOX_UID_FIRST
from pybox._core.receipt import Status
from pybox._core.request import InputFile, RunRequest
from pybox._engine import Engine
from pybox._orchestration.session import Session
from tests.integration.conftest import boxes


def run(session: Session, code: str, **kwargs: object) -> RunOutcome:
    return session.run(RunRequest(code=code.encode(), **kwargs))  # type: ignore[arg-type]


def report(outcome: RunOutcome) -> dict[str, Any]:
    assert outcome.receipt.status is Status.SUCCEEDED, outcome.stderr.decode() + str(
        outcome.receipt.cause
    )
    value: dict[str, Any] = json.loads(outcome.stdout)
    return value


def test_hello(session: Session, engine: Engine) -> None:
    outcome = run(session, "print(6*7)")
    receipt = outcome.receipt
    assert outcome.stdout == b"42\n"
    assert receipt.status is Status.SUCCEEDED
    assert receipt.exit_code == 0
    assert receipt.observed_by_engine.posture_verified
    assert receipt.observed_by_engine.posture_fields_checked > 50
    assert receipt.observed_by_engine.removal_confirmed
    assert receipt.observed_by_kernel.samples >= 1
    assert (
        receipt.observed_by_kernel.memory_limit_bytes == receipt.configured.limits["memory_bytes"]
    )
    assert receipt.observed_by_kernel.pids_limit == receipt.configured.limits["pids"]
    # Confirmed against the engine: no box with this run's ID exists.
    assert boxes(engine, receipt.run_id) == []
    assert engine.inspect_container(receipt.observed_by_engine.container_id or "") is None


def test_nonzero_exit(session: Session) -> None:
    outcome = run(session, "import sys\nprint('bad', file=sys.stderr)\nsys.exit(3)")
    assert outcome.receipt.status is Status.FAILED
    assert outcome.receipt.exit_code == 3
    assert outcome.stderr == b"bad\n"
    assert outcome.receipt.cause.known


def test_uncaught_exception_is_a_failure(session: Session) -> None:
    outcome = run(session, "raise ValueError('boom')", code_name="job.py")
    assert outcome.receipt.status is Status.FAILED
    assert outcome.receipt.exit_code == 1
    assert b'File "/pybox/work/job.py"' in outcome.stderr
    assert b"ValueError: boom" in outcome.stderr


IDENTITY = r"""
import json, os
status = {}
for line in open('/proc/self/status'):
    key, _, value = line.partition(':')
    status[key] = value.strip()
print(json.dumps({
    'uid': os.getuid(), 'gid': os.getgid(), 'euid': os.geteuid(), 'groups': os.getgroups(),
    'caps': {k: status[k] for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')},
    'no_new_privs': status['NoNewPrivs'], 'seccomp': status['Seccomp'],
    'pid': os.getpid(), 'ppid': os.getppid(),
    'pid1': open('/proc/1/cmdline', 'rb').read().split(b'\0')[:3] and 'readable',
    'env': dict(os.environ), 'hostname': open('/etc/hostname').read().strip(),
    'cwd': os.getcwd(),
}))
"""


def test_non_root_no_capabilities_not_pid1(session: Session) -> None:
    os.environ["PYBOX_TEST_CANARY"] = "host-secret-canary"
    try:
        outcome = run(session, IDENTITY)
        again = run(session, IDENTITY)
    finally:
        del os.environ["PYBOX_TEST_CANARY"]
    facts = report(outcome)
    # A uid and gid of the box's own, from a range no host account uses.
    uid = int(outcome.receipt.configured.user.split(":")[0])
    assert uid >= BOX_UID_FIRST
    assert outcome.receipt.configured.user == f"{uid}:{uid}"
    assert facts["uid"] == facts["euid"] == facts["gid"] == uid
    assert report(again)["uid"] != uid
    caps = facts["caps"]
    assert isinstance(caps, dict)
    assert set(caps.values()) == {"0000000000000000"}
    assert facts["no_new_privs"] == "1"
    assert facts["seccomp"] == "2"  # filter mode: the engine's default profile
    assert facts["pid"] != 1  # the bootstrap holds PID 1, not the program
    assert facts["ppid"] == 1
    env = facts["env"]
    assert isinstance(env, dict)
    assert "PYBOX_TEST_CANARY" not in env
    assert "host-secret-canary" not in json.dumps(env)
    assert env["PYBOX_INPUT_DIR"] == "/pybox/input"
    assert env["PYBOX_OUTPUT_DIR"] == "/pybox/output"
    assert facts["hostname"] == "pybox"
    assert facts["hostname"] != socket.gethostname()
    assert facts["cwd"] == "/pybox/work"


def test_bootstrap_is_not_traceable(session: Session) -> None:
    facts = report(
        run(
            session,
            "import json, os\n"
            "out = {}\n"
            "for path in ('/proc/1/environ', '/proc/1/fd/1', '/proc/1/mem'):\n"
            "    try:\n"
            "        open(path, 'rb').close(); out[path] = 'opened'\n"
            "    except OSError as e:\n"
            "        out[path] = e.errno\n"
            "print(json.dumps(out))",
        )
    )
    assert "opened" not in facts.values(), facts


NETWORK = r"""
import json, os, socket, sys
gateway, port = sys.argv[1:3] if len(sys.argv) > 2 else (os.environ.get('GW'), 0)
routes = open('/proc/net/route').read().splitlines()[1:]
result = {'interfaces': sorted(os.listdir('/sys/class/net')), 'routes': routes,
          'resolv': open('/etc/resolv.conf').read()}
target = json.load(open('/pybox/input/target.json'))
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(3)
try:
    s.connect((target['host'], target['port']))
    result['connect'] = 'connected'
except OSError as exc:
    result['connect'] = exc.errno
print(json.dumps(result))
"""


def _bridge_gateway() -> str | None:
    """This machine's docker bridge address (a listener here is ours to start)."""
    try:
        out = subprocess.run(
            ["ip", "-4", "-o", "addr", "show", "docker0"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    except FileNotFoundError:
        return None
    for word in out.split():
        if "/" in word and word[0].isdigit():
            return word.split("/")[0]
    return None


def test_no_network(session: Session) -> None:
    gateway = _bridge_gateway() or "127.0.0.1"
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((gateway, 0))
    listener.listen(1)
    try:
        target = json.dumps({"host": gateway, "port": listener.getsockname()[1]}).encode()
        facts = report(run(session, NETWORK, inputs=(InputFile("target.json", target),)))
        # A connection that got through would be waiting in the backlog now.
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert facts["interfaces"] == ["lo"]
    assert facts["routes"] == []
    assert facts["resolv"] == ""
    assert facts["connect"] != "connected"


FILESYSTEM = r"""
import errno, json, os
out = {}
for path in ('/x', '/usr/x', '/etc/x', '/usr/lib/python3/x', '/var/x', '/root/x', '/dev/x',
             '/sys/fs/cgroup/x'):
    try:
        open(path, 'w').close(); out[path] = 'written'
    except OSError as exc:
        out[path] = errno.errorcode[exc.errno]
data = b'x' * (1 << 20)
written = 0
try:
    with open('/tmp/fill', 'wb') as handle:
        while True:
            handle.write(data); handle.flush(); written += len(data)
except OSError as exc:
    out['fill'] = errno.errorcode[exc.errno]
out['fill_bytes'] = written
os.remove('/tmp/fill')
mounts = [line.split() for line in open('/proc/self/mounts')]
out['writable'] = sorted(m[1] for m in mounts if m[3].split(',')[0] == 'rw' and m[2] in ('tmpfs', 'overlay', 'ext4', 'xfs', 'btrfs'))
out['opts'] = {m[1]: m[3] for m in mounts if m[1] in ('/tmp', '/pybox', '/dev/shm')}
out['dev'] = sorted(os.listdir('/dev'))
out['sock'] = [p for p in ('/var/run/docker.sock', '/run/docker.sock', '/run/podman/podman.sock') if os.path.exists(p)]
try:
    open('/pybox/input/data.txt', 'a').close(); out['input_write'] = 'written'
except OSError as exc:
    out['input_write'] = errno.errorcode[exc.errno]
out['input'] = open(os.environ['PYBOX_INPUT_DIR'] + '/data.txt').read()
print(json.dumps(out))
"""


def test_read_only_root_and_capped_tmpfs(session: Session) -> None:
    outcome = run(
        session,
        FILESYSTEM,
        inputs=(InputFile("data.txt", b"hello input"),),
        limits=LimitRequest(writable_bytes=8 * MIB, memory_bytes=256 * MIB),
    )
    facts = report(outcome)
    for path in ("/x", "/usr/x", "/etc/x", "/usr/lib/python3/x", "/var/x", "/root/x"):
        assert facts[path] in ("EROFS", "EACCES"), (path, facts[path])
    assert facts["/x"] == "EROFS"
    assert facts["fill"] == "ENOSPC"
    assert facts["fill_bytes"] <= 8 * MIB
    opts = facts["opts"]
    assert isinstance(opts, dict)
    for mount in ("/tmp", "/pybox", "/dev/shm"):
        assert {"nosuid", "nodev", "noexec"} <= set(opts[mount].split(",")), (mount, opts[mount])
    # The only writable filesystems are the capped tmpfs mounts (and /dev, root-owned).
    writable = facts["writable"]
    assert isinstance(writable, list)
    assert "/" not in writable
    # /dev and /sys/fs/cgroup are root-owned (the uid cannot write there, see below); the
    # engine masks /proc/keys and /proc/timer_list with /dev/null.
    assert set(writable) <= {
        "/tmp",
        "/pybox",
        "/dev/shm",
        "/dev",
        "/sys/fs/cgroup",
        "/proc/keys",
        "/proc/timer_list",
    }
    assert facts["/dev/x"] == "EACCES"
    assert facts["/sys/fs/cgroup/x"] == "EACCES"
    assert facts["sock"] == []
    assert set(facts["dev"]) <= {
        "null",
        "zero",
        "full",
        "random",
        "urandom",
        "tty",
        "ptmx",
        "pts",
        "shm",
        "mqueue",
        "fd",
        "stdin",
        "stdout",
        "stderr",
        "core",
    }
    assert facts["input_write"] == "EACCES"
    assert facts["input"] == "hello input"


def test_inputs_in_and_outputs_out(session: Session, tmp_path: Path) -> None:
    code = r"""
import os
src = os.path.join(os.environ['PYBOX_INPUT_DIR'], 'sales.csv')
rows = open(src).read().splitlines()
out = os.environ['PYBOX_OUTPUT_DIR']
os.makedirs(out + '/charts')
open(out + '/total.txt', 'w').write(str(sum(int(r.split(',')[1]) for r in rows)))
open(out + '/charts/data.bin', 'wb').write(bytes(range(256)) * 100)
os.symlink('/etc/passwd', out + '/link')
os.mkfifo(out + '/fifo')
print('done')
"""
    files_dir = tmp_path / "staging"
    files_dir.mkdir()
    outcome = session.run(
        RunRequest(
            code=code.encode(),
            inputs=(InputFile("sales.csv", b"a,1\nb,2\nc,39\n"),),
            collect_outputs=True,
        ),
        files_dir=files_dir,
    )
    assert outcome.receipt.status is Status.SUCCEEDED, outcome.stderr
    assert sorted(f.path for f in outcome.output_files) == ["charts/data.bin", "total.txt"]
    assert (files_dir / "total.txt").read_text() == "42"
    assert (files_dir / "charts" / "data.bin").read_bytes() == bytes(range(256)) * 100
    skipped = {s.path: s.reason for s in outcome.receipt.reported_by_program.output_files_skipped}
    assert skipped == {"link": "symbolic link", "fifo": "not a regular file"}
    assert not (files_dir / "link").exists()


def test_returned_names_with_bidi_or_format_characters_are_never_written(
    session: Session, tmp_path: Path
) -> None:
    """`ok\\u202etxt.exe` would list as `okexe.txt`: such names are skipped, not written."""
    code = """
import os
out = os.environ['PYBOX_OUTPUT_DIR']
for name in ('ok\\u202etxt.exe', 'zero\\u200bwidth', 'c1\\x9bname', 'plain.txt'):
    open(os.path.join(out, name), 'w').write('x')
"""
    files_dir = tmp_path / "staging"
    files_dir.mkdir()
    outcome = session.run(RunRequest(code=code.encode(), collect_outputs=True), files_dir=files_dir)
    assert outcome.receipt.status is Status.SUCCEEDED, outcome.stderr
    assert [f.path for f in outcome.output_files] == ["plain.txt"]
    assert sorted(os.listdir(files_dir)) == ["plain.txt"]
    skipped = {s.path: s.reason for s in outcome.receipt.reported_by_program.output_files_skipped}
    format_reason = "bidirectional or invisible format characters in the name"
    assert skipped == {
        "ok\u202etxt.exe": format_reason,
        "zero\u200bwidth": format_reason,
        "c1\x9bname": "control characters in the name",
    }
    assert all(line.isprintable() for line in outcome.receipt.summary_lines())


def test_output_cap_marks_truncation(session: Session) -> None:
    code = "import sys\nfor i in range(200000):\n    sys.stdout.write('%07d\\n' % i)\n"
    outcome = session.run(
        RunRequest(code=code.encode(), limits=LimitRequest(output_bytes=16 * 1024))
    )
    stream = outcome.receipt.reported_by_program.stdout
    assert outcome.receipt.status is Status.SUCCEEDED
    assert stream.truncated
    assert stream.bytes_total == 1_600_000
    assert stream.bytes_kept == 16 * 1024
    assert outcome.stdout.startswith(b"0000000\n")
    assert outcome.stdout.endswith(b"0199999\n")
    assert b"[pybox: output truncated" in outcome.stdout


def test_each_box_is_fresh(session: Session) -> None:
    first = run(
        session, "open('/tmp/marker', 'w').write('x'); open('/pybox/work/m', 'w').write('y')"
    )
    assert first.receipt.status is Status.SUCCEEDED
    second = report(
        run(
            session,
            "import json, os\nprint(json.dumps([os.path.exists('/tmp/marker'), "
            "os.path.exists('/pybox/work/m')]))",
        )
    )
    assert second == [False, False]  # type: ignore[comparison-overlap]


@pytest.mark.parametrize("bad_id", ["sha256:" + "0" * 64])
def test_unknown_image_id_is_refused(engine: Engine, tmp_path: Path, bad_id: str) -> None:
    from pybox._adapters.state import StateStore
    from pybox._core.errors import ImageError
    from pybox._core.images import ImageRecord
    from pybox._core.limits import Policy

    state = StateStore(tmp_path)
    state.record_image(
        ImageRecord(
            "stdlib", bad_id, "sha256:" + "1" * 64, "/usr/bin/python3", "2026-01-01T00:00:00Z"
        )
    )
    # Refused by the image check before any box is created.
    with pytest.raises(ImageError, match="missing from the engine"):
        Session(engine, state, Policy()).run(RunRequest(code=b"print(1)"))
    assert state.attempts() == {}


# -- pybox's seccomp profile and AppArmor, on the real engine ----------------------------


def test_a_box_is_run_only_when_its_kernel_says_it_is_filtered(
    session: Session, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel's own word, per run: a real box's PID 1 reads `Seccomp: 2` and
    `NoNewPrivs: 1`; asked to require a value the kernel does not show, the real
    bootstrap refuses before the program gets its code, and pybox says why."""
    from pybox._core.runtimes import RuntimeChoice

    marker = "the program ran " + os.urandom(4).hex()
    code = f"print({marker!r})"
    ok = run(session, code)
    assert ok.receipt.status is Status.SUCCEEDED and marker.encode() in ok.stdout
    monkeypatch.setattr(
        RuntimeChoice, "kernel_status_required", (("Seccomp", "2"), ("NoNewPrivs", "0"))
    )
    refused = run(session, code)
    assert refused.receipt.status is Status.SANDBOX_ERROR
    assert "NoNewPrivs '1'" in refused.receipt.cause.summary, refused.receipt.cause.summary
    assert "requires '0'" in refused.receipt.cause.summary
    assert marker.encode() not in refused.stdout + refused.stderr
    assert boxes(engine, refused.receipt.run_id) == []


def test_io_uring_and_the_denied_calls_fail_with_eperm_under_pybox_s_profile(
    engine: Engine, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pybox._adapters.confinement import host_apparmor, seccomp_profile
    from pybox._adapters.state import StateStore
    from pybox._core.limits import Policy
    from pybox._core.seccomp import ENGINE_APPARMOR_PROFILE, profile_sha256
    from pybox._engine import connect_engine
    from pybox._features.verify.verdict import case_source

    # An engine connection of this test's own, whose inspect answers are kept:
    # the first one is the read-back of the run's box before start.
    own = connect_engine(engine.endpoint, engine.name)
    seen: list[dict[str, Any]] = []
    inspect = own.inspect_container

    def keep(container_id: str) -> Any:
        found = inspect(container_id)
        if found is not None:
            seen.append(found)
        return found

    monkeypatch.setattr(own, "inspect_container", keep)
    session = Session(own, StateStore(state_dir), Policy())
    outcome = session.run(RunRequest(code=case_source("seccomp"), code_name="seccomp.py"))
    facts = report(outcome)
    attempts = facts["attempts"]
    assert facts["arch"] in ("x86_64", "aarch64"), facts["arch"]
    assert attempts["io_uring_setup"] == "EPERM"
    assert len(attempts) >= 30
    assert set(attempts.values()) == {"EPERM"}, attempts
    assert facts["seccomp"] == "2"
    # The engine held pybox's own profile, exactly, in the container it made.
    profile = seccomp_profile()
    read_back = seen[0]
    assert read_back["State"]["Status"] == "created"
    if engine.name == "podman":
        # Podman shows the file it read the profile from, named by the profile's
        # hash (docs/engines.md); the calls above prove that profile applied.
        digest = profile_sha256(profile).removeprefix("sha256:")
        nnp, option = read_back["HostConfig"]["SecurityOpt"]
        assert nnp == "no-new-privileges" and option.endswith(f"/seccomp-{digest}.json")
        assert profile_sha256(Path(option.removeprefix("seccomp=")).read_text()) == (
            profile_sha256(profile)
        )
    else:
        assert read_back["HostConfig"]["SecurityOpt"] == ["no-new-privileges", "seccomp=" + profile]
    apparmor = read_back.get("AppArmorProfile") or ""
    assert apparmor != "unconfined"
    if host_apparmor()[0]:
        assert apparmor == ENGINE_APPARMOR_PROFILE
    confinement = outcome.receipt.configured.confinement
    assert confinement.seccomp_profile_sha256 == profile_sha256(profile)
    assert confinement.apparmor_profile == (apparmor or None)
    assert outcome.receipt.observed_by_engine.removal_confirmed


@pytest.mark.parametrize(
    "how",
    [
        "pybox's seccomp profile left out (the engine's default)",
        "seccomp unconfined",
        "a seccomp profile that allows io_uring",
        "AppArmor unconfined",
    ],
)
def test_a_box_without_pybox_s_profile_is_refused_before_start(
    engine: Engine, state_dir: Path, tmp_path: Path, how: str
) -> None:
    from pybox._adapters.state import StateStore
    from pybox._core.limits import Policy
    from pybox._features.verify.posture_case import WEAKENINGS, WeakenedCreateEngine

    (weakening,) = [w for w in WEAKENINGS if w.how == how]
    hook = WeakenedCreateEngine(engine, str(tmp_path))
    hook.reset(weakening)
    session = Session(hook, StateStore(state_dir), Policy())
    if engine.name == "podman" and "AppArmor" in how:
        # Podman shows no AppArmor profile on a host without AppArmor, so pybox's
        # translation refuses any apparmor= before a box exists (docs/engines.md).
        from pybox._engine.specgen import PodmanUnsupported

        with pytest.raises(PodmanUnsupported, match=r"HostConfig\.SecurityOpt='apparmor="):
            session.run(RunRequest(code=b"print('ran')\n"))
        assert not hook.started and not hook.attached
        assert not hook.created
        return
    outcome = session.run(RunRequest(code=b"print('ran')\n"))
    receipt = outcome.receipt
    assert receipt.status is Status.SANDBOX_ERROR
    fields = [m.field for m in receipt.observed_by_engine.posture_mismatches]
    assert "HostConfig.SecurityOpt" in fields, receipt.cause.summary
    assert "refused before start" in receipt.cause.summary
    assert "defaultAction" not in receipt.cause.summary  # hashes, not the profile's text
    assert not hook.started and not hook.attached
    assert hook.state_before_removal == "created"
    assert outcome.stdout == b""
    assert receipt.observed_by_engine.removal_confirmed
    assert boxes(engine, receipt.run_id) == []
