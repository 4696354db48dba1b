"""The next step when the engine cannot be reached: for `pybox doctor` and `pybox setup`.

Each step follows from the cause (a bad DOCKER_HOST, a socket this user may not
open, no engine at all), never a guess past it.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Mapping

from pybox._core.errors import ConfigError, PyboxError
from pybox._engine import find_endpoint

INSTALL_ENGINE = "sudo apt-get install docker.io && sudo systemctl start docker"
START_ENGINE = "sudo systemctl start docker"


def _cause(exc: BaseException) -> BaseException:
    """The OS error under a pybox error, when there is one (the engine adapter chains it)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def socket_group_step(socket_path: str) -> str:
    """The next step when this user may not open the engine's socket.

    Membership in the socket's group only takes effect at the next login, so a
    user already listed in the group is told to log in again, not to add it twice.
    """
    user = pwd.getpwuid(os.getuid()).pw_name
    try:
        gid = os.stat(socket_path).st_gid
        group = grp.getgrgid(gid).gr_name
        listed = user in grp.getgrgid(gid).gr_mem or pwd.getpwnam(user).pw_gid == gid
    except (OSError, KeyError):
        group, gid, listed = "docker", -1, False
    return access_step(user, group, listed=listed, active=gid in os.getgroups())


def access_step(user: str, group: str, *, listed: bool, active: bool) -> str:
    if listed and not active:
        return (
            f"{user} is in the {group} group but this login session is not yet: log out and "
            f"in again (or start a shell with `newgrp {group}`)"
        )
    return (
        f"add your user to the {group} group and log in again: sudo usermod -aG {group} "
        f"{user}, then log out and in"
    )


def engine_next_step(
    exc: BaseException, socket_path: str | None, start_hint: str, *, found_by: str = ""
) -> str:
    """The step that fixes why the engine could not be reached; never a guess past the cause."""
    if isinstance(exc, ConfigError):
        return "unset DOCKER_HOST, or set it to the engine's unix:// socket"
    cause = _cause(exc)
    if isinstance(cause, PermissionError) and socket_path:
        return socket_group_step(socket_path)
    if isinstance(cause, FileNotFoundError) and socket_path and found_by == "DOCKER_HOST":
        # The user chose this path: the fix may be the variable, not the engine.
        return (
            f"DOCKER_HOST names {socket_path}, which does not exist: point DOCKER_HOST at "
            f"the engine's socket or unset it (no engine installed? {INSTALL_ENGINE})"
        )
    if isinstance(cause, FileNotFoundError) or socket_path is None:
        return INSTALL_ENGINE if start_hint == START_ENGINE else start_hint
    return start_hint


def engine_problem_step(environ: Mapping[str, str], exc: BaseException) -> str:
    """The next step for a local engine that could not be reached (for `pybox setup`)."""
    try:
        endpoint = find_endpoint(environ)
    except PyboxError:
        return engine_next_step(exc, None, START_ENGINE)
    return engine_next_step(exc, endpoint.socket_path, START_ENGINE, found_by=endpoint.found_by)
