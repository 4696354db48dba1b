"""bench/microvm_box.py's pure parts, without QEMU: the frame, the argv, the guest's init."""

from __future__ import annotations

import gzip

from bench import _initramfs
from bench import microvm_box as box


def test_a_frame_is_parsed_only_when_whole() -> None:
    frame = b"\x07" + (3).to_bytes(4, "big") + b"42\n" + (2).to_bytes(4, "big") + b"no"
    assert box.parse_frame(frame) == (7, b"42\n", b"no")
    for cut in range(len(frame)):
        assert box.parse_frame(frame[:cut]) is None


def test_the_argv_has_a_read_only_root_and_one_named_virtio_port_on_the_socket() -> None:
    argv = box.box_argv("qemu", "/k", "/i", "/r.ext4", "/s/port.sock", memory_mib=256, cpus=1)
    assert argv[argv.index("-accel") + 1] == "tcg"
    assert "readonly=on" in argv[argv.index("-drive") + 1]
    assert "-netdev" not in argv and "-nic" not in argv  # no network device at all
    chardev = argv[argv.index("-chardev") + 1]
    assert chardev.startswith("socket,") and "path=/s/port.sock" in chardev
    assert f"virtserialport,chardev=port,name={_initramfs.PORT_NAME}" in argv
    assert argv[-2] == "-append"


def test_the_channel_init_loads_the_console_module_and_opens_the_port_once() -> None:
    script = _initramfs.CHANNEL_INIT_SCRIPT
    assert "virtio_console" in script
    # A virtio-console port opens once: the runner gets one descriptor, duplicated.
    assert "0<>$port 1>&0" in script
    # The runner sits in single quotes in the shell: it must hold none, and compile.
    assert "'" not in _initramfs.CHANNEL_RUNNER
    compile(_initramfs.CHANNEL_RUNNER, "runner", "exec")
    assert "setuid(65534)" in _initramfs.CHANNEL_RUNNER


def test_the_initramfs_takes_the_channel_init() -> None:
    archive = gzip.decompress(
        _initramfs.initramfs(b"busybox", [("virtio", b"ko")], _initramfs.CHANNEL_INIT_SCRIPT)
    )
    assert _initramfs.PORT_NAME.encode() in archive and b"lib/virtio.ko" in archive
