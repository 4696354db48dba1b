"""Text from inside the box, shown between begin and end lines it cannot print.

Every tool that shows what a box said (a run's output, its files' names, the
receipt's notes, an experiment's report) puts it in `Section`s and renders them
with `fenced_sections`: the tag on each fence is a digest of all the texts shown,
so no text can hold it, and text inside a section that looks like pybox's is the
box's, never pybox's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pybox._core.display import escape_text, neutralise_text


@dataclass(frozen=True)
class Section:
    """Text from inside the box, shown between its own begin and end lines.

    `name` and `notes` are pybox's words (`program stdout`, `offset 0, 6 bytes`);
    `text` is the box's."""

    name: str
    text: str
    notes: Sequence[str] = ()


def output_sections(sections: Iterable[tuple[str, str, list[str]]]) -> list[str]:
    """The program's output, each (stream, text, notes) in a section of its own."""
    return fenced_sections(
        Section(f"program {stream}", text, notes) for stream, text, notes in sections
    )


def fenced_sections(sections: Iterable[Section]) -> list[str]:
    """What the box said, each part between its own begin and end lines.

    A section without text is left out. The tag on every begin and end line is a
    digest of all the texts shown, in every section, so no text can hold it; the
    texts' control characters are shown as escapes."""
    shown = [section for section in sections if section.text]
    if not shown:
        return []
    tag = _section_tag(section.text for section in shown)
    if all(section.name.startswith("program ") for section in shown):
        intro = "The program's output follows, untrusted: each stream between lines "
        part = "program <stream>"
    else:
        intro = "What came from inside the box follows, untrusted: each part between lines "
        part = "<part>"
    lines = [f"{intro}'--- begin {part} (untrusted) {tag} ---' and '--- end {part} {tag} ---'."]
    for section in shown:
        # Pybox's own words in the begin line: escaped, so a note can never break it.
        note = "".join(f", {escape_text(n)}" for n in section.notes)
        lines.append(f"--- begin {section.name} (untrusted{note}) {tag} ---")
        lines.append(neutralise_text(section.text).rstrip("\n"))
        lines.append(f"--- end {section.name} {tag} ---")
    return lines


def _section_tag(texts: Iterable[str]) -> str:
    """A tag the program cannot print: a digest of the very output it would appear in."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()[:16]
