"""The operator's configuration: built-in values, a TOML file, then environment.

Layers, later ones winning: built-in defaults and ceilings; the config file
(`--config`, else `PYBOX_CONFIG`, else `$XDG_CONFIG_HOME/pybox/config.toml`);
environment variables `PYBOX_DEFAULT_<KEY>` and `PYBOX_MAX_<KEY>`. The repair
loop's bounds work the same way: `[repair.defaults]`, `[repair.ceilings]`,
`PYBOX_REPAIR_DEFAULT_<KEY>`, `PYBOX_REPAIR_MAX_<KEY>`. Front ends
that accept operator flags (such as `pybox mcp --max-memory`) apply them last.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pybox._adapters.state import default_state_dir
from pybox._core.errors import ConfigError
from pybox._core.limits import FIELDS_BY_KEY, LimitField, Policy
from pybox._core.pool import PoolSettings
from pybox._core.repair import REPAIR_FIELDS_BY_KEY, RepairPolicy

CONFIG_SECTIONS = ("defaults", "ceilings", "state_dir", "pool", "repair")
POOL_ENV = {
    "PYBOX_POOL_BOXES": "boxes_per_profile",
    "PYBOX_POOL_IDLE_S": "idle_s",
    "PYBOX_POOL_MEMORY_MIB": "memory_budget_mib",
}


@dataclass(frozen=True)
class Settings:
    policy: Policy
    state_dir: Path
    config_file: Path | None
    sources: tuple[str, ...]
    pool: PoolSettings = field(default_factory=PoolSettings)
    repair_policy: RepairPolicy = field(default_factory=RepairPolicy)


def config_file_path(environ: Mapping[str, str], explicit: str | None) -> tuple[Path | None, bool]:
    """The config file to read, and whether it was asked for explicitly."""
    if explicit:
        return Path(explicit), True
    if environ.get("PYBOX_CONFIG"):
        return Path(environ["PYBOX_CONFIG"]), True
    xdg = environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else Path.home() / ".config"
    return base / "pybox" / "config.toml", False


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}. Fix the file or remove it.") from exc
    except OSError as exc:
        raise ConfigError(f"Cannot read the config file {path}: {exc.strerror or exc}.") from exc


def _section(data: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    section = data.get(name, {})
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: [{name}] must be a table of settings, not {section!r}.")
    return section


def _env_layer(
    environ: Mapping[str, str],
    fields: Mapping[str, LimitField] = FIELDS_BY_KEY,
    prefix: str = "PYBOX_",
) -> tuple[dict[str, str], dict[str, str]]:
    defaults: dict[str, str] = {}
    ceilings: dict[str, str] = {}
    for key in fields:
        upper = key.upper()
        if f"{prefix}DEFAULT_{upper}" in environ:
            defaults[key] = environ[f"{prefix}DEFAULT_{upper}"]
        if f"{prefix}MAX_{upper}" in environ:
            ceilings[key] = environ[f"{prefix}MAX_{upper}"]
    return defaults, ceilings


def load_settings(environ: Mapping[str, str], config_path: str | None = None) -> Settings:
    policy = Policy()
    repair_policy = RepairPolicy()
    pool = PoolSettings()
    sources = ["built-in"]
    state_dir = default_state_dir(environ)
    path, explicit = config_file_path(environ, config_path)
    used_file: Path | None = None
    if path is not None and (explicit or path.exists()):
        if not path.is_file():
            raise ConfigError(
                f"The config file {path} does not exist. Create it, or drop --config/PYBOX_CONFIG."
            )
        data = _read_toml(path)
        unknown = sorted(set(data) - set(CONFIG_SECTIONS))
        if unknown:
            raise ConfigError(
                f"{path}: unknown setting(s) {', '.join(unknown)}. Known: "
                f"{', '.join(CONFIG_SECTIONS)}."
            )
        policy = policy.with_settings(
            _section(data, "defaults", path), _section(data, "ceilings", path), str(path)
        )
        repair = _section(data, "repair", path)
        unknown = sorted(set(repair) - {"defaults", "ceilings"})
        if unknown:
            raise ConfigError(
                f"{path}: unknown setting(s) repair.{', repair.'.join(unknown)}. Known: "
                "repair.defaults, repair.ceilings."
            )
        repair_policy = repair_policy.with_settings(
            _section(repair, "defaults", path),
            _section(repair, "ceilings", path),
            f"{path} [repair]",
        )
        if "state_dir" in data and "PYBOX_STATE_DIR" not in environ:
            if not isinstance(data["state_dir"], str):
                raise ConfigError(f"{path}: state_dir must be a path string.")
            state_dir = Path(data["state_dir"]).expanduser()
        pool = pool.with_settings(_section(data, "pool", path), str(path))
        used_file = path
        sources.append(str(path))
    env_defaults, env_ceilings = _env_layer(environ)
    repair_defaults, repair_ceilings = _env_layer(environ, REPAIR_FIELDS_BY_KEY, "PYBOX_REPAIR_")
    if env_defaults or env_ceilings or repair_defaults or repair_ceilings:
        policy = policy.with_settings(env_defaults, env_ceilings, "environment")
        repair_policy = repair_policy.with_settings(repair_defaults, repair_ceilings, "environment")
        sources.append("environment")
    env_pool = {key: environ[name] for name, key in POOL_ENV.items() if name in environ}
    if env_pool:
        pool = pool.with_settings(env_pool, "environment")
        if "environment" not in sources:
            sources.append("environment")
    return Settings(policy, state_dir, used_file, tuple(sources), pool, repair_policy)
