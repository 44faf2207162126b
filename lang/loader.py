"""Read a .nfp file and everything it imports, then check it.

``import "std/headers.nfp";`` names a file in the standard library (``stdlib/``); any
other path is relative to the importing file.  Each file is read once.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lang import ast
from lang.check import check
from lang.diagnostics import Diagnostics, SourceMap, Span
from lang.limits import MAX_SOURCE_BYTES
from lang.parser import parse_text
from lang.symbols import CheckedProgram
from lang.text import line_col, normalize

__all__ = ["MAX_SOURCE_BYTES", "STDLIB", "load"]

STDLIB = Path(__file__).resolve().parent.parent / "stdlib"


def load(path: str, diags: Diagnostics, sources: SourceMap) -> CheckedProgram:
    """Parse ``path`` and its imports, then resolve names and check types."""
    modules: list[ast.Module] = []
    _read(path, Path(path), diags, sources, modules, set(), None, [])
    return check(modules, path, diags)


def _read(
    shown: str,
    path: Path,
    diags: Diagnostics,
    sources: SourceMap,
    modules: list[ast.Module],
    seen: set[Path],
    at: Span | None,
    reading: list[tuple[Path, str]],
) -> None:
    """``reading``: the files whose imports are being read, outermost first (an import of one
    of them is a cycle, E003)."""
    key = path.resolve()
    open_keys = [p for p, _ in reading]
    if key in open_keys and at is not None:
        cycle = [name for _, name in reading[open_keys.index(key):]]
        diags.error("E003", f"import cycle: {' imports '.join([*cycle, shown])}", at,
                    notes=("move what both files need into a third file that both import",))
        return
    if key in seen:
        return
    seen.add(key)
    text = _text(shown, path, diags, at)
    if text is None:
        return
    sources.add(shown, text)
    module = parse_text(text, shown, diags)
    for decl in module.decls:
        if isinstance(decl, ast.Import):
            target, target_shown = _resolve(decl.path, path, shown)
            _read(target_shown, target, diags, sources, modules, seen, decl.span, [*reading, (key, shown)])
    modules.append(module)


def _resolve(name: str, importer: Path, importer_shown: str) -> tuple[Path, str]:
    if name.startswith("std/"):
        return STDLIB / name[4:], f"<stdlib>/{name[4:]}"
    target = importer.parent / name
    return target, str(Path(importer_shown).parent / name)


def _text(shown: str, path: Path, diags: Diagnostics, at: Span | None) -> str | None:
    """The normalized text of ``path`` (lang.text), or None after a diagnostic: E003 for an
    import (E002 for the main file) that is missing or not a regular file, E002 for a file
    too large, not UTF-8 or holding a NUL byte."""
    where = at or Span(shown, 1, 1, 1, 1)
    try:
        raw = _read_bounded(path)
    except OSError as e:
        diags.error("E003" if at else "E002", f"cannot read '{shown}': {e.strerror or e}", where)
        return None
    if raw is None:
        diags.error("E003" if at else "E002", f"cannot read '{shown}': not a regular file", where)
        return None
    if len(raw) > MAX_SOURCE_BYTES:
        diags.error("E002", f"'{shown}' is larger than {MAX_SOURCE_BYTES // 2**20} MiB", where)
        return None
    try:
        text = normalize(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        _bad_char(shown, normalize(raw[: e.start].decode("utf-8")), "source must be UTF-8 text (found a binary byte)",
                  diags)
        return None
    nul = text.find("\0")
    if nul >= 0:
        _bad_char(shown, text[:nul], "source must be text, not binary (found a NUL byte)", diags)
        return None
    return text


def _read_bounded(path: Path) -> bytes | None:
    """At most ``MAX_SOURCE_BYTES + 1`` bytes of ``path``; None if it is not a regular file.
    Opened non-blocking and checked on the open descriptor, so a FIFO or a device
    (``/dev/zero``) is refused without waiting for a writer or reading without end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(MAX_SOURCE_BYTES + 1)


def _bad_char(shown: str, before: str, message: str, diags: Diagnostics) -> None:
    """E002 at the character after ``before`` (the normalized text preceding it)."""
    line, col = line_col(before, len(before))
    diags.error("E002", message, Span(shown, line, col, line, col + 1))
