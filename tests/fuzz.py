"""Random packets and table contents for any program, derived from its IR.

Packets walk the pipeline's parse graph at random (a select picks a case, or the default
with a random value), fill header fields from a small pool per width mixed with the
program's own constants (so table keys collide with packet fields and comparisons go both
ways), usually carry a correct IPv4-style checksum, and are sometimes truncated or
followed by random payload.  Table entries draw keys and values from the same pools, so
lookups hit often.  These are inputs only: what the outputs must be comes from comparing
independent implementations, never from this module.
"""

from __future__ import annotations

import random
from collections import defaultdict

from compiler import ir
from compiler.analysis import stmt_exprs, walk_expr, walk_stmts
from compiler.forward_ports import declared_ports
from compiler.interp import Entry, Match
from compiler.interp.bits import internet_checksum, pack
from compiler.shard import monotonic_reads

__all__ = ["Fuzzer"]


def _equalities(cond: ir.Expr) -> list[tuple[str, str, int]]:
    """The ``h.f == K`` terms of a conjunction, and for ``h.f >= K`` / ``h.f > K`` (a TTL
    check) the least value that meets them."""
    if isinstance(cond, ir.Binary) and cond.op == "&&":
        return _equalities(cond.left) + _equalities(cond.right)
    if isinstance(cond, ir.Binary) and cond.op in ("==", ">=", ">") and isinstance(cond.left, ir.HeaderField) \
            and isinstance(cond.right, ir.Const) and cond.right.value + (cond.op == ">") < 1 << cond.left.width:
        return [(cond.left.inst, cond.left.field, cond.right.value + (cond.op == ">"))]
    return []


class Fuzzer:
    def __init__(self, prog: ir.Program, seed: int) -> None:
        self.prog = prog
        self.rnd = random.Random(seed)
        self.consts: dict[int, set[int]] = defaultdict(set)
        for st in prog.stages.values():
            for s in walk_stmts(st.body):
                for e in stmt_exprs(s):
                    for x in walk_expr(e):
                        if isinstance(x, ir.Const) and x.width > 0:
                            self.consts[x.width].add(x.value)
        self.pools: dict[int, list[int]] = {}
        # a table value that names a cell of a monotonic register -> the register's size: the
        # runtime refuses an entry naming no cell (an SA slot out of range)
        self.cells = {(r.index.table, r.index.field): prog.registers[r.reg].size
                      for r in monotonic_reads(prog, prog.stages.values()) if isinstance(r.index, ir.Result)}
        self.declared = declared_ports(prog) or ((0, 0),)

    def value(self, width: int) -> int:
        if width not in self.pools:
            top = (1 << width) - 1
            self.pools[width] = sorted({0, 1, top, *(self.rnd.randint(0, top) for _ in range(3))})
        known = sorted(self.consts.get(width, ()))
        if known and self.rnd.random() < 0.4:
            return self.rnd.choice(known)
        return self.rnd.choice(self.pools[width])

    # ---- packets ---------------------------------------------------------------------------

    def packet(self, pl: ir.Pipeline) -> bytes:
        g = self.prog.parsers[pl.parser]
        headers: list[tuple[str, dict[str, int]]] = []
        values: dict[str, dict[str, int]] = {}
        state = g.states[0]
        for _ in range(32):
            for s in state.stmts:
                if isinstance(s, ir.Extract):
                    h = self.prog.header_of(s.inst)
                    values[s.inst] = {f.name: self.value(f.width) for f in h.fields}
                    headers.append((s.inst, values[s.inst]))
                elif isinstance(s, ir.Verify) and self.rnd.random() < 0.85:
                    for inst, name, v in _equalities(s.cond):  # mostly pass ``verify(h.f == K && ...)``
                        if inst in values:
                            values[inst][name] = v
            target = self._select(state, values)
            if target.kind != "state":
                break
            state = g.state(target.name)
        data = b"".join(self._bytes(inst, v) for inst, v in headers)
        data += self.rnd.randbytes(self.rnd.choice([0, 0, 1, 8, 30]))
        if self.rnd.random() < 0.08:
            data = data[:self.rnd.randint(0, len(data))]
        return data

    def _select(self, state: ir.ParserState, values: dict[str, dict[str, int]]) -> ir.PTarget:
        if not state.select or not state.cases or self.rnd.random() < 0.1:
            return state.default
        case = self.rnd.choice(state.cases)
        for e, (v, m) in zip(state.select, case.values, strict=True):
            if isinstance(e, ir.HeaderField) and e.inst in values:
                old = values[e.inst][e.field]
                values[e.inst][e.field] = (v & m) | (old & ~m & ((1 << e.width) - 1))
        return case.target

    def _bytes(self, inst: str, v: dict[str, int]) -> bytes:
        h = self.prog.header_of(inst)
        if h.checksum is not None and self.rnd.random() < 0.9:
            raw = pack(h, {**v, h.checksum: 0})
            v[h.checksum] = internet_checksum(raw)
        return pack(h, v)

    def port(self, pl: ir.Pipeline) -> int:
        lo, hi = self.rnd.choice(pl.ports)
        return self.rnd.randint(lo, hi)

    def _port(self, width: int) -> int:
        """Mostly one of the program's ports; else any number of the value's width (a server
        port, one past the last, one a 9-bit switch port would truncate), which forward()
        drops as ``no_such_port`` on every target."""
        if self.rnd.random() < 0.8:
            lo, hi = self.rnd.choice(self.declared)
            return self.rnd.randint(lo, hi)
        return self.value(width)

    # ---- table contents --------------------------------------------------------------------

    def entries(self, table: ir.Table, n: int) -> list[Entry]:
        out: dict[tuple[object, ...], Entry] = {}
        for _ in range(n):
            key = []
            for k in table.keys:
                w = k.expr.width
                if k.match == "lpm":
                    plen = self.rnd.choice([0, w // 4, w // 2, w - 8 if w > 8 else w, w])
                    m = ((1 << w) - 1) ^ ((1 << (w - plen)) - 1)
                    key.append(Match(self.value(w) & m, plen))
                elif k.match == "ternary":
                    m = self.rnd.choice([(1 << w) - 1, 0, self.value(w)])
                    key.append(Match(self.value(w) & m, m))
                elif k.match == "range":
                    a, b = sorted((self.value(w), self.value(w)))
                    key.append(Match(a, b))
                else:
                    key.append(Match(self.value(w)))
            self._add(out, table, key)
        return list(out.values())

    def entries_at(self, table: ir.Table, lookups: list[tuple[int, ...]]) -> list[Entry]:
        """Entries that some of ``lookups`` (key values a table was looked up with) hit: the
        way to reach what lies behind a wide exact key whose values random packets rarely
        repeat.  LPM entries cover the value with a random prefix."""
        out: dict[tuple[object, ...], Entry] = {}
        for values in lookups:
            key = []
            for k, v in zip(table.keys, values, strict=True):
                w = k.expr.width
                if k.match == "lpm":
                    plen = self.rnd.randint(w // 2, w)
                    key.append(Match(v & (((1 << w) - 1) ^ ((1 << (w - plen)) - 1)), plen))
                elif k.match == "ternary":
                    key.append(Match(v, (1 << w) - 1))
                elif k.match == "range":
                    key.append(Match(v, v))
                else:
                    key.append(Match(v))
            self._add(out, table, key)
        return list(out.values())

    def _add(self, out: dict[tuple[object, ...], Entry], table: ir.Table, key: list[Match]) -> None:
        # distinct priorities: overlapping entries of equal priority have no defined winner on a switch
        prio = self.rnd.randint(1, 5) * 10_000 + len(out) if table.match in ("ternary", "range") else 0
        ident = (tuple((m.value, m.arg) for m in key), prio)
        values = {v.name: self._port(v.width) if "port" in v.name else self.value(v.width) for v in table.values}
        for v in table.values:
            if (table.name, v.name) in self.cells:
                values[v.name] %= self.cells[(table.name, v.name)]
        out.setdefault(ident, Entry(tuple(key), values, prio))
