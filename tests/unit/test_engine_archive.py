"""Reading files out of a container (`get_archive`) with a cap: an answer longer
than allowed is refused before it is read whole, however the engine frames it."""

from __future__ import annotations

import socket

import pytest

from pybox._core.errors import EngineAnswerTooLarge, EngineAPIError
from pybox._engine.http1 import BodyTooLarge, exchange
from tests.unit.test_engine_client import (
    PairTransport,
    chunked_reply,
    engine_on,
    reply,
    transport,  # noqa: F401 (the fixture)
)
from tests.unit.test_engine_http1 import closing, served  # noqa: F401 (closing: the fixture)


def test_the_archive_is_asked_for_by_path_and_read_whole(transport: PairTransport) -> None:  # noqa: F811
    tar = b"t" * 3000
    transport.scripts.append(transport.answer(reply("200 OK", tar, content_type="x-tar")))
    assert engine_on(transport).get_archive("c0ffee", "/pybox-install/target") == tar
    line = transport.requests[0].line
    assert line.startswith("GET /v1.41/containers/c0ffee/archive?path=%2Fpybox-install%2Ftarget ")


def test_a_length_over_the_cap_is_refused_unread(transport: PairTransport) -> None:  # noqa: F811
    transport.scripts.append(transport.answer(reply("200 OK", b"t" * 3000)))
    with pytest.raises(EngineAnswerTooLarge, match="larger than 2999 bytes") as refused:
        engine_on(transport).get_archive("c0ffee", "/x", max_bytes=2999)
    assert refused.value.limit_bytes == 2999


def test_chunks_past_the_cap_are_refused(transport: PairTransport) -> None:  # noqa: F811
    transport.scripts.append(transport.answer(chunked_reply("200 OK", [b"a" * 1000] * 4)))
    with pytest.raises(EngineAnswerTooLarge):
        engine_on(transport).get_archive("c0ffee", "/x", max_bytes=3500)


def test_chunks_up_to_the_cap_are_read(transport: PairTransport) -> None:  # noqa: F811
    transport.scripts.append(transport.answer(chunked_reply("200 OK", [b"a" * 1000] * 4)))
    assert engine_on(transport).get_archive("c0ffee", "/x", max_bytes=4000) == b"a" * 4000


def test_a_missing_path_is_the_engines_refusal(transport: PairTransport) -> None:  # noqa: F811
    missing = b'{"message":"Could not find the file /x in container c0ffee"}'
    transport.scripts.append(transport.answer(reply("404 Not Found", missing)))
    with pytest.raises(EngineAPIError, match="Could not find the file /x") as refused:
        engine_on(transport).get_archive("c0ffee", "/x")
    assert refused.value.status == 404


def test_a_body_to_the_end_of_the_connection_is_capped_too(
    closing: list[socket.socket],  # noqa: F811
) -> None:
    sock, _ = served(b"HTTP/1.1 200 OK\r\n\r\n" + b"z" * 5000)
    closing.append(sock)
    with pytest.raises(BodyTooLarge):
        exchange(sock, "GET", "/x", {"Host": "docker"}, max_body_bytes=4999)
    sock, _ = served(b"HTTP/1.1 200 OK\r\n\r\n" + b"z" * 5000)
    closing.append(sock)
    assert exchange(sock, "GET", "/x", {"Host": "docker"}, max_body_bytes=5000).body == b"z" * 5000
