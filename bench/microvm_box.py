"""A box as a microVM, end to end: code in and output out over virtio, limits from outside.

    python bench/microvm_box.py --kernel K --busybox B (--image REF | --rootfs FILE)
        [--rounds N] [--memory-mib M] [--cpus C] [--timeout-s S] [--baseline] [--json]

Each round boots QEMU's `microvm` machine (TCG: this host's KVM cannot boot a
guest, docs/isolation.md) with the image's files as a read-only virtio-blk
ext4 image, a busybox initramfs that loads the virtio modules, and a
virtio-console port on a unix socket of the round's own. pybox's side sends
the code (a 4-byte length, then the bytes) over the port; the guest runs it as
uid 65534 in a chroot of the image and sends back one frame (exit code, stdout,
stderr); the guest powers off. QEMU runs in a cgroup of the round's own
(memory, CPU quota, processes), made before it starts and removed after it,
and is killed by pid if it outlives the round. Times are from QEMU's start.
`--baseline` times a fresh runc and gVisor box (`Session.run`) in the same run;
run it under `flock /tmp/pybox-integration.lock`. Findings: docs/isolation.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench._initramfs import (
    BOX_END,
    BOX_START,
    CHANNEL_INIT_SCRIPT,
    CHANNEL_MODULES,
    MARKER,
    PORT_NAME,
    initramfs,
    modules_dir,
    read_modules,
)
from bench.microvm_probe import KERNEL_ARGS, Variant, newest_boot, qemu_argv, time_baseline

CODE = "print(6*7)"
CGROUP_ROOT = "/sys/fs/cgroup"
# QEMU's own memory beside the guest's (TCG's translation cache, its threads).
VMM_OVERHEAD_MIB = 256
VMM_PIDS = 64
ROOTFS_MIB = 320


@dataclass(frozen=True)
class VMRun:
    outcome: str  # ran, no-answer, qemu-error, timed-out
    init_s: float | None  # the guest's init printed its marker (serial console)
    sent_s: float | None  # the code was written to the port
    result_s: float | None  # the whole frame came back
    exit_s: float | None  # QEMU exited (the VM is gone)
    rc: int | None
    stdout: str
    stderr: str
    memory_peak_bytes: int | None  # the VMM's cgroup, from outside
    cpu_s: float | None
    pids_peak: int | None
    console_tail: str


def parse_frame(data: bytes) -> tuple[int, bytes, bytes] | None:
    """The guest's answer: exit code, stdout, stderr; None while incomplete."""
    if len(data) < 5:
        return None
    rc, at = data[0], 1
    parts = []
    for _ in range(2):
        if len(data) < at + 4:
            return None
        size = int.from_bytes(data[at : at + 4], "big")
        if len(data) < at + 4 + size:
            return None
        parts.append(data[at + 4 : at + 4 + size])
        at += 4 + size
    return rc, parts[0], parts[1]


def box_argv(
    qemu: str,
    kernel: str,
    initrd: str,
    rootfs: str,
    port_socket: str,
    *,
    memory_mib: int,
    cpus: int,
) -> list[str]:
    """The probe's microvm argv plus a virtio-serial port on `port_socket`."""
    argv = qemu_argv(
        qemu,
        kernel,
        initrd,
        Variant("tcg", "microvm", "tcg"),
        memory_mib=memory_mib,
        cpus=cpus,
        kernel_args=KERNEL_ARGS + " quiet",
        rootfs=rootfs,
    )
    port = [
        "-device", "virtio-serial-device",
        "-chardev", f"socket,id=port,path={port_socket},server=on,wait=off",
        "-device", f"virtserialport,chardev=port,name={PORT_NAME}",
    ]  # fmt: skip
    return argv[:-2] + port + argv[-2:]


class VMMCgroup:
    """A cgroup v1 group per controller for one QEMU process: limits set before it
    joins, counters read after, removed (rmdir) when the process is gone."""

    CONTROLLERS = ("memory", "cpu", "cpuacct", "pids")

    def __init__(self, name: str, memory_mib: int, cpus: int) -> None:
        if os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers")):
            raise SystemExit("microvm_box: written for cgroup v1 (this machine); not for v2")
        self.paths = [os.path.join(CGROUP_ROOT, c, name) for c in self.CONTROLLERS]
        made = []
        try:
            for path in self.paths:
                os.mkdir(path)
                made.append(path)
        except OSError:
            for path in made:  # a controller missing: leave nothing half made
                os.rmdir(path)
            raise
        memory, cpu, _, pids = self.paths
        limit = str((memory_mib + VMM_OVERHEAD_MIB) * 1024 * 1024)
        self._write(memory, "memory.limit_in_bytes", limit)
        if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")):
            self._write(memory, "memory.memsw.limit_in_bytes", limit)  # no swap beyond it
        self._write(cpu, "cpu.cfs_period_us", "100000")
        self._write(cpu, "cpu.cfs_quota_us", str(100000 * cpus))
        self._write(pids, "pids.max", str(VMM_PIDS))

    @staticmethod
    def _write(path: str, name: str, value: str) -> None:
        with open(os.path.join(path, name), "w", encoding="ascii") as handle:
            handle.write(value)

    @staticmethod
    def _read(path: str, name: str) -> int | None:
        try:
            with open(os.path.join(path, name), encoding="ascii") as handle:
                return int(handle.read().strip())
        except (OSError, ValueError):
            return None

    def join(self, pid: int) -> None:
        for path in self.paths:
            self._write(path, "cgroup.procs", str(pid))

    def counters(self) -> tuple[int | None, float | None, int | None]:
        memory, _, cpuacct, pids = self.paths
        usage = self._read(cpuacct, "cpuacct.usage")
        return (
            self._read(memory, "memory.max_usage_in_bytes"),
            None if usage is None else usage / 1e9,
            self._read(pids, "pids.peak"),
        )

    def remove(self) -> None:
        for path in self.paths:
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)  # the killed QEMU's threads are still leaving


def make_rootfs(image: str, target: str) -> None:
    """An ext4 image of `image`'s files (docker export of a container never started)."""
    container = subprocess.run(
        ["docker", "create", image, "true"], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        with tempfile.TemporaryDirectory(prefix="pybox-microvm-root-") as root:
            exported = os.path.join(root, "image.tar")
            subprocess.run(["docker", "export", "-o", exported, container], check=True)
            files = os.path.join(root, "files")
            with tarfile.open(exported) as archive:
                archive.extractall(files, filter="tar")
            subprocess.run(
                ["mkfs.ext4", "-q", "-F", "-L", "pybox", "-d", files, target, f"{ROOTFS_MIB}M"],
                stdout=sys.stderr,  # stdout is the report's
                check=True,
            )
    finally:
        subprocess.run(["docker", "rm", container], capture_output=True, check=False)


def _talk(port_socket: str, code: bytes, started: float, deadline: float) -> dict[str, Any]:
    while not os.path.exists(port_socket):
        if time.monotonic() > deadline:
            return {}
        time.sleep(0.005)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as port:
        port.connect(port_socket)
        port.sendall(len(code).to_bytes(4, "big") + code)
        sent = time.monotonic() - started
        data = b""
        while (frame := parse_frame(data)) is None:
            port.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = port.recv(65536)
            except TimeoutError:
                return {"sent_s": sent}
            if not chunk:
                return {"sent_s": sent}
            data += chunk
    return {"sent_s": sent, "result_s": time.monotonic() - started, "frame": frame}


def run_once(argv: list[str], port_socket: str, cgroup: VMMCgroup, timeout_s: float) -> VMRun:
    console: list[tuple[float, str]] = []
    started = time.monotonic()
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    exit_s = None
    try:
        # Joined before QEMU has made its vCPU threads (microseconds after exec).
        cgroup.join(process.pid)
        assert process.stdout is not None
        stream = process.stdout

        def read_console() -> None:
            for raw in stream:
                line = raw.decode(errors="replace").rstrip("\r\n")
                console.append((time.monotonic() - started, line))

        reader = threading.Thread(target=read_console, daemon=True)
        reader.start()
        answer = _talk(port_socket, CODE.encode(), started, started + timeout_s)
        try:
            process.wait(timeout=max(0.1, started + timeout_s - time.monotonic()))
            exit_s = time.monotonic() - started
        except subprocess.TimeoutExpired:
            pass
    finally:
        if process.poll() is None:
            process.kill()  # by this Popen's pid, never by name
        process.wait()
    reader.join(timeout=5)
    memory, cpu, pids = cgroup.counters()
    init_s = next((t for t, line in console if MARKER in line), None)
    frame = answer.get("frame")
    if frame is not None:
        outcome = "ran"
    elif any(line.startswith("qemu-system") for _, line in console):
        outcome = "qemu-error"
    else:
        outcome = "timed-out" if exit_s is None else "no-answer"
    tail = [line for _, line in console if BOX_START not in line and BOX_END not in line]
    return VMRun(
        outcome=outcome,
        init_s=init_s,
        sent_s=answer.get("sent_s"),
        result_s=answer.get("result_s"),
        exit_s=exit_s,
        rc=None if frame is None else frame[0],
        stdout="" if frame is None else frame[1].decode(errors="replace"),
        stderr="" if frame is None else frame[2].decode(errors="replace")[-500:],
        memory_peak_bytes=memory,
        cpu_s=cpu,
        pids_peak=pids,
        console_tail=" | ".join(tail[-3:])[-300:],
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--qemu", default=shutil.which("qemu-system-x86_64"))
    parser.add_argument("--kernel", default=os.environ.get("PYBOX_MICROVM_KERNEL") or newest_boot())
    parser.add_argument("--busybox", default=shutil.which("busybox"))
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--image", help="a local image reference: its files become the rootfs")
    source.add_argument("--rootfs", help="an ext4 image of a box image's files")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-mib", type=int, default=256)
    parser.add_argument("--cpus", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=60.0)
    parser.add_argument("--baseline", action="store_true", help="also time runc and gVisor boxes")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    for what, path in (("qemu", args.qemu), ("kernel", args.kernel), ("busybox", args.busybox)):
        if not path or not os.path.isfile(path):
            print(f"microvm_box: no {what} (see bench/microvm_probe.py's Rerun notes)")
            return 2
    runs: list[VMRun] = []
    with tempfile.TemporaryDirectory(prefix="pybox-microvm-box-") as scratch:
        rootfs = args.rootfs or os.path.join(scratch, "root.ext4")
        if args.image:
            make_rootfs(args.image, rootfs)
        initrd = os.path.join(scratch, "initrd.gz")
        modules = read_modules(modules_dir(args.kernel), CHANNEL_MODULES)
        with open(args.busybox, "rb") as source, open(initrd, "wb") as target:
            target.write(initramfs(source.read(), modules, CHANNEL_INIT_SCRIPT))
        for index in range(args.rounds):
            port_socket = os.path.join(scratch, f"port-{index}.sock")
            command = box_argv(
                args.qemu,
                args.kernel,
                initrd,
                rootfs,
                port_socket,
                memory_mib=args.memory_mib,
                cpus=args.cpus,
            )
            cgroup = VMMCgroup(f"pybox-microvm-{os.getpid()}-{index}", args.memory_mib, args.cpus)
            try:
                runs.append(run_once(command, port_socket, cgroup, args.timeout_s))
            finally:
                cgroup.remove()
            print(f"round {index}: {runs[-1].outcome} {asdict(runs[-1])}", file=sys.stderr)
    report: dict[str, Any] = {"argv": command[1:], "runs": [asdict(run) for run in runs]}
    for key in ("init_s", "result_s", "exit_s"):
        values = [getattr(run, key) for run in runs if getattr(run, key) is not None]
        report[f"median_{key}"] = statistics.median(values) if values else None
    if args.baseline:
        report["baseline_s"] = {
            lane: statistics.median(values) for lane, values in time_baseline(args.rounds).items()
        }
    print(json.dumps(report, indent=None if args.json else 2))
    return 0 if runs and all(run.outcome == "ran" for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
