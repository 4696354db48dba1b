"""The listening socket: admits a connection only within the caps, never waiting on it."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
from dataclasses import replace
from typing import Any

from pybox._frontends.mcp._connection import log
from pybox._frontends.mcp._dispatcher import Dispatcher
from pybox._frontends.mcp._http.sessions import Sessions
from pybox._frontends.mcp._http.settings import HttpSettings
from pybox._frontends.mcp._http.wire import ByteBudget, ConnectionGate, refuse

# resources/read answers (up to the read cap each) built and sent at once.
READS_AT_ONCE = 2
READ_WAIT_S = 30.0


class Listener(socketserver.ThreadingTCPServer):
    """The server's shared state: caps, budgets and sessions, one thread a connection."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        settings: HttpSettings,
        dispatcher: Dispatcher,
        handler: type[socketserver.BaseRequestHandler],
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        super().__init__((settings.host, settings.port), handler)
        # One body cap for both transports: the server's largest JSON-RPC message.
        self.limits = replace(settings.limits, max_body_bytes=dispatcher.max_frame_bytes)
        self.settings = settings
        self.dispatcher = dispatcher
        self.gate = ConnectionGate(self.limits.max_connections)
        self.bodies = ByteBudget(self.limits.body_budget_bytes)
        self.reads = threading.BoundedSemaphore(READS_AT_ONCE)
        self.read_wait_s = READ_WAIT_S
        self.sessions = Sessions()

    def process_request(self, request: Any, client_address: Any) -> None:
        # Runs in the accepting thread: never blocks, never waits for the client.
        if not self.gate.admit(request):
            refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.gate.leave(request)
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        # One line, never a traceback, whatever a client sent (PYBOX_DEBUG shows it).
        log(f"http {client_address[0]}: a connection ended on an internal error")
        if os.environ.get("PYBOX_DEBUG"):
            super().handle_error(request, client_address)
