"""Owner-only unix sockets for pybox's own services (the pool service, keepers).

Both listen where only their user can reach them and ask the kernel who
connected (SO_PEERCRED) rather than trusting anything the client says.
"""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """The connecting process's (pid, uid), from the kernel (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid


def listen_owner_only(path: Path, backlog: int) -> socket.socket | None:
    """A socket listening at `path`, mode 600; None when another process already
    listens there. A socket file nobody listens on (its owner died) is replaced."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except FileNotFoundError:
        pass
    except OSError:
        path.unlink()
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
