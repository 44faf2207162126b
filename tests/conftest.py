"""Shared fixtures: run the front end on source text and collect its diagnostics."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lang import Diagnostics, SourceMap, load  # noqa: E402
from lang.symbols import CheckedProgram  # noqa: E402


class Front:
    """Compile source text from a temporary file; keep diagnostics and their rendering."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp

    def load(self, text: str, name: str = "t.nfp") -> tuple[CheckedProgram, Diagnostics, SourceMap]:
        path = self.tmp / name
        path.write_text(text)
        diags, sources = Diagnostics(), SourceMap()
        prog = load(str(path), diags, sources)
        return prog, diags, sources


@pytest.fixture
def front(tmp_path: Path) -> Front:
    return Front(tmp_path)


def compile_ir(path: str):
    """Front end + lowering of a file, failing the test on any diagnostic."""
    from compiler.lower import lower

    diags, sources = Diagnostics(), SourceMap()
    checked = load(path, diags, sources)
    assert not diags.has_errors, "\n".join(sources.render(d) for d in diags.items)
    return lower(checked)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true", help="rewrite golden files instead of comparing")


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))
