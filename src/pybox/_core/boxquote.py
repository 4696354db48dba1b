"""Where, in a message pybox wrote, the words that came from inside the box are.

A message such as "the box ended without one (<the bootstrap's last words>)" is
pybox's sentence around the box's (untrusted) text. The receipt keeps the whole
message, as it always has; `BoxQuote` marks the box's part, so a front end that
must keep box text apart (MCP) shows pybox's words with a pointer in its place
and the box's words in a section of their own, without parsing the message.
"""

from __future__ import annotations

from dataclasses import dataclass

# Dataclass field metadata: the field is not part of the receipt's JSON.
NOT_IN_JSON = {"json": False}


@dataclass(frozen=True)
class BoxQuote:
    """`message[start:end]` came from inside the box."""

    start: int
    end: int

    def said(self, message: str) -> str:
        return message[self.start : self.end]

    def pointing(self, message: str, pointer: str) -> str:
        """`message` with the box's words replaced by `pointer`."""
        return message[: self.start] + pointer + message[self.end :]

    def shifted(self, by: int) -> BoxQuote:
        """The same words once `by` characters were put before the message."""
        return BoxQuote(self.start + by, self.end + by)


def quoting(before: str, box_words: str, after: str = "") -> tuple[str, BoxQuote]:
    """pybox's `before` and `after` around the box's words, and where those are."""
    return before + box_words + after, BoxQuote(len(before), len(before) + len(box_words))
