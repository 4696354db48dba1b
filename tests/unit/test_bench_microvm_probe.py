"""bench/microvm_probe.py's pure parts, without QEMU: variants, argv, console parsing, cpio."""

from __future__ import annotations

import gzip

import pytest
from bench import _initramfs
from bench import microvm_probe as probe


def test_the_variant_names_are_unique_and_the_defaults_exist() -> None:
    names = [v.name for v in probe.VARIANTS]
    assert len(names) == len(set(names))
    assert set(probe.DEFAULT_VARIANTS) <= set(names)


def test_variants_are_chosen_by_name_and_all_means_every_one() -> None:
    args = probe.parse_args(["--variants", "tcg,kvm-host-noarchcap", "--kernel", "/k"])
    assert [v.name for v in args.variant_list] == ["tcg", "kvm-host-noarchcap"]
    assert len(probe.parse_args(["--variants", "all"]).variant_list) == len(probe.VARIANTS)


def test_an_unknown_variant_or_no_rounds_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        probe.parse_args(["--variants", "kvm-nonsense"])
    with pytest.raises(SystemExit):
        probe.parse_args(["--rounds", "0"])


def test_missing_qemu_and_kernel_are_named_with_how_to_get_them() -> None:
    args = probe.parse_args(["--qemu", "/nonexistent/qemu", "--kernel", "/nonexistent/vmlinuz"])
    problems = " ".join(probe.missing(args))
    assert "apt-get install -y qemu-system-x86" in problems
    assert "cloud-amd64" in problems and "--kernel" in problems


def test_the_argv_is_a_list_with_the_variant_s_machine_accel_and_cpu() -> None:
    variant = probe.Variant("x", "microvm", "kvm", "host,-arch-capabilities")
    argv = probe.qemu_argv(
        "qemu", "/k", "/i", variant, memory_mib=128, cpus=2, kernel_args="console=ttyS0"
    )
    assert argv[:7] == ["qemu", "-M", "microvm", "-accel", "kvm", "-cpu", "host,-arch-capabilities"]
    assert argv[argv.index("-m") + 1] == "128" and argv[argv.index("-smp") + 1] == "2"
    assert argv[argv.index("-initrd") + 1] == "/i"
    assert argv[-2:] == ["-append", "console=ttyS0"]
    no_cpu = probe.qemu_argv("qemu", "/k", None, probe.VARIANTS[0], memory_mib=1, cpus=1)
    assert "-cpu" not in no_cpu and "-initrd" not in no_cpu


def test_a_boot_that_reaches_init_is_timed_at_each_step() -> None:
    lines = [
        (0.1, "Probing EDD (edd=off to disable)... ok"),
        (2.0, "[    0.000000] Linux version 6.1.0"),
        (5.0, f"{_initramfs.MARKER} uptime 3.1"),
        (5.1, "[    3.2] reboot: Power down"),
    ]
    boot = probe.classify("tcg", lines, 5.2, 0)
    assert (boot.outcome, boot.first_output_s, boot.first_kernel_s, boot.init_s) == (
        "init-ran",
        0.1,
        2.0,
        5.0,
    )


def test_qemu_errors_panics_and_hangs_are_told_apart() -> None:
    abort = probe.classify(
        "h", [(0.2, "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x0")], 0.3, 1
    )
    assert abort.outcome == "qemu-error" and abort.error is not None and "0x10a" in abort.error
    assert abort.first_output_s is None
    kvm = probe.classify(
        "h", [(1.0, "[ 0.1] x"), (9.0, "KVM internal error. Suberror: 1")], 20, None
    )
    assert kvm.outcome == "qemu-error" and kvm.error == "KVM internal error. Suberror: 1"
    panic = probe.classify("t", [(1.0, "[ 1.0] Kernel panic - not syncing: VFS")], 1.5, 0)
    assert panic.outcome == "panic" and panic.panic_s == 1.0
    warned = [(0.1, "qemu-system-x86_64: warning: host doesn't support requested feature")]
    assert probe.classify("q", [*warned, (0.2, "Probing EDD")], 20, None).outcome == (
        "no-kernel-output"
    )
    assert probe.classify("q", [(0.2, "[ 0.0] Linux version")], 20, None).outcome == (
        "hung-after-kernel"
    )
    killed = [(0.1, "qemu-system-x86_64: terminating on signal 15 from pid 1 (timeout)")]
    assert probe.classify("q", killed, 20, None).error is None


def test_the_initramfs_is_a_gzipped_newc_archive_with_init_and_a_trailer() -> None:
    archive = gzip.decompress(_initramfs.initramfs(b"\x7fELF-busybox"))
    assert archive.startswith(b"070701")
    assert b"bin/busybox\0" in archive and b"init\0" in archive and b"TRAILER!!!\0" in archive
    assert _initramfs.MARKER.encode() in archive
    assert len(archive) % 4 == 0
    # The header's name size counts the NUL; the data follows 4-byte alignment.
    one = _initramfs.newc_archive([("a", 0o100644, b"xyz")])
    assert int(one[94:102], 16) == 2 and int(one[54:62], 16) == 3
    assert one[110:112] == b"a\0" and one[112:115] == b"xyz"


def test_the_summary_takes_medians_of_what_was_seen() -> None:
    boots = [
        probe.classify("t", [(1.0, "[ 0] Linux version"), (3.0 + i, _initramfs.MARKER)], 4.0 + i, 0)
        for i in range(3)
    ]
    summary = probe.summarize(boots)
    assert summary["outcomes"] == ["init-ran"]
    assert summary["init_s_median"] == 4.0 and summary["panic_s_median"] is None
    assert "init-ran" in probe.text_report(
        {"qemu": "q", "kernel": "k", "variants": {"t": {"summary": summary}}}
    )


def test_a_box_run_is_timed_to_its_program_s_first_line_and_exit_code() -> None:
    lines = [
        (0.1, "Probing EDD"),
        (2.0, f"{_initramfs.MARKER} uptime 1.5"),
        (3.2, f"{_initramfs.BOX_START} uptime 1.9"),
        (5.3, "42"),
        (5.4, f"{_initramfs.BOX_END} rc=0 uptime 4.0"),
    ]
    boot = probe.classify("tcg", lines, 5.5, 0)
    assert (boot.outcome, boot.output_s, boot.box_rc) == ("box-ran", 5.3, 0)
    failed = probe.classify("tcg", [*lines[:3], (4.0, f"{_initramfs.BOX_END} rc=127")], 4.1, 0)
    assert (failed.outcome, failed.output_s, failed.box_rc) == ("init-ran", None, 127)


def test_the_box_argv_attaches_the_root_filesystem_read_only() -> None:
    argv = probe.qemu_argv("q", "/k", "/i", probe.VARIANTS[0], memory_mib=1, cpus=1, rootfs="/r")
    drive = argv[argv.index("-drive") + 1]
    assert "file=/r" in drive and "readonly=on" in drive
    assert argv[argv.index("-device") + 1] == "virtio-blk-device,drive=root"


def test_the_box_initramfs_loads_the_modules_in_dependency_order() -> None:
    assert [n for n, _ in _initramfs.VIRTIO_MODULES][:2] == ["virtio_ring", "virtio"]
    archive = gzip.decompress(_initramfs.initramfs(b"bb", [("virtio_ring", b"KO")]))
    assert b"lib/virtio_ring.ko\0" in archive and b"mount -t ext4 -o ro /dev/vda" in archive
    assert _initramfs.modules_dir("/x/root/boot/vmlinuz-6.1.0-57-cloud-amd64") == (
        "/x/root/lib/modules/6.1.0-57-cloud-amd64"
    )
