"""Where pybox keeps its state and looks for its config (pure: paths as strings).

The adapters (`pybox._adapters.state`, `pybox._adapters.config`) and the
command line's pool client (`pybox._frontends.poolclient`, which must start in
a few milliseconds and never imports an adapter) find them with these same
functions, so the two can never disagree. `home` is the user's home folder,
as `Path.home()` gives it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the pool client imports this module
if TYPE_CHECKING:
    from collections.abc import Mapping

# The CLI pool service's folder in the state directory, and its socket there.
POOL_FOLDER = "pool"
POOL_SOCKET = "cli.sock"
POOL_LOG = "service.log"


def _join(*parts: str) -> str:
    out = parts[0]
    for part in parts[1:]:
        out = part if part.startswith("/") else out.rstrip("/") + "/" + part
    return out


def state_dir_path(environ: Mapping[str, str], home: str) -> str:
    """$PYBOX_STATE_DIR, else $XDG_STATE_HOME/pybox, else ~/.local/state/pybox
    (a config file's `state_dir` is applied on top by the config loader)."""
    explicit = environ.get("PYBOX_STATE_DIR")
    if explicit:
        return explicit
    xdg = environ.get("XDG_STATE_HOME")
    return _join(xdg if xdg else _join(home, ".local", "state"), "pybox")


def config_path(environ: Mapping[str, str], home: str, explicit: str | None) -> tuple[str, bool]:
    """The config file to read, and whether it was asked for explicitly."""
    if explicit:
        return explicit, True
    if environ.get("PYBOX_CONFIG"):
        return environ["PYBOX_CONFIG"], True
    xdg = environ.get("XDG_CONFIG_HOME")
    return _join(xdg if xdg else _join(home, ".config"), "pybox", "config.toml"), False


def pool_socket_path(state_dir: str) -> str:
    return _join(state_dir, POOL_FOLDER, POOL_SOCKET)
