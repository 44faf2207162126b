"""Pass ``lower``: checked syntax tree → typed IR.

Precondition: ``lang.check`` found no errors.  Constants are folded into ``Const``;
integer literals take the width the checker inferred; ``hit(r) { r.f }`` becomes
``Result(table, f)``; ``if / else if`` chains become nested ``If``.

Before: ``lookup fib { hit(r) { forward(r.port); } }``
After:  ``Lookup("fib", hit=(Forward(Result("fib", "port", 9)),), miss=())``
"""

from __future__ import annotations

from typing import assert_never

from compiler import ir
from compiler.analysis import expr_reads
from compiler.forward_ports import guard_forwards
from lang import ast
from lang.diagnostics import InternalError
from lang.symbols import (
    STD_FIELDS,
    CheckedProgram,
    key_field_name,
    quantity_count,
    quantity_fraction,
    quantity_seconds,
)
from lang.types import Bits, Bool, IntLiteral, Unknown

__all__ = ["lower"]


def lower(prog: CheckedProgram) -> ir.Program:
    """Build the IR of a checked program."""
    return _Lower(prog).program()


class _Lower:
    def __init__(self, prog: CheckedProgram) -> None:
        self.p = prog
        self.sym = prog.symbols
        self.reasons: set[str] = set()

    def program(self) -> ir.Program:
        sym = self.sym
        headers = {h.name: self._header(h) for h in sym.headers.values()}
        instances = tuple(ir.Instance(i.name, i.header_type, i.span) for i in sym.instances.values())
        metadata = tuple(ir.Field(f.name, self._w(f.type), f.span) for f in sym.metadata.values())
        parsers = {p.name: self._parser(p) for p in sym.parsers.values()}
        tables = {t.name: self._table(t) for t in sym.tables.values()}
        registers = {r.name: ir.Register(r.name, self._w(r.type), quantity_count(r.size) or 0, r.span, r.monotonic)
                     for r in sym.registers.values()}
        counters = {c.name: ir.Counter(c.name, c.kind, quantity_count(c.size) or 0, c.span)
                    for c in sym.counters.values()}
        externs = {e.name: self._extern(e) for e in sym.externs.values()}
        stages = {s.name: ir.Stage(s.name, self._block(s.body, {}), s.span) for s in sym.stages.values()}
        pipelines = tuple(self._pipeline(p) for p in sym.pipelines.values())
        targets = {t.name: ir.TargetDecl(t.name, t.base, tuple(_prop(p) for p in t.props), t.span)
                   for t in sym.targets.values()}
        deployment = next((ir.TargetDecl(d.name, None, tuple(_prop(p) for p in d.props), d.span,
                                         next((ir.Shard(x.method, tuple(self._expr(k, {}) for k in x.keys), x.span)
                                               for x in d.shards), None))
                           for d in sym.deployments.values()), None)
        prog = ir.Program(self.p.main_file, headers, instances, metadata, parsers, tables, registers, counters,
                          externs, stages, pipelines, targets, deployment, tuple(sorted(self.reasons)))
        return guard_forwards(prog)

    # ---- declarations ----------------------------------------------------------------------

    def _w(self, t: ast.TypeRef) -> int:
        return ir.BOOL if t.width is None else t.width

    def _header(self, h: ast.HeaderDecl) -> ir.HeaderType:
        fields = tuple(ir.Field(f.name, self._w(f.type), f.span) for f in h.fields)
        return ir.HeaderType(h.name, fields, h.checksum[0] if h.checksum else None, h.span)

    def _extern(self, e: ast.ExternDecl) -> ir.Extern:
        params = tuple(ir.Field(p.name, 0 if isinstance(p, ast.HeaderParam) else self._w(p.type), p.span)
                       for p in e.params)
        htypes = tuple(p.header_type if isinstance(p, ast.HeaderParam) else None for p in e.params)
        return ir.Extern(e.name, params, htypes, self._w(e.ret) if e.ret else None, e.requires, e.span)

    def _parser(self, p: ast.ParserDecl) -> ir.ParserGraph:
        return ir.ParserGraph(p.name, tuple(self._pstate(s) for s in p.states), p.span)

    def _pstate(self, s: ast.ParserState) -> ir.ParserState:
        stmts = tuple(x for st in s.stmts for x in self._stmt(st, {}))
        tr = s.transition
        if tr.direct is not None:
            return ir.ParserState(s.name, stmts, (), (), self._ptarget(tr.direct), s.span)
        select = tuple(self._expr(e, {}) for e in tr.exprs)
        cases: list[ir.Case] = []
        default = ir.PTarget("drop", "parser_no_match", tr.span)
        for c in tr.cases:
            if c.keys is None:
                default = self._ptarget(c.target)
                continue
            values = tuple(self._select_value(k, e.width) for k, e in zip(c.keys, select, strict=True))
            cases.append(ir.Case(values, self._ptarget(c.target), c.span))
        if default.name == "parser_no_match":
            self.reasons.add(default.name)
        return ir.ParserState(s.name, stmts, select, tuple(cases), default, s.span)

    def _select_value(self, k: ast.SelectKey, width: int) -> tuple[int, int]:
        full = (1 << width) - 1
        value = self._const(self._expr(k.value, {}))
        mask = self._const(self._expr(k.mask, {})) if k.mask is not None else full
        return (value & mask, mask)

    def _const(self, e: ir.Expr) -> int:
        if not isinstance(e, ir.Const):
            raise InternalError("select values must be constants", e.span)
        return e.value

    def _ptarget(self, t: ast.PTarget) -> ir.PTarget:
        if t.kind == "drop":
            self.reasons.add(t.name)
        return ir.PTarget(t.kind, t.name, t.span)

    def _table(self, t: ast.TableDecl) -> ir.Table:
        props = {p.name: p.value for p in t.props}
        keys = tuple(ir.Key(k.alias or key_field_name(k.expr), self._expr(k.expr, {}), k.kind, k.span) for k in t.keys)
        values = tuple(ir.Field(v.name, self._w(v.type), v.span, v.secret) for v in t.values)
        hints = ir.Hints(
            active=_frac(props.get("active"), 1.0),
            updates=_number(props.get("updates"), 0.0),
            traffic=_frac(props.get("traffic"), 1.0),
            skew=_number(props.get("skew"), 0.0),
            pin=props["pin"].name if isinstance(props.get("pin"), ast.NameValue) else None,  # type: ignore[union-attr]
            cache=isinstance(props.get("cache"), ast.BoolLit) and props["cache"].value is True,  # type: ignore[union-attr]
            refresh=not (isinstance(props.get("refresh"), ast.BoolLit) and props["refresh"].value is False),  # type: ignore[union-attr]
        )
        size = quantity_count(props["size"]) if "size" in props else 0
        timeout = quantity_seconds(props["timeout"]) if "timeout" in props else None
        held = props.get("holds_ports")
        names = [k.name for k in keys]
        holds = (names.index(held.names[0]), names.index(held.names[1])) if isinstance(held, ast.NameList) else None
        limits = props.get("idle_limits")
        idle = tuple(sorted(((quantity_fraction(a) or 0.0, quantity_seconds(b) or 0.0) for a, b in limits.pairs),
                            reverse=True)) if isinstance(limits, ast.LimitList) else None
        return ir.Table(t.name, t.is_state, keys, values, size or 0, hints, timeout, t.span, holds, idle)

    def _pipeline(self, p: ast.PipelineDecl) -> ir.Pipeline:
        props = {x.name: x.value for x in p.props}
        ports_v = props.get("ports")
        if isinstance(ports_v, ast.NameValue):
            ports = self.sym.ports[ports_v.name].ports.ranges
        elif isinstance(ports_v, ast.PortList):
            ports = ports_v.ranges
        else:
            ports = ()
        parser_v = props.get("parser")
        stages_v = props.get("stages")
        return ir.Pipeline(
            p.name,
            ports,
            parser_v.name if isinstance(parser_v, ast.NameValue) else "",
            stages_v.names if isinstance(stages_v, ast.NameList) else (),
            self._expr(p.when, {}) if p.when is not None else None,
            _frac(props.get("traffic"), 1.0),
            p.span,
        )

    # ---- statements ------------------------------------------------------------------------

    def _block(self, b: ast.Block, hits: dict[str, str]) -> tuple[ir.Stmt, ...]:
        return tuple(x for s in b.stmts for x in self._stmt(s, hits))

    def _opt(self, b: ast.Block | None, hits: dict[str, str]) -> tuple[ir.Stmt, ...]:
        return self._block(b, hits) if b is not None else ()

    def _stmt(self, s: ast.Stmt, hits: dict[str, str]) -> tuple[ir.Stmt, ...]:
        match s:
            case ast.Assign():
                return (ir.Assign(self._lvalue(s.target, hits), self._expr(s.value, hits), s.span),)
            case ast.Let():
                width = self._width_of(s.value) if s.type is None else self._w(s.type)
                return (ir.Assign(ir.Local(s.name, width, s.span), self._expr(s.value, hits), s.span),)
            case ast.If():
                return (ir.If(self._expr(s.cond, hits), self._block(s.then, hits), self._opt(s.orelse, hits),
                              s.span),)
            case ast.Lookup():
                inner = dict(hits)
                if s.hit_var:
                    inner[s.hit_var] = s.table
                return (ir.Lookup(s.table, self._opt(s.hit, inner), self._opt(s.miss, hits), s.span),)
            case ast.Push():
                return _push(s.header, self._inits(s.inits, hits), s.span)
            case ast.Pop():
                return (ir.Pop(s.header, s.span),)
            case ast.Forward():
                return (ir.Forward(self._expr(s.port, hits), s.span),)
            case ast.Drop():
                self.reasons.add(s.reason)
                return (ir.Drop(s.reason, s.span),)
            case ast.Punt():
                return (ir.Punt(s.reason, s.span),)
            case ast.Insert():
                timeout = self._index(s.timeout, hits) if s.timeout is not None else None
                return (ir.Insert(s.state, self._inits(s.inits, hits), timeout, s.span),)
            case ast.Remove():
                return (ir.Remove(s.state, s.span),)
            case ast.Refresh():
                return (ir.Refresh(s.state, s.span),)
            case ast.Verify():
                self.reasons.add(s.reason)
                return (ir.Verify(self._expr(s.cond, hits), s.reason, s.span),)
            case ast.ExprStmt():
                return (ir.Eval(self._expr(s.expr, hits), s.span),)
            case ast.Extract():
                return (ir.Extract(s.header, s.span),)
            case _:
                assert_never(s)

    def _inits(self, inits: tuple[ast.FieldInit, ...], hits: dict[str, str]) -> tuple[tuple[str, ir.Expr], ...]:
        return tuple((i.name, self._expr(i.value, hits)) for i in inits)

    def _lvalue(self, e: ast.Expr, hits: dict[str, str]) -> ir.LValue:
        if isinstance(e, ast.Name):
            return ir.Local(e.ident, self._width_of(e), e.span)
        lv = self._expr(e, hits)
        if not isinstance(lv, ir.HeaderField | ir.MetaField | ir.Local | ir.RegRead):
            raise InternalError("checked assignment target is not an l-value", e.span)
        return lv

    # ---- expressions -----------------------------------------------------------------------

    def _width_of(self, e: ast.Expr) -> int:
        t = self.p.types.get(id(e))
        match t:
            case Bits(width=w):
                return w
            case Bool():
                return ir.BOOL
            case IntLiteral() | Unknown() | None:
                raise InternalError("expression without a width after checking", e.span)
            case _:
                assert_never(t)

    def _expr(self, e: ast.Expr, hits: dict[str, str]) -> ir.Expr:
        match e:
            case ast.IntLit():
                return ir.Const(e.value, self._width_of(e), e.span)
            case ast.BoolLit():
                return ir.Const(int(e.value), ir.BOOL, e.span)
            case ast.Name():
                return self._name(e)
            case ast.Member():
                return self._member(e, hits)
            case ast.Slice():
                return ir.Slice(self._expr(e.base, hits), e.hi, e.lo, e.hi - e.lo + 1, e.span)
            case ast.Index():
                reg = e.base.ident if isinstance(e.base, ast.Name) else ""
                return ir.RegRead(reg, self._index(e.index, hits), self.sym.registers[reg].type.width or 1, e.span)
            case ast.Call():
                return self._call(e, hits)
            case ast.Cast():
                return ir.Cast(self._expr(e.operand, hits), self._width_of(e), e.span)
            case ast.Unary():
                return ir.Unary(e.op, self._expr(e.operand, hits), self._width_of(e), e.span)
            case ast.Binary():
                return ir.Binary(e.op, self._expr(e.left, hits), self._expr(e.right, hits), self._width_of(e), e.span)
            case ast.Quantity() | ast.StringLit():
                raise InternalError("quantity in an expression after checking", e.span)
            case _:
                assert_never(e)

    def _index(self, e: ast.Expr, hits: dict[str, str]) -> ir.Expr:
        """Register / counter indices: a literal index is given 32 bits."""
        t = self.p.types.get(id(e))
        if isinstance(t, IntLiteral):
            return ir.Const(t.value, 32, e.span)
        return self._expr(e, hits)

    def _name(self, e: ast.Name) -> ir.Expr:
        c = self.sym.consts.get(e.ident)
        if c is None:
            return ir.Local(e.ident, self._width_of(e), e.span)
        if e.ident not in self.p.const_values:  # the checker requires a literal and no local hides a const
            raise InternalError(f"const '{e.ident}' has no value after checking", e.span)
        return ir.Const(self.p.const_values[e.ident], self._w(c.type), e.span)

    def _member(self, e: ast.Member, hits: dict[str, str]) -> ir.Expr:
        base = e.base.ident if isinstance(e.base, ast.Name) else ""
        width = self._width_of(e)
        if base in hits:
            return ir.Result(hits[base], e.field, width, e.span)
        if base == "meta":
            return ir.MetaField(e.field, width, e.span)
        if base == "std" and e.field in STD_FIELDS:
            return ir.StdField(e.field, width, e.span)
        return ir.HeaderField(base, e.field, width, e.span)

    def _call(self, e: ast.Call, hits: dict[str, str]) -> ir.Expr:
        callee = e.callee
        if isinstance(callee, ast.Member) and isinstance(callee.base, ast.Name):
            return ir.CounterOp(callee.base.ident, callee.field, self._index(e.args[0], hits), self._width_of(e),
                                e.span)
        name = callee.ident if isinstance(callee, ast.Name) else ""
        if name in ("valid", "checksum_ok"):
            inst = e.args[0].ident if isinstance(e.args[0], ast.Name) else ""
            return ir.Valid(inst, e.span) if name == "valid" else ir.ChecksumOk(inst, e.span)
        if name == "csum_update":
            csum, old, new = (self._expr(a, hits) for a in e.args)
            return ir.CsumUpdate(csum, old, new, e.span)
        ext = self.sym.externs.get(name)
        if ext is not None:
            args = tuple(ir.HeaderRef(a.ident, a.span) if isinstance(p, ast.HeaderParam) and isinstance(a, ast.Name)
                         else self._expr(a, hits) for a, p in zip(e.args, ext.params, strict=True))
            return ir.ExternCall(name, args, self._width_of(e), e.span)
        args = tuple(self._expr(a, hits) for a in e.args)
        return ir.Hash(name, args, self._width_of(e), e.span)


def _frac(v: ast.PropValue | None, default: float) -> float:
    if v is None:
        return default
    f = quantity_fraction(v)
    return default if f is None else f


def _number(v: ast.PropValue | None, default: float) -> float:
    if isinstance(v, ast.IntLit):
        return float(v.value)
    if isinstance(v, ast.Quantity):
        return v.number * {"K": 1e3, "M": 1e6, "G": 1e9}.get(v.unit, 1.0)
    return default


def _prop(p: ast.Property) -> ir.PropVal:
    v = p.value
    match v:
        case ast.IntLit():
            return ir.PropVal(p.name, float(v.value), "", None, (), p.span)
        case ast.Quantity():
            return ir.PropVal(p.name, v.number, v.unit, None, (), p.span)
        case ast.BoolLit():
            return ir.PropVal(p.name, float(v.value), "", None, (), p.span)
        case ast.StringLit():
            return ir.PropVal(p.name, None, "", v.value, (), p.span)
        case ast.NameValue():
            return ir.PropVal(p.name, None, "", v.name, (), p.span)
        case ast.NameList():
            return ir.PropVal(p.name, None, "", None, v.names, p.span)
        case ast.PortList():
            return ir.PropVal(p.name, None, "", None, tuple(f"{lo}..{hi}" for lo, hi in v.ranges), p.span)
        case ast.LimitList():
            raise InternalError("idle limits are a table's, not a target's", p.span)
        case _:
            assert_never(v)


def _push(inst: str, inits: tuple[tuple[str, ir.Expr], ...], span: ir.Span) -> tuple[ir.Stmt, ...]:
    """``push``: its values are those before the header is made valid.  A value that reads the
    pushed header (a field, its validity) or std.packet_length, which the push changes, is
    copied to a local first (``nfc_`` names are reserved for nfc), so a target that makes the
    header valid and then writes its fields one by one computes the same."""
    before: list[ir.Stmt] = []
    out: list[tuple[str, ir.Expr]] = []
    for name, e in inits:
        reads = expr_reads(e)
        if any(loc[:2] in (("hdr", inst), ("valid", inst), ("hdrall", inst)) for loc in reads) or \
                ("std", "packet_length") in reads:
            local = ir.Local(f"nfc_push_{inst}_{name}", e.width, e.span)
            before.append(ir.Assign(local, e, e.span))
            e = local
        out.append((name, e))
    return (*before, ir.Push(inst, tuple(out), span))
