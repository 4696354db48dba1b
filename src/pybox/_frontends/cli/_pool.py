"""`pybox pool start|stop|status`: the warm pool service for `pybox exec` (docs/pool.md)."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pybox._core.errors import StateError
from pybox._core.locations import POOL_LOG, pool_socket_path
from pybox._core.poolwire import (
    WIRE_VERSION,
    WireError,
    encode_frame,
    folder_refusal,
    listener_refusal,
)
from pybox._frontends.cli._common import Commands, open_session, say
from pybox._orchestration.services import peer_credentials

START_WAIT_S = 30.0
STOP_WAIT_S = 150.0  # runs in progress may end first (the service gives them 120 s)


def _ask(socket_path: str, request: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """One request to the service; None when none answers there. A socket in a
    folder others can write, or another user's listener, is refused (StateError)."""
    from pybox._frontends.cli._poolservice import receive_frame

    folder = os.path.dirname(socket_path)
    try:
        info = os.lstat(folder)
    except OSError:
        return None
    refusal = folder_refusal(folder, info.st_uid, info.st_mode, os.geteuid())
    if refusal is not None:
        raise StateError(f"Not using the pool service's socket {socket_path}: {refusal}.")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(socket_path)
        except OSError:
            return None
        refusal = listener_refusal(socket_path, peer_credentials(sock)[1], os.geteuid())
        if refusal is not None:
            raise StateError(f"Not using the pool service: {refusal}.")
        sock.sendall(encode_frame({"t": request, "wire": WIRE_VERSION}))
        header, _ = receive_frame(sock)
    except (OSError, WireError):
        return None
    finally:
        sock.close()
    return header


def _socket_of(args: argparse.Namespace) -> tuple[str, Path]:
    state = open_session(args).state_dir
    return pool_socket_path(str(state)), state


def status_of(args: argparse.Namespace) -> dict[str, Any]:
    path, _ = _socket_of(args)
    answer = _ask(path, "status")
    status = answer.get("status") if answer else None
    if not isinstance(status, dict):
        return {"pybox_pool_version": 1, "running": False, "socket": path}
    return status


def cmd_start(args: argparse.Namespace) -> int:
    from pybox._frontends.cli._poolservice import open_log, own_folder, pool_folder

    path, state = _socket_of(args)
    folder = own_folder(pool_folder(state))  # made 0700 (and refused if not ours) first
    answer = _ask(path, "status")
    if answer is not None and isinstance(answer.get("status"), dict):
        say(f"pybox: a pool service is already running (pid {answer['status'].get('pid')}).")
        return 0
    config = [] if args.config is None else ["--config", os.path.abspath(args.config)]
    log_path = folder / POOL_LOG
    with open_log(log_path) as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "pybox", *config, "pool", "serve"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # its own session: a closed terminal does not end it
            close_fds=True,
        )
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise StateError(
                f"The pool service exited at start (exit code {process.returncode}). "
                f"Its log: {log_path}."
            )
        if _ask(path, "status") is not None:
            say(f"pybox: pool service started (pid {process.pid}, socket {path}).")
            return 0
        time.sleep(0.05)
    raise StateError(
        f"The pool service (pid {process.pid}) did not answer on {path} within "
        f"{START_WAIT_S:g} s. Its log: {log_path}; `pybox pool stop` to end it."
    )


def cmd_stop(args: argparse.Namespace) -> int:
    path, _ = _socket_of(args)
    answer = _ask(path, "stop")
    if answer is None:
        say("pybox: no pool service is running.")
        return 0
    pid = answer.get("pid")
    deadline = time.monotonic() + STOP_WAIT_S
    while isinstance(pid, int) and time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        if isinstance(pid, int):
            raise StateError(
                f"The pool service (pid {pid}) did not end within {STOP_WAIT_S:g} s; "
                "its boxes carry its owner label: `pybox sweep` removes them once it is gone."
            )
    say(f"pybox: pool service stopped (pid {pid}); its waiting boxes were removed.")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    status = status_of(args)
    if args.json:
        print(json.dumps(status))
        return 0
    if not status.get("running"):
        say(f"pybox: no pool service is running (socket {status['socket']}).")
        return 0
    lines = [
        f"pool service: pid {status['pid']}, since {status['started_at']}",
        f"  socket:   {status['socket']}",
        f"  runs:     {status['served']} served, {status['fallbacks']} ran cold, "
        f"{status['refused']} refused (another uid)",
        f"  boxes:    {status['hits']} hits, {status['misses']} misses, "
        f"{status['boxes_started']} started, {status['box_failures']} failed to start",
    ]
    for p in status["profiles"]:
        lines.append(
            f"  profile:  {p['image']} ({p['image_id'][:19]}), {p['memory_mib']} MiB, "
            f"{p['timeout_s']:g} s, {p['code_name']}: {p['waiting']} waiting, "
            f"{p['starting']} starting, {p['in_use']} in use (keeps {p['target']} ready, "
            f"{p['misses']} misses)"
        )
    if status.get("last_error"):
        lines.append(f"  last error: {status['last_error']}")
    say("\n".join(lines), sys.stdout)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from pybox._frontends.cli._poolservice import serve

    return serve(args.config)


def register(commands: Commands) -> None:
    pool = commands.add_parser(
        "pool",
        help="start, stop or check the warm pool service for `pybox exec`",
        description="A per-user service holding warm boxes: `pybox exec` uses it when it "
        "runs, and runs cold when it does not (docs/pool.md).",
    )
    actions = pool.add_subparsers(dest="pool_action", metavar="{start,stop,status}")
    actions.required = True
    start = actions.add_parser("start", help="start the service (detached) and wait for it")
    start.set_defaults(handler=cmd_start)
    stop = actions.add_parser("stop", help="stop it; its waiting boxes are removed")
    stop.set_defaults(handler=cmd_stop)
    status = actions.add_parser("status", help="pid, socket, boxes per profile, hits, misses")
    status.add_argument("--json", action="store_true", help="print one JSON record on stdout")
    status.set_defaults(handler=cmd_status)
    serve = actions.add_parser("serve")  # what `start` runs: no help, so not listed
    serve.set_defaults(handler=cmd_serve)
