"""What a Node project's package.json says about its tests: which runner its
dependencies and `test` script name, and which config files it has."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pybox._features.experiments.testing.results_tree import read_json
from pybox._features.experiments.testing.summary import ReadFile

_DEPENDENCY_TABLES = ("devDependencies", "dependencies", "optionalDependencies")
_CONFIG_ENDINGS = (".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".json")


@dataclass(frozen=True)
class NodeProject:
    dependencies: frozenset[str]
    test_script: str
    top_level: frozenset[str]  # package.json's own keys ("jest" holds jest's config)

    def uses(self, tool: str, paths: frozenset[str]) -> bool:
        """The project uses `tool`: as a dependency, in its test script, or by a
        `tool.config.*` file at the root."""
        if tool in self.dependencies or re.search(rf"(?:^|[\s/;&|]){tool}\b", self.test_script):
            return True
        return any(f"{tool}.config{ending}" in paths for ending in _CONFIG_ENDINGS)


def node_project(paths: frozenset[str], read: ReadFile) -> NodeProject | None:
    """The root package.json's facts, or None when there is none (or it is not JSON)."""
    if "package.json" not in paths:
        return None
    manifest = read_json(read, "package.json")
    if manifest is None:
        return None
    names: set[str] = set()
    for table in _DEPENDENCY_TABLES:
        value = manifest.get(table)
        if isinstance(value, dict):
            names.update(str(key) for key in value)
    scripts = manifest.get("scripts")
    test = scripts.get("test") if isinstance(scripts, dict) else None
    return NodeProject(
        dependencies=frozenset(names),
        test_script=test if isinstance(test, str) else "",
        top_level=frozenset(str(key) for key in manifest),
    )
