"""Paths from callers stay in the sandbox's workspace."""

from __future__ import annotations

import pytest

from pybox._core.errors import InvalidRequest
from pybox._features.sandboxes.paths import workspace_path


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("a.txt", "a.txt"),
        ("./data//in.csv", "data/in.csv"),
        ("/pybox/work/data/in.csv", "data/in.csv"),
        ("/pybox/work/", ""),
    ],
)
def test_paths_inside_are_made_relative(given: str, expected: str) -> None:
    assert workspace_path(given, folder_ok=True) == expected


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("../../etc/passwd", "'..' is not allowed"),
        ("a/../../b", "'..' is not allowed"),
        ("/etc/passwd", "outside the sandbox's workspace"),
        ("/pybox/workshop/x", "outside the sandbox's workspace"),
        ("a\nb", "control characters"),
        ("a\x1b[2Jb", "control characters"),
        ("out/ok\u202etxt.exe", "bidirectional or invisible format characters"),
        ("\u200eleft", "bidirectional or invisible format characters"),
        ("x" * 2000, "longer than"),
        ("/".join("d" * 40), "folders deep"),
        ("", "names the workspace itself"),
        (".", "names the workspace itself"),
    ],
)
def test_paths_that_leave_or_are_not_usable_are_refused(given: str, why: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        workspace_path(given)
    assert why in str(raised.value)


def test_a_path_must_be_a_string() -> None:
    with pytest.raises(InvalidRequest, match="must be a string"):
        workspace_path(["a"])
