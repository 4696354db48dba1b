"""The host's view of a box's processes (pybox._adapters.box_processes), on a fake
cgroup tree holding this test's own process."""

from __future__ import annotations

import os
from pathlib import Path

from pybox._adapters.box_processes import (
    ROLE_GOFER,
    ROLE_OTHER,
    ROLE_SENTRY,
    ROLE_STUB,
    _role,
    box_processes,
    sentry_process_ids,
)

BOX = "f" * 64


def _cgroup_root(tmp_path: Path, pids: list[int]) -> str:
    for controller in ("memory", "pids", "cpu", "cpuacct"):
        directory = tmp_path / controller / "docker" / BOX
        directory.mkdir(parents=True)
        (directory / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in pids))
    return str(tmp_path)


def test_a_process_of_the_host_kernel_is_not_gvisors(tmp_path: Path) -> None:
    root = _cgroup_root(tmp_path, [os.getpid(), 2**22 + 17])  # the second: no such process
    (seen,) = box_processes(BOX, root)
    assert seen.pid == os.getpid() and seen.role == ROLE_OTHER
    assert seen.seccomp is not None and seen.no_new_privs is not None
    assert seen.threads is not None and seen.threads >= 1
    # No Sentry, so nothing to ask about the program's processes.
    assert sentry_process_ids(BOX, "/usr/bin/runsc", root) is None


def test_no_cgroup_no_processes(tmp_path: Path) -> None:
    assert box_processes(BOX, str(tmp_path)) == ()


def test_roles_from_the_command_and_the_parent() -> None:
    assert _role("runsc-gofer", None) == ROLE_GOFER
    assert _role("runsc-sandbox", None) == ROLE_SENTRY
    # A stub has no command line and descends from the Sentry.
    assert _role("", ROLE_SENTRY) == ROLE_STUB
    assert _role("", ROLE_STUB) == ROLE_STUB
    assert _role("", None) == ROLE_OTHER  # its parent is not the Sentry's
    assert _role("python3", ROLE_SENTRY) == ROLE_OTHER
