"""pybox's owner-only unix listener: what it replaces, what it refuses."""

from __future__ import annotations

import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._adapters.unix_listener import MAX_SOCKET_PATH_BYTES, listen_owner_only
from pybox._core.errors import StateError


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # pytest's tmp_path can itself be near the 107-byte limit of a socket address.
    with tempfile.TemporaryDirectory(prefix="pbx-", dir="/tmp") as name:
        yield Path(name)


def test_listens_owner_only_and_says_when_another_listens(short_dir: Path) -> None:
    path = short_dir / "s.sock"
    listener = listen_owner_only(path, 1)
    assert listener is not None
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert listen_owner_only(path, 1) is None
    finally:
        listener.close()


def test_a_stale_socket_is_replaced(short_dir: Path) -> None:
    path = short_dir / "s.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens
    listener = listen_owner_only(path, 1)
    assert listener is not None
    listener.close()


def test_a_file_that_is_not_a_socket_is_kept_and_refused(short_dir: Path) -> None:
    path = short_dir / "s.sock"
    path.write_text("keep me\n")
    with pytest.raises(StateError, match="not a socket"):
        listen_owner_only(path, 1)
    assert path.read_text() == "keep me\n"


def test_a_path_too_long_for_a_socket_is_refused_with_the_numbers(short_dir: Path) -> None:
    path = short_dir / ("d" * 60) / ("s" * 60)
    with pytest.raises(StateError, match=f"over the {MAX_SOCKET_PATH_BYTES}"):
        listen_owner_only(path, 1)
