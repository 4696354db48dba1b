"""Which protocol era and version a request is served at.

A request whose `params._meta` names `io.modelcontextprotocol/protocolVersion` is
served statelessly at that version (2026-07-28), with the HTTP headers that mirror
it checked against it; any other request belongs to the handshake era and needs
`initialize` first on its connection.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from pybox._frontends.mcp._connection import Connection
from pybox._frontends.mcp._protocol import (
    ALL_VERSIONS,
    HANDSHAKE_VERSIONS,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    META_CLIENT_CAPABILITIES,
    META_PROTOCOL_VERSION,
    MODERN_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
    JSONObject,
    RpcError,
)

# Methods whose subject is mirrored in the Mcp-Name header (2026-07-28 HTTP).
NAME_BEARING = {"tools/call": "name", "resources/read": "uri"}
# Methods that need no era: answered the same way to anyone.
ERA_FREE = {"server/discover"}


def version_for(
    conn: Connection,
    method: str,
    params: JSONObject,
    headers: Mapping[str, str] | None,
) -> str | None:
    """The protocol version this request is served at (None: era-free), or an error."""
    meta = params.get("_meta")
    if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta and method != "initialize":
        return _stateless_version(method, params, meta, headers)
    if meta is not None and not isinstance(meta, dict):
        raise RpcError(INVALID_PARAMS, "params._meta must be an object.")
    if method in ("initialize", "ping") or method in ERA_FREE:
        return conn.protocol_version
    if conn.protocol_version is None:
        raise RpcError(
            INVALID_REQUEST,
            f"{method} before initialize: send initialize first (protocol 2025-11-25 "
            "and older), or give every request params._meta with "
            f"{META_PROTOCOL_VERSION!r} and {META_CLIENT_CAPABILITIES!r} (2026-07-28).",
        )
    return conn.protocol_version


def _stateless_version(
    method: str, params: JSONObject, meta: JSONObject, headers: Mapping[str, str] | None
) -> str:
    version = meta[META_PROTOCOL_VERSION]
    if META_CLIENT_CAPABILITIES not in meta:
        raise RpcError(
            INVALID_PARAMS,
            f"params._meta is missing {META_CLIENT_CAPABILITIES!r} (required with "
            f"{META_PROTOCOL_VERSION!r}); send {{}} for no capabilities.",
        )
    if not isinstance(meta[META_CLIENT_CAPABILITIES], dict):
        raise RpcError(
            INVALID_PARAMS, f"params._meta[{META_CLIENT_CAPABILITIES!r}] must be an object."
        )
    if not isinstance(version, str):
        raise RpcError(INVALID_PARAMS, f"params._meta[{META_PROTOCOL_VERSION!r}] must be a string.")
    if headers is not None:
        if headers.get("mcp-protocol-version") != version:
            raise RpcError(
                HEADER_MISMATCH,
                "The MCP-Protocol-Version header does not match the request's "
                f"params._meta protocol version {version!r}.",
            )
        if headers.get("mcp-method") != method:
            raise RpcError(
                HEADER_MISMATCH, f"The Mcp-Method header is missing or does not match {method!r}."
            )
        name_key = NAME_BEARING.get(method)
        named = params.get(name_key) if name_key else None
        if isinstance(named, str) and _header_value(headers.get("mcp-name")) != named:
            raise RpcError(
                HEADER_MISMATCH, f"The Mcp-Name header is missing or does not match {named!r}."
            )
    if version not in MODERN_VERSIONS:
        raise RpcError(
            UNSUPPORTED_PROTOCOL_VERSION,
            f"Unsupported protocol version {version!r}; supported: {', '.join(ALL_VERSIONS)} "
            f"({', '.join(HANDSHAKE_VERSIONS)} through initialize).",
            {"supported": list(ALL_VERSIONS), "requested": version},
        )
    return version


def _header_value(raw: str | None) -> str | None:
    """An Mcp-Name value; non-ASCII names travel as `=?base64?...?=`."""
    if raw is None or not (raw.startswith("=?base64?") and raw.endswith("?=")):
        return raw
    try:
        return base64.b64decode(raw[9:-2], validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
