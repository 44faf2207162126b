"""Partition equivalence: the spec pipeline and the placed program — switch stages, the
switch→server bridge, server stages, the server→switch bridge, switch stages again, and for
a switch-cached table the miss path through the server — give the same outcome for every
packet the parser accepts and every table content: the same drop reason, or the same egress
port, the same headers (validity and every field; the deparsed packet and its checksums
follow from them) and the same payload (ESP replaces it); and either way the same registers
and anti-replay windows left behind.

Both sides share the parse (it runs on the switch, before any cut) and the uninterpreted
tables; a cache holds an arbitrary subset of its table.  Not compared: a punted packet's
bytes (only that it is punted, and why).  Each pipeline is one query in a fresh Z3 context
with a timeout.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import z3

from compiler import ir
from compiler.interp.bits import pack
from compiler.placement import EGRESS, EGRESS_SET, Bridge, Direction, Placement, Segment, find_bridge
from compiler.verify.symbolic import PAYLOAD, Semantics, SymState, Unsupported

__all__ = ["Counterexample", "PipelineProof", "verify_partition"]


@dataclass(frozen=True)
class Counterexample:
    port: int
    packet: bytes
    tables: dict[str, list[tuple[tuple[int, ...], dict[str, int] | None]]]  # key -> values (None: absent)
    cached: dict[str, list[tuple[int, ...]]]  # keys a switch cache holds
    spec: str
    placed: str

    @property
    def scapy(self) -> str:
        return f"Ether(bytes.fromhex({self.packet.hex()!r}))"


@dataclass
class PipelineProof:
    pipeline: str
    proved: bool
    seconds: float
    what: str = ""  # why not proved (a difference, a timeout, an unsupported construct)
    counterexample: Counterexample | None = None


class _Placed:
    """Runs a pipeline the way the placed program does, on a symbolic state."""

    def __init__(self, sem: Semantics, p: ir.Pipeline, placement: Placement, bridges: tuple[Bridge, ...],
                 stages: dict[str, ir.Stage], switch: bool) -> None:
        self.sem, self.p, self.placement, self.stages, self.switch = sem, p, placement, stages, switch
        self.bridges = tuple(b for b in bridges if b.pipeline == p.name)
        self.cached = sorted({b.miss for b in self.bridges if b.miss is not None})

    def run(self, st: SymState) -> None:
        before, server, after = (self.placement.stages_in(self.p.stages, seg) for seg in Segment)
        self._switch(st, before)
        if server and self.switch:
            self.project(st, self._bridge(Direction.TO_SERVER))
        for s in server:  # without a switch the server parses and runs everything: no cut, no bridge
            self.sem.run(st, self.stages[s].body, z3.BoolVal(True, self.sem.ctx))
        if server and self.switch:
            self.project(st, self._bridge(Direction.TO_SWITCH))
        self._switch(st, after)

    def _bridge(self, direction: Direction, miss: str | None = None) -> Bridge:
        b = find_bridge(self.bridges, self.p.name, direction, miss)
        if b is None:
            raise Unsupported(f"no {direction.value} bridge for {miss or 'the main cut'} of {self.p.name}")
        return b

    def _switch(self, st: SymState, stages: tuple[str, ...]) -> None:
        sem = self.sem
        true = z3.BoolVal(True, sem.ctx)
        for name in stages:
            body = self.stages[name].body
            before = st.copy()
            missed: list[z3.BoolRef] = []
            sem.run(st, body, true, functools.partial(self._cache_lookup, missed))
            if missed:  # a miss sends the packet, as it was before this stage, to the server
                table = next(t for t in self.cached if _uses(body, t))
                srv = before.copy()
                self.project(srv, self._bridge(Direction.TO_SERVER, table))
                sem.run(srv, body, true)
                self.project(srv, self._bridge(Direction.TO_SWITCH, table))
                st.merge(z3.Or(*missed), srv)

    def _cache_lookup(self, missed: list[z3.BoolRef], s: SymState, lk: ir.Lookup, pc: z3.BoolRef) -> None:
        """A lookup on the switch: a switch-cached table hits only for keys the cache holds;
        the conditions under which it misses go to ``missed``."""
        sem = self.sem
        t = sem.prog.tables[lk.table]
        if t.name not in self.cached:
            sem.lookup(s, lk, pc)
            return
        key = sem.table_key(s, t)
        sem.lookups += [(t.name, key, "table"), (t.name, key, "cache")]
        in_cache = z3.And(sem.cached(t, key), sem.table_hit(t, key))
        missed.append(z3.And(pc, z3.Not(s.done), z3.Not(in_cache)))
        sem.bind(s, lk, pc, in_cache, {v.name: sem.table_value(t, v.name, key) for v in t.values})

    def project(self, st: SymState, b: Bridge) -> None:
        """What crosses a cut: the headers the validity bits name (their fields travel in the
        packet, as does the payload), the bridged metadata / std fields / egress port at their bridged widths;
        everything else arrives as 0."""
        c = self.sem.ctx
        go = z3.Not(st.done)
        carried = {f.name: f.width for f in b.fields}

        def cross(name: str, v: z3.BitVecRef) -> z3.BitVecRef:
            w = carried.get(name)
            if w is None:
                return z3.BitVecVal(0, v.size(), c)
            return v if w >= v.size() else z3.ZeroExt(v.size() - w, z3.Extract(w - 1, 0, v))

        for inst in st.valid:
            if inst not in b.valid_bits:
                st.valid[inst] = z3.If(go, z3.BoolVal(False, c), st.valid[inst])
        for m, v in st.meta.items():
            st.meta[m] = z3.If(go, cross(f"meta.{m}", v), v)
        for n, v in st.std.items():
            if n != PAYLOAD:  # the payload travels in the packet
                st.std[n] = z3.If(go, cross(f"std.{n}", v), v)
        if EGRESS in carried:
            st.egress = z3.If(go, cross(EGRESS, st.egress), st.egress)
        if EGRESS not in carried or EGRESS_SET not in carried:  # whether a port was chosen does not cross
            st.egress_set = z3.And(st.egress_set, st.done)
        st.locals = {}
        st.results = {}


def _uses(stmts: tuple[ir.Stmt, ...], table: str) -> bool:
    for s in stmts:
        if isinstance(s, ir.Lookup) and (s.table == table or _uses(s.hit, table) or _uses(s.miss, table)):
            return True
        if isinstance(s, ir.If) and (_uses(s.then, table) or _uses(s.orelse, table)):
            return True
    return False


def _finish(sem: Semantics, st: SymState) -> None:
    """A pipeline that ends without an egress port drops (no_egress)."""
    st.reason = z3.If(st.done, st.reason, sem.reason_code("no_egress"))
    st.done = z3.Or(st.done, z3.Not(st.egress_set))


def _differ(a: SymState, b: SymState) -> z3.BoolRef:
    headers = [z3.Or(a.valid[i] != b.valid[i],
                     z3.And(a.valid[i], z3.Or(*[a.fields[k] != b.fields[k] for k in a.fields if k[0] == i] or
                                              [z3.BoolVal(False, a.done.ctx)])))
               for i in a.valid]
    payload = [a.std[PAYLOAD] != b.std[PAYLOAD]] + ([a.payload != b.payload] if a.payload is not None and
                                                     b.payload is not None else [])
    return z3.Or(a.done != b.done, z3.And(a.done, a.reason != b.reason),
                 z3.And(z3.Not(a.done), z3.Or(a.egress != b.egress, *headers, *payload)))


def _state_differs(sem: Semantics, a: SymState, b: SymState) -> z3.BoolRef:
    """The registers and anti-replay windows the packet leaves differ at some index (whether it
    is forwarded or dropped: a dropped packet may have moved a window first)."""
    out = []
    for name in sorted(set(a.writes) | set(b.writes)):
        _cond, idx, value = (a.writes.get(name) or b.writes[name])[0]
        probe = z3.FreshConst(idx.sort(), f"probe_{name}")
        out.append(sem.state_read(a, name, probe, value.size()) != sem.state_read(b, name, probe, value.size()))
    return z3.Or(*out) if out else z3.BoolVal(False, sem.ctx)


def verify_partition(prog: ir.Program, placement: Placement, bridges: tuple[Bridge, ...],
                     timeout_ms: int = 60_000, placed: ir.Program | None = None,
                     switch: bool = True) -> list[PipelineProof]:
    """``placed``: the program the placed side runs, when it is not ``prog`` itself (the
    mutation tests break it on purpose).  ``switch``: the build has a switch (without one,
    every stage runs on the server, uncut)."""
    out = []
    for p in prog.pipelines:
        t0 = time.perf_counter()
        pp = next(q for q in (placed or prog).pipelines if q.name == p.name)
        try:
            out.append(_verify_pipeline(prog, p, pp, (placed or prog).stages, placement, bridges, switch, timeout_ms,
                                        t0))
        except (Unsupported, KeyError) as e:
            out.append(PipelineProof(p.name, False, time.perf_counter() - t0, f"not encoded: {e}"))
    return out


def _verify_pipeline(prog: ir.Program, p: ir.Pipeline, pp: ir.Pipeline, stages: dict[str, ir.Stage],
                     placement: Placement, bridges: tuple[Bridge, ...], switch: bool, timeout_ms: int,
                     t0: float) -> PipelineProof:
    ctx = z3.Context()
    sem = Semantics(prog, ctx)
    s0 = sem.initial()
    port = s0.std["ingress_port"]
    sem.parse(s0, prog.parsers[p.parser])
    spec, placed = s0.copy(), s0.copy()
    for s in p.stages:
        sem.run(spec, prog.stages[s].body, z3.BoolVal(True, ctx))
    _Placed(sem, pp, placement, bridges, stages, switch).run(placed)
    _finish(sem, spec)
    _finish(sem, placed)
    solver = z3.Solver(ctx=ctx)
    solver.set("timeout", timeout_ms)
    solver.add(z3.Or(*[z3.And(z3.UGE(port, lo), z3.ULE(port, hi)) for lo, hi in p.ports]))
    solver.add(z3.Or(_differ(spec, placed), _state_differs(sem, spec, placed)))
    r = solver.check()
    seconds = time.perf_counter() - t0
    if r == z3.unsat:
        return PipelineProof(p.name, True, seconds)
    if r != z3.sat:
        return PipelineProof(p.name, False, seconds, f"z3: {solver.reason_unknown()}")
    m = solver.model()
    solver.add(z3.ULE(s0.std[PAYLOAD], 64))  # a counterexample with a short payload, if there is one
    if solver.check() == z3.sat:
        m = solver.model()
    cex = _counterexample(prog, sem, m, s0, spec, placed)
    return PipelineProof(p.name, False, seconds, f"differs: spec {cex.spec}; placed {cex.placed}", cex)


def _counterexample(prog: ir.Program, sem: Semantics, m: z3.ModelRef, s0: SymState, spec: SymState,
                    placed: SymState) -> Counterexample:
    def num(e: z3.ExprRef) -> int:
        v = m.eval(e, model_completion=True)
        return 1 if z3.is_true(v) else 0 if z3.is_false(v) else int(v.as_long())

    data = b""
    for inst in prog.instances:  # the parsed headers, in packet order, as the model has them
        if num(s0.valid[inst.name]):
            h = prog.headers[inst.header]
            data += pack(h, {f.name: num(s0.fields[(inst.name, f.name)]) for f in h.fields})
    n = num(s0.std[PAYLOAD])  # as long as the model has it: std.packet_length may read it
    data += (b"payload!" * (n // 8 + 1))[:n]
    tables: dict[str, list[tuple[tuple[int, ...], dict[str, int] | None]]] = {}
    cached: dict[str, list[tuple[int, ...]]] = {}
    for name, key, kind in sem.lookups:
        t = prog.tables[name]
        k = _split(num(key), [kk.expr.width for kk in t.keys])
        if kind == "cache":
            if num(sem.cached(t, key)) and k not in cached.setdefault(name, []):
                cached[name].append(k)
            continue
        row = (k, {v.name: num(sem.table_value(t, v.name, key)) for v in t.values}
               if num(sem.table_hit(t, key)) else None)
        if row not in tables.setdefault(name, []):
            tables[name].append(row)
    codes = {v: k for k, v in sem.reasons.items()}

    def show(st: SymState) -> str:
        if num(st.done):
            return f"drop {codes.get(num(st.reason), '?')}"
        hs = [i.name for i in prog.instances if num(st.valid[i.name])]
        return f"forward to port {num(st.egress)} with {', '.join(hs)}"

    return Counterexample(num(s0.std["ingress_port"]), data, tables, cached, show(spec), show(placed))


def _split(value: int, widths: list[int]) -> tuple[int, ...]:
    out = []
    for w in reversed(widths):
        out.append(value & ((1 << w) - 1))
        value >>= w
    return tuple(reversed(out))

