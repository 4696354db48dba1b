"""What the operator chose for `pybox mcp --http`: the address, the token, and
the caps on HTTP clients (`wire.HttpLimits`), from flags and environment.
"""

from __future__ import annotations

import argparse
import secrets
from dataclasses import dataclass, field
from typing import Any

from pybox._core.addresses import is_loopback
from pybox._core.errors import ConfigError
from pybox._frontends.mcp._http.wire import KIB, HttpLimits

TOKEN_ENV = "PYBOX_MCP_TOKEN"  # noqa: S105 (the variable's name, not a secret)
WILDCARD_HOSTS = {"0.0.0.0", "::", ""}  # noqa: S104 (names to warn about, not bound here)


@dataclass(frozen=True)
class HttpSettings:
    host: str
    port: int
    token: str
    allowed_origins: tuple[str, ...] = ()
    limits: HttpLimits = field(default_factory=HttpLimits)


def add_http_arguments(parser: argparse.ArgumentParser) -> None:
    """The operator's caps on HTTP clients (they hold before the token is checked)."""
    default = HttpLimits()
    parser.add_argument(
        "--http-max-connections",
        type=int,
        default=default.max_connections,
        metavar="N",
        help="HTTP connections at once; a new one pushes out the oldest still sending its "
        "request head, or is refused (503) when all serve requests (default: %(default)s)",
    )
    parser.add_argument(
        "--http-max-header-kib",
        type=int,
        default=default.max_header_bytes // KIB,
        metavar="KIB",
        help="request line and headers, in KiB (431 above; default: %(default)s)",
    )
    parser.add_argument(
        "--http-max-headers",
        type=int,
        default=default.max_headers,
        metavar="N",
        help="header fields in a request (431 above; default: %(default)s)",
    )
    parser.add_argument(
        "--http-read-timeout-s",
        type=float,
        default=default.read_timeout_s,
        metavar="S",
        help="time for a whole request head, and the longest wait for body bytes, in seconds "
        "(the connection is closed after it; default: %(default)s)",
    )


def http_limits(args: argparse.Namespace, max_body_bytes: int) -> HttpLimits:
    """The caps from the flags; the body cap is the server's --max-message."""
    checks = (
        ("--http-max-connections", args.http_max_connections),
        ("--http-max-header-kib", args.http_max_header_kib),
        ("--http-max-headers", args.http_max_headers),
    )
    for flag, value in checks:
        if value < 1:
            raise ConfigError(f"{flag} must be at least 1, not {value}.")
    if not 0 < args.http_read_timeout_s <= 3600:
        raise ConfigError(
            "--http-read-timeout-s must be above 0 and at most 3600, not "
            f"{args.http_read_timeout_s}."
        )
    return HttpLimits(
        max_connections=args.http_max_connections,
        max_header_bytes=args.http_max_header_kib * KIB,
        max_headers=args.http_max_headers,
        read_timeout_s=float(args.http_read_timeout_s),
        max_body_bytes=max_body_bytes,
    )


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT` or `PORT` (loopback)."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"--http {text!r}: the port must be a number (HOST:PORT).") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"--http {text!r}: the port must be between 0 and 65535.")
    return host, port


def http_settings(
    address: str,
    environ: dict[str, str] | Any,
    allowed_origins: tuple[str, ...],
    limits: HttpLimits | None = None,
) -> tuple[HttpSettings, bool]:
    """The settings, and whether the token was generated (so it must be shown)."""
    host, port = parse_address(address)
    token = environ.get(TOKEN_ENV) or ""
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"Refusing to serve on {host}, which is not a loopback address, without a token "
            f"chosen by the operator: set {TOKEN_ENV} to a long random secret, or bind "
            "127.0.0.1."
        )
    if token and len(token) < 16:
        raise ConfigError(f"{TOKEN_ENV} is too short ({len(token)} characters); use 16 or more.")
    generated = not token
    settings = HttpSettings(
        host, port, token or secrets.token_urlsafe(32), allowed_origins, limits or HttpLimits()
    )
    return settings, generated


def exposure_warning(host: str) -> str | None:
    """What an operator binding beyond loopback should know: there is no TLS."""
    if is_loopback(host):
        return None
    where = "on every interface" if host in WILDCARD_HOSTS else f"on {host}"
    return (
        f"warning: serving plain HTTP {where}: the bearer token and every request and result "
        "cross the network unencrypted. Bind 127.0.0.1 and reach it through an SSH tunnel or "
        "a TLS proxy, or serve only a network you trust."
    )
