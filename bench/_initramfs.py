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


# The channel box (bench/microvm_box.py): code in and output out over a
# virtio-console port, not the serial console. virtio_console after the others.
CHANNEL_MODULES = (*VIRTIO_MODULES, ("virtio_console", "kernel/drivers/char/virtio_console.ko"))
PORT_NAME = "pybox"
# The guest's runner, the image's Python in the chroot, fds 0 and 1 on the port:
# reads a 4-byte big-endian length and the code, runs it as a child (uid 65534,
# its own session, a deadline), then writes one frame: the exit code, stdout and
# stderr, each with its 4-byte length. The init powers off after it.
CHANNEL_RUNNER = r"""
import os, subprocess, sys
def take(n):
    data = b""
    while len(data) < n:
        part = os.read(0, n - len(data))
        if not part:
            sys.exit(3)
        data += part
    return data
code = take(int.from_bytes(take(4), "big"))
def drop():
    os.setgid(65534)
    os.setuid(65534)
try:
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60, cwd="/tmp", preexec_fn=drop, start_new_session=True)
    rc, out, err = done.returncode, done.stdout, done.stderr
except subprocess.TimeoutExpired as exc:
    rc, out, err = 124, exc.stdout or b"", exc.stderr or b""
frame = (rc & 0xFF).to_bytes(1, "big")
for part in (out[:1 << 20], err[:1 << 20]):
    frame += len(part).to_bytes(4, "big") + part
os.write(1, frame)
"""
CHANNEL_INIT_SCRIPT = f"""#!/bin/busybox sh
B=/bin/busybox
$B mount -t proc proc /proc
$B mount -t devtmpfs dev /dev
$B mount -t sysfs sys /sys
for m in {" ".join(name for name, _ in CHANNEL_MODULES)}; do $B insmod /lib/$m.ko; done
echo {MARKER} uptime {_UPTIME}
i=0; while [ ! -b /dev/vda ] && [ $i -lt 200 ]; do $B sleep 0.05; i=$((i+1)); done
port=
for p in /sys/class/virtio-ports/*; do
  [ "$($B cat $p/name 2>/dev/null)" = {PORT_NAME} ] && port=/dev/$($B basename $p)
done
$B mkdir -p /newroot
$B mount -t ext4 -o ro /dev/vda /newroot
$B mount -t proc proc /newroot/proc
$B mount -t devtmpfs dev /newroot/dev
$B mount -t tmpfs -o size=16m,mode=1777 tmpfs /newroot/tmp
echo {BOX_START} port=$port uptime {_UPTIME}
$B chroot /newroot /usr/bin/python3 -I -S -c '{CHANNEL_RUNNER}' 0<>$port 1>&0
echo {BOX_END} rc=$? uptime {_UPTIME}
$B poweroff -f
"""


def initramfs(
    busybox: bytes, modules: Sequence[tuple[str, bytes]] = (), init: str | None = None
) -> bytes:
    """With `modules` (name, .ko bytes) the box init; without, the marker-only one;
    `init` names another script (the channel box's)."""
    init = init or (BOX_INIT_SCRIPT if modules else INIT_SCRIPT)
    entries = [(d, _DIRECTORY, b"") for d in ("bin", "dev", "lib", "proc", "sys")]
    entries += [("bin/busybox", _EXECUTABLE, busybox), ("init", _EXECUTABLE, init.encode())]
    entries += [(f"lib/{name}.ko", _REGULAR, data) for name, data in modules]
    return gzip.compress(newc_archive(entries), compresslevel=1)


def modules_dir(kernel: str) -> str:
    """ROOT/lib/modules/VERSION for a kernel at ROOT/boot/vmlinuz-VERSION (dpkg-deb -x)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(kernel)))
    version = os.path.basename(kernel).removeprefix("vmlinuz-")
    return os.path.join(root, "lib", "modules", version)


def read_modules(
    directory: str, wanted: Sequence[tuple[str, str]] = VIRTIO_MODULES
) -> list[tuple[str, bytes]]:
    found = []
    for name, relative in wanted:
        with open(os.path.join(directory, relative), "rb") as module:
            found.append((name, module.read()))
    return found
