"""Pass ``check-names``: every name a program declares can be spelled in every generated
language without meeting a name nfc generates, or another of the program's.

Precondition: lowered IR.  The generators build identifiers from ``.nfp`` names: they are
used as they are (``hdr.<instance>.<field>``, ``meta.<field>``, tables, registers), joined
with a double underscore (``<parser>__<state>``, ``<table>__hit``, ``meta.<table>__<value>``)
or prefixed with ``nfc_`` for the code's own (``meta.nfc_egress``, ``NFC_DROP_<REASON>``).
So that no two names can ever meet, a program's names

* do not begin with ``nfc_`` (in any case) or with ``_`` (Python's private and special
  names: ``_``, ``__class__``);
* do not contain ``__`` (``a_b`` + ``c`` and ``a`` + ``b__c`` would both join to ``a_b__c``;
  ``a_b`` and ``a__b`` would both become the Python class ``AB``);
* name drop and punt reasons that differ in more than letter case (each becomes an
  upper-case constant, ``NFC_DROP_NO_ROUTE``).

Each is E014 at the name.  Words a generated language reserves (a table named ``key`` in
P4) are the generators' to escape or refuse (targets/names.py).

Before: ``metadata { nfc_egress: bit<9>; }`` built a P4 program declaring the field twice.
After:  ``t.nfp:3:12: error[E014]: 'nfc_egress' begins with 'nfc_', which is reserved for
the names nfc generates``.
"""

from __future__ import annotations

from collections.abc import Iterator

from compiler import ir
from compiler.analysis import walk_stmts
from lang.diagnostics import Diagnostics, Span

__all__ = ["check_names", "declared_names", "reason_uses"]


def declared_names(prog: ir.Program) -> Iterator[tuple[str, str, Span]]:
    """(kind, name, span) of every name the program declares that reaches generated code."""
    for h in prog.headers.values():
        yield "header", h.name, h.span
        for f in h.fields:
            yield f"field of header '{h.name}'", f.name, f.span
    for i in prog.instances:
        yield "header instance", i.name, i.span
    for f in prog.metadata:
        yield "metadata field", f.name, f.span
    for g in prog.parsers.values():
        yield "parser", g.name, g.span
        for s in g.states:
            yield f"state of parser '{g.name}'", s.name, s.span
    for t in prog.tables.values():
        yield "table", t.name, t.span
        for v in t.values:
            yield f"value of table '{t.name}'", v.name, v.span
    for r in prog.registers.values():
        yield "register", r.name, r.span
    for c in prog.counters.values():
        yield c.kind, c.name, c.span
    for st in prog.stages.values():
        yield "stage", st.name, st.span
    for p in prog.pipelines:
        yield "pipeline", p.name, p.span


def check_names(prog: ir.Program, diags: Diagnostics) -> None:
    for kind, name, span in declared_names(prog):
        problem = _reserved(name)
        if problem:
            diags.error("E014", f"{kind} '{name}' {problem}", span,
                        notes=("rename it: names beginning with 'nfc_' or '_', or containing '__', belong to the "
                               "code nfc generates",))
    _check_reasons(prog, diags)


def _reserved(name: str) -> str | None:
    if name.lower().startswith("nfc_"):
        return "begins with 'nfc_', which is reserved for the names nfc generates"
    if name.startswith("_"):
        return "begins with '_', which is reserved for the names nfc generates"
    if "__" in name:
        return "contains '__', which nfc uses to join names"
    return None


def reason_uses(prog: ir.Program) -> Iterator[tuple[str, Span]]:
    """(reason, span) of every drop and punt the program's parsers and stages write."""
    bodies: list[tuple[ir.Stmt, ...]] = []
    for g in prog.parsers.values():
        for st in g.states:
            bodies.append(st.stmts)  # its verify(...)s
            for t in (*(c.target for c in st.cases), st.default):
                if t.kind in ("drop", "punt"):
                    yield t.name, t.span
    for body in (*bodies, *(stage.body for stage in prog.stages.values())):
        for s in walk_stmts(body):
            if isinstance(s, ir.Drop | ir.Punt | ir.Verify):
                yield s.reason, s.span


def _check_reasons(prog: ir.Program, diags: Diagnostics) -> None:
    """Reasons equal but for letter case would be one constant (``NFC_DROP_X``) twice."""
    first: dict[str, str] = {}
    reported: set[str] = set()
    for reason, span in reason_uses(prog):
        seen = first.setdefault(reason.lower(), reason)
        if seen != reason and reason not in reported:
            reported.add(reason)
            diags.error("E014", f"reason '{reason}' differs from reason '{seen}' only in letter case", span,
                        notes=(f"both would be the generated constant NFC_DROP_{reason.upper()}: use one spelling",))
