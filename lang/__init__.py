"""The nfc front end: grammar, parser, diagnostics, name resolution and type checking."""

from lang.diagnostics import CompileError, Diagnostic, Diagnostics, InternalError, SourceMap, Span
from lang.loader import STDLIB, load
from lang.symbols import CheckedProgram, Symbols

__all__ = [
    "STDLIB",
    "CheckedProgram",
    "CompileError",
    "Diagnostic",
    "Diagnostics",
    "InternalError",
    "SourceMap",
    "Span",
    "Symbols",
    "load",
]
