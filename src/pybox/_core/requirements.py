"""Libraries an agent asks for: names and version specifiers, nothing else (pure).

What reaches pip in an install box is only ever a project name with optional
extras and version specifiers ("numpy==2.1.0", "attrs>=23,<25",
"pkg[extra]~=1.2"). URLs, paths, direct references ("name @ url"), markers,
pip options and anything else pip would read as something other than a
requirement are refused here, before any box exists, with the item and why.
Items come back normalized: the PEP 503 name, sorted extras, specifiers
without spaces; an exact repeat is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pybox._core.display import escape_text
from pybox._core.errors import InvalidRequest
from pybox._core.locks import normalize_name

MAX_LIBRARIES = 32
MAX_LIBRARY_CHARS = 200
_SHOWN_CHARS = 60

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
# Version characters of PEP 440 (and the `.*` of prefix matching), no more.
_SPEC = r"(?:===|~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9][A-Za-z0-9.*+!_-]*"
_REQUIREMENT_RE = re.compile(
    rf"(?P<name>{_NAME})\s*"
    rf"(?:\[\s*(?P<extras>{_NAME}(?:\s*,\s*{_NAME})*)?\s*\])?\s*"
    rf"(?P<specs>{_SPEC}(?:\s*,\s*{_SPEC})*)?"
)
_SPEC_RE = re.compile(r"(===|~=|==|!=|<=|>=|<|>)\s*(\S+)")
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:|://")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# pip reads an item ending so as the name of a file to install, not a project.
_ARCHIVE_ENDINGS = (".whl", ".zip", ".tar", ".tgz", ".tbz", ".txz", ".tlz", ".gz", ".bz2", ".xz")

_NEXT = (
    "Give names with optional version specifiers only, for example 'requests', "
    "'numpy==2.1.0' or 'attrs>=23,<25'."
)


def parse_libraries(libraries: Sequence[str]) -> tuple[str, ...]:
    """The normalized requirements, or `InvalidRequest` naming the first bad item."""
    if isinstance(libraries, (str, bytes)) or not isinstance(libraries, Sequence):
        raise InvalidRequest(
            f"libraries must be a list of requirement strings, not {type(libraries).__name__} "
            f"{escape_text(repr(libraries)[:80])}. {_NEXT}"
        )
    if len(libraries) > MAX_LIBRARIES:
        raise InvalidRequest(
            f"{len(libraries)} libraries were asked for; at most {MAX_LIBRARIES} may be "
            "installed at once. Ask for fewer (their dependencies come along by themselves)."
        )
    normalized: list[str] = []
    for index, item in enumerate(libraries):
        requirement = parse_library(item, index)
        if requirement not in normalized:
            normalized.append(requirement)
    return tuple(normalized)


def parse_library(item: object, index: int = 0) -> str:
    """One requirement, normalized; `index` names its place in the list for messages."""
    if not isinstance(item, str):
        raise InvalidRequest(
            f"Library {index + 1} is {type(item).__name__} {escape_text(repr(item)[:80])}, "
            f"not a string. {_NEXT}"
        )
    shown = escape_text(repr(item[:_SHOWN_CHARS]))
    where = f"Library {index + 1}, {shown}{'...' if len(item) > _SHOWN_CHARS else ''},"
    why = _refusal(item)
    if why is not None:
        raise InvalidRequest(f"{where} is refused: {why}. {_NEXT}")
    match = _REQUIREMENT_RE.fullmatch(item.strip())
    assert match is not None  # _refusal checked it
    extras = sorted({normalize_name(e.strip()) for e in (match.group("extras") or "").split(",")})
    extras = [extra for extra in extras if extra]
    specs = ",".join(
        f"{operator}{version}" for operator, version in _SPEC_RE.findall(match.group("specs") or "")
    )
    return normalize_name(match.group("name")) + (f"[{','.join(extras)}]" if extras else "") + specs


def _refusal(item: str) -> str | None:
    """Why `item` is not a plain requirement, in words a caller can act on."""
    if len(item) > MAX_LIBRARY_CHARS:
        return f"it is {len(item)} characters long, more than {MAX_LIBRARY_CHARS}"
    if _CONTROL_RE.search(item):
        return "it holds control characters"
    text = item.strip()
    if not text:
        return "it is empty: a package name is needed"
    if text.startswith("-"):
        return "it starts with '-', which pip would read as an option; options are not accepted"
    if not text.isascii():
        return "package names and versions are ASCII only"
    if "@" in text:
        return "it is a direct reference ('name @ url'); only names and versions are accepted"
    if _URL_RE.search(text):
        return "it is a URL; only packages from the operator's index are installed"
    if ";" in text:
        return "it has an environment marker (';'); markers are not accepted"
    if text.startswith((".", "~")) or "/" in text or "\\" in text:
        return "it is a path; only packages from the operator's index are installed"
    whole = _REQUIREMENT_RE.fullmatch(text)
    if whole is not None and whole.group("name").lower().endswith(_ARCHIVE_ENDINGS):
        return "it names an archive file; only packages from the operator's index are installed"
    if whole is not None:
        return None
    first = _REQUIREMENT_RE.match(text)
    if (
        first is not None
        and first.end() > 0
        and text[first.end() :].strip()
        and (text[first.end() - 1].isspace() or text[first.end()].isspace())
    ):
        return (
            f"it has more than one token ({escape_text(repr(text[first.end() :].strip()[:40]))} "
            "after the requirement); give each library as its own item"
        )
    return "it is not a package name with optional extras and version specifiers"
