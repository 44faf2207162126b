"""Source spans and diagnostics: the one way nfc reports a user's mistake.

A diagnostic renders as ``file:line:col: error[E0xx]: message``, the source line and a
caret under the offending text (p4c / rustc style).  Codes are stable and listed in
``CODES``; docs/errors.md explains each one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from lang.text import normalize, printable

__all__ = [
    "CODES",
    "CompileError",
    "Diagnostic",
    "Diagnostics",
    "InternalError",
    "Severity",
    "SourceMap",
    "Span",
]


@dataclass(frozen=True, slots=True)
class Span:
    """A region of a source file; lines and columns start at 1, ``end_col`` is exclusive."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def merge(self, other: Span) -> Span:
        """The smallest span covering both (used by nodes a pass synthesises)."""
        if other.file != self.file:
            return self
        start = min((self.line, self.col), (other.line, other.col))
        end = max((self.end_line, self.end_col), (other.end_line, other.end_col))
        return Span(self.file, start[0], start[1], end[0], end[1])


BUILTIN = Span("<builtin>", 0, 0, 0, 0)
Related = tuple[tuple[Span, str], ...]  # a diagnostic's related spans, each with its note


class Severity(Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


CODES: dict[str, str] = {
    "E001": "syntax error",
    "E002": "unreadable or invalid source text",
    "E003": "import not found or cyclic",
    "E004": "malformed number",
    "E005": "nested too deeply",
    "E010": "duplicate definition",
    "E011": "unknown name",
    "E012": "unknown field",
    "E013": "wrong kind of name",
    "E014": "reserved name",
    "E020": "type or width mismatch",
    "E021": "literal does not fit its width",
    "E022": "invalid width",
    "E023": "wrong number of arguments",
    "E024": "not assignable",
    "E030": "invalid table or state declaration",
    "E031": "invalid table key",
    "E032": "unknown or invalid property",
    "E040": "invalid parse graph",
    "E041": "header can never be valid here",
    "E050": "invalid pipeline",
    "E060": "invalid target or deployment",
    "E061": "a monotonic register a move between servers cannot carry",
    "E070": "unsupported on every target",
    "E071": "unsupported on the chosen target",
    "E080": "does not fit",
    "E081": "does not fit the servers",
    "E083": "port number does not fit the switch or the deployment",
    "E084": "forward to a port no pipeline takes",
    "E090": "numeric value out of range",
    "E100": "not supported by the code generator yet",
    "W001": "declared but never used",
    "W002": "unreachable parser state",
    "W083": "server port assumed (no deployment)",
    "W081": "servers over-committed (--allow-overcommit)",
    "W084": "declared servers carry no traffic (no 'shard by')",
    "W085": "a shard key the switch does not set before a cut",
    "W086": "several servers and no shard by: the compiler chose the keys",
    "W087": "a state table bigger than a server's state tables hold",
    "W088": "the switch program's control code takes it past the switch's stages",
    "W080": "placement not proved optimal (time limit or scalable search)",
}


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: str
    message: str
    span: Span
    severity: Severity = Severity.ERROR
    notes: tuple[str, ...] = ()
    related: tuple[tuple[Span, str], ...] = ()


class SourceMap:
    """The text of every file read, so diagnostics can quote the offending line."""

    def __init__(self) -> None:
        self._texts: dict[str, list[str]] = {}

    def add(self, name: str, text: str) -> None:
        """Keep ``text`` (lines as ``lang.text`` counts them: only LF, CR LF and CR end a line)."""
        self._texts[name] = normalize(text).split("\n")

    def line(self, name: str, line: int) -> str | None:
        lines = self._texts.get(name)
        if lines is None or not 1 <= line <= len(lines):
            return None
        return lines[line - 1]

    def render(self, d: Diagnostic) -> str:
        out = [f"{d.span}: {d.severity.value}[{d.code}]: {d.message}"]
        out += self._quote(d.span)
        for span, msg in d.related:
            out.append(f"{span}: note: {msg}")
            out += self._quote(span)
        out += [f"  = note: {n}" for n in d.notes]
        return "\n".join(out)

    def _quote(self, span: Span) -> list[str]:
        text = self.line(span.file, span.line)
        if text is None:
            return []
        width = span.end_col - span.col if span.end_line == span.line else len(text) - span.col + 1
        shown, start = _window(printable(text), span.col - 1)
        caret = " " * start + "^" + "~" * max(0, min(width, len(shown) - start) - 1)
        gutter = f"{span.line:>4} | "
        return [gutter + shown, " " * (len(gutter) - 2) + "| " + caret]


QUOTE_WIDTH = 120  # a quoted line longer than this is cut around the caret


def _window(text: str, at: int) -> tuple[str, int]:
    """``text`` cut to about ``QUOTE_WIDTH`` characters around index ``at`` (cuts marked with
    '…'), and the index of ``at`` in the result."""
    if len(text) <= QUOTE_WIDTH:
        return text, at
    begin = max(0, min(at - QUOTE_WIDTH // 3, len(text) - QUOTE_WIDTH))
    end = begin + QUOTE_WIDTH
    head = "…" if begin > 0 else ""
    return head + text[begin:end] + ("…" if end < len(text) else ""), at - begin + len(head)


@dataclass
class Diagnostics:
    """Collects diagnostics so several independent errors are reported in one run."""

    items: list[Diagnostic] = field(default_factory=list)

    def error(self, code: str, message: str, span: Span, notes: tuple[str, ...] = (), related: Related = ()) -> None:
        self._add(Diagnostic(code, message, span, Severity.ERROR, notes, related))

    def warning(self, code: str, message: str, span: Span, notes: tuple[str, ...] = (), related: Related = ()) -> None:
        self._add(Diagnostic(code, message, span, Severity.WARNING, notes, related))

    def _add(self, d: Diagnostic) -> None:
        assert d.code in CODES, d.code
        self.items.append(d)

    @property
    def has_errors(self) -> bool:
        return any(d.severity is Severity.ERROR for d in self.items)

    def errors(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity is Severity.ERROR]

    def raise_if_errors(self) -> None:
        if self.has_errors:
            raise CompileError(sorted(self.items, key=_order))


def _order(d: Diagnostic) -> tuple[str, int, int]:
    return (d.span.file, d.span.line, d.span.col)


class CompileError(Exception):
    """The user's program is wrong; carries every diagnostic found."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("; ".join(f"{d.span}: {d.message}" for d in diagnostics))
        self.diagnostics = diagnostics


class InternalError(Exception):
    """A bug in nfc itself, never the user's fault."""

    def __init__(self, message: str, span: Span | None = None) -> None:
        where = f" at {span}" if span else ""
        super().__init__(f"internal error{where}: {message} (this is a bug in nfc, please report it)")
