"""JSON-RPC 2.0 and MCP wire constants, shared by the transports and the dispatcher.

Two protocol eras are served side by side and told apart per request:
- the stateless era (2026-07-28): every request carries its protocol version
  and client capabilities in `params._meta`; there is no handshake;
- the handshake era (2025-11-25 and older): `initialize` fixes the version for
  the connection (or the HTTP session).
"""

from __future__ import annotations

import json
from typing import Any, TypeGuard

JSONRPC_VERSION = "2.0"

MODERN_VERSIONS: tuple[str, ...] = ("2026-07-28",)
# Newest first: `initialize` with a version not listed gets the first one back.
HANDSHAKE_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
ALL_VERSIONS: tuple[str, ...] = (*MODERN_VERSIONS, *HANDSHAKE_VERSIONS)

# Tool `title`, `outputSchema` and `structuredContent` arrived in 2025-06-18.
STRUCTURED_SINCE = "2025-06-18"
# Argument errors became tool execution errors in 2025-11-25 (SEP-1303).
ARGUMENT_ERRORS_AS_RESULTS_SINCE = "2025-11-25"

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

# JSON-RPC 2.0
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# MCP, 2026-07-28
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
# MCP, 2025-11-25 and older (2026-07-28 uses INVALID_PARAMS instead)
RESOURCE_NOT_FOUND_HANDSHAKE = -32002

# The HTTP status a stateless-era error is sent with (2026-07-28 transports).
HTTP_STATUS_FOR_ERROR: dict[int, int] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}

RequestId = str | int
JSONObject = dict[str, Any]


class RpcError(Exception):
    """A request that gets a JSON-RPC error response instead of a result."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class ArgumentError(RpcError):
    """Tool arguments that do not fit the tool's input schema.

    Since 2025-11-25 (SEP-1303) this is a tool execution error (`isError`), so
    the model reads it and corrects its call; older versions get `-32602`.
    """

    def __init__(self, message: str) -> None:
        super().__init__(INVALID_PARAMS, message)


def error_response(request_id: RequestId | None, error: RpcError) -> JSONObject:
    body: JSONObject = {"code": error.code, "message": error.message}
    if error.data is not None:
        body["data"] = error.data
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "error": body}


def result_response(request_id: RequestId, result: JSONObject) -> JSONObject:
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "result": result}


def notification(method: str, params: JSONObject) -> JSONObject:
    return {"jsonrpc": JSONRPC_VERSION, "method": method, "params": params}


def encode(message: JSONObject) -> bytes:
    """One message as compact UTF-8 JSON without newlines (stdio frames are lines)."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate a client sent us, echoed back
        return json.dumps(message, separators=(",", ":"), allow_nan=False).encode()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode(data: bytes | str) -> Any:
    """One message; ValueError (or RecursionError) when it is not strict JSON."""
    return json.loads(data, parse_constant=_refuse_constant)


def is_request_id(value: object) -> TypeGuard[str | int]:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def version_at_least(version: str, oldest: str) -> bool:
    """Versions are an enumerated set, so compare positions, never strings."""
    order = tuple(reversed(HANDSHAKE_VERSIONS)) + MODERN_VERSIONS
    if version not in order or oldest not in order:
        return False
    return order.index(version) >= order.index(oldest)
