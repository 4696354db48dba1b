"""The one MCP client of the benchmarks: a `pybox mcp` child over stdio.

Used by `bench/compare.py` (the `pybox_mcp` path, with the handshake) and
`bench/mcp_overhead.py` (2026-07-28 requests, no handshake).
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import IO, Any

import pybox
from bench._values import MCP_PROTOCOL_VERSION, MCP_TIMEOUT_S, PathUnavailable

# This environment's `pybox mcp` (stdio), with the interpreter running the benchmark.
PYBOX_MCP_ARGV = (sys.executable, "-m", "pybox", "mcp")

# 2026-07-28: each request names its protocol version and the client's
# capabilities in `_meta` and needs no handshake (no `initialize`).
STATELESS_META: dict[str, Any] = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def end_child(proc: subprocess.Popen[Any], wait_s: float = 30.0) -> int | None:
    """Close a child's input and let it finish; end it if it hangs. Its exit code,
    or None when it had to be ended."""
    with suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        return proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return None


class McpClient:
    """The client side of MCP's stdio transport: one JSON-RPC message per line."""

    def __init__(self, argv: Sequence[str], stderr: IO[bytes] | int) -> None:
        self._proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )
        self.pid = self._proc.pid
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._next_id = 0
        threading.Thread(target=self._read, name="mcp-reader", daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(b"")  # end of stream

    def _send(self, message: dict[str, Any]) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(message).encode() + b"\n")
            self._proc.stdin.flush()
        except OSError as exc:
            raise PathUnavailable(f"the MCP server closed its input ({exc})") from exc

    def request(self, method: str, params: dict[str, Any], timeout_s: float) -> Any:
        """Send a request and wait for its response; answer the server's own requests."""
        self._next_id += 1
        request_id = self._next_id
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise PathUnavailable(f"no answer to {method} within {timeout_s:.0f} s") from None
            if not line:
                code = self._proc.wait(timeout=5)
                raise PathUnavailable(f"the MCP server exited (code {code}) before answering")
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise PathUnavailable(f"{method} failed: {message['error']}")
                return message.get("result")
            if "method" in message and "id" in message:  # a request from the server
                self._answer_server_request(message)
            # Notifications (logging, progress) are not needed here.

    def _answer_server_request(self, message: dict[str, Any]) -> None:
        if message["method"] == "ping":
            self._send({"jsonrpc": "2.0", "id": message["id"], "result": {}})
        else:
            self._send(
                {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "error": {"code": -32601, "message": "not supported by the benchmark"},
                }
            )

    def initialize(self) -> dict[str, Any]:
        result = self.request(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "pybox-bench", "version": pybox.__version__},
            },
            MCP_TIMEOUT_S,
        )
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return dict(result or {})

    def run_python(self, code: str, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """One `run_python` call; with `meta` (say STATELESS_META), sent as its `_meta`."""
        params: dict[str, Any] = {"name": "run_python", "arguments": {"code": code}}
        if meta is not None:
            params["_meta"] = dict(meta)
        return dict(self.request("tools/call", params, MCP_TIMEOUT_S) or {})

    def close(self) -> int | None:
        """Close its input (the stdio transport's shutdown); its exit code, if it exited."""
        return end_child(self._proc)
