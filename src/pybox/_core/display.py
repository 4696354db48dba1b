"""Text for people and agents: how pybox shows strings it did not write (pure, no I/O).

Three rules, one module, so every front end escapes (or refuses) the same way:

- `escape_text` is for text pybox places inside its *own* lines: returned and
  skipped file names, skip reasons, engine and model messages, error texts. Every
  character Python does not call printable is shown as a backslash escape:
  control characters (ESC, CR, LF, BEL, backspace, C1), bidirectional-text
  controls (U+202A..U+202E, U+2066..U+2069, U+200E/U+200F, U+061C), zero-width
  and other format characters, line and paragraph separators, unusual spaces
  and undecodable bytes. Such text can then never move the cursor, recolour
  or clear the screen, open a terminal string that swallows what follows,
  reorder the line, or start a new line that looks like pybox's own.
- `neutralise_output` is for a program's own output shown on a terminal. It
  keeps what ordinary text needs (newlines, tabs, CRLF line ends, all printable
  Unicode including joiners) and shows the rest as escapes, so the output
  cannot change the terminal's state for the lines pybox prints after it.
- `name_problem` is for names pybox writes to disk or hands to a box (returned
  files, input names, sandbox paths, copied project files). A name holding a
  control character (Unicode category Cc: C0, DEL, C1) or a format or
  separator character (Cf, Zl, Zp: the bidirectional controls U+202A..U+202E,
  U+2066..U+2069, U+200E/U+200F and U+061C, zero-width spaces and joiners,
  the BOM, soft hyphens, tag characters, line and paragraph separators) is
  refused, not escaped: it would be written as it is, and `ok\\u202etxt.exe`
  lists as `okexe.txt` in a file manager. Joiners are refused too, though some
  scripts and emoji use them: they let two different names look the same.
  Other spaces, unassigned and private-use characters, and undecodable bytes
  are left to the checks of each place.

Escapes use Python's notation (`\\x1b`, `\\r`, `\\u202e`); an undecodable
byte 0xNN is shown as `\\xNN`. Backslashes themselves are left alone, so text
that is already safe (a JSON record, a repr) is unchanged, and escaping twice
changes nothing.
"""

from __future__ import annotations

import re

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

# What a terminal acts on in program output: C0 controls but TAB and LF, a CR
# that does not end a line, DEL, C1 controls, the bidirectional controls whose
# effect runs on past their own text, line/paragraph separators, and the
# stand-ins (lone surrogates) for bytes that were not UTF-8. A pattern string: `re`
# compiles it on first use and keeps it, so importing this module costs no compile.
_OUTPUT_UNSAFE = (
    "\r(?!\n)|[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f"
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]"
)


def _escape_char(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escape_text(text: str) -> str:
    """`text` on one line, every character that is not printable shown as an escape."""
    if text.isprintable():  # the common case: nothing to do, and fast for long records
        return text
    return "".join(char if char.isprintable() else _escape_char(char) for char in text)


def escape_lines(text: str) -> str:
    """Like `escape_text`, but the line breaks of a multi-line message are kept."""
    return "\n".join(escape_text(line) for line in text.split("\n"))


def neutralise_text(text: str) -> str:
    """A program's output (as text) with what a terminal would act on shown as escapes."""
    return re.sub(_OUTPUT_UNSAFE, lambda match: _escape_char(match.group()), text)


def neutralise_output(data: bytes) -> bytes:
    """A program's raw output, made safe to write to a terminal (see `neutralise_text`)."""
    text = data.decode("utf-8", "surrogateescape")
    return neutralise_text(text).encode("utf-8")


# What `name_problem` refuses, by Unicode general category (see the module's docstring).
_CONTROL_CATEGORIES = frozenset({"Cc"})
_FORMAT_CATEGORIES = frozenset({"Cf", "Zl", "Zp"})


def name_problem(name: str) -> str | None:
    """Why `name` (a file name or path) may not be written or used, by its characters:
    "control characters", "bidirectional or invisible format characters", or None."""
    if name.isprintable():  # no Cc, Cf, Zl or Zp in it: the common case, fast
        return None
    import unicodedata  # only for a name that holds something unprintable

    categories = {unicodedata.category(char) for char in name}
    if categories & _CONTROL_CATEGORIES:
        return "control characters"
    if categories & _FORMAT_CATEGORIES:
        return "bidirectional or invisible format characters"
    return None


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """`1 file`, `2 files`, `0 files`; `plural_form` for irregular words (`process`)."""
    return f"{count} {noun(count, singular, plural_form)}"


def noun(count: int, singular: str, plural_form: str | None = None) -> str:
    """The word alone, for `count` of it: `setting` or `settings`, never both."""
    return singular if count == 1 else (plural_form or singular + "s")


def quoted(text: str) -> str:
    """`text` escaped and in quotes, so where a name begins and ends is plain to see."""
    return "'" + escape_text(text).replace("'", "\\'") + "'"
