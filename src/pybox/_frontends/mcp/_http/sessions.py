"""Handshake-era MCP sessions over HTTP (`Mcp-Session-Id`), bounded and fair.

All clients share one bearer token, so the server cannot tell them apart to
share sessions out per client. Instead a session in use is never pushed out:
at the cap, a new session takes the place of the longest-unused one only when
that one has served nothing for SESSION_IDLE_S; otherwise `initialize` is
refused (503) and says why. A client that opens sessions in a loop fills the
free places, never anyone's live session.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

from pybox._frontends.mcp._connection import Connection

MAX_SESSIONS = 64
# A session unused this long may give its place to a new one; a session in use never does.
SESSION_IDLE_S = 900.0


@dataclass
class Session:
    conn: Connection
    last_used: float = field(default_factory=time.monotonic)
    active: int = 0  # requests of this session being served now


class Sessions:
    """Handshake-era sessions. At the cap, a new session takes the place of the
    longest-unused one only if nobody used it for SESSION_IDLE_S and it serves
    nothing; otherwise it is refused. So no client can push out a session in use."""

    def __init__(self, cap: int = MAX_SESSIONS, idle_s: float = SESSION_IDLE_S) -> None:
        self.cap = cap
        self.idle_s = idle_s
        self._by_id: dict[str, Session] = {}
        self._lock = threading.Lock()

    def new(self) -> tuple[str, Connection] | None:
        with self._lock:
            if len(self._by_id) >= self.cap:
                now = time.monotonic()
                idle = [
                    (s.last_used, sid)
                    for sid, s in self._by_id.items()
                    if s.active == 0 and now - s.last_used >= self.idle_s
                ]
                if not idle:
                    return None
                self._by_id.pop(min(idle)[1]).conn.cancel_all()
            session_id = secrets.token_hex(16)
            self._by_id[session_id] = Session(Connection())
            return session_id, self._by_id[session_id].conn

    def use(self, session_id: str) -> Session | None:
        with self._lock:
            found = self._by_id.get(session_id)
            if found is not None:
                found.active += 1
                found.last_used = time.monotonic()
            return found

    def release(self, session: Session) -> None:
        with self._lock:
            session.active -= 1
            session.last_used = time.monotonic()

    def end(self, session_id: str) -> bool:
        with self._lock:
            found = self._by_id.pop(session_id, None)
        if found is None:
            return False
        found.conn.cancel_all()
        return True

    def end_all(self) -> None:
        with self._lock:
            sessions = list(self._by_id.values())
            self._by_id.clear()
        for session in sessions:
            session.conn.cancel_all()
