"""What ``forward(p)`` means when ``p`` is no port of the program: the packet is dropped
(reason ``no_such_port``), on every target alike.

A port number computed at run time (a table value, a metadata field) can name a port no
pipeline takes: a switch port wired to a server, or a number wider than the switch's port
(a ``bit<16>`` value 600 on Tofino's 9-bit ``PortId_t`` would leave on port 88).  Neither is
a port of the network function, so the language defines such a forward as a drop, and the
lowering makes that explicit in the IR, where the reference interpreter, the verifier and
every generator read it: a ``forward`` whose port is not a constant becomes

    if (p >= lo1 && p <= hi1 || ...) { forward(p); } else { drop(no_such_port); }

over the merged ``ports`` ranges of all pipelines, comparing at ``p``'s own width (before any
truncation to a target's port).  Bounds a width already implies are left out; a forward of
the packet's own ingress port needs no guard.  A constant port is checked at compile time
instead (E084, pass ``check-ports``).

Before: ``forward(r.port);`` (``port: bit<16>``, ``ports = [0..31]``)
After:  ``if (r.port <= 31) { forward(r.port); } else { drop(no_such_port); }``
"""

from __future__ import annotations

from dataclasses import replace

from compiler import ir

__all__ = ["NO_SUCH_PORT", "declared_ports", "guard_forwards"]

NO_SUCH_PORT = "no_such_port"


def declared_ports(prog: ir.Program) -> tuple[tuple[int, int], ...]:
    """Every pipeline's ports, as sorted disjoint ranges (adjacent ranges merged)."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(r for p in prog.pipelines for r in p.ports):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def guard_forwards(prog: ir.Program) -> ir.Program:
    """``prog`` with every run-time ``forward`` guarded by the declared ports."""
    g = _Guard(declared_ports(prog))
    stages = {n: replace(st, body=g.block(st.body)) for n, st in prog.stages.items()}
    if not g.used:
        return prog
    return replace(prog, stages=stages, reasons=tuple(sorted({*prog.reasons, NO_SUCH_PORT})))


class _Guard:
    def __init__(self, ports: tuple[tuple[int, int], ...]) -> None:
        self.ports = ports
        self.used = False

    def block(self, stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(self.stmt(s) for s in stmts)

    def stmt(self, s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.If):
            return replace(s, then=self.block(s.then), orelse=self.block(s.orelse))
        if isinstance(s, ir.Lookup):
            return replace(s, hit=self.block(s.hit), miss=self.block(s.miss))
        if not isinstance(s, ir.Forward) or isinstance(s.port, ir.Const) or _is_ingress_port(s.port):
            return s
        cond = self.within(s.port, s.span)
        if cond is True:
            return s
        self.used = True
        drop = ir.Drop(NO_SUCH_PORT, s.span)
        if cond is False:
            return drop
        return ir.If(cond, (s,), (drop,), s.span)

    def within(self, e: ir.Expr, span: ir.Span) -> ir.Expr | bool:
        """``e`` is one of the ports, as a condition at ``e``'s width (True/False when the
        width decides it)."""
        top = (1 << e.width) - 1
        terms: list[ir.Expr] = []
        for lo, hi in self.ports:
            if lo > top:
                break
            if lo == 0 and hi >= top:
                return True
            ge = ir.Binary(">=", e, ir.Const(lo, e.width, span), ir.BOOL, span) if lo > 0 else None
            le = ir.Binary("<=", e, ir.Const(hi, e.width, span), ir.BOOL, span) if hi < top else None
            both = [t for t in (ge, le) if t is not None]
            terms.append(both[0] if len(both) == 1 else ir.Binary("&&", both[0], both[1], ir.BOOL, span))
        if not terms:
            return False
        cond = terms[0]
        for t in terms[1:]:
            cond = ir.Binary("||", cond, t, ir.BOOL, span)
        return cond


def _is_ingress_port(e: ir.Expr) -> bool:
    return isinstance(e, ir.StdField) and e.name == "ingress_port"
