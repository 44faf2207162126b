"""The ``.nfp`` names a P4 switch program cannot declare where the lowering puts them.

``lower.py`` uses a program's names as P4 identifiers: header fields and instances and
metadata fields as struct fields (the printer escapes those that are P4 keywords,
``printer.field_name``), tables, registers, counters and meters as locals of the ingress
control.  A local named like a P4 keyword (``key``, ``apply``, ``int``; P4_16 spec §6.4) is
refused rather than renamed, since its name is also its P4Runtime name; so is a local that
repeats one of the control's parameters (``hdr``, ``meta``, ``ig_tm_md``) or an
architecture name (``Register``, ``PortId_t``), which p4c rejects.  Names nfc joins or
prefixes cannot meet (compiler/passes/names.py).  Each refusal is :class:`NameClash` (E014)
at the name.
"""

from __future__ import annotations

from collections.abc import Iterator

from compiler import ir
from targets.names import NameClash
from targets.p4 import intrinsics as ix
from targets.p4 import syntax as p
from targets.p4.arch import Arch

__all__ = ["check_p4_names"]


def check_p4_names(prog: ir.Program, program: p.Program, arch: Arch, arch_name: str) -> None:
    """Raise NameClash for the first ``.nfp`` name ``program`` (the lowered P4) cannot carry."""
    params = {prm.name for prm in (*arch.parser_params(), *arch.ingress_params())}
    arch_names = {*ix.types(arch_name), *ix.typedefs(arch_name), *ix.externs(arch_name), *ix.functions(arch_name),
                  *ix.constants(arch_name)}
    top = {d.name for d in program.decls}
    declared = {x.name for d in program.decls if isinstance(d, p.Control) for x in d.locals}
    for kind, name, span in _control_locals(prog):
        if name not in declared:
            continue  # not on the switch
        if name in p.P4_KEYWORDS:
            raise NameClash(f"{kind} '{name}' is a P4 keyword: the switch program cannot name it; rename it", span)
        if name in params or name in arch_names or name in top:
            raise NameClash(f"{kind} '{name}' is also a name of the {arch_name} switch program's own "
                            f"(a parameter, type or extern of its ingress control); rename it", span)


def _control_locals(prog: ir.Program) -> Iterator[tuple[str, str, ir.Span]]:
    for t in prog.tables.values():
        yield "table", t.name, t.span
    for r in prog.registers.values():
        yield "register", r.name, r.span
    for c in prog.counters.values():
        yield c.kind, c.name, c.span
