"""The wire between `pybox exec` and the CLI pool service (pure: bytes in, values out).

One frame is an 8-byte prefix (the JSON header's length, then the body's, both
big-endian unsigned 32-bit), a JSON object (UTF-8) and a body of raw bytes.
Both lengths are bounded before anything is read, and the header is checked
field by field: everything the service decodes came from a client process and
is untrusted (its uid was checked, not its bytes).

The exchange (`docs/pool.md`):

    client  -> {"t": "exec", "wire": 1, "argv": [...], ...} + the files it read
    service -> {"t": "prepared", "run_id": ...}   or {"t": "fallback", "reason": ...}
    client  -> {"t": "go"}                        (from here it never runs cold)
    service -> {"t": "out", "fd": 1|2} + bytes    (as many as the presentation writes)
    client  -> {"t": "cancel"} | {"t": "closed", "fd": 1|2}   (at any time)
    service -> {"t": "exit", "code": N}

    client  -> {"t": "status", "wire": 1}         -> {"t": "status", ...}
    client  -> {"t": "stop", "wire": 1}           -> {"t": "stopping"}
"""

from __future__ import annotations

import struct

from pybox._core.errors import InvalidRequest

TYPE_CHECKING = False  # not typing's: the pool client imports this module
if TYPE_CHECKING:
    from collections.abc import Mapping

WIRE_VERSION = 1
PREFIX = struct.Struct("!II")
MAX_HEADER_BYTES = 1 << 20
# The client's files travel in one body; bigger requests run cold (the operator's
# input ceiling may be higher: the wire is not the place to hold 512 MiB).
MAX_REQUEST_BODY_BYTES = 64 << 20
MAX_OUTPUT_BODY_BYTES = 1 << 20  # one write of the presentation, split if larger
MAX_ARGV_ITEMS = 4096
MAX_STRING_CHARS = 1 << 16
MAX_FILES = 1024
# What in the environment decides what a run is (the config, the state, the engine):
# a service answers only a client whose values are its own.
IDENTITY_PREFIXES = ("PYBOX_", "DOCKER_")
IDENTITY_NAMES = ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME")
NOT_IDENTITY = frozenset({"PYBOX_POOL", "PYBOX_DEBUG"})


class WireError(InvalidRequest):
    """A frame that does not follow the pool service's wire."""


# -- whom a client trusts with its code (the client does the I/O, these decide) ------

_GROUP_OR_OTHER_WRITE = 0o022
_DIRECTORY = 0o040000  # stat.S_IFDIR, spelled out: the pool client does not import stat
_FILE_TYPE = 0o170000  # stat.S_IFMT's mask


def folder_refusal(folder: str, owner_uid: int, mode: int, own_uid: int) -> str | None:
    """Why a client must not use a socket in `folder` (its lstat: owner, mode), or None.

    Only a folder of the client's own uid that no other user can write is used: in
    any other, another user could put their own listener in the service's place.
    """
    if mode & _FILE_TYPE != _DIRECTORY:
        return f"its folder {folder} is not a folder (a link, or another kind of file)"
    if owner_uid != own_uid:
        return f"its folder {folder} belongs to uid {owner_uid}, not to you (uid {own_uid})"
    if mode & _GROUP_OR_OTHER_WRITE:
        return (
            f"its folder {folder} can be written by other users (mode {mode & 0o7777:04o}); "
            f"`chmod 700 {folder}`, or `pybox pool start` makes it so"
        )
    return None


def listener_refusal(socket_path: str, peer_uid: int | None, own_uid: int) -> str | None:
    """Why a client must not send its request to the process listening at
    `socket_path` (its uid from the kernel, SO_PEERCRED; None: not known), or None.

    Only the client's own uid: a pool service is started by its user and serves
    only that uid, so any other listener (root included) is not pybox's service.
    """
    if peer_uid is None:
        return f"this system does not say which user listens on {socket_path} (no SO_PEERCRED)"
    if peer_uid != own_uid:
        return (
            f"the process listening on {socket_path} runs as uid {peer_uid}, not as you "
            f"(uid {own_uid}); it is not your pool service"
        )
    return None


# JSON through the C functions the json module itself uses: importing json brings
# re, enum and collections (about 8 ms of the client's start-up). Same parser,
# same checks; an error still raises json's own JSONDecodeError (a ValueError).
try:
    import _json
except ImportError:  # pragma: no cover - not CPython: the json module
    _json = None  # type: ignore[assignment,unused-ignore]


class _Scanning:
    """What the C scanner reads of its context (json.decoder.JSONDecoder's)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    array_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> object:
        raise ValueError(f"{name} is not a number here")


def _refuse(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON")


def dumps(value: object) -> str:
    """Compact JSON, ASCII only, no NaN: json.dumps(value, separators=(",", ":"))."""
    if _json is None:  # pragma: no cover
        import json

        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    encoder = _json.make_encoder(
        None, _refuse, _json.encode_basestring_ascii, None, ":", ",", False, False, False
    )
    return "".join(encoder(value, 0))


def loads(text: str) -> object:
    """json.loads(text), without whitespace around the value; ValueError when bad."""
    if _json is None:  # pragma: no cover
        import json

        return json.loads(text)
    scanner = _json.make_scanner(_Scanning)  # type: ignore[arg-type]
    try:
        value, end = scanner(text, 0)
    except StopIteration:
        raise ValueError("not a JSON value") from None
    if end != len(text):
        raise ValueError(f"extra data at {end}")
    return value


def encode_frame(header: dict[str, object], body: bytes = b"") -> bytes:
    raw = dumps(header).encode("ascii")
    return PREFIX.pack(len(raw), len(body)) + raw + body


def frame_lengths(prefix: bytes, max_body_bytes: int) -> tuple[int, int]:
    """The header's and body's lengths from a frame's prefix, both bounded."""
    if len(prefix) != PREFIX.size:
        raise WireError(f"A frame's prefix is {PREFIX.size} bytes, not {len(prefix)}.")
    header_len, body_len = PREFIX.unpack(prefix)
    if not 2 <= header_len <= MAX_HEADER_BYTES:
        raise WireError(f"A frame's header of {header_len} bytes; the limit is {MAX_HEADER_BYTES}.")
    if body_len > max_body_bytes:
        raise WireError(f"A frame's body of {body_len} bytes; the limit is {max_body_bytes}.")
    return header_len, body_len


def decode_header(raw: bytes) -> dict[str, object]:
    try:
        header = loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WireError(f"A frame's header is not JSON: {exc}.") from None
    if not isinstance(header, dict) or not isinstance(header.get("t"), str):
        raise WireError("A frame's header must be a JSON object with a string 't'.")
    return header


def identity_of(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment variables that decide what a run is."""
    return {
        name: value
        for name, value in environ.items()
        if (name.startswith(IDENTITY_PREFIXES) or name in IDENTITY_NAMES)
        and name not in NOT_IDENTITY
    }


def _string(value: object, what: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_STRING_CHARS or "\0" in value:
        raise WireError(f"{what} must be a string of at most {MAX_STRING_CHARS} characters.")
    return value


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise WireError(f"{what} must be true or false.")
    return value


class ExecRequest:
    """A checked `exec` frame: the client's argv, the files it read, its terminal."""

    __slots__ = ("argv", "cwd", "files", "identity", "stdin", "term", "tty_err", "tty_out")

    def __init__(self, header: dict[str, object], body: bytes) -> None:
        if header.get("wire") != WIRE_VERSION:
            raise WireError(
                f"Wire version {header.get('wire')!r}; this service speaks {WIRE_VERSION}."
            )
        known = {"t", "wire", "argv", "cwd", "files", "stdin", "identity", "tty", "term"}
        extra = sorted(set(header) - known)
        if extra:
            raise WireError(f"Unknown fields in an exec frame: {', '.join(extra)}.")
        argv = header.get("argv")
        if not isinstance(argv, list) or not 1 <= len(argv) <= MAX_ARGV_ITEMS:
            raise WireError(f"argv must be a list of 1 to {MAX_ARGV_ITEMS} strings.")
        self.argv = [_string(item, "each argv item") for item in argv]
        self.cwd = _string(header.get("cwd"), "cwd")
        if not self.cwd.startswith("/"):
            raise WireError("cwd must be an absolute path.")
        self.term = _string(header.get("term", ""), "term")
        tty = header.get("tty")
        if not isinstance(tty, list) or len(tty) != 2:
            raise WireError("tty must be [stdout is a terminal, stderr is a terminal].")
        self.tty_out, self.tty_err = _flag(tty[0], "tty[0]"), _flag(tty[1], "tty[1]")
        identity = header.get("identity")
        if not isinstance(identity, dict) or len(identity) > MAX_FILES:
            raise WireError("identity must be an object of strings.")
        self.identity = {
            _string(k, "an identity name"): _string(v, "an identity value")
            for k, v in identity.items()
        }
        self.files = self._slices(header.get("files"), body, "files")
        stdin = header.get("stdin")
        self.stdin = None if stdin is None else self._slice(stdin, body, "stdin")

    @staticmethod
    def _slice(where: object, body: bytes, what: str) -> bytes:
        if (
            not isinstance(where, list)
            or len(where) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in where)
        ):
            raise WireError(f"{what} must be [offset, length].")
        offset, length = where
        if offset < 0 or length < 0 or offset + length > len(body):
            raise WireError(
                f"{what} [{offset}, {length}] is outside the body of {len(body)} bytes."
            )
        return body[offset : offset + length]

    @classmethod
    def _slices(cls, files: object, body: bytes, what: str) -> dict[str, bytes]:
        if not isinstance(files, dict) or len(files) > MAX_FILES:
            raise WireError(f"{what} must be an object of at most {MAX_FILES} paths.")
        return {
            _string(path, "a file path"): cls._slice(where, body, f"{what}[{path!r}]")
            for path, where in files.items()
        }
