"""Read a .nfp file and everything it imports, then check it.

``import "std/headers.nfp";`` names a file in the standard library (``stdlib/``); any
other path is relative to the importing file.  Each file is read once.
"""

from __future__ import annotations

from pathlib import Path

from lang import ast
from lang.check import check
from lang.diagnostics import Diagnostics, SourceMap, Span
from lang.parser import parse_text
from lang.symbols import CheckedProgram

__all__ = ["MAX_SOURCE_BYTES", "STDLIB", "load"]

STDLIB = Path(__file__).resolve().parent.parent / "stdlib"
MAX_SOURCE_BYTES = 4 * 1024 * 1024


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
    where = at or Span(shown, 1, 1, 1, 1)
    try:
        raw = path.read_bytes()
    except OSError as e:
        diags.error("E003" if at else "E002", f"cannot read '{shown}': {e.strerror or e}", where)
        return None
    if len(raw) > MAX_SOURCE_BYTES:
        diags.error("E002", f"'{shown}' is larger than {MAX_SOURCE_BYTES // 2**20} MiB", where)
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        diags.error("E002", "source must be UTF-8 text (found a binary byte)", Span(shown, line, col, line, col + 1))
        return None
    nul = text.find("\0")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        col = nul - (text.rfind("\n", 0, nul) + 1) + 1
        diags.error("E002", "source must be text, not binary (found a NUL byte)", Span(shown, line, col, line, col + 1))
        return None
    return text
