"""Round trips: parse → print → parse gives the same tree (spans aside), for every example,
the standard library, and random mutations never crash the front end."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.lower import lower
from compiler.passes.validity import check_validity
from lang import Diagnostics, SourceMap
from lang.diagnostics import CODES, Span
from lang.loader import STDLIB, load
from lang.parser import parse_text
from lang.printer import print_module
from tests.support import ROOT

SOURCES = sorted((ROOT / "examples").glob("*.nfp")) + sorted(STDLIB.glob("*.nfp"))


def strip(x: object) -> object:
    """The tree without spans, as nested tuples."""
    if isinstance(x, Span):
        return None
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__, *(strip(getattr(x, f.name)) for f in dataclasses.fields(x)
                                    if not isinstance(getattr(x, f.name), Span) and f.name not in ("file",)))
    if isinstance(x, tuple | list):
        return tuple(strip(i) for i in x)
    return x


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_parse_print_parse(path: Path) -> None:
    d = Diagnostics()
    first = parse_text(path.read_text(), str(path), d)
    assert not d.has_errors
    text = print_module(first)
    second = parse_text(text, "printed.nfp", d)
    assert not d.has_errors, [x.message for x in d.items]
    assert strip(second.decls) == strip(first.decls)
    assert print_module(second) == text  # the printer is idempotent


EXAMPLE = (ROOT / "examples" / "vpn_gateway.nfp").read_text()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, len(EXAMPLE) - 1), st.integers(1, 40), st.text(max_size=8))
def test_mutated_source_never_crashes(tmp_path: Path, at: int, cut: int, insert: str) -> None:
    """Deleting and inserting text anywhere gives diagnostics, never an exception."""
    mutated = EXAMPLE[:at] + insert + EXAMPLE[at + cut :]
    path = tmp_path / "m.nfp"
    path.write_text(mutated)
    diags = Diagnostics()
    checked = load(str(path), diags, SourceMap())  # must not raise
    if not diags.has_errors:
        check_validity(lower(checked), diags)
    for d in diags.items:
        assert d.span.line >= 0 and d.code in CODES
