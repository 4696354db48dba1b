"""A program cannot make its own end look like pybox's (issue 12), on the real engine.

The program signals PID 1, swaps its output folder for a link to / after it
wrote its files, or writes far more files than are returned: the receipt keeps
the program's own exit status and says in `unknown` what was lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pybox._core.limits import MIB, LimitRequest
from pybox._core.request import RunRequest
from pybox._orchestration.session import Session


def _unknown(outcome_receipt: object) -> dict[str, str]:
    return {u.fact: u.reason for u in outcome_receipt.unknown}  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGQUIT"])
def test_signals_to_pid1_leave_the_programs_own_exit_status(session: Session, name: str) -> None:
    code = (
        "import os, signal, time\n"
        f"os.kill(1, signal.{name})\n"
        "time.sleep(0.3)\n"
        "print('still here')\n"
        "raise SystemExit(3)\n"
    )
    outcome = session.run(RunRequest(code=code.encode()))
    receipt = outcome.receipt
    assert receipt.status.value == "failed", receipt.cause.summary
    assert receipt.exit_code == 3
    assert outcome.stdout == b"still here\n"
    assert receipt.observed_by_engine.exit_code == 3
    assert "the program's own exit report" not in _unknown(receipt)


def test_a_signal_storm_at_pid1_changes_nothing(session: Session) -> None:
    # Every catchable signal, sent to PID 1 while the program keeps running.
    code = (
        "import os, signal\n"
        "for sig in sorted(signal.valid_signals()):\n"
        "    if sig in (signal.SIGKILL, signal.SIGSTOP):\n"
        "        continue\n"
        "    try:\n"
        "        os.kill(1, sig)\n"
        "    except OSError:\n"
        "        pass\n"
        "print('done')\n"
    )
    outcome = session.run(RunRequest(code=code.encode()))
    assert outcome.receipt.status.value == "succeeded", outcome.receipt.cause.summary
    assert outcome.stdout == b"done\n"


def test_output_folder_swapped_for_a_link_to_root(session: Session, tmp_path: Path) -> None:
    code = (
        "import os\n"
        "open('/pybox/output/report.txt', 'w').write('mine')\n"
        "os.rename('/pybox/output', '/pybox/elsewhere')\n"
        "os.symlink('/', '/pybox/output')\n"
        "raise SystemExit(3)\n"
    )
    outcome = session.run(RunRequest(code=code.encode(), collect_outputs=True), files_dir=tmp_path)
    receipt = outcome.receipt
    assert receipt.status.value == "failed", receipt.cause.summary
    assert receipt.exit_code == 3
    assert receipt.observed_by_engine.exit_code == 3
    assert outcome.output_files == ()
    assert list(tmp_path.iterdir()) == []  # nothing of / was read back
    reason = _unknown(receipt)["returned files"]
    assert "the output folder was replaced by a link; nothing returned" in reason


def test_a_sub_folder_link_to_root_is_skipped_not_walked(session: Session, tmp_path: Path) -> None:
    code = (
        "import os\n"
        "open('/pybox/output/a.txt', 'w').write('a')\n"
        "os.symlink('/', '/pybox/output/root')\n"
    )
    outcome = session.run(RunRequest(code=code.encode(), collect_outputs=True), files_dir=tmp_path)
    receipt = outcome.receipt
    assert receipt.status.value == "succeeded"
    assert [f.path for f in outcome.output_files] == ["a.txt"]
    skipped = {(s.path, s.reason) for s in receipt.reported_by_program.output_files_skipped}
    assert skipped == {("root", "symbolic link")}


def test_a_tree_deeper_than_path_max(session: Session, tmp_path: Path) -> None:
    # 40 levels of 200-character names: over PATH_MAX (4096) as a path.
    code = (
        "import os\n"
        "os.chdir('/pybox/output')\n"
        "open('top.txt', 'w').write('top')\n"
        "for _ in range(40):\n"
        "    os.mkdir('d' * 200)\n"
        "    os.chdir('d' * 200)\n"
        "open('bottom.txt', 'w').write('bottom')\n"
        "raise SystemExit(4)\n"
    )
    outcome = session.run(RunRequest(code=code.encode(), collect_outputs=True), files_dir=tmp_path)
    receipt = outcome.receipt
    assert receipt.status.value == "failed", receipt.cause.summary
    assert receipt.exit_code == 4
    assert [f.path for f in outcome.output_files] == ["top.txt"]
    reasons = [s.reason for s in receipt.reported_by_program.output_files_skipped]
    assert reasons == ["path longer than 1024 bytes"]


def test_twenty_thousand_output_files_succeed_with_a_capped_list(
    session: Session, tmp_path: Path
) -> None:
    code = (
        "import os\n"
        "for i in range(20000):\n"
        "    with open(f'/pybox/output/f{i:05d}.txt', 'w') as handle:\n"
        "        handle.write('x')\n"
    )
    # Each small file takes a page of the tmpfs: 20,000 need about 80 MiB.
    request = RunRequest(
        code=code.encode(),
        collect_outputs=True,
        limits=LimitRequest(writable_bytes=160 * MIB, memory_bytes=768 * MIB),
    )
    outcome = session.run(request, files_dir=tmp_path)
    receipt = outcome.receipt
    assert receipt.status.value == "succeeded", outcome.stderr[-2000:]
    assert receipt.exit_code == 0
    cap = receipt.configured.limits["output_files"]
    assert len(outcome.output_files) == cap
    assert len(list(tmp_path.iterdir())) == cap
    skipped = receipt.reported_by_program.output_files_skipped
    assert len(skipped) == 100
    assert {s.reason for s in skipped} == {"over the returned-files count cap"}
    more = 20000 - cap - len(skipped)
    assert f"{more} more files were not returned" in _unknown(receipt)["the other skipped files"]


# Fills the box's memory with its output folder's directory entries and one file
# until a megabyte is left, then exits 5: listing those entries after the exit
# report takes the bootstrap over the memory limit, and the engine records 137.
OOM_AFTER_EXIT = """
import os
def counter(*paths):
    for path in paths:
        try:
            return int(open(path).read().split()[0])
        except (OSError, ValueError):
            pass
    raise SystemExit("no memory counters in the box")
used = lambda: counter("/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory/memory.usage_in_bytes")
limit = counter("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
os.mkdir("/pybox/output/many")
for i in range(40000):
    open("/pybox/output/many/%06d%s" % (i, "n" * 200), "w").close()
with open("/pybox/output/fill", "wb") as handle:
    while used() < limit - (1 << 20):
        handle.write(b"x" * (256 << 10))
        handle.flush()
print("exiting with 5", flush=True)
raise SystemExit(5)
"""


def test_a_box_killed_while_returning_files_keeps_the_programs_status(
    session: Session, tmp_path: Path
) -> None:
    request = RunRequest(
        code=OOM_AFTER_EXIT.encode(),
        collect_outputs=True,
        limits=LimitRequest(memory_bytes=128 * MIB, writable_bytes=256 * MIB, timeout_s=120),
    )
    outcome = session.run(request, files_dir=tmp_path)
    receipt = outcome.receipt
    assert outcome.stdout == b"exiting with 5\n", outcome.stderr[-2000:]
    assert receipt.reported_by_program.exit_code == 5
    if receipt.observed_by_engine.exit_code == 5:
        pytest.skip("the bootstrap listed the files within the memory left on this kernel")
    # The program failed with 5; what happened to the box after that is not its status.
    assert (receipt.status.value, receipt.exit_code) == ("failed", 5), receipt.cause
    assert receipt.cause.summary == "the program exited with code 5"
    assert receipt.cause.evidence[0] == "the box reported exit code 5 (untrusted)"
    assert "which is not the program's" in receipt.cause.evidence[-1]
    assert "returned files" in _unknown(receipt)
