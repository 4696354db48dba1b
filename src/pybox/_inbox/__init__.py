"""Code that runs inside the box. Read as text by the host, never imported there."""

from __future__ import annotations

from pathlib import Path

# Beside this file, as pybox is installed; not through importlib.resources, whose
# imports would cost every run a few milliseconds.
BOOTSTRAP_PATH = Path(__file__).with_name("bootstrap.py")


def bootstrap_source() -> str:
    """The text of the box's PID 1, one file (bootstrap.py says what it does)."""
    return BOOTSTRAP_PATH.read_text(encoding="utf-8")


def inbox_program(name: str) -> bytes:
    """The source of one of pybox's own in-box programs (`sandbox_files`, `sandbox_exec`)."""
    return Path(__file__).with_name(f"{name}.py").read_bytes()
