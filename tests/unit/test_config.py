"""Operator configuration: built-in values, then a TOML file, then the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from pybox._adapters.config import config_file_path, load_settings
from pybox._core.errors import ConfigError
from pybox._core.limits import BUILTIN_CEILINGS, BUILTIN_DEFAULTS, MIB, Policy


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    """An environment that never points at the real home directory."""
    (tmp_path / "xdg-config").mkdir()
    return {
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "XDG_STATE_HOME": str(tmp_path / "xdg-state"),
    }


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def xdg_file(environ: dict[str, str]) -> Path:
    return Path(environ["XDG_CONFIG_HOME"]) / "pybox" / "config.toml"


# --- where the file is looked for --------------------------------------------


def test_no_file_and_no_environment_gives_builtin_policy(environ: dict[str, str]) -> None:
    settings = load_settings(environ)
    assert settings.policy == Policy()
    assert settings.config_file is None
    assert settings.sources == ("built-in",)
    assert settings.state_dir == Path(environ["XDG_STATE_HOME"]) / "pybox"


def test_config_file_path_order(tmp_path: Path) -> None:
    env = {"PYBOX_CONFIG": "/from/env.toml", "XDG_CONFIG_HOME": str(tmp_path)}
    assert config_file_path(env, "/explicit.toml") == (Path("/explicit.toml"), True)
    assert config_file_path(env, None) == (Path("/from/env.toml"), True)
    assert config_file_path({"XDG_CONFIG_HOME": str(tmp_path)}, None) == (
        tmp_path / "pybox" / "config.toml",
        False,
    )


def test_empty_pybox_config_falls_back_to_xdg(tmp_path: Path) -> None:
    env = {"PYBOX_CONFIG": "", "XDG_CONFIG_HOME": str(tmp_path)}
    assert config_file_path(env, None) == (tmp_path / "pybox" / "config.toml", False)


def test_xdg_file_is_read_when_present(environ: dict[str, str]) -> None:
    path = write(xdg_file(environ), "[defaults]\nmemory_mib = 256\n")
    settings = load_settings(environ)
    assert settings.policy.defaults.memory_bytes == 256 * MIB
    assert settings.config_file == path
    assert settings.sources == ("built-in", str(path))


def test_pybox_config_is_read_instead_of_xdg(environ: dict[str, str], tmp_path: Path) -> None:
    write(xdg_file(environ), "[defaults]\nmemory_mib = 256\n")
    chosen = write(tmp_path / "chosen.toml", "[defaults]\nmemory_mib = 128\n")
    settings = load_settings({**environ, "PYBOX_CONFIG": str(chosen)})
    assert settings.policy.defaults.memory_bytes == 128 * MIB
    assert settings.config_file == chosen


def test_explicit_path_wins_over_pybox_config(environ: dict[str, str], tmp_path: Path) -> None:
    from_env = write(tmp_path / "env.toml", "[defaults]\npids = 16\n")
    explicit = write(tmp_path / "explicit.toml", "[defaults]\npids = 32\n")
    settings = load_settings({**environ, "PYBOX_CONFIG": str(from_env)}, str(explicit))
    assert settings.policy.defaults.pids == 32
    assert settings.config_file == explicit


def test_missing_explicit_file_is_a_clear_error(environ: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_settings(environ, str(missing))
    message = str(info.value)
    assert str(missing) in message
    assert "does not exist" in message
    assert "--config" in message


def test_missing_pybox_config_file_is_an_error(environ: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_settings({**environ, "PYBOX_CONFIG": str(missing)})
    assert str(missing) in str(info.value)
    assert "PYBOX_CONFIG" in str(info.value)


def test_explicit_path_that_is_a_directory_is_an_error(
    environ: dict[str, str], tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ, str(tmp_path))
    assert str(tmp_path) in str(info.value)


def test_missing_xdg_file_is_silently_skipped(environ: dict[str, str]) -> None:
    assert not xdg_file(environ).exists()
    assert load_settings(environ).config_file is None


# --- what the file may hold ---------------------------------------------------


def test_file_sets_defaults_and_ceilings_in_user_units(
    environ: dict[str, str], tmp_path: Path
) -> None:
    path = write(
        tmp_path / "c.toml",
        "[defaults]\ntimeout_s = 5.5\ncpus = 0.5\n\n"
        "[ceilings]\nmemory_mib = 2048\noutput_kib = 128\noutput_files = 5\n",
    )
    policy = load_settings(environ, str(path)).policy
    assert policy.defaults.timeout_s == 5.5
    assert policy.defaults.cpus == 0.5
    assert policy.ceilings.memory_bytes == 2048 * MIB
    assert policy.ceilings.output_bytes == 128 * 1024
    assert policy.ceilings.output_files == 5
    # Lowering a ceiling lowers the default that was not set.
    assert policy.defaults.output_files == 5
    assert policy.defaults.memory_bytes == BUILTIN_DEFAULTS.memory_bytes


def test_empty_file_changes_nothing_but_is_recorded(
    environ: dict[str, str], tmp_path: Path
) -> None:
    path = write(tmp_path / "empty.toml", "")
    settings = load_settings(environ, str(path))
    assert settings.policy == Policy()
    assert settings.config_file == path
    assert settings.sources == ("built-in", str(path))


def test_invalid_toml_is_a_config_error(environ: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path / "bad.toml", "[defaults\nmemory_mib = \n")
    with pytest.raises(ConfigError) as info:
        load_settings(environ, str(path))
    assert str(path) in str(info.value)
    assert "not valid TOML" in str(info.value)


def test_unknown_sections_are_named(environ: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "[limits]\nmemory_mib = 1\n[extra]\nx = 1\n")
    with pytest.raises(ConfigError) as info:
        load_settings(environ, str(path))
    message = str(info.value)
    assert "extra, limits" in message
    assert "defaults" in message
    assert "ceilings" in message


def test_section_that_is_not_a_table_is_an_error(environ: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "defaults = 5\n")
    with pytest.raises(ConfigError) as info:
        load_settings(environ, str(path))
    assert "[defaults] must be a table" in str(info.value)


def test_bad_value_in_file_names_the_file(environ: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", '[ceilings]\nmemory_mib = "lots"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(environ, str(path))
    assert str(path) in str(info.value)
    assert "memory_mib" in str(info.value)


def test_boolean_value_in_file_is_an_error(environ: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "[defaults]\npids = true\n")
    with pytest.raises(ConfigError):
        load_settings(environ, str(path))


def test_file_default_above_file_ceiling_is_an_error(
    environ: dict[str, str], tmp_path: Path
) -> None:
    path = write(
        tmp_path / "c.toml", "[defaults]\nmemory_mib = 512\n[ceilings]\nmemory_mib = 256\n"
    )
    with pytest.raises(ConfigError) as info:
        load_settings(environ, str(path))
    assert "512 MiB" in str(info.value)
    assert "256 MiB" in str(info.value)


def test_unknown_limit_in_file_is_a_config_error(environ: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "[ceilings]\nmemory_gb = 4\n")
    with pytest.raises(ConfigError) as info:
        load_settings(environ, str(path))
    assert "memory_gb" in str(info.value)


def test_state_dir_from_file(environ: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", f'state_dir = "{tmp_path / "st"}"\n')
    assert load_settings(environ, str(path)).state_dir == tmp_path / "st"


def test_pybox_state_dir_wins_over_the_file(environ: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", f'state_dir = "{tmp_path / "st"}"\n')
    env = {**environ, "PYBOX_STATE_DIR": str(tmp_path / "env-state")}
    assert load_settings(env, str(path)).state_dir == tmp_path / "env-state"


def test_state_dir_must_be_a_string(environ: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "state_dir = 3\n")
    with pytest.raises(ConfigError) as info:
        load_settings(environ, str(path))
    assert "state_dir" in str(info.value)


# --- the environment ------------------------------------------------------------


def test_environment_default_and_ceiling(environ: dict[str, str]) -> None:
    env = {**environ, "PYBOX_DEFAULT_TIMEOUT_S": "12.5", "PYBOX_MAX_MEMORY_MIB": "4096"}
    settings = load_settings(env)
    assert settings.policy.defaults.timeout_s == 12.5
    assert settings.policy.ceilings.memory_bytes == 4096 * MIB
    assert settings.sources == ("built-in", "environment")
    assert settings.config_file is None


def test_environment_lowered_ceiling_lowers_default(environ: dict[str, str]) -> None:
    settings = load_settings({**environ, "PYBOX_MAX_MEMORY_MIB": "64"})
    assert settings.policy.ceilings.memory_bytes == 64 * MIB
    assert settings.policy.defaults.memory_bytes == 64 * MIB


def test_environment_wins_over_the_file(environ: dict[str, str], tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.toml",
        "[defaults]\npids = 50\ncpus = 0.5\n[ceilings]\nmemory_mib = 1024\npids = 100\n",
    )
    env = {
        **environ,
        "PYBOX_CONFIG": str(path),
        "PYBOX_DEFAULT_PIDS": "60",
        "PYBOX_MAX_MEMORY_MIB": "2048",
    }
    settings = load_settings(env)
    policy = settings.policy
    assert policy.defaults.pids == 60  # env
    assert policy.defaults.cpus == 0.5  # file, untouched by env
    assert policy.ceilings.memory_bytes == 2048 * MIB  # env
    assert policy.ceilings.pids == 100  # file
    assert settings.sources == ("built-in", str(path), "environment")


def test_environment_ceiling_below_file_default_lowers_it(
    environ: dict[str, str], tmp_path: Path
) -> None:
    path = write(tmp_path / "c.toml", "[defaults]\nmemory_mib = 1024\n")
    settings = load_settings({**environ, "PYBOX_MAX_MEMORY_MIB": "256"}, str(path))
    assert settings.policy.ceilings.memory_bytes == 256 * MIB
    assert settings.policy.defaults.memory_bytes == 256 * MIB


def test_environment_default_above_ceiling_is_an_error(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        load_settings({**environ, "PYBOX_DEFAULT_CPUS": "16"})


@pytest.mark.parametrize("value", ["", "abc", "1.5", "-4"])
def test_bad_environment_value_is_an_error_naming_the_environment(
    environ: dict[str, str], value: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({**environ, "PYBOX_MAX_PIDS": value})
    assert str(info.value).startswith("environment:")
    assert "pids" in str(info.value)


def test_unrelated_environment_variables_are_ignored(environ: dict[str, str]) -> None:
    env = {**environ, "PYBOX_MAX_MEMORY": "1", "PYBOX_DEFAULT_": "x", "PYBOX_OTHER": "y"}
    settings = load_settings(env)
    assert settings.policy.defaults == BUILTIN_DEFAULTS
    assert settings.policy.ceilings == BUILTIN_CEILINGS
    assert settings.sources == ("built-in",)


def test_lower_case_environment_names_are_not_read(environ: dict[str, str]) -> None:
    settings = load_settings({**environ, "pybox_max_memory_mib": "64"})
    assert settings.policy.ceilings == BUILTIN_CEILINGS


# --- credential-shaped environment variables for the program -------------------


def test_credential_env_is_refused_by_default(environ: dict[str, str]) -> None:
    assert load_settings(environ).policy.allow_credential_env is False


def test_operator_allows_credential_env_in_the_file(environ: dict[str, str]) -> None:
    write(xdg_file(environ), "allow_credential_env = true\n[ceilings]\nmemory_mib = 256\n")
    policy = load_settings(environ).policy
    assert policy.allow_credential_env is True
    assert policy.ceilings.memory_bytes == 256 * MIB  # kept through the limit settings


def test_operator_allows_credential_env_in_the_environment(environ: dict[str, str]) -> None:
    environ["PYBOX_ALLOW_CREDENTIAL_ENV"] = "1"
    environ["PYBOX_MAX_MEMORY_MIB"] = "256"
    assert load_settings(environ).policy.allow_credential_env is True


@pytest.mark.parametrize("text", ['allow_credential_env = "yes"\n', "allow_credential_env = 1\n"])
def test_allow_credential_env_must_be_a_boolean(environ: dict[str, str], text: str) -> None:
    write(xdg_file(environ), text)
    with pytest.raises(ConfigError, match="allow_credential_env must be true or false"):
        load_settings(environ)


def test_allow_credential_env_variable_must_be_0_or_1(environ: dict[str, str]) -> None:
    environ["PYBOX_ALLOW_CREDENTIAL_ENV"] = "yes"
    with pytest.raises(ConfigError, match="PYBOX_ALLOW_CREDENTIAL_ENV must be 0 or 1"):
        load_settings(environ)


# --- the names an MCP server may forward from its own environment (issue 29) --------


def test_forward_env_is_empty_by_default_and_read_from_the_file(environ: dict[str, str]) -> None:
    assert load_settings(environ).forward_env == ()
    write(xdg_file(environ), 'forward_env = ["CI", "REDIS_HOST"]\n')
    assert load_settings(environ).forward_env == ("CI", "REDIS_HOST")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('forward_env = "CI"\n', "forward_env must be a list of environment variable names"),
        ("forward_env = [1]\n", "forward_env must be a list"),
        ('forward_env = ["A=B"]\n', "forward_env: 'A=B' is not an environment variable name"),
    ],
)
def test_forward_env_must_list_names(environ: dict[str, str], text: str, message: str) -> None:
    write(xdg_file(environ), text)
    with pytest.raises(ConfigError, match=message):
        load_settings(environ)
