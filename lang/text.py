"""Source text as every part of the front end sees it: one notion of a line.

A UTF-8 byte-order mark at the start is skipped; CR LF, a lone CR and LF all end a line
and become LF before lexing.  Nothing else ends a line: U+2028, U+2029, NEL, form feed and
vertical tab are ordinary characters (form feed is whitespace to the lexer, the others are
only allowed in comments and strings).  The lexer, the diagnostics' line and column and the
quoted source line therefore always count lines the same way.
"""

from __future__ import annotations

__all__ = ["BOM", "line_col", "normalize", "printable"]

BOM = "\ufeff"


def normalize(text: str) -> str:
    """``text`` without a leading byte-order mark, with every line ending a single LF."""
    if text.startswith(BOM):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of ``offset`` in normalized ``text`` (columns count characters)."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def printable(line: str) -> str:
    """A source line safe to print under a diagnostic, one character per column: a tab
    becomes a space and any other control or line/paragraph separator character a U+FFFD,
    so a quoted line cannot move the cursor, clear the terminal or break the caret's
    alignment."""
    return "".join(" " if ch == "\t" else "\ufffd" if _unprintable(ch) else ch for ch in line)


def _unprintable(ch: str) -> bool:
    code = ord(ch)
    return code < 0x20 or 0x7F <= code < 0xA0 or ch in "\u2028\u2029" or 0x202A <= code <= 0x202E \
        or 0x2066 <= code <= 0x2069
