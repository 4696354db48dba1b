"""Can this machine run a box as a small VM? Try QEMU's CPU/accel variants and time them.

    python bench/microvm_probe.py [--qemu PATH] [--kernel PATH] [--busybox PATH]
        [--variants a,b] [--rounds N] [--timeout-s S] [--baseline] [--json]

Each variant boots the kernel with a tiny initramfs (busybox-static; its init
prints a marker and powers off) and records, from QEMU's start: the first kernel
line on the serial console, the init's marker, a kernel panic, or a QEMU error.
Without a busybox the kernel boots with no initramfs and the expected end is the
"no root filesystem" panic. QEMU is always killed by pid when a round ends.
`--baseline` also times a fresh runc and gVisor box (`Session.run`) in the same
run; run it under `flock /tmp/pybox-integration.lock`. Findings: docs/isolation.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import IO, Any

from bench._initramfs import BOX_END, BOX_START, MARKER, initramfs, modules_dir, read_modules

KERNEL_LINE = re.compile(r"^\[\s*\d+\.\d+\]|Linux version ")
PANIC = "Kernel panic"
QEMU_ANY = re.compile(r"^qemu-system-\w+: ")
QEMU_ERROR = re.compile(r"^qemu-system-\w+: (?!terminating on signal)(.*)|^(KVM internal error.*)")
# microvm has no HPET or ACPI PM timer; without a given TSC rate the kernel cannot
# calibrate its clock and waits forever after "Marking TSC unstable".
CODE_LINE = "print(6*7)"
KERNEL_ARGS = "console=ttyS0 panic=-1 loglevel=4 tsc_early_khz=2000000"


@dataclass(frozen=True)
class Variant:
    name: str
    machine: str
    accel: str
    cpu: str | None = None


VARIANTS: tuple[Variant, ...] = (
    Variant("tcg", "microvm", "tcg"),
    Variant("tcg-legacy-clocks", "microvm,pit=on,pic=on,rtc=on", "tcg"),
    Variant("kvm-host", "microvm", "kvm", "host"),
    Variant("kvm-host-noarchcap", "microvm", "kvm", "host,-arch-capabilities"),
    Variant("kvm-max-noarchcap", "microvm", "kvm", "max,-arch-capabilities"),
    Variant("kvm-host-nopmu-noarchcap", "microvm", "kvm", "host,pmu=off,-arch-capabilities"),
    Variant("kvm-qemu64", "microvm", "kvm", "qemu64"),
    Variant("kvm-qemu64-sse4", "microvm", "kvm", "qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt"),
    Variant("kvm-host-noarchcap-nocx16", "microvm", "kvm", "host,-arch-capabilities,-cx16"),
    Variant("kvm-cascadelake", "microvm", "kvm", "Cascadelake-Server,enforce=off"),
    Variant("kvm-icelake", "microvm", "kvm", "Icelake-Server,enforce=off"),
    Variant("kvm-skylake", "microvm", "kvm", "Skylake-Server,enforce=off"),
    Variant("kvm-haswell", "microvm", "kvm", "Haswell,enforce=off"),
    Variant("q35-kvm-host-noarchcap", "q35", "kvm", "host,-arch-capabilities"),
    Variant("pc-kvm-host-noarchcap", "pc", "kvm", "host,-arch-capabilities"),
)
DEFAULT_VARIANTS = ("tcg", "kvm-host", "kvm-host-noarchcap", "kvm-qemu64-sse4")


@dataclass(frozen=True)
class Boot:
    """One boot, read from the serial console; times in seconds from QEMU's start."""

    variant: str
    outcome: (
        str  # box-ran, init-ran, panic, qemu-error, exited, no-kernel-output, hung-after-kernel
    )
    first_output_s: float | None  # any guest line (the real-mode setup's EDD probe comes first)
    first_kernel_s: float | None
    init_s: float | None
    output_s: float | None  # with --rootfs: the box's program printed its first line
    box_rc: int | None  # with --rootfs: the program's exit code
    panic_s: float | None
    wall_s: float
    exit_code: int | None
    last_line: str
    error: str | None


# --- pure parts -----------------------------------------------------------------


def qemu_argv(
    qemu: str,
    kernel: str,
    initrd: str | None,
    variant: Variant,
    *,
    memory_mib: int,
    cpus: int,
    kernel_args: str = "",
    rootfs: str | None = None,
) -> list[str]:
    argv = [qemu, "-M", variant.machine, "-accel", variant.accel]
    if variant.cpu is not None:
        argv += ["-cpu", variant.cpu]
    argv += ["-m", str(memory_mib), "-smp", str(cpus), "-nodefaults", "-no-user-config"]
    argv += ["-nographic", "-serial", "stdio", "-no-reboot", "-kernel", kernel]
    if initrd is not None:
        argv += ["-initrd", initrd]
    if rootfs is not None:
        drive = f"id=root,file={rootfs},format=raw,if=none,readonly=on"
        device = "virtio-blk-device" if variant.machine.startswith("microvm") else "virtio-blk-pci"
        argv += ["-drive", drive, "-device", f"{device},drive=root"]
    return [*argv, "-append", kernel_args]


def classify(
    variant: str, lines: Iterable[tuple[float, str]], wall_s: float, exit_code: int | None
) -> Boot:
    """What a boot did, from its timestamped console lines (QEMU's stderr included)."""
    first_output = first_kernel = init = panic = output = None
    box_rc = None
    in_box = False
    error = None
    last = ""
    for at_s, line in lines:
        last = line or last
        if first_output is None and line.strip() and not QEMU_ANY.match(line):
            first_output = at_s
        if first_kernel is None and KERNEL_LINE.search(line):
            first_kernel = at_s
        if init is None and MARKER in line:
            init = at_s
        if BOX_END in line:
            in_box = False
            found_rc = re.search(r"rc=(\d+)", line)
            box_rc = int(found_rc.group(1)) if found_rc else None
        elif in_box and output is None and line.strip():
            output = at_s
        if BOX_START in line:
            in_box = True
        if panic is None and PANIC in line:
            panic = at_s
        found = QEMU_ERROR.match(line)
        if found and error is None and "warning" not in line:
            error = found.group(1) or found.group(2)
    if box_rc == 0 and output is not None:
        outcome = "box-ran"
    elif init is not None:
        outcome = "init-ran"
    elif panic is not None:
        outcome = "panic"
    elif error is not None:
        outcome = "qemu-error"
    elif exit_code is not None:
        outcome = "exited"
    elif first_kernel is None:
        outcome = "no-kernel-output"
    else:
        outcome = "hung-after-kernel"
    return Boot(
        variant,
        outcome,
        first_output,
        first_kernel,
        init,
        output,
        box_rc,
        panic,
        wall_s,
        exit_code,
        last[:200],
        error,
    )


def summarize(boots: Sequence[Boot]) -> dict[str, Any]:
    def median(values: Iterable[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    return {
        "rounds": len(boots),
        "outcomes": sorted({b.outcome for b in boots}),
        "first_output_s_median": median(b.first_output_s for b in boots),
        "first_kernel_s_median": median(b.first_kernel_s for b in boots),
        "init_s_median": median(b.init_s for b in boots),
        "output_s_median": median(b.output_s for b in boots),
        "panic_s_median": median(b.panic_s for b in boots),
        "wall_s_median": median(b.wall_s for b in boots),
        "error": next((b.error for b in boots if b.error), None),
        "last_line": boots[-1].last_line if boots else "",
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python bench/microvm_probe.py")
    parser.add_argument("--qemu", default=shutil.which("qemu-system-x86_64"))
    parser.add_argument("--kernel", default=os.environ.get("PYBOX_MICROVM_KERNEL") or newest_boot())
    parser.add_argument("--busybox", default=shutil.which("busybox"))
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=20.0)
    parser.add_argument(
        "--rootfs", help="an ext4 image of a box image's files: run its python3, read-only"
    )
    parser.add_argument("--kernel-args", default=KERNEL_ARGS)
    parser.add_argument("--memory-mib", type=int, default=256)
    parser.add_argument("--cpus", type=int, default=1)
    parser.add_argument("--baseline", action="store_true", help="also time runc and gVisor boxes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    names = {v.name for v in VARIANTS}
    wanted = [n for n in args.variants.split(",") if n]
    if args.variants == "all":
        wanted = [v.name for v in VARIANTS]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    args.variant_list = [v for v in VARIANTS if v.name in wanted]
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def missing(args: argparse.Namespace) -> list[str]:
    """What the probe cannot run without, and how to get it."""
    problems = []
    if not args.qemu or not os.access(args.qemu, os.X_OK):
        problems.append("qemu-system-x86_64 not found: apt-get install -y qemu-system-x86 (--qemu)")
    if not args.kernel or not os.path.isfile(args.kernel):
        problems.append(
            "no kernel: apt-get download linux-image-<version>-cloud-amd64, dpkg-deb -x it "
            "into a scratch dir and pass --kernel DIR/boot/vmlinuz-* (or PYBOX_MICROVM_KERNEL)"
        )
    if args.busybox and not os.path.isfile(args.busybox):
        problems.append(f"--busybox {args.busybox}: no such file (busybox-static provides one)")
    if args.rootfs and not (args.busybox and args.kernel):
        problems.append("--rootfs needs --busybox and --kernel")
    elif args.rootfs and not os.path.isdir(modules_dir(args.kernel)):
        problems.append(
            f"--rootfs needs the kernel's virtio modules in {modules_dir(args.kernel)} "
            "(dpkg-deb -x the kernel package so boot/ and lib/ sit side by side)"
        )
    return problems


def newest_boot() -> str | None:
    kernels = sorted(glob.glob("/boot/vmlinuz-*"))
    return kernels[-1] if kernels else None


# --- running --------------------------------------------------------------------


def _reader(stream: IO[bytes], started: float, lines: list[tuple[float, str]]) -> None:
    for raw in stream:
        lines.append((time.monotonic() - started, raw.decode(errors="replace").rstrip("\r\n")))


def boot_once(argv: list[str], variant: str, timeout_s: float) -> Boot:
    lines: list[tuple[float, str]] = []
    started = time.monotonic()
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        assert process.stdout is not None
        reader = threading.Thread(target=_reader, args=(process.stdout, started, lines))
        reader.start()
        try:
            exit_code: int | None = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            exit_code = None
        wall = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()  # by this Popen's pid, never by name
        process.wait()
    reader.join(timeout=5)
    return classify(variant, lines, wall, exit_code)


def time_baseline(rounds: int, code: str = CODE_LINE) -> dict[str, list[float]]:
    """A fresh runc and gVisor box per run (`Session.run`), as bench/runtimes; a lane
    the engine or operator does not offer is left out and said so on stderr."""
    # Imported here so the probe itself runs without pybox on the path (PYTHONPATH=src).
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from bench.runtimes import _session  # noqa: PLC0415
    from pybox._core.errors import PyboxError  # noqa: PLC0415
    from pybox._core.request import RunRequest  # noqa: PLC0415

    request = RunRequest(code=code.encode())
    times: dict[str, list[float]] = {}
    for lane in ("runc", "gvisor"):
        session = _session(lane, pool=False)
        try:
            session.run(request)  # the session's first sweep and checks, not timed
        except PyboxError as exc:
            print(f"baseline: no {lane} lane here: {exc}", file=sys.stderr)
            continue
        times[f"{lane} fresh box"] = []
        for _ in range(rounds):
            begun = time.monotonic()
            session.run(request)
            times[f"{lane} fresh box"].append(time.monotonic() - begun)
    return times


def run(args: argparse.Namespace, emit: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pybox-microvm-") as scratch:
        initrd = None
        if args.busybox:
            initrd = os.path.join(scratch, "initrd.gz")
            modules = read_modules(modules_dir(args.kernel)) if args.rootfs else []
            with open(args.busybox, "rb") as source, open(initrd, "wb") as target:
                target.write(initramfs(source.read(), modules))
        results: dict[str, Any] = {}
        for variant in args.variant_list:
            argv = qemu_argv(
                args.qemu,
                args.kernel,
                initrd,
                variant,
                memory_mib=args.memory_mib,
                cpus=args.cpus,
                kernel_args=args.kernel_args,
                rootfs=args.rootfs,
            )
            boots = [boot_once(argv, variant.name, args.timeout_s) for _ in range(args.rounds)]
            results[variant.name] = {
                "argv": argv[1:],
                "summary": summarize(boots),
                "boots": [asdict(b) for b in boots],
            }
            emit(f"{variant.name}: {', '.join(results[variant.name]['summary']['outcomes'])}")
    report: dict[str, Any] = {"qemu": args.qemu, "kernel": args.kernel, "variants": results}
    if args.baseline:
        report["baseline_s"] = time_baseline(args.rounds)
    return report


def text_report(report: dict[str, Any]) -> str:
    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    rows = [f"qemu {report['qemu']}  kernel {report['kernel']}", ""]
    head = ("variant", "outcome", "output", "kernel", "init", "box", "panic", "wall")
    rows.append(f"{head[0]:26} {head[1]:20} " + " ".join(f"{h:>7}" for h in head[2:]))
    for name, result in report["variants"].items():
        s = result["summary"]
        rows.append(
            f"{name:26} {'/'.join(s['outcomes']):20} {fmt(s['first_output_s_median']):>7} "
            f"{fmt(s['first_kernel_s_median']):>7} "
            f"{fmt(s['init_s_median']):>7} {fmt(s['output_s_median']):>7} "
            f"{fmt(s['panic_s_median']):>7} "
            f"{fmt(s['wall_s_median']):>7}"
        )
        detail = s["error"] or s["last_line"]
        if detail:
            rows.append(f"{'':26} {detail[:100]}")
    for name, values in report.get("baseline_s", {}).items():
        rows.append(f"{name:26} median {statistics.median(values):.3f} s (n={len(values)})")
    rows.append("(seconds from QEMU's start, medians over the rounds)")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    problems = missing(args)
    if problems:
        for problem in problems:
            print(f"microvm_probe: {problem}", file=sys.stderr)
        return 2
    report = run(args, lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(report, indent=2) if args.json else text_report(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
