"""Execute a P4_16 program (the syntax tree nfc prints) on packets, as its architecture does.

``P4Executor(program)`` compiles the parsers and controls of the package ``main`` once and
then runs packets through them in the architecture's order:

* TNA (``Switch(Pipeline(IngressParser, Ingress, IngressDeparser, EgressParser, Egress,
  EgressDeparser))``): the ingress parser reads ``ingress_intrinsic_metadata_t`` and the
  port metadata from the front of the packet (built here from the ingress port and time,
  as the Tofino parser sees them); a parser error stops parsing and is reported in
  ``ig_prsr_md.parser_err`` (the program reads it, so Tofino sends the packet on);
  ``ig_dprsr_md.drop_ctl`` bit 0 drops; ``ig_tm_md.ucast_egress_port`` is the egress port;
  the egress parser reads ``egress_intrinsic_metadata_t`` first.
* v1model (``V1Switch(parser, verify, ingress, egress, compute, deparser)``, bmv2
  ``simple_switch``): a parser error sets ``standard_metadata.parser_error`` and the packet
  continues; ``mark_to_drop`` sets ``egress_spec`` to 511 and the packet is dropped after
  ingress (or after egress).

The deparser's output is the emitted headers followed by the part of the packet the parser
did not read.  Tables are ``emulator.p4.tables.P4Table``, written by the P4Runtime server.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emulator.p4.compile import ApplyResult, Compiler, ExitSignal, Frame, StmtFn, mask
from emulator.p4.externs import ChecksumObj, CounterObj, ExternLib, instantiate
from emulator.p4.tables import KeyField, P4Table
from emulator.p4.types import TypeEnv, TypeErrorP4
from emulator.p4.values import Obj, PacketError, PacketIn, PacketOut
from targets.p4 import intrinsics
from targets.p4 import syntax as p

__all__ = ["P4Executor", "P4Result"]


@dataclass(frozen=True, slots=True)
class P4Result:
    """Where the packet left (``port`` None: dropped) and its bytes."""

    port: int | None
    data: bytes


def _field(o: Obj, name: str) -> int:
    value = o.v[name]
    assert isinstance(value, int)
    return value


class _Parser:
    def __init__(self, c: Compiler, decl: p.Parser, scope: dict[str, p.Type], objects: dict[str, Any]) -> None:
        self.name = decl.name
        self.scope = scope
        self.objects = objects
        self.states: dict[str, tuple[StmtFn, Callable[[Frame], str]]] = {
            s.name: (c.stmts(s.body, scope), self._transition(c, s)) for s in decl.states}
        if "start" not in self.states:
            raise TypeErrorP4(f"parser {decl.name} has no start state")

    def _transition(self, c: Compiler, s: p.State) -> Callable[[Frame], str]:
        if not s.select:
            nxt = s.next
            return lambda f: nxt
        keys = [c.expr(e, self.scope) for e in s.select]
        widths = [c.env.width(t) for _, t in keys]
        matchers = [(self._case(c, case, widths), case.next) for case in s.cases]

        def select(f: Frame) -> str:
            values = tuple(fn(f) for fn, _ in keys)
            for match, nxt in matchers:
                if match(values):
                    return nxt
            return "reject"
        return select

    @staticmethod
    def _case(c: Compiler, case: p.Case, widths: list[int]) -> Callable[[tuple[int, ...]], bool]:
        if case.keys == (p.Default(),):  # ``default`` (or ``_``) as the whole keyset of a tuple select
            return lambda values: True
        tests: list[Callable[[int], bool]] = []
        for k, w in zip(case.keys, widths, strict=True):
            tests.append(_keyset(k, w))
        return lambda values: all(t(v) for t, v in zip(tests, values, strict=True))

    def run(self, f: Frame) -> bool:
        """Run from ``start``; False when the parser ended in an error (reject)."""
        for obj in self.objects.values():
            if isinstance(obj, ChecksumObj):
                obj.parts.clear()  # a checksum unit starts empty for every packet
        f.update(self.objects)
        state = "start"
        while state not in ("accept", "reject"):
            body, transition = self.states[state]
            try:
                body(f)
                state = transition(f)
            except PacketError:
                return False
        return state == "accept"


def _keyset(k: p.Expr, width: int) -> Callable[[int], bool]:
    m = mask(width)
    match k:
        case p.Default():
            return lambda v: True
        case p.Const():
            value = k.value & m
            return lambda v: v == value
        case p.Mask(value=p.Const() as value, mask=p.Const() as km):
            want, bits = value.value & km.value, km.value
            return lambda v: (v & bits) == want
        case p.Range(lo=p.Const() as lo, hi=p.Const() as hi):
            low, high = lo.value, hi.value
            return lambda v: low <= v <= high
    raise TypeErrorP4(f"keyset {k} is not in the executed subset")


class _Control:
    def __init__(self, c: Compiler, decl: p.Control, scope: dict[str, p.Type], tables: dict[str, P4Table],
                 objects: dict[str, Any]) -> None:
        self.name = decl.name
        c.actions, c.tables, c.action_decls = {}, {}, []
        for x in decl.locals:
            if isinstance(x, p.Action):
                c.actions[x.name] = self._action(c, x, scope)
                c.action_decls.append(x)
            elif isinstance(x, p.Table):
                tables[x.name] = table = self._table_store(c, x, scope)
                c.tables[x.name] = self._apply(c, x, table, scope)
        self.body = c.stmts(decl.apply, scope)
        self.objects = objects

    @staticmethod
    def _action(c: Compiler, a: p.Action, scope: dict[str, p.Type]) -> Callable[[Frame, dict[str, int]], None]:
        inner = {**scope, **dict(a.params)}
        body = c.stmts(a.body, inner)

        def run(f: Frame, args: dict[str, int]) -> None:
            f.update(args)
            body(f)
        return run

    @staticmethod
    def _table_store(c: Compiler, t: p.Table, scope: dict[str, p.Type]) -> P4Table:
        keys = tuple(KeyField(k.name, k.match, c.env.width(c.bits(k.expr, scope)[1])) for k in t.keys)
        params: dict[str, tuple[tuple[str, int], ...]] = {}
        for name in (*t.actions, t.default_action):
            if name not in c.actions:
                raise TypeErrorP4(f"table {t.name}: action {name} is not declared before it")
        for a in c.action_decls:
            if a.name in t.actions:
                params[a.name] = tuple((n, c.env.width(ty)) for n, ty in a.params)
        return P4Table(t.name, keys, params, t.default_action, t.size, idle=bool(t.idle))

    @staticmethod
    def _apply(c: Compiler, t: p.Table, table: P4Table, scope: dict[str, p.Type]) -> Callable[[Frame], ApplyResult]:
        keys = [c.bits(k.expr, scope)[0] for k in t.keys]
        actions = c.actions
        default = t.default_action

        def apply(f: Frame) -> ApplyResult:
            e = table.lookup(tuple(k(f) for k in keys))
            if e is None:
                actions[default](f, {})
                return ApplyResult(False, default)
            table.hit(e)
            actions[e.action](f, e.params)
            return ApplyResult(True, e.action)
        return apply

    def run(self, f: Frame) -> None:
        f.update(self.objects)
        with contextlib.suppress(ExitSignal):  # ``exit`` ends this control block
            self.body(f)


class P4Executor:
    """Runs packets through ``program``; ``tables`` and ``externs`` hold the device state."""

    def __init__(self, program: p.Program) -> None:
        self.program = program
        self.env = TypeEnv(program)
        self.arch = self.env.arch
        self.compiler = Compiler(self.env, ExternLib(self.arch))
        self.tables: dict[str, P4Table] = {}
        self.externs: dict[str, Any] = {}  # extern instances of every block, by name
        self.now = 0.0  # the packet being processed: its arrival time
        self.blocks: dict[str, _Parser | _Control] = {}
        decls = {d.name: d for d in program.decls if isinstance(d, p.Parser | p.Control)}
        for name in self._package_blocks():
            self.blocks[name] = self._compile(decls[name])

    def _package_blocks(self) -> list[str]:
        instances = {d.name: d for d in self.program.decls if isinstance(d, p.Instance)}
        main = instances.get("main")
        if main is None:
            raise TypeErrorP4("the program has no package instance 'main'")
        args = list(main.args)
        if main.type.name == "Switch":  # TNA: Switch(pipe), pipe = Pipeline(...)
            pipe = args[0]
            assert isinstance(pipe, p.Path)
            args = list(instances[pipe.name].args)
        names = []
        for a in args:
            if not (isinstance(a, p.Call) and isinstance(a.target, p.Path)):
                raise TypeErrorP4(f"package argument {a} must be a block instantiation")
            names.append(a.target.name)
        return names

    def _compile(self, d: p.Parser | p.Control) -> _Parser | _Control:
        scope: dict[str, p.Type] = {prm.name: prm.type for prm in d.params}
        objects: dict[str, Any] = {}
        for inst in d.locals:
            if isinstance(inst, p.Instance):
                scope[inst.name] = inst.type
                objects[inst.name] = self.externs[inst.name] = instantiate(inst, self.env.enums, objects)
        for inst in d.locals:  # abstract methods implemented by an instance (RegisterAction.apply)
            if isinstance(inst, p.Instance) and inst.methods:
                if [m.name for m in inst.methods] != ["apply"] or not hasattr(objects[inst.name], "apply"):
                    raise TypeErrorP4(f"{inst.name}: only a RegisterAction's apply is in the executed subset")
                m = inst.methods[0]
                objects[inst.name].apply = self.compiler.stmts(m.body, {**scope, **{q.name: q.type for q in m.params}})
        if isinstance(d, p.Parser):
            return _Parser(self.compiler, d, scope, objects)
        return _Control(self.compiler, d, scope, self.tables, objects)

    # ---- running a packet --------------------------------------------------------------------

    def counter(self, name: str) -> CounterObj:
        obj = self.externs[name]
        assert isinstance(obj, CounterObj)
        return obj

    def process(self, data: bytes, port: int, now: float | None = None) -> P4Result:
        self.now = time.time() if now is None else now  # what meters refill by (seconds)
        ts = int(self.now * 1e9) & mask(48)
        if self.arch == "v1model":
            return self._v1model(data, port, ts)
        return self._tna(data, port, ts)

    def _run_parser(self, name: str, f: Frame) -> bool:
        block = self.blocks[name]
        assert isinstance(block, _Parser)
        return block.run(f)

    def _run_control(self, name: str, f: Frame) -> None:
        block = self.blocks[name]
        assert isinstance(block, _Control)
        block.run(f)

    def _new(self, type_name: str) -> Obj:
        return self.compiler.new_obj(p.TypeName(type_name))

    def _params(self, name: str) -> tuple[p.Param, ...]:
        d = next(x for x in self.program.decls if isinstance(x, p.Parser | p.Control) and x.name == name)
        return d.params

    def _frame(self, name: str, given: dict[str, Any]) -> Frame:
        """A frame for block ``name``: its parameters by position role, from ``given`` by type name."""
        f: Frame = {"__len__": given.get("__len__", 0), "__now__": self.now}
        for prm in self._params(name):
            t = prm.type.name if isinstance(prm.type, p.TypeName) else ""
            if t not in given:
                raise TypeErrorP4(f"{name}: no value for parameter {prm.name} of type {t}")
            f[prm.name] = given[t]
        return f

    def _tna(self, data: bytes, port: int, ts: int) -> P4Result:
        ig_parser, ingress, ig_deparser, eg_parser, egress, eg_deparser = self.blocks
        md = self._new("ingress_intrinsic_metadata_t")
        md.v["ingress_port"], md.v["ingress_mac_tstamp"] = port, ts
        prefix = PacketOut()
        prefix.emit(Obj(md.decl, md.v, True))
        prefix.write(intrinsics.constants(self.arch)["PORT_METADATA_SIZE"], 0)
        pkt = PacketIn(prefix.bytes() + data)
        hdr, meta = self._new("headers_t"), self._new("metadata_t")
        state = {"packet_in": pkt, "headers_t": hdr, "metadata_t": meta, "ingress_intrinsic_metadata_t": self._new(
            "ingress_intrinsic_metadata_t"), "__len__": len(data)}
        ok = self._run_parser(ig_parser, self._frame(ig_parser, state))
        prsr = self._new("ingress_intrinsic_metadata_from_parser_t")
        prsr.v["parser_err"] = 0 if ok else intrinsics.constants(self.arch)["PARSER_ERROR_PARTIAL_HDR"]
        dprsr, tm = self._new("ingress_intrinsic_metadata_for_deparser_t"), self._new(
            "ingress_intrinsic_metadata_for_tm_t")
        state.update({"ingress_intrinsic_metadata_from_parser_t": prsr,
                      "ingress_intrinsic_metadata_for_deparser_t": dprsr, "ingress_intrinsic_metadata_for_tm_t": tm})
        self._run_control(ingress, self._frame(ingress, state))
        out = PacketOut()
        self._run_control(ig_deparser, self._frame(ig_deparser, {**state, "packet_out": out}))
        if _field(dprsr, "drop_ctl") & 1:
            return P4Result(None, b"")
        egress_port = _field(tm, "ucast_egress_port")
        payload = out.bytes() + pkt.rest()
        return self._tna_egress(eg_parser, egress, eg_deparser, payload, egress_port)

    def _tna_egress(self, eg_parser: str, egress: str, eg_deparser: str, data: bytes, port: int) -> P4Result:
        md = self._new("egress_intrinsic_metadata_t")
        md.v["egress_port"] = port
        prefix = PacketOut()
        prefix.emit(Obj(md.decl, md.v, True))
        pkt = PacketIn(prefix.bytes() + data)
        state = {"packet_in": pkt, "egress_headers_t": self._new("egress_headers_t"),
                 "egress_metadata_t": self._new("egress_metadata_t"),
                 "egress_intrinsic_metadata_t": self._new("egress_intrinsic_metadata_t"), "__len__": len(data)}
        self._run_parser(eg_parser, self._frame(eg_parser, state))
        dprsr = self._new("egress_intrinsic_metadata_for_deparser_t")
        state.update({"egress_intrinsic_metadata_from_parser_t": self._new("egress_intrinsic_metadata_from_parser_t"),
                      "egress_intrinsic_metadata_for_deparser_t": dprsr,
                      "egress_intrinsic_metadata_for_output_port_t": self._new(
                          "egress_intrinsic_metadata_for_output_port_t")})
        self._run_control(egress, self._frame(egress, state))
        out = PacketOut()
        self._run_control(eg_deparser, self._frame(eg_deparser, {**state, "packet_out": out}))
        if _field(dprsr, "drop_ctl") & 1:
            return P4Result(None, b"")
        return P4Result(port, out.bytes() + pkt.rest())

    def _v1model(self, data: bytes, port: int, ts: int) -> P4Result:
        parser, verify, ingress, egress, compute, deparser = self.blocks
        sm = self._new("standard_metadata_t")
        sm.v.update(ingress_port=port, packet_length=len(data), ingress_global_timestamp=ts)
        pkt = PacketIn(data)
        state = {"packet_in": pkt, "headers_t": self._new("headers_t"), "metadata_t": self._new("metadata_t"),
                 "standard_metadata_t": sm, "__len__": len(data)}
        if not self._run_parser(parser, self._frame(parser, state)):
            sm.v["parser_error"] = self.env.enums["error.PacketTooShort"]
        self._run_control(verify, self._frame(verify, state))
        self._run_control(ingress, self._frame(ingress, state))
        if _field(sm, "egress_spec") == 511:
            return P4Result(None, b"")
        sm.v["egress_port"] = sm.v["egress_spec"]
        self._run_control(egress, self._frame(egress, state))
        if _field(sm, "egress_spec") == 511:
            return P4Result(None, b"")
        self._run_control(compute, self._frame(compute, state))
        out = PacketOut()
        self._run_control(deparser, self._frame(deparser, {**state, "packet_out": out}))
        return P4Result(_field(sm, "egress_port"), out.bytes() + pkt.rest())
