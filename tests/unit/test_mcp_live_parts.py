"""The pieces of live output over MCP: the live buffer, pages, kept output by offset,
and the HTTP reply queue that never holds more than a few notifications."""

from __future__ import annotations

import queue

import pytest

from pybox._core.capture import HeadTailCapture
from pybox._core.events import OutputChunk, RunEnded
from pybox._frontends.mcp._http.wire import ReplyQueue
from pybox._frontends.mcp._live import LiveOutput, character_end, kept_from


def chunk(data: bytes, offset: int, stream: str = "stdout") -> OutputChunk:
    return OutputChunk(stream, data, offset)  # type: ignore[arg-type]


def test_the_live_buffer_keeps_output_in_order_within_the_cap() -> None:
    live = LiveOutput(cap_bytes=10)
    live.on_event(chunk(b"hello ", 0))
    live.on_event(chunk(b"err", 0, "stderr"))
    live.on_event(chunk(b"x", 99))  # out of order: would make every later offset wrong
    live.on_event(RunEnded("r", "succeeded", 0))
    live.on_event(chunk(b"world!!", 6))
    assert live.sizes() == {"stdout": 10, "stderr": 3}
    page = live.page("stdout", 0, 100)
    assert page is not None and (page.data, page.more, page.buffered) == (b"hello worl", False, 10)
    live.release()
    assert live.page("stdout", 0, 100) is None and live.tail("stdout", 0, 100) is None
    assert live.text("stdout") is None and live.sizes() == {"stdout": 0, "stderr": 0}
    live.on_event(chunk(b"late", 10))
    assert live.sizes()["stdout"] == 0


def test_pages_by_offset_and_size() -> None:
    live = LiveOutput(cap_bytes=1000)
    live.on_event(chunk(b"0123456789", 0))
    page = live.page("stdout", 3, 4)
    assert page is not None
    assert (page.offset, page.data, page.next_offset, page.more) == (3, b"3456", 7, True)
    past = live.page("stdout", 50, 4)  # past the end: an empty page at the end
    assert past is not None and (past.offset, past.data, past.more) == (10, b"", False)


@pytest.mark.parametrize(
    ("data", "end", "expected"),
    [
        (b"abc", 3, 3),
        ("aé".encode(), 2, 1),  # the é's lead byte alone: held back
        ("aé".encode(), 3, 3),
        ("a€".encode(), 3, 1),
        ("a😀".encode(), 4, 1),
        ("a😀".encode(), 5, 5),
        (b"a\x80\x80\x80\x80", 5, 5),  # not UTF-8: passed on as it is
        (b"\xff", 1, 1),
    ],
)
def test_character_end(data: bytes, end: int, expected: int) -> None:
    assert character_end(data, 0, end) == expected


def test_a_character_cut_at_the_cap_is_not_held_back_for_ever() -> None:
    live = LiveOutput(cap_bytes=4)
    live.on_event(chunk("abcé".encode(), 0))  # the cap cuts the é: it never completes
    page = live.page("stdout", 0, 100)
    assert page is not None and page.data == b"abc\xc3" and page.more is False
    tail = live.tail("stdout", 0, 100)
    assert tail is not None and tail.data == b"abc\xc3"


def test_the_tail_begins_at_a_character() -> None:
    live = LiveOutput(cap_bytes=1000)
    live.on_event(chunk("ééé".encode(), 0))
    tail = live.tail("stdout", 0, 3)
    assert tail is not None and (tail.offset, tail.data) == (4, "é".encode())
    held = LiveOutput(cap_bytes=1000)
    held.on_event(chunk(b"ab\xc3", 0))
    tail = held.tail("stdout", 0, 100)
    assert tail is not None and tail.data == b"ab"


@pytest.mark.parametrize("total", [0, 10, 16, 17, 40])
def test_kept_from_matches_what_the_capture_kept(total: int) -> None:
    cap = 16
    printed = bytes(range(65, 65 + total))
    capture = HeadTailCapture(cap)
    capture.feed(printed)
    kept = capture.kept()
    for offset in range(total + 2):
        start, data = kept_from(kept, total, cap, offset)
        if total <= cap:
            assert (start, data) == (min(offset, total), printed[offset:])
        elif offset <= cap - cap // 2:
            assert start == offset and data == kept[offset:]
        else:  # from the tail: the printed bytes themselves
            assert data == printed[start:] and start >= min(offset, total - cap // 2)


def test_the_reply_queue_drops_notifications_a_slow_client_has_not_taken() -> None:
    replies = ReplyQueue(max_pending=3)
    for i in range(10):
        replies.put({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"i": i}})
    replies.put({"jsonrpc": "2.0", "id": 1, "result": {}})  # the response always goes in
    got = []
    while True:
        try:
            got.append(replies.get(0.01))
        except queue.Empty:
            break
    assert [m["params"]["i"] for m in got[:-1] if m is not None] == [0, 1, 2]
    assert got[-1] == {"jsonrpc": "2.0", "id": 1, "result": {}} and replies.dropped == 7
    replies.put(None)  # the end marker of a cancelled request, too
    assert replies.get(0.01) is None
