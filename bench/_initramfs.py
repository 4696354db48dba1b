"""The microVM probe's initramfs: a cpio "newc" archive with busybox and an init script.

Two inits: one prints a marker and powers off (boot cost alone); the box one loads
the virtio modules, mounts the image's root filesystem read-only from /dev/vda,
runs the image's Python in a chroot and powers off.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence

MARKER = "PYBOX-MICROVM-INIT"
BOX_START, BOX_END = "PYBOX-MICROVM-BOX-START", "PYBOX-MICROVM-BOX-END"
# virtio_ring first: virtio needs it, virtio_mmio and virtio_blk need both.
VIRTIO_MODULES = (
    ("virtio_ring", "kernel/drivers/virtio/virtio_ring.ko"),
    ("virtio", "kernel/drivers/virtio/virtio.ko"),
    ("virtio_mmio", "kernel/drivers/virtio/virtio_mmio.ko"),
    ("virtio_blk", "kernel/drivers/block/virtio_blk.ko"),
)
BOX_PROGRAM = "print(6*7)"
_UPTIME = "$(/bin/busybox cut -d' ' -f1 /proc/uptime)"
INIT_SCRIPT = f"""#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
echo {MARKER} uptime {_UPTIME}
/bin/busybox poweroff -f
"""
BOX_INIT_SCRIPT = f"""#!/bin/busybox sh
B=/bin/busybox
$B mount -t proc proc /proc
$B mount -t devtmpfs dev /dev
for m in {" ".join(name for name, _ in VIRTIO_MODULES)}; do $B insmod /lib/$m.ko; done
echo {MARKER} uptime {_UPTIME}
i=0; while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do $B sleep 0.05; i=$((i+1)); done
$B mkdir -p /newroot
$B mount -t ext4 -o ro /dev/vda /newroot
$B mount -t proc proc /newroot/proc
$B mount -t tmpfs -o size=16m tmpfs /newroot/tmp
echo {BOX_START} uptime {_UPTIME}
$B chroot /newroot /usr/bin/python3 -c '{BOX_PROGRAM}'
echo {BOX_END} rc=$? uptime {_UPTIME}
$B poweroff -f
"""
_DIRECTORY, _EXECUTABLE, _REGULAR = 0o040755, 0o100755, 0o100644


def newc_archive(entries: Sequence[tuple[str, int, bytes]]) -> bytes:
    """A cpio "newc" archive (what the kernel unpacks as an initramfs): (name, mode, data)."""
    out = bytearray()
    for inode, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], start=1):
        encoded = name.encode() + b"\0"
        fields = [inode, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0]
        header = b"070701" + b"".join(b"%08X" % field for field in fields)
        out += header + encoded
        out += b"\0" * (-len(out) % 4)
        out += data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def initramfs(busybox: bytes, modules: Sequence[tuple[str, bytes]] = ()) -> bytes:
    """With `modules` (name, .ko bytes) the box init; without, the marker-only one."""
    init = BOX_INIT_SCRIPT if modules else INIT_SCRIPT
    entries = [(d, _DIRECTORY, b"") for d in ("bin", "dev", "lib", "proc", "sys")]
    entries += [("bin/busybox", _EXECUTABLE, busybox), ("init", _EXECUTABLE, init.encode())]
    entries += [(f"lib/{name}.ko", _REGULAR, data) for name, data in modules]
    return gzip.compress(newc_archive(entries), compresslevel=1)


def modules_dir(kernel: str) -> str:
    """ROOT/lib/modules/VERSION for a kernel at ROOT/boot/vmlinuz-VERSION (dpkg-deb -x)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(kernel)))
    version = os.path.basename(kernel).removeprefix("vmlinuz-")
    return os.path.join(root, "lib", "modules", version)


def read_modules(directory: str) -> list[tuple[str, bytes]]:
    found = []
    for name, relative in VIRTIO_MODULES:
        with open(os.path.join(directory, relative), "rb") as module:
            found.append((name, module.read()))
    return found
