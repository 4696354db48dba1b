"""The operator's `[sandboxes]` settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from pybox._adapters.config import load_settings
from pybox._core.errors import ConfigError


def test_the_config_file_sets_the_sandboxes_settings(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[sandboxes]\nidle_ttl_s = 60\nmax_lifetime_s = 3600\nmax_sandboxes = 2\n")
    settings = load_settings({"PYBOX_STATE_DIR": str(tmp_path)}, str(config)).sandboxes
    assert (settings.idle_ttl_s, settings.max_lifetime_s, settings.max_sandboxes) == (60, 3600, 2)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("idle_ttl_s = 1", "from 10 to"),
        ("max_sandboxes = 2.5", "a whole number"),
        ("max_sandboxes = true", "a whole number"),
        ("idle = 5", "unknown sandboxes setting"),
    ],
)
def test_bad_sandboxes_settings_are_refused(tmp_path: Path, line: str, why: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f"[sandboxes]\n{line}\n")
    with pytest.raises(ConfigError, match=why):
        load_settings({"PYBOX_STATE_DIR": str(tmp_path)}, str(config))
