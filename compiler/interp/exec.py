"""The reference semantics of .nfp: executes the typed IR on concrete packets.

``Interpreter.process(bytes, ingress_port)`` selects the pipeline, runs its parser,
runs its stages and deparses, returning an ``Outcome``: forwarded bytes and egress
port, or a drop with its reason, or a punt to the control plane.  Every other check
(the DPDK program, the switch model, the Z3 encoding) is compared against this.

Semantics fixed here (docs/language.md repeats them):
* reading a field of an invalid header gives 0; writing one does nothing;
* arithmetic wraps modulo 2**width; shifts by >= width give 0;
* ``push`` makes a header valid with every field 0 except those initialised;
* ``forward`` chooses the egress port, later statements still run; ``drop`` and
  ``punt`` end processing; a pipeline that ends without a port drops ("no_egress");
* on output, headers are emitted in ``packet { }`` order, then the payload; a header
  declared ``checksum(f)`` gets ``f`` recomputed (RFC 1071).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import assert_never

from compiler import ir
from compiler.interp.bits import bit_string, crc16, csum_update, internet_checksum, mask, pack, unpack
from compiler.interp.externs import EXTERNS
from compiler.interp.state import DataplaneState
from compiler.interp.tables import TableContents
from lang.diagnostics import InternalError

__all__ = ["Ctx", "Interpreter", "Outcome", "crc16"]


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: str  # "forward" | "drop" | "punt"
    port: int | None = None
    data: bytes = b""
    reason: str = ""


@dataclass
class Ctx:
    """One packet in flight: header values (None when invalid), payload, metadata."""

    program: ir.Program
    state: DataplaneState
    headers: dict[str, dict[str, int] | None]
    payload: bytes
    meta: dict[str, int]
    std: dict[str, int]
    now: float
    locals: dict[str, int] = field(default_factory=dict)
    results: dict[str, dict[str, int]] = field(default_factory=dict)
    egress: int | None = None
    parsed: bool = False  # the headers are extracted and the rest is ``payload``

    def packet_length(self) -> int:
        """``std.packet_length``: the frame as it arrived while it is parsed; after that the packet
        as it is now, its valid headers and payload (a ``push`` or ``pop`` changes it)."""
        if not self.parsed:
            return self.std["packet_length"]
        n = sum(self.program.header_of(i).bits // 8 for i, h in self.headers.items() if h is not None)
        return (n + len(self.payload)) & 0xFFFF

    def take_after(self, inst: str) -> bytes:
        """Deparse and invalidate every valid header after ``inst``, plus the payload."""
        names = [i.name for i in self.program.instances]
        out = b""
        for name in names[names.index(inst) + 1 :]:
            h = self.headers.get(name)
            if h is not None:
                out += emit(self.program.header_of(name), h)
                self.headers[name] = None
        out += self.payload
        self.payload = b""
        return out


class Stop(Exception):
    """Ends processing of a packet with an outcome (drop, punt, or a hand-over to a server)."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


def emit(h: ir.HeaderType, values: dict[str, int]) -> bytes:
    if h.checksum is None:
        return pack(h, values)
    raw = pack(h, {**values, h.checksum: 0})
    return pack(h, {**values, h.checksum: internet_checksum(raw)})


class Interpreter:
    """Executes a program against table contents and data-plane state."""

    def __init__(self, program: ir.Program, tables: dict[str, TableContents] | None = None,
                 state: DataplaneState | None = None,
                 cache_miss: Callable[[ir.Lookup, Ctx], None] | None = None) -> None:
        """``cache_miss``: when given, lookups in ``cache = true`` tables consult only the
        entries in ``tables`` (a switch's cache) and a miss calls it (it raises ``Stop``)."""
        self.program = program
        self.cache_miss = cache_miss
        self.tables = tables if tables is not None else {
            t.name: TableContents(t) for t in program.tables.values()
            if not t.is_state or (cache_miss is not None and t.hints.cache)}
        self.state = state if state is not None else DataplaneState(program)

    # ---- whole packets -----------------------------------------------------------------

    def process(self, data: bytes, port: int, now: float = 0.0) -> Outcome:
        """Run one packet through the pipeline its ingress port (and ``when``) selects."""
        outcome = self._process(data, port, now)
        if outcome.kind == "drop":
            self.state.drops[outcome.reason] += 1
        elif outcome.kind == "punt":
            self.state.punts[outcome.reason] += 1
        return outcome

    def _process(self, data: bytes, port: int, now: float) -> Outcome:
        for p in self.program.pipelines:
            if not p.has_port(port):
                continue
            ctx = self.new_ctx(data, port, now)
            try:
                self.parse(ctx, self.program.parsers[p.parser], data)
                if p.when is not None and not self.eval(p.when, ctx):
                    continue
                self.run_stages(ctx, p.stages)
            except Stop as s:
                return s.outcome
            return self.finish(ctx)
        return Outcome("drop", reason="no_pipeline")

    def new_ctx(self, data: bytes, port: int, now: float) -> Ctx:
        headers: dict[str, dict[str, int] | None] = {i.name: None for i in self.program.instances}
        meta = {f.name: 0 for f in self.program.metadata}
        std = {"ingress_port": port, "timestamp": int(now * 1e9) & mask(48), "packet_length": len(data) & 0xFFFF}
        return Ctx(self.program, self.state, headers, b"", meta, std, now)

    def finish(self, ctx: Ctx) -> Outcome:
        if ctx.egress is None:
            return Outcome("drop", reason="no_egress")
        return Outcome("forward", ctx.egress, self.deparse(ctx))

    def deparse(self, ctx: Ctx) -> bytes:
        out = b""
        for inst in self.program.instances:
            values = ctx.headers.get(inst.name)
            if values is not None:
                out += emit(self.program.headers[inst.header], values)
        return out + ctx.payload

    # ---- parser ------------------------------------------------------------------------

    def parse(self, ctx: Ctx, graph: ir.ParserGraph, data: bytes) -> None:
        """Extract headers into ``ctx``; raises Stop with a drop for a malformed packet."""
        offset = 0
        state = graph.state("start")
        for _ in range(len(graph.states) + 1):
            for stmt in state.stmts:
                if isinstance(stmt, ir.Extract):
                    offset = self._extract(ctx, stmt.inst, data, offset)
                else:
                    self.exec(stmt, ctx)
            target = self._select(state, ctx)
            if target.kind == "accept":
                ctx.payload = data[offset:]
                ctx.parsed = True
                return
            if target.kind == "drop":
                raise Stop(Outcome("drop", reason=target.name))
            if target.kind == "punt":
                raise Stop(Outcome("punt", data=data, reason=target.name))
            state = graph.state(target.name)
        raise InternalError("parser loop", graph.span)

    def _extract(self, ctx: Ctx, inst: str, data: bytes, offset: int) -> int:
        h = self.program.header_of(inst)
        n = h.bits // 8
        if offset + n > len(data):
            raise Stop(Outcome("drop", reason="truncated"))
        ctx.headers[inst] = unpack(h, data[offset : offset + n])
        return offset + n

    def _select(self, state: ir.ParserState, ctx: Ctx) -> ir.PTarget:
        if not state.select:
            return state.default
        values = [self.eval(e, ctx) for e in state.select]
        for case in state.cases:
            if all((v & m) == cv for v, (cv, m) in zip(values, case.values, strict=True)):
                return case.target
        return state.default

    # ---- stages ------------------------------------------------------------------------

    def run_stages(self, ctx: Ctx, stages: tuple[str, ...]) -> None:
        for name in stages:
            self.exec_block(self.program.stages[name].body, ctx)

    def run_stages_outcome(self, ctx: Ctx, stages: tuple[str, ...]) -> Outcome | None:
        """Run some stages; the drop/punt that ended them, or None if processing goes on."""
        try:
            self.run_stages(ctx, stages)
        except Stop as s:
            return s.outcome
        return None

    def exec_block(self, stmts: tuple[ir.Stmt, ...], ctx: Ctx) -> None:
        for s in stmts:
            self.exec(s, ctx)

    def exec(self, s: ir.Stmt, ctx: Ctx) -> None:
        match s:
            case ir.Assign():
                self._assign(s.target, self.eval(s.value, ctx), ctx)
            case ir.If():
                self.exec_block(s.then if self.eval(s.cond, ctx) else s.orelse, ctx)
            case ir.Lookup():
                self._lookup(s, ctx)
            case ir.Push():
                h = self.program.header_of(s.inst)
                values = {f.name: 0 for f in h.fields}
                for name, e in s.inits:
                    values[name] = self.eval(e, ctx)
                ctx.headers[s.inst] = values
            case ir.Pop():
                ctx.headers[s.inst] = None
            case ir.Forward():
                ctx.egress = self.eval(s.port, ctx)
            case ir.Drop():
                raise Stop(Outcome("drop", reason=s.reason))
            case ir.Punt():
                raise Stop(Outcome("punt", data=self.deparse(ctx), reason=s.reason))
            case ir.Insert():
                self._insert(s, ctx)
            case ir.Remove():
                self.state.state_remove(s.state, self._key(self.program.tables[s.state], ctx), ctx.now)
            case ir.Refresh():
                self.state.state_lookup(s.state, self._key(self.program.tables[s.state], ctx), ctx.now)
            case ir.Verify():
                if not self.eval(s.cond, ctx):
                    raise Stop(Outcome("drop", reason=s.reason))
            case ir.Eval():
                self.eval(s.expr, ctx)
            case ir.Extract():
                raise InternalError("extract outside a parser", s.span)
            case _:
                assert_never(s)

    def _assign(self, target: ir.LValue, value: int, ctx: Ctx) -> None:
        match target:
            case ir.HeaderField():
                h = ctx.headers.get(target.inst)
                if h is not None:
                    h[target.field] = value
            case ir.MetaField():
                ctx.meta[target.name] = value
            case ir.Local():
                ctx.locals[target.name] = value
            case ir.RegRead():
                self.state.reg_write(target.reg, self.eval(target.index, ctx), value)
            case _:
                assert_never(target)

    def _key(self, table: ir.Table, ctx: Ctx) -> tuple[int, ...]:
        return tuple(self.eval(k.expr, ctx) for k in table.keys)

    def _lookup(self, s: ir.Lookup, ctx: Ctx) -> None:
        table = self.program.tables[s.table]
        key = self._key(table, ctx)
        if self.cache_miss is not None and table.hints.cache:
            entry = self.tables[s.table].lookup(key)
            if entry is None:
                self.cache_miss(s, ctx)
                return
            values: dict[str, int] | None = entry.values
        elif table.is_state:
            values = self.state.state_lookup(s.table, key, ctx.now, table.hints.refresh)
        else:
            entry = self.tables[s.table].lookup(key)
            values = entry.values if entry is not None else None
        if values is None:
            self.exec_block(s.miss, ctx)
            return
        ctx.results[s.table] = dict(values)
        self.exec_block(s.hit, ctx)

    def _insert(self, s: ir.Insert, ctx: Ctx) -> None:
        table = self.program.tables[s.state]
        values = {name: self.eval(e, ctx) for name, e in s.values}
        timeout = float(self.eval(s.timeout, ctx)) if s.timeout is not None else (table.timeout or 300.0)
        self.state.state_insert(s.state, self._key(table, ctx), values, timeout, ctx.now)

    # ---- expressions -------------------------------------------------------------------

    def eval(self, e: ir.Expr, ctx: Ctx) -> int:
        match e:
            case ir.Const():
                return e.value
            case ir.HeaderField():
                h = ctx.headers.get(e.inst)
                return h.get(e.field, 0) if h is not None else 0
            case ir.MetaField():
                return ctx.meta.get(e.name, 0)
            case ir.StdField():
                return ctx.packet_length() if e.name == "packet_length" else ctx.std[e.name]
            case ir.Local():
                return ctx.locals.get(e.name, 0)
            case ir.Result():
                return ctx.results.get(e.table, {}).get(e.field, 0)
            case ir.Valid():
                return int(ctx.headers.get(e.inst) is not None)
            case ir.ChecksumOk():
                return self._checksum_ok(e.inst, ctx)
            case ir.HeaderRef():
                raise InternalError("header reference outside an extern call", e.span)
            case ir.RegRead():
                return self.state.reg_read(e.reg, self.eval(e.index, ctx))
            case ir.Hash():
                data = bit_string([(self.eval(a, ctx), a.width) for a in e.args])
                return zlib.crc32(data) if e.alg == "crc32" else crc16(data)
            case ir.CsumUpdate():
                return csum_update(self.eval(e.csum, ctx), self.eval(e.old, ctx), self.eval(e.new, ctx), e.old.width)
            case ir.ExternCall():
                return self._extern(e, ctx)
            case ir.CounterOp():
                return self._counter(e, ctx)
            case ir.Unary():
                return self._unary(e, ctx)
            case ir.Binary():
                return self._binary(e, ctx)
            case ir.Slice():
                return (self.eval(e.base, ctx) >> e.lo) & mask(e.width)
            case ir.Cast():
                v = self.eval(e.operand, ctx)
                return int(v != 0) if e.width == ir.BOOL else v & mask(e.width)
            case _:
                assert_never(e)

    def _checksum_ok(self, inst: str, ctx: Ctx) -> int:
        values = ctx.headers.get(inst)
        h = self.program.header_of(inst)
        if values is None or h.checksum is None:
            return 0
        return int(internet_checksum(pack(h, values)) == 0)

    def _extern(self, e: ir.ExternCall, ctx: Ctx) -> int:
        impl = EXTERNS.get(e.name)
        if impl is None:
            raise InternalError(f"no reference semantics for operation '{e.name}'", e.span)
        args: list[int | str] = [a.inst if isinstance(a, ir.HeaderRef) else self.eval(a, ctx) for a in e.args]
        return impl(ctx, args) & (mask(e.width) if e.width else 1)

    def _counter(self, e: ir.CounterOp, ctx: Ctx) -> int:
        index = self.eval(e.index, ctx)
        nbytes = len(self.deparse(ctx))
        if e.method == "count":
            self.state.count(e.obj, index, nbytes)
            return 1
        return self.state.meter(e.obj, index, nbytes, ctx.now)

    def _unary(self, e: ir.Unary, ctx: Ctx) -> int:
        v = self.eval(e.operand, ctx)
        if e.op == "!":
            return int(not v)
        if e.op == "~":
            return ~v & mask(e.width)
        return -v & mask(e.width)

    def _binary(self, e: ir.Binary, ctx: Ctx) -> int:
        op = e.op
        if op == "&&":
            return int(bool(self.eval(e.left, ctx)) and bool(self.eval(e.right, ctx)))
        if op == "||":
            return int(bool(self.eval(e.left, ctx)) or bool(self.eval(e.right, ctx)))
        a, b = self.eval(e.left, ctx), self.eval(e.right, ctx)
        w = e.width
        match op:
            case "+":
                return (a + b) & mask(w)
            case "-":
                return (a - b) & mask(w)
            case "&":
                return a & b
            case "|":
                return a | b
            case "^":
                return a ^ b
            case "<<":
                return (a << b) & mask(w) if b < w else 0
            case ">>":
                return a >> b if b < w else 0
            case "++":
                return (a << e.right.width) | b
            case "==":
                return int(a == b)
            case "!=":
                return int(a != b)
            case "<":
                return int(a < b)
            case "<=":
                return int(a <= b)
            case ">":
                return int(a > b)
            case ">=":
                return int(a >= b)
        raise InternalError(f"unknown operator {op}", e.span)
