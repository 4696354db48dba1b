"""Drive the MCP dispatcher in memory, with the fake engine behind the session."""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterable
from typing import Any

from pybox._frontends.mcp import ServerOptions, build_dispatcher
from pybox._frontends.mcp._connection import Connection
from pybox._frontends.mcp._dispatcher import Dispatcher
from pybox._frontends.mcp._protocol import META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION
from pybox._frontends.mcp._toolbox import Tool
from pybox._frontends.mcp._tools import TOOLS
from pybox._orchestration.session import Session

MODERN_META = {META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {}}


class Peer:
    """One client connection: sends frames, collects everything the server replies."""

    def __init__(
        self,
        session: Session,
        options: ServerOptions | None = None,
        tools: Iterable[Tool] = TOOLS,
    ) -> None:
        self.dispatcher: Dispatcher = build_dispatcher(
            session, options or ServerOptions(), tools=tools
        )
        self.conn = Connection()
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.cancelled_count = 0
        self._next_id = 1000

    def reply(self, message: dict[str, Any] | None) -> None:
        # The server must always produce JSON-serialisable messages.
        if message is not None:
            json.dumps(message, allow_nan=False)
        self.replies.put(message)

    def frame(self, raw: bytes | str) -> None:
        data = raw.encode() if isinstance(raw, str) else raw
        self.dispatcher.handle_frame(self.conn, data, self.reply)

    def send(self, message: Any) -> None:
        self.frame(json.dumps(message))

    def next(self, timeout_s: float = 10.0) -> dict[str, Any] | None:
        return self.replies.get(timeout=timeout_s)

    def response(self, request_id: Any, timeout_s: float = 10.0) -> dict[str, Any]:
        """The response to `request_id`, skipping notifications."""
        deadline = time.monotonic() + timeout_s
        while True:
            message = self.next(max(deadline - time.monotonic(), 0.01))
            if message is not None and message.get("id") == request_id and "method" not in message:
                return message

    def request(
        self, method: str, params: dict[str, Any] | None = None, *, modern: bool = True
    ) -> dict[str, Any]:
        self._next_id += 1
        body: dict[str, Any] = dict(params or {})
        if modern:
            body["_meta"] = {**MODERN_META, **body.get("_meta", {})}
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if body or not modern:
            message["params"] = body
        self.send(message)
        return self.response(self._next_id)

    def initialize(self, version: str = "2025-11-25") -> dict[str, Any]:
        response = self.request(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
            modern=False,
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return response

    def call(self, tool: str, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments}, **kw)
