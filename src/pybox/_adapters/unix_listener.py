"""Owner-only unix sockets for pybox's own services (the pool service, keepers).

Both listen where only their user can reach them and ask the kernel who
connected (SO_PEERCRED) rather than trusting anything the client says.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from pathlib import Path

from pybox._core.errors import StateError

# A unix socket's address (sun_path) holds 108 bytes, the terminating NUL included.
MAX_SOCKET_PATH_BYTES = 107


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """The connecting process's (pid, uid), from the kernel (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid


def listen_owner_only(path: Path, backlog: int) -> socket.socket | None:
    """A socket listening at `path`, mode 600; None when another process already
    listens there. A socket file nobody listens on (its owner died) is replaced;
    any other file there is left alone and refused."""
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH_BYTES:
        raise StateError(
            f"Cannot listen at {path}: the path is {size} bytes, over the "
            f"{MAX_SOCKET_PATH_BYTES} a unix socket's address holds. Use a shorter state "
            "directory (PYBOX_STATE_DIR) or runtime directory (XDG_RUNTIME_DIR)."
        )
    try:
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise StateError(
                f"Cannot listen at {path}: a file that is not a socket is there. Remove it if "
                "it is not yours to keep, or choose another state directory (PYBOX_STATE_DIR)."
            )
    except FileNotFoundError:
        pass
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except FileNotFoundError:
        pass
    except ConnectionRefusedError:
        path.unlink()  # a socket whose listener is gone
    except OSError as exc:
        raise StateError(
            f"Cannot listen at {path}: {exc.strerror or exc}. Remove the file there if it "
            "is not pybox's, or choose another state directory (PYBOX_STATE_DIR)."
        ) from None
    else:
        return None
    finally:
        probe.close()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)
    try:
        listener.bind(str(path))
    finally:
        os.umask(previous)
    os.chmod(path, 0o600)
    listener.listen(backlog)
    return listener
