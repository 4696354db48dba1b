"""The Streamable HTTP transport, on the standard library's socketserver.

One endpoint, `/mcp`, serves both eras:
- 2026-07-28: every POST is a self-contained request (no session); a client
  cancels by closing the response stream;
- 2025-11-25 and older: `initialize` opens a session (`Mcp-Session-Id`),
  later POSTs name it, `notifications/cancelled` cancels, DELETE ends it.

Every request needs the bearer token, checked as soon as the request head is
read (before any body). A browser page cannot drive the server: an `Origin`
that is not this server's own (or one the operator allowed) is refused, and so
is a `Host` that is not a loopback name while bound to loopback (DNS
rebinding). Connections, heads, bodies and waits are bounded by `wire`
before the token is known; sessions are never pushed out while in use.

The parts, outside in:
- `settings`: the address, token and caps, from flags and environment;
- `listener`: the listening socket; admits connections within the caps;
- `server`: `HttpServer`, and each connection's loop and the checks every
  request passes before any body is read (path, Host, Origin, token);
- `exchange`: a POST's body, its era and session, and its answer;
- `replies`: writing responses and progress events to the client;
- `sessions`: the handshake era's sessions, bounded;
- `wire`: reading HTTP/1.1 within bounds, and the shared budgets.
"""
