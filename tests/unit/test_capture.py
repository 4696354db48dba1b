"""Bounded capture of an output stream: the first half and the last half are kept."""

from __future__ import annotations

import hashlib
import random

import pytest

from pybox._core.capture import HeadTailCapture
from pybox._core.receipt import StreamReport

KIB = 1024


def captured(limit: int, *chunks: bytes) -> HeadTailCapture:
    capture = HeadTailCapture(limit)
    for chunk in chunks:
        capture.feed(chunk)
    return capture


def buffered(capture: HeadTailCapture) -> int:
    """The bytes the capture holds right now (its head and tail buffers)."""
    return len(capture._head) + len(capture._tail)


def test_nothing_fed() -> None:
    capture = HeadTailCapture(10)
    assert capture.kept() == b""
    assert capture.total_bytes == 0
    assert not capture.truncated
    assert capture.report() == StreamReport(
        bytes_total=0, bytes_kept=0, truncated=False, sha256=hashlib.sha256(b"").hexdigest()
    )


def test_under_the_limit_keeps_everything() -> None:
    capture = captured(100, b"hello ", b"world\n")
    assert capture.kept() == b"hello world\n"
    assert not capture.truncated
    report = capture.report()
    assert report.bytes_total == 12
    assert report.bytes_kept == 12
    assert report.sha256 == hashlib.sha256(b"hello world\n").hexdigest()


def test_exactly_at_the_limit_keeps_everything() -> None:
    data = bytes(range(100))
    capture = captured(100, data)
    assert capture.kept() == data
    assert not capture.truncated
    assert capture.report().bytes_kept == 100


def test_one_byte_over_the_limit_is_truncated() -> None:
    data = bytes(range(101))
    capture = captured(100, data)
    assert capture.truncated
    assert capture.report().bytes_kept == 100
    assert capture.kept().startswith(data[:50])
    assert capture.kept().endswith(data[-50:])
    assert b"1 bytes dropped" in capture.kept()


def test_over_the_limit_keeps_first_half_and_last_half() -> None:
    data = b"".join(f"line {i:05d}\n".encode() for i in range(1000))
    capture = captured(200, data)
    kept = capture.kept()
    head, tail = data[:100], data[-100:]
    marker = (
        f"\n[pybox: output truncated: {len(data) - 200} bytes dropped between the first "
        "100 and the last 100 bytes]\n"
    ).encode()
    assert kept == head + marker + tail
    report = capture.report()
    assert report == StreamReport(
        bytes_total=len(data),
        bytes_kept=200,
        truncated=True,
        sha256=hashlib.sha256(data).hexdigest(),
    )


def test_sha256_is_of_the_full_stream_not_the_kept_bytes() -> None:
    data = random.Random(1).randbytes(10_000)
    capture = captured(64, data[:3000], data[3000:])
    assert capture.report().sha256 == hashlib.sha256(data).hexdigest()
    assert capture.report().sha256 != hashlib.sha256(capture.kept()).hexdigest()


def test_odd_limit_gives_the_extra_byte_to_the_head() -> None:
    data = b"abcdefghijklmnopqrstuvwxyz"
    capture = captured(7, data)
    kept = capture.kept()
    assert kept.startswith(b"abcd\n[pybox")
    assert kept.endswith(b"]\nxyz")
    assert b"19 bytes dropped between the first 4 and the last 3 bytes" in kept
    assert capture.report().bytes_kept == 7


def test_limit_of_one_keeps_only_the_first_byte() -> None:
    capture = captured(1, b"abc")
    assert capture.truncated
    assert capture.kept().startswith(b"a\n[pybox")
    assert capture.kept().endswith(b"bytes]\n")
    assert capture.report().bytes_kept == 1
    assert capture.report().bytes_total == 3


def test_limit_of_zero_keeps_nothing_but_still_counts_and_hashes() -> None:
    capture = captured(0, b"abc", b"def")
    assert capture.truncated
    assert capture.report().bytes_kept == 0
    assert capture.report().bytes_total == 6
    assert capture.report().sha256 == hashlib.sha256(b"abcdef").hexdigest()
    assert b"6 bytes dropped" in capture.kept()
    assert buffered(capture) == 0


def test_zero_limit_with_nothing_fed_is_not_truncated() -> None:
    capture = HeadTailCapture(0)
    capture.feed(b"")
    assert not capture.truncated
    assert capture.kept() == b""


def test_empty_feeds_change_nothing() -> None:
    capture = captured(10, b"", b"abc", b"", b"")
    assert capture.kept() == b"abc"
    assert capture.total_bytes == 3


def test_tail_is_the_last_bytes_even_when_they_come_in_tiny_feeds() -> None:
    capture = captured(10, *(bytes([b]) for b in b"0123456789ABCDEFGHIJ"))
    kept = capture.kept()
    assert kept.startswith(b"01234\n")
    assert kept.endswith(b"\nFGHIJ")


def test_a_feed_that_fills_the_head_and_spills_into_the_tail() -> None:
    capture = captured(10, b"012", b"3456789", b"X")
    kept = capture.kept()
    assert kept.startswith(b"01234\n")
    assert kept.endswith(b"\n6789X")
    assert capture.total_bytes == 11


@pytest.mark.parametrize("limit", [0, 1, 2, 3, 7, 10, 64, 101])
def test_many_tiny_feeds_equal_one_big_feed(limit: int) -> None:
    rng = random.Random(limit)
    data = rng.randbytes(500)
    whole = captured(limit, data)
    bytewise = captured(limit, *(data[i : i + 1] for i in range(len(data))))
    cuts = sorted(rng.sample(range(1, len(data)), 20))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    pieced = captured(limit, *pieces)
    for other in (bytewise, pieced):
        assert other.kept() == whole.kept()
        assert other.report() == whole.report()


@pytest.mark.parametrize("limit", [1, 2, 9, 100])
def test_random_feeds_match_a_reference(limit: int) -> None:
    rng = random.Random(limit * 31)
    data = bytearray()
    capture = HeadTailCapture(limit)
    for _ in range(200):
        chunk = rng.randbytes(rng.randrange(0, 3 * limit + 2))
        capture.feed(chunk)
        data += chunk
        head_len = limit - limit // 2
        tail_len = limit // 2
        if len(data) <= limit:
            assert capture.kept() == bytes(data)
        else:
            kept = capture.kept()
            assert kept.startswith(bytes(data[:head_len]))
            assert kept.endswith(bytes(data[len(data) - tail_len :]) if tail_len else b"]\n")
        assert buffered(capture) <= limit
        assert capture.total_bytes == len(data)


def test_memory_stays_bounded_for_a_large_stream() -> None:
    limit = 64 * KIB
    chunk_size = 64 * KIB
    total = 50 * 1024 * 1024
    capture = HeadTailCapture(limit)
    digest = hashlib.sha256()
    block = bytes(range(256)) * (chunk_size // 256)
    first = last = b""
    for index in range(total // chunk_size):
        chunk = index.to_bytes(4, "big") + block[4:]
        capture.feed(chunk)
        digest.update(chunk)
        assert buffered(capture) <= limit
        if index == 0:
            first = chunk
        last = chunk
    report = capture.report()
    assert report.bytes_total == total
    assert report.bytes_kept == limit
    assert report.truncated
    assert report.sha256 == digest.hexdigest()
    kept = capture.kept()
    assert kept.startswith(first[: limit // 2])
    assert kept.endswith(last[-limit // 2 :])
    assert len(kept) < limit + 200  # the kept bytes plus one short marker line
