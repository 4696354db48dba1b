"""The operator's configuration: built-in values, a TOML file, then environment.

Layers, later ones winning: built-in defaults and ceilings; the config file
(`--config`, else `PYBOX_CONFIG`, else `$XDG_CONFIG_HOME/pybox/config.toml`);
environment variables `PYBOX_DEFAULT_<KEY>` and `PYBOX_MAX_<KEY>`. The repair
loop's bounds work the same way: `[repair.defaults]`, `[repair.ceilings]`,
`PYBOX_REPAIR_DEFAULT_<KEY>`, `PYBOX_REPAIR_MAX_<KEY>`. Front ends
that accept operator flags (such as `pybox mcp --max-memory`) apply them last.

Where boxes run: `platform = "auto" | "linux" | "colima"` in the file, or
`PYBOX_PLATFORM` (for tests and unusual setups); "auto" means Colima on macOS
and the local engine elsewhere. A `[colima]` table names trusted `colima` and
`docker` executables and the VM's `cpus`, `memory_gib` and `disk_gib`.

The engine: `engine = "auto" | "docker" | "podman"` in the file, or
`PYBOX_ENGINE` (`pybox --engine` sets it); "auto" means Docker's socket if
there is one, else Podman's (see pybox._engine.endpoint).

Environment variables: `allow_credential_env = true` (or
`PYBOX_ALLOW_CREDENTIAL_ENV=1`) lets credential-shaped ones into boxes;
`forward_env = ["CI", ...]` lists the names an MCP server may copy from its own
environment when an agent names them alone (`pybox mcp --forward-env` adds more).

Admission control: top-level `max_running_boxes`, `max_waiting_runs` and
`admission_wait_s`, or `PYBOX_MAX_RUNNING_BOXES`, `PYBOX_MAX_WAITING_RUNS` and
`PYBOX_ADMISSION_WAIT_S` (see pybox._core.admission for the defaults).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pybox._adapters.runtime_config import (
    RUNTIME_SECTIONS,
    runtime_policy_from_env,
    runtime_policy_from_file,
)
from pybox._adapters.state import default_state_dir
from pybox._core.admission import ADMISSION_KEYS, AdmissionConfig
from pybox._core.display import noun
from pybox._core.egress import EgressSettings
from pybox._core.errors import ConfigError
from pybox._core.experiment_settings import ExperimentSettings
from pybox._core.limits import FIELDS_BY_KEY, LimitField, Policy
from pybox._core.locations import config_path
from pybox._core.pool import PoolSettings
from pybox._core.repair import REPAIR_FIELDS_BY_KEY, RepairPolicy
from pybox._core.runtimes import RuntimePolicy
from pybox._core.sandbox_settings import SandboxSettings

POOL_ENV = {
    "PYBOX_POOL_BOXES": "boxes_per_profile",
    "PYBOX_POOL_MAX_BOXES": "max_boxes_per_profile",
    "PYBOX_POOL_IDLE_S": "idle_s",
    "PYBOX_POOL_MEMORY_MIB": "memory_budget_mib",
    "PYBOX_POOL_STARTS": "concurrent_starts",
}
ADMISSION_ENV = {f"PYBOX_{key.upper()}": key for key in ADMISSION_KEYS}
CONFIG_SECTIONS = (
    "defaults",
    "ceilings",
    "state_dir",
    "pool",
    "sandboxes",
    "experiments",
    "repair",
    "platform",
    "engine",
    "colima",
    "allow_credential_env",
    "forward_env",
    "egress",
    *ADMISSION_KEYS,
    *RUNTIME_SECTIONS,
)
PLATFORMS = ("auto", "linux", "colima")
ENGINES = ("auto", "docker", "podman")
COLIMA_KEYS = {
    "colima": str,
    "docker": str,
    "cpus": int,
    "memory_gib": int,
    "disk_gib": int,
    "mirror": str,
    "suite": str,
}


@dataclass(frozen=True)
class ColimaSettings:
    """The `[colima]` table: explicit tool paths, the VM's size, and the Debian
    mirror and suite the stdlib image is built from in the VM (macOS)."""

    colima: str | None = None
    docker: str | None = None
    cpus: int = 2
    memory_gib: int = 2
    disk_gib: int = 20
    mirror: str | None = None
    suite: str | None = None


@dataclass(frozen=True)
class Settings:
    policy: Policy
    state_dir: Path
    config_file: Path | None
    sources: tuple[str, ...]
    pool: PoolSettings = field(default_factory=PoolSettings)
    sandboxes: SandboxSettings = field(default_factory=SandboxSettings)
    experiments: ExperimentSettings = field(default_factory=ExperimentSettings)
    repair_policy: RepairPolicy = field(default_factory=RepairPolicy)
    # "auto" (from the operating system), "linux" or "colima"; PYBOX_PLATFORM wins.
    platform: str = "auto"
    platform_source: str = "built-in"
    colima: ColimaSettings = field(default_factory=ColimaSettings)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    # "auto" (Docker's socket, else Podman's), "docker" or "podman"; PYBOX_ENGINE wins.
    engine: str = "auto"
    engine_source: str = "built-in"
    # The isolation lanes (runc, gvisor): pybox._adapters.runtime_config.
    runtimes: RuntimePolicy = field(default_factory=RuntimePolicy)
    egress: EgressSettings = field(default_factory=EgressSettings)
    # Names an MCP server may forward by name alone from its own environment
    # (pybox._core.host_env); the CLI and the API forward the user's own.
    forward_env: tuple[str, ...] = ()


def _colima_settings(data: Any, path: Path) -> ColimaSettings:
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: [colima] must be a table, not {data!r}.")
    unknown = sorted(set(data) - set(COLIMA_KEYS))
    if unknown:
        raise ConfigError(
            f"{path}: unknown [colima] {noun(len(unknown), 'setting')} "
            f"{', '.join(unknown)}. Known: "
            f"{', '.join(COLIMA_KEYS)}."
        )
    for key, value in data.items():
        kind = COLIMA_KEYS[key]
        if type(value) is not kind or (isinstance(value, int) and value < 1):
            what = (
                "a positive whole number"
                if kind is int
                else "a path string"
                if key in ("colima", "docker")
                else "a string"
            )
            raise ConfigError(f"{path}: colima.{key} must be {what}, not {value!r}.")
    return ColimaSettings(**data)


def _platform_choice(value: Any, where: str) -> str:
    if value not in PLATFORMS:
        raise ConfigError(
            f"{where}: platform must be one of {', '.join(PLATFORMS)}, not {value!r}."
        )
    return str(value)


def _engine_choice(value: Any, where: str) -> str:
    if value not in ENGINES:
        raise ConfigError(f"{where}: engine must be one of {', '.join(ENGINES)}, not {value!r}.")
    return str(value)


def config_file_path(environ: Mapping[str, str], explicit: str | None) -> tuple[Path | None, bool]:
    """The config file to read, and whether it was asked for explicitly."""
    if explicit:
        return Path(explicit), True
    if environ.get("PYBOX_CONFIG"):
        return Path(environ["PYBOX_CONFIG"]), True
    path, _ = config_path(environ, str(Path.home()), None)
    return Path(path), False


def _read_toml(path: Path) -> dict[str, Any]:
    import tomllib  # about 3 ms, and most runs have no config file

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
    sandboxes = SandboxSettings()
    experiments = ExperimentSettings()
    sources = ["built-in"]
    state_dir = default_state_dir(environ)
    path, explicit = config_file_path(environ, config_path)
    used_file: Path | None = None
    platform, platform_source = "auto", "built-in"
    engine, engine_source = "auto", "built-in"
    colima = ColimaSettings()
    admission = AdmissionConfig()
    runtimes = RuntimePolicy()
    egress = EgressSettings()
    forward_env: tuple[str, ...] = ()
    if path is not None and (explicit or path.exists()):
        if not path.is_file():
            raise ConfigError(
                f"The config file {path} does not exist. Create it, or drop --config/PYBOX_CONFIG."
            )
        data = _read_toml(path)
        unknown = sorted(set(data) - set(CONFIG_SECTIONS))
        if unknown:
            raise ConfigError(
                f"{path}: unknown {noun(len(unknown), 'setting')} {', '.join(unknown)}. Known: "
                f"{', '.join(CONFIG_SECTIONS)}."
            )
        policy = policy.with_settings(
            _section(data, "defaults", path), _section(data, "ceilings", path), str(path)
        )
        repair = _section(data, "repair", path)
        unknown = sorted(set(repair) - {"defaults", "ceilings"})
        if unknown:
            raise ConfigError(
                f"{path}: unknown {noun(len(unknown), 'setting')} "
                f"repair.{', repair.'.join(unknown)}. Known: "
                "repair.defaults, repair.ceilings."
            )
        repair_policy = repair_policy.with_settings(
            _section(repair, "defaults", path),
            _section(repair, "ceilings", path),
            f"{path} [repair]",
        )
        if "allow_credential_env" in data:
            if not isinstance(data["allow_credential_env"], bool):
                raise ConfigError(f"{path}: allow_credential_env must be true or false.")
            policy = dataclasses.replace(policy, allow_credential_env=data["allow_credential_env"])
        if "forward_env" in data:
            from pybox._core.host_env import check_forward_names  # rare: kept off exec's path

            forward_env = check_forward_names(data["forward_env"], str(path))
        if "state_dir" in data and "PYBOX_STATE_DIR" not in environ:
            if not isinstance(data["state_dir"], str):
                raise ConfigError(f"{path}: state_dir must be a path string.")
            state_dir = Path(data["state_dir"]).expanduser()
        pool = pool.with_settings(_section(data, "pool", path), str(path))
        sandboxes = sandboxes.with_settings(_section(data, "sandboxes", path), str(path))
        experiments = experiments.with_settings(_section(data, "experiments", path), str(path))
        if "platform" in data:
            platform, platform_source = _platform_choice(data["platform"], str(path)), str(path)
        if "engine" in data:
            engine, engine_source = _engine_choice(data["engine"], str(path)), str(path)
        if "colima" in data:
            colima = _colima_settings(data["colima"], path)
        admission = admission.with_settings(
            {key: data[key] for key in ADMISSION_KEYS if key in data}, str(path)
        )
        runtimes = runtime_policy_from_file(runtimes, data, path)
        egress = egress.with_settings(_section(data, "egress", path), str(path))
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
    env_admission = {key: environ[name] for name, key in ADMISSION_ENV.items() if name in environ}
    if env_admission:
        admission = admission.with_settings(env_admission, "environment")
        if "environment" not in sources:
            sources.append("environment")
    allow = environ.get("PYBOX_ALLOW_CREDENTIAL_ENV")
    if allow:
        if allow not in ("0", "1"):
            raise ConfigError(f"PYBOX_ALLOW_CREDENTIAL_ENV must be 0 or 1, not {allow!r}.")
        policy = dataclasses.replace(policy, allow_credential_env=allow == "1")
        if "environment" not in sources:
            sources.append("environment")
    runtimes = runtime_policy_from_env(runtimes, environ)
    if environ.get("PYBOX_PLATFORM"):
        platform = _platform_choice(environ["PYBOX_PLATFORM"], "PYBOX_PLATFORM")
        platform_source = "PYBOX_PLATFORM"
    if environ.get("PYBOX_ENGINE"):
        engine = _engine_choice(environ["PYBOX_ENGINE"], "PYBOX_ENGINE")
        engine_source = "PYBOX_ENGINE (or pybox --engine)"
    return Settings(
        policy,
        state_dir,
        used_file,
        tuple(sources),
        pool=pool,
        sandboxes=sandboxes,
        experiments=experiments,
        repair_policy=repair_policy,
        platform=platform,
        platform_source=platform_source,
        colima=colima,
        admission=admission,
        engine=engine,
        engine_source=engine_source,
        runtimes=runtimes,
        egress=egress,
        forward_env=forward_env,
    )
