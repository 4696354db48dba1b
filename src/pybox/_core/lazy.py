"""A package's names imported on first use (PEP 562), so importing it costs nothing yet.

Nothing imported at run time: `import pybox` (and so every command) goes through here.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


def lazy_names(
    namespace: dict[str, object], where: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__`: `where` maps each name to the
    module (relative to the package, as ".part", or absolute) that defines it.
    A name is imported on first use and kept in `namespace` (the package's
    globals), so later look-ups do not come back here."""
    package = str(namespace["__name__"])

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
