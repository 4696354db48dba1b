"""Code that runs inside the box. Read as text by the host, never imported there."""

from __future__ import annotations

from pathlib import Path

# Beside this file, as pybox is installed; not through importlib.resources, whose
# imports would cost every run a few milliseconds.
# The bootstrap is one program in the box, kept in files along its seams
# (bootstrap.py says what the whole does); pybox joins them in this order.
BOOTSTRAP_PARTS = (
    "bootstrap.py",
    "bootstrap_processes.py",
    "bootstrap_io.py",
    "bootstrap_space.py",
    "bootstrap_main.py",
)
BOOTSTRAP_PATH = Path(__file__).with_name(BOOTSTRAP_PARTS[0])


def bootstrap_source() -> str:
    folder = BOOTSTRAP_PATH.parent
    return "\n".join(
        (folder / part).read_text(encoding="utf-8").rstrip("\n") + "\n" for part in BOOTSTRAP_PARTS
    )


def inbox_program(name: str) -> bytes:
    """The source of one of pybox's own in-box programs (`sandbox_files`, `sandbox_exec`)."""
    return Path(__file__).with_name(f"{name}.py").read_bytes()
