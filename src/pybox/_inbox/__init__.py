"""Code that runs inside the box. Read as text by the host, never imported there."""

from __future__ import annotations

from importlib.resources import files


def bootstrap_source() -> str:
    return files(__name__).joinpath("bootstrap.py").read_text(encoding="utf-8")
