"""The byte protocol between pybox and the in-box bootstrap."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import pytest

from pybox._core import wire
from pybox._core.errors import SandboxError
from pybox._core.wire import (
    Frame,
    FrameDecoder,
    PayloadFile,
    ProtocolError,
    encode_payload,
)
from pybox._inbox import bootstrap_source


def frame_bytes(kind: bytes, data: bytes) -> bytes:
    return kind + len(data).to_bytes(4, "big") + data


def decode_all(decoder: FrameDecoder, *chunks: bytes) -> list[Frame]:
    frames: list[Frame] = []
    for chunk in chunks:
        frames.extend(decoder.feed(chunk))
    return frames


SAMPLE_FRAMES = [
    Frame(wire.K_READY, b'{"version": 1, "pid": 1, "uid": 1000}'),
    Frame(wire.K_STARTED, b"{}"),
    Frame(wire.K_STDOUT, b"hello\n"),
    Frame(wire.K_STDERR, b""),
    Frame(wire.K_STDERR, b"\x00\xff oops"),
    Frame(wire.K_FILE, b'{"path": "a.txt", "size": 3}'),
    Frame(wire.K_DATA, b"abc"),
    Frame(wire.K_EXIT, b'{"exit_code": 0, "backstop": false}'),
    Frame(wire.K_FILES_DONE, b'{"files_sent": 1, "files_skipped": []}'),
]
STREAM = b"".join(frame_bytes(f.kind, f.data) for f in SAMPLE_FRAMES)


# --- FrameDecoder ---------------------------------------------------------------


def test_protocol_error_is_a_sandbox_error() -> None:
    assert issubclass(ProtocolError, SandboxError)


def test_one_feed_with_many_frames() -> None:
    decoder = FrameDecoder()
    assert decode_all(decoder, STREAM) == SAMPLE_FRAMES
    assert decoder.pending_bytes == 0


def test_one_byte_at_a_time() -> None:
    decoder = FrameDecoder()
    frames = decode_all(decoder, *(STREAM[i : i + 1] for i in range(len(STREAM))))
    assert frames == SAMPLE_FRAMES
    assert decoder.pending_bytes == 0


def test_split_at_every_byte_boundary() -> None:
    for cut in range(len(STREAM) + 1):
        decoder = FrameDecoder()
        first = list(decoder.feed(STREAM[:cut]))
        second = list(decoder.feed(STREAM[cut:]))
        assert first + second == SAMPLE_FRAMES, cut
        assert decoder.pending_bytes == 0


def test_split_into_three_at_every_pair_of_boundaries_in_one_frame() -> None:
    data = frame_bytes(wire.K_STDOUT, b"0123456789")
    for i in range(len(data) + 1):
        for j in range(i, len(data) + 1):
            decoder = FrameDecoder()
            frames = decode_all(decoder, data[:i], data[i:j], data[j:])
            assert frames == [Frame(wire.K_STDOUT, b"0123456789")], (i, j)


def test_frame_is_not_yielded_before_its_last_byte() -> None:
    data = frame_bytes(wire.K_STDOUT, b"abcdef")
    decoder = FrameDecoder()
    assert list(decoder.feed(data[:-1])) == []
    assert decoder.pending_bytes == len(data) - 1
    assert list(decoder.feed(data[-1:])) == [Frame(wire.K_STDOUT, b"abcdef")]
    assert decoder.pending_bytes == 0


def test_pending_bytes_counts_a_partial_header_and_a_trailing_partial_frame() -> None:
    decoder = FrameDecoder()
    assert decoder.pending_bytes == 0
    assert list(decoder.feed(b"1\x00\x00")) == []
    assert decoder.pending_bytes == 3
    complete = frame_bytes(wire.K_STDOUT, b"xy")
    decoder = FrameDecoder()
    frames = list(decoder.feed(complete + complete[:4]))
    assert frames == [Frame(wire.K_STDOUT, b"xy")]
    assert decoder.pending_bytes == 4


def test_empty_feed_yields_nothing() -> None:
    decoder = FrameDecoder()
    assert list(decoder.feed(b"")) == []
    assert decoder.pending_bytes == 0


def test_empty_payload_frame() -> None:
    assert list(FrameDecoder().feed(frame_bytes(wire.K_STARTED, b""))) == [
        Frame(wire.K_STARTED, b"")
    ]


@pytest.mark.parametrize("kind", [b"Q", b"\x00", b"r", b"3", b"\xff"])
def test_unknown_kind_is_a_protocol_error(kind: bytes) -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError) as info:
        list(decoder.feed(frame_bytes(kind, b"x")))
    assert repr(kind) in str(info.value)


def test_unknown_kind_after_a_good_frame() -> None:
    decoder = FrameDecoder()
    seen: list[Frame] = []
    with pytest.raises(ProtocolError):
        for frame in decoder.feed(frame_bytes(wire.K_STDOUT, b"ok") + frame_bytes(b"?", b"")):
            seen.append(frame)
    assert seen == [Frame(wire.K_STDOUT, b"ok")]


@pytest.mark.parametrize("kind", [wire.K_STDOUT, wire.K_STDERR, wire.K_DATA])
def test_data_frames_are_limited_to_one_chunk(kind: bytes) -> None:
    at_limit = frame_bytes(kind, b"x" * wire.MAX_FRAME_BYTES)
    assert list(FrameDecoder().feed(at_limit)) == [Frame(kind, b"x" * wire.MAX_FRAME_BYTES)]
    over = kind + (wire.MAX_FRAME_BYTES + 1).to_bytes(4, "big")
    with pytest.raises(ProtocolError) as info:
        list(FrameDecoder().feed(over))
    assert str(wire.MAX_FRAME_BYTES + 1) in str(info.value)
    assert str(wire.MAX_FRAME_BYTES) in str(info.value)


@pytest.mark.parametrize("kind", [wire.K_READY, wire.K_EXIT, wire.K_FILE, wire.K_ERROR])
def test_json_frames_have_a_larger_but_bounded_limit(kind: bytes) -> None:
    decoder = FrameDecoder()
    # Just above the data limit is fine for JSON frames, and waits for more bytes.
    header = kind + (wire.MAX_FRAME_BYTES + 1).to_bytes(4, "big")
    assert list(decoder.feed(header)) == []
    with pytest.raises(ProtocolError):
        list(FrameDecoder().feed(kind + (wire.MAX_JSON_FRAME_BYTES + 1).to_bytes(4, "big")))


def test_oversized_frame_is_refused_from_the_header_alone() -> None:
    # A 4 GiB announcement must be refused at once, not buffered for.
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError):
        list(decoder.feed(wire.K_STDOUT + b"\xff\xff\xff\xff"))


def test_decoder_keeps_only_what_it_has_not_yielded() -> None:
    decoder = FrameDecoder()
    payload = b"z" * wire.CHUNK
    for _ in range(50):
        frames = list(decoder.feed(frame_bytes(wire.K_STDOUT, payload)))
        assert len(frames) == 1
        assert decoder.pending_bytes == 0


# --- Frame.json -------------------------------------------------------------------


def test_frame_json_returns_the_object() -> None:
    assert Frame(wire.K_EXIT, b'{"exit_code": 3}').json() == {"exit_code": 3}


@pytest.mark.parametrize("data", [b"", b"{", b"not json", b"\xff\xfe", b'{"a": }'])
def test_frame_json_refuses_non_json(data: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        Frame(wire.K_EXIT, data).json()
    assert "not JSON" in str(info.value)
    assert repr(wire.K_EXIT) in str(info.value)


@pytest.mark.parametrize("data", [b"[]", b"1", b'"x"', b"null", b"true"])
def test_frame_json_refuses_non_objects(data: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        Frame(wire.K_FILE, data).json()
    assert "not a JSON object" in str(info.value)


# --- encode_payload -------------------------------------------------------------
#
# The header is read inside the box by the bootstrap's own parser, so the
# layout is checked by decoding it with that parser: what the host encodes is
# what the box reads.


def bootstrap_namespace() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "pybox_bootstrap_under_test"}
    exec(compile(bootstrap_source(), "bootstrap.py", "exec"), namespace)
    return namespace


def payload_args(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "argv": ["/usr/bin/python3", "main.py"],
        "code_name": "main.py",
        "code": b"print('hi')\n",
        "inputs": (PayloadFile("a.txt", b"AAAA"), PayloadFile("b.bin", b"\x00\x01")),
        "backstop_s": 31.5,
        "collect_outputs": True,
        "max_files": 7,
        "max_file_bytes": 1234,
    }
    args.update(overrides)
    return args


def split_payload(raw: bytes) -> tuple[bytes, bytes]:
    assert raw[:4] == wire.MAGIC
    length = int.from_bytes(raw[4:8], "big")
    assert len(raw) >= 8 + length
    return raw[8 : 8 + length], raw[8 + length :]


def box_header(raw_header: bytes) -> dict[str, Any]:
    header = bootstrap_namespace()["parse_header"](raw_header)
    assert isinstance(header, dict)
    return header


def test_payload_layout_as_the_box_reads_it() -> None:
    args = payload_args()
    raw_header, rest = split_payload(b"".join(encode_payload(**args)))
    assert box_header(raw_header) == {
        "version": wire.VERSION,
        "argv": ["/usr/bin/python3", "main.py"],
        "code_name": "main.py",
        "code_size": len(args["code"]),
        "inputs": [{"name": "a.txt", "size": 4}, {"name": "b.bin", "size": 2}],
        "backstop_s": 31.5,
        "collect_outputs": True,
        "max_files": 7,
        "max_file_bytes": 1234,
        "args": [],
        "env": [],
        "stdin_size": 0,
    }
    # Then the code and each input, in header order, back to back.
    assert rest == b"print('hi')\nAAAA\x00\x01"


def test_payload_chunks_are_header_then_code_then_each_input() -> None:
    chunks = list(encode_payload(**payload_args()))
    assert len(chunks) == 4
    assert chunks[0].startswith(wire.MAGIC)
    length = int.from_bytes(chunks[0][4:8], "big")
    assert len(chunks[0]) == 8 + length  # the first chunk is exactly the header
    assert chunks[1:] == [b"print('hi')\n", b"AAAA", b"\x00\x01"]


def test_payload_header_length_is_four_bytes_big_endian() -> None:
    big_argv = ["/usr/bin/python3", "x" * 300]
    first = next(encode_payload(**payload_args(argv=big_argv)))
    length = int.from_bytes(first[4:8], "big")
    assert length > 255  # needs more than the low byte
    assert first[4:8] == length.to_bytes(4, "big")
    assert len(first) == 8 + length
    assert box_header(first[8:])["argv"] == big_argv


def test_payload_with_no_inputs_and_empty_code() -> None:
    raw_header, rest = split_payload(
        b"".join(encode_payload(**payload_args(inputs=(), code=b"", collect_outputs=False)))
    )
    header = box_header(raw_header)
    assert header["inputs"] == []
    assert header["code_size"] == 0
    assert header["collect_outputs"] is False
    assert rest == b""


@pytest.mark.parametrize("backstop_s", [0.1, 30, 31.25, 3600.0, 1 / 3])
def test_payload_backstop_survives_exactly(backstop_s: float) -> None:
    first = next(encode_payload(**payload_args(backstop_s=backstop_s)))
    assert box_header(first[8:])["backstop_s"] == float(backstop_s)


def test_payload_unicode_names_survive() -> None:
    name = "naïve ☃ 𝄞.txt"
    first = next(encode_payload(**payload_args(inputs=(PayloadFile(name, b"x"),), code=b"c")))
    assert box_header(first[8:])["inputs"] == [{"name": name, "size": 1}]


def test_payload_argv_with_spaces_and_empty_fields_survives() -> None:
    argv = ["/usr/bin/python3", "-X", "a b", "", "main.py"]
    first = next(encode_payload(**payload_args(argv=argv)))
    assert box_header(first[8:])["argv"] == argv


@pytest.mark.parametrize(
    "overrides",
    [
        {"code_name": "ma\tin.py"},
        {"code_name": "main.py\n"},
        {"argv": ["/usr/bin/python3", "a\nb"]},
        {"inputs": (PayloadFile("a\tb", b""),)},
        {"inputs": (PayloadFile("a\nversion\t2", b""),)},
    ],
    ids=repr,
)
def test_payload_refuses_fields_that_would_break_the_header(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="tab or newline"):
        list(encode_payload(**payload_args(**overrides)))


# --- both sides agree -------------------------------------------------------------


def test_bootstrap_constants_equal_wire_constants() -> None:
    box = bootstrap_namespace()
    assert callable(box["main"])  # defined, not run
    for name in (
        "VERSION",
        "ONE_PROGRAM",
        "MANY_PROGRAMS",
        "MAGIC",
        "ACK",
        "STOP",
        "CHUNK",
        "BACKSTOP_EXIT",
        "MAX_SKIPPED_LISTED",
        "MAX_SKIPPED_JSON_BYTES",
    ):
        assert box[name] == getattr(wire, name), name
    box_kinds = {name: value for name, value in box.items() if name.startswith("K_")}
    wire_kinds = {name: getattr(wire, name) for name in dir(wire) if name.startswith("K_")}
    assert box_kinds == wire_kinds
    assert set(wire_kinds.values()) == wire.KINDS


def test_every_kind_is_one_distinct_byte() -> None:
    kinds = [getattr(wire, name) for name in dir(wire) if name.startswith("K_")]
    assert all(isinstance(k, bytes) and len(k) == 1 for k in kinds)
    assert len(set(kinds)) == len(kinds)


def _link(box: dict[str, Any]) -> tuple[Any, int, int]:
    """A bootstrap Link over two real pipes; returns it, pybox's write end and read end."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    return box["Link"](in_r, out_w), in_w, out_r


def _fill(fd: int) -> None:
    """Fill a pipe until a write would block, as a reader that stopped reading would."""
    os.set_blocking(fd, False)
    try:
        while True:
            os.write(fd, b"x" * 65536)
    except BlockingIOError:
        pass


def test_bootstrap_send_frames_decode_on_the_host() -> None:
    box = bootstrap_namespace()
    link, _, out_r = _link(box)
    link.send(box["K_STDOUT"], b"hello")
    link.send_json(box["K_EXIT"], {"exit_code": 0, "backstop": False})
    link.send(box["K_STARTED"])
    big = (
        bytes(range(256)) * 256
    )  # with the frames before it, over a pipe's buffer: send() must wait and loop
    reader = threading.Thread(target=lambda: written.extend(_read_all(out_r)))
    written = bytearray()
    reader.start()
    link.send(box["K_STDOUT"], big)
    os.close(link.fd_out)
    reader.join(timeout=10)
    frames = list(FrameDecoder().feed(bytes(written)))
    assert [(f.kind, f.data) for f in frames if f.kind != wire.K_EXIT] == [
        (wire.K_STDOUT, b"hello"),
        (wire.K_STARTED, b""),
        (wire.K_STDOUT, big),
    ]
    assert frames[1].json() == {"exit_code": 0, "backstop": False}


def _read_all(fd: int) -> bytes:
    parts = []
    while part := os.read(fd, 65536):
        parts.append(part)
    os.close(fd)
    return b"".join(parts)


def test_bootstrap_gives_up_when_pybox_stops_reading() -> None:
    """A frozen pybox cannot keep a box: a write without progress ends the wait."""
    box = bootstrap_namespace()
    box["STALL_S"] = 0.2
    link, _, _ = _link(box)
    _fill(link.fd_out)
    with pytest.raises(box["ControllerGone"], match="read the box's output"):
        link.send(box["K_STDOUT"], b"more")


def test_bootstrap_gives_up_at_the_program_deadline_while_it_runs() -> None:
    box = bootstrap_namespace()
    box["STALL_S"] = 3600.0  # the deadline, not the stall bound, applies while it runs
    link, _, _ = _link(box)
    _fill(link.fd_out)
    link.program_deadline = time.monotonic() + 0.2
    with pytest.raises(box["ControllerGone"]):
        link.send(box["K_STDOUT"], b"more")


def test_bootstrap_waits_for_the_payload_only_as_long_as_it_was_told() -> None:
    box = bootstrap_namespace()
    box["STALL_S"] = 3600.0
    link, _, _ = _link(box)
    began = time.monotonic()
    with pytest.raises(box["ControllerGone"], match="send the payload"):
        link.read_exact(4, first_wait_s=0.2)
    assert time.monotonic() - began < 60  # it gave up on the given wait, not the stall bound


def test_bootstrap_gives_up_on_a_payload_that_stops_halfway() -> None:
    box = bootstrap_namespace()
    box["STALL_S"] = 0.2
    link, in_w, _ = _link(box)
    os.write(in_w, b"PBX")
    with pytest.raises(box["ControllerGone"], match="send the payload"):
        link.read_exact(8, first_wait_s=3600.0)


def test_bootstrap_treats_the_end_of_stdin_as_pybox_gone() -> None:
    box = bootstrap_namespace()
    link, in_w, _ = _link(box)
    os.write(in_w, b"PB")
    os.close(in_w)
    with pytest.raises(box["ControllerGone"], match="2 bytes early"):
        link.read_exact(4, first_wait_s=5.0)


def test_bootstrap_reads_a_payload_that_arrives_whole() -> None:
    box = bootstrap_namespace()
    link, in_w, _ = _link(box)
    os.write(in_w, b"PBX1rest")
    assert link.read_exact(4, first_wait_s=5.0) == b"PBX1"
    assert link.read_exact(4) == b"rest"


@pytest.mark.parametrize(
    "value",
    [
        {"exit_code": None, "backstop": True},
        {"exit_code": -9, "pid": 1, "uid": 65534, "version": 1},
        {"message": 'ValueError: bad "name" \\ here\n\ttab\r'},
        {"message": "control \x00\x01\x1f\x7f chars"},
        {"message": "naïve ☃ — 𝄞 😀"},
        {"files_sent": 2, "files_skipped": [{"path": "a/b", "reason": "symbolic link"}]},
        {"nested": [[], [1, 2.5, "x"], {"k": [True, False, None]}]},
        {"ratio": 0.1, "big": 10**18, "neg": -3.75},
        {},
    ],
    ids=repr,
)
def test_bootstrap_json_is_read_back_exactly_by_the_host(value: dict[str, Any]) -> None:
    encoded = bootstrap_namespace()["dumps"](value).encode("ascii")
    assert Frame(wire.K_ERROR, encoded).json() == value
    assert json.loads(encoded) == value


def test_bootstrap_json_keeps_undecodable_file_names_distinct() -> None:
    # A file name that is not UTF-8 reaches the bootstrap as a lone surrogate.
    name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    encoded = bootstrap_namespace()["dumps"]({"path": name}).encode("ascii")
    assert Frame(wire.K_FILE, encoded).json() == {"path": name}


def test_bootstrap_json_refuses_what_it_cannot_report() -> None:
    with pytest.raises(TypeError):
        bootstrap_namespace()["dumps"]({"x": object()})
