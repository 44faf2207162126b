"""Symbolic semantics of the typed IR in Z3 — the reference interpreter's rules
(``compiler/interp/exec.py``) over symbolic packets.

A packet in flight is a :class:`SymState`: header validity as Booleans, fields, metadata and
std fields as bit-vectors, the egress port, and the outcome so far (``done``: dropped or
punted, with a reason code).  Control flow is merged rather than forked: every update is
guarded by the path condition and by "not done yet", so one state describes every path.
Tables are uninterpreted functions from the key to (hit, value fields), so what is proved
holds for all table contents; data-plane state tables are such functions too (the symbolic
pre-state), overlaid by the packet's own inserts and removes.  Registers and the ESP
anti-replay windows are the same: a function of the index (SA) for the state before the
packet, overlaid by its writes; the window logic (RFC 4303 Appendix A, A2.2) is exact.
Hashes, checksum updates, meters, other extern operations and the crypto of ESP are
uninterpreted functions of their arguments: both sides of an equivalence apply the same
ones, so they must be given the same arguments.  The payload is a symbol too (``payload``,
its content, and ``std[PAYLOAD]``, its length): ESP replaces both by functions of what it
encrypts or decrypts, and an equivalence compares them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import assert_never

import z3

from compiler import ir

__all__ = ["PAYLOAD", "Semantics", "SymState", "Unsupported"]

EGRESS_WIDTH = 32
REPLAY_WINDOW = 64  # compiler/interp/state.py's
# name -> the suite's tag (its uninterpreted functions are its own): "esn" carries a 64-bit number
ESP_DECRYPT = {"esp_decrypt": "32", "esp_decrypt_esn": "esn", "esp_decrypt_cbc": "cbc"}
ESP_ENCRYPT = {"esp_encrypt": "32", "esp_encrypt_esn": "esn", "esp_encrypt_cbc": "cbc"}
REPLAY = ("replay_check", "replay_check_esn")
# std key of the payload length fixed by the parser (frame length less the parsed headers)
PAYLOAD = "payload_length"
Lookup = Callable[["SymState", ir.Lookup, z3.BoolRef], None]


class Unsupported(Exception):
    """A construct the encoding does not cover (the message names it)."""


@dataclass
class SymState:
    valid: dict[str, z3.BoolRef]
    fields: dict[tuple[str, str], z3.BitVecRef]
    meta: dict[str, z3.BitVecRef]
    std: dict[str, z3.BitVecRef]
    egress: z3.BitVecRef
    egress_set: z3.BoolRef
    done: z3.BoolRef
    reason: z3.BitVecRef
    locals: dict[str, z3.BitVecRef] = field(default_factory=dict)
    results: dict[tuple[str, str], z3.BitVecRef] = field(default_factory=dict)
    # data-plane state: per table, the inserts/removes of this packet, oldest first
    overlays: dict[str, list[tuple[z3.BoolRef, z3.BitVecRef, z3.BoolRef, dict[str, z3.BitVecRef]]]] = \
        field(default_factory=dict)
    # registers (and "replay:top", "replay:bitmap": the anti-replay windows by SA): the writes
    # of this packet, oldest first, as (condition, index, value)
    writes: dict[str, list[tuple[z3.BoolRef, z3.BitVecRef, z3.BitVecRef]]] = field(default_factory=dict)
    payload: z3.BitVecRef | None = None  # the payload's content (a symbol; ESP makes new ones)

    def copy(self) -> SymState:
        return SymState(dict(self.valid), dict(self.fields), dict(self.meta), dict(self.std), self.egress,
                        self.egress_set, self.done, self.reason, dict(self.locals), dict(self.results),
                        {k: list(v) for k, v in self.overlays.items()}, {k: list(v) for k, v in self.writes.items()},
                        self.payload)

    def merge(self, cond: z3.BoolRef, other: SymState) -> None:
        """self := other where cond holds."""
        for k in self.valid:
            self.valid[k] = z3.If(cond, other.valid[k], self.valid[k])
        for fk in self.fields:
            self.fields[fk] = z3.If(cond, other.fields[fk], self.fields[fk])
        for mk in self.meta:
            self.meta[mk] = z3.If(cond, other.meta[mk], self.meta[mk])
        for sk in self.std:
            self.std[sk] = z3.If(cond, other.std[sk], self.std[sk])
        if self.payload is not None and other.payload is not None:
            self.payload = z3.If(cond, other.payload, self.payload)
        for name in set(self.writes) | set(other.writes):  # after what both had: each its own, guarded
            mine, theirs = self.writes.get(name, []), other.writes.get(name, [])
            same = 0
            while same < min(len(mine), len(theirs)) and mine[same] is theirs[same]:
                same += 1
            self.writes[name] = [*mine[:same], *[(z3.And(z3.Not(cond), c), i, v) for c, i, v in mine[same:]],
                                 *[(z3.And(cond, c), i, v) for c, i, v in theirs[same:]]]
        self.egress = z3.If(cond, other.egress, self.egress)
        self.egress_set = z3.If(cond, other.egress_set, self.egress_set)
        self.done = z3.If(cond, other.done, self.done)
        self.reason = z3.If(cond, other.reason, self.reason)


def _bv(v: z3.ExprRef, width: int) -> z3.BitVecRef:
    """A value as a bit-vector of ``width`` (Booleans as 0/1)."""
    if z3.is_bool(v):
        return z3.If(v, z3.BitVecVal(1, width, v.ctx), z3.BitVecVal(0, width, v.ctx))  # each proof has its own context
    assert isinstance(v, z3.BitVecRef)
    w = v.size()
    if w == width:
        return v
    return z3.ZeroExt(width - w, v) if w < width else z3.Extract(width - 1, 0, v)


def _internet_checksum_ok(data: z3.BitVecRef) -> z3.BoolRef:
    """RFC 1071: the one's complement sum of the 16-bit words (checksum included) is 0xffff."""
    n = data.size() // 16
    total = z3.Sum([z3.ZeroExt(16, z3.Extract(16 * i + 15, 16 * i, data)) for i in range(n)])
    for _ in range(2):
        total = (total & 0xFFFF) + z3.LShR(total, 16)
    return total & 0xFFFF == 0xFFFF


def _bool(v: z3.ExprRef) -> z3.BoolRef:
    if z3.is_bool(v):
        return v
    assert isinstance(v, z3.BitVecRef)
    return v != 0


class Semantics:
    """The symbolic reading of one program; ``reasons`` numbers drop/punt reasons."""

    def __init__(self, prog: ir.Program, ctx: z3.Context) -> None:
        self.prog = prog
        self.ctx = ctx
        self.reasons: dict[str, int] = {}
        self.lookups: list[tuple[str, z3.BitVecRef, str]] = []  # (table, key, "table" | "cache"): for counterexamples
        self._funcs: dict[str, z3.FuncDeclRef] = {}
        self._active = z3.BoolVal(True, ctx)  # the statement being run takes effect (its extern calls' effects)

    # ---- building blocks -------------------------------------------------------------------

    def reason_code(self, reason: str) -> z3.BitVecRef:
        code = self.reasons.setdefault(reason, len(self.reasons) + 1)
        return z3.BitVecVal(code, 16, self.ctx)

    def func(self, name: str, arg_bits: int, result: z3.SortRef) -> z3.FuncDeclRef:
        if name not in self._funcs:
            self._funcs[name] = z3.Function(name, z3.BitVecSort(max(1, arg_bits), self.ctx), result)
        return self._funcs[name]

    def _concat(self, values: list[z3.BitVecRef]) -> z3.BitVecRef:
        if not values:
            return z3.BitVecVal(0, 1, self.ctx)
        return values[0] if len(values) == 1 else z3.Concat(*values)

    def table_key(self, st: SymState, t: ir.Table) -> z3.BitVecRef:
        return self._concat([_bv(self.eval(k.expr, st), k.expr.width) for k in t.keys])

    def table_hit(self, t: ir.Table, key: z3.BitVecRef) -> z3.BoolRef:
        f = self.func(f"hit_{t.name}", key.size(), z3.BoolSort(self.ctx))
        return f(key)

    def table_value(self, t: ir.Table, fname: str, key: z3.BitVecRef) -> z3.BitVecRef:
        width = next(v.width for v in t.values if v.name == fname)
        f = self.func(f"{t.name}.{fname}", key.size(), z3.BitVecSort(width, self.ctx))
        return f(key)

    def cached(self, t: ir.Table, key: z3.BitVecRef) -> z3.BoolRef:
        """The switch cache holds the key (any subset of the table: the runtime's choice)."""
        f = self.func(f"cached_{t.name}", key.size(), z3.BoolSort(self.ctx))
        return f(key)

    def initial(self, prefix: str = "in") -> SymState:
        """A packet before parsing: every field a free variable, nothing valid."""
        p, c = self.prog, self.ctx
        fields = {(i.name, f.name): z3.BitVec(f"{prefix}.{i.name}.{f.name}", f.width, c)
                  for i in p.instances for f in p.headers[i.header].fields}
        std = {n: z3.BitVec(f"{prefix}.std.{n}", w, c) for n, w in
               (("ingress_port", 16), ("timestamp", 48), ("packet_length", 16))}
        return SymState({i.name: z3.BoolVal(False, c) for i in p.instances}, fields,
                        {f.name: z3.BitVecVal(0, f.width, c) for f in p.metadata}, std,
                        z3.BitVecVal(0, EGRESS_WIDTH, c), z3.BoolVal(False, c), z3.BoolVal(False, c),
                        z3.BitVecVal(0, 16, c), payload=z3.BitVec(f"{prefix}.payload", 64, c))

    # ---- parser ----------------------------------------------------------------------------

    def parse(self, st: SymState, graph: ir.ParserGraph) -> None:
        """Every path of the (loop-free) parse graph, merged: validity as the disjunction of the
        paths that extract a header; a drop or punt target ends the packet with its reason."""
        self._parse_state(st, graph, graph.state("start"), z3.BoolVal(True, self.ctx), 0)
        st.std[PAYLOAD] = st.std["packet_length"] - self._header_bytes(st)

    def _header_bytes(self, st: SymState) -> z3.BitVecRef:
        """The bytes of the valid headers, 16 bits wide as std.packet_length."""
        zero = z3.BitVecVal(0, 16, self.ctx)
        return sum((z3.If(st.valid[i.name], z3.BitVecVal(self.prog.header_of(i.name).bits // 8, 16, self.ctx), zero)
                    for i in self.prog.instances), zero)

    def packet_length(self, st: SymState) -> z3.BitVecRef:
        """std.packet_length as the interpreter has it: the frame while it is parsed, then the
        valid headers plus the payload."""
        if PAYLOAD not in st.std:
            return st.std["packet_length"]
        return self._header_bytes(st) + st.std[PAYLOAD]

    def _parse_state(self, st: SymState, g: ir.ParserGraph, s: ir.ParserState, pc: z3.BoolRef, depth: int) -> None:
        if depth > len(g.states):
            raise Unsupported(f"parser loop in {g.name}")
        for stmt in s.stmts:
            if isinstance(stmt, ir.Extract):
                self._guard_set_valid(st, stmt.inst, pc, True)
            else:
                self.exec(st, stmt, pc)
        rest = pc
        values = [self.eval(e, st) for e in s.select]
        for case in s.cases:
            cond = z3.And(*[_bv(v, e.width) & cm == cv for v, e, (cv, cm) in
                            zip(values, s.select, case.values, strict=True)]) if values else z3.BoolVal(True, self.ctx)
            self._target(st, g, case.target, z3.And(rest, cond), depth)
            rest = z3.And(rest, z3.Not(cond))
        self._target(st, g, s.default, rest, depth)

    def _target(self, st: SymState, g: ir.ParserGraph, t: ir.PTarget, pc: z3.BoolRef, depth: int) -> None:
        if t.kind == "state":
            self._parse_state(st, g, g.state(t.name), pc, depth + 1)
        elif t.kind in ("drop", "punt"):
            self._stop(st, pc, f"{'punt:' if t.kind == 'punt' else ''}{t.name}")

    def _guard_set_valid(self, st: SymState, inst: str, pc: z3.BoolRef, value: bool) -> None:
        active = z3.And(pc, z3.Not(st.done))
        st.valid[inst] = z3.If(active, z3.BoolVal(value, self.ctx), st.valid[inst])

    def _stop(self, st: SymState, pc: z3.BoolRef, reason: str) -> None:
        active = z3.And(pc, z3.Not(st.done))
        st.reason = z3.If(active, self.reason_code(reason), st.reason)
        st.done = z3.Or(st.done, active)

    # ---- statements ------------------------------------------------------------------------

    def run(self, st: SymState, stmts: tuple[ir.Stmt, ...], pc: z3.BoolRef, lookup: Lookup | None = None) -> None:
        for s in stmts:
            self.exec(st, s, pc, lookup)

    def exec(self, st: SymState, s: ir.Stmt, pc: z3.BoolRef, lookup: Lookup | None = None) -> None:
        active = z3.And(pc, z3.Not(st.done))
        self._active = active  # (a statement evaluates its expressions before running nested ones)
        match s:
            case ir.Assign():
                self._assign(st, s.target, self.eval(s.value, st), active)
            case ir.If():
                c = _bool(self.eval(s.cond, st))
                self.run(st, s.then, z3.And(pc, c), lookup)
                self.run(st, s.orelse, z3.And(pc, z3.Not(c)), lookup)
            case ir.Lookup():
                (lookup or self.lookup)(st, s, pc)
            case ir.Push():
                h = self.prog.header_of(s.inst)
                inits = {n: e for n, e in s.inits}
                for f in h.fields:
                    v = _bv(self.eval(inits[f.name], st), f.width) if f.name in inits else z3.BitVecVal(0, f.width,
                                                                                                      self.ctx)
                    st.fields[(s.inst, f.name)] = z3.If(active, v, st.fields[(s.inst, f.name)])
                self._guard_set_valid(st, s.inst, pc, True)
            case ir.Pop():
                self._guard_set_valid(st, s.inst, pc, False)
            case ir.Forward():
                st.egress = z3.If(active, _bv(self.eval(s.port, st), EGRESS_WIDTH), st.egress)
                st.egress_set = z3.Or(st.egress_set, active)
            case ir.Drop():
                self._stop(st, pc, s.reason)
            case ir.Punt():
                self._stop(st, pc, f"punt:{s.reason}")
            case ir.Verify():
                self._stop(st, z3.And(pc, z3.Not(_bool(self.eval(s.cond, st)))), s.reason)
            case ir.Eval():
                self.eval(s.expr, st)
            case ir.Insert():
                t = self.prog.tables[s.state]
                values = {n: _bv(self.eval(e, st), next(v.width for v in t.values if v.name == n)) for n, e in s.values}
                st.overlays.setdefault(t.name, []).append((active, self.table_key(st, t), z3.BoolVal(True, self.ctx),
                                                           values))
            case ir.Remove():
                t = self.prog.tables[s.state]
                st.overlays.setdefault(t.name, []).append((active, self.table_key(st, t), z3.BoolVal(False, self.ctx),
                                                           {}))
            case ir.Refresh():
                pass  # a timer: what this packet sees of the table does not change
            case ir.Extract():
                raise Unsupported("extract outside a parser")
            case _:
                assert_never(s)

    def lookup(self, st: SymState, s: ir.Lookup, pc: z3.BoolRef) -> None:
        """A lookup in the full table (or data-plane state)."""
        t = self.prog.tables[s.table]
        key = self.table_key(st, t)
        self.lookups.append((t.name, key, "table"))
        hit = self.table_hit(t, key)
        values = {v.name: self.table_value(t, v.name, key) for v in t.values}
        for cond, k, present, vals in st.overlays.get(t.name, []):  # this packet's own inserts/removes
            here = z3.And(cond, k == key)
            hit = z3.If(here, present, hit)
            values = {n: z3.If(here, vals.get(n, v), v) for n, v in values.items()}
        self.bind(st, s, pc, hit, values)

    def bind(self, st: SymState, s: ir.Lookup, pc: z3.BoolRef, hit: z3.BoolRef,
             values: dict[str, z3.BitVecRef]) -> None:
        active = z3.And(pc, z3.Not(st.done), hit)
        for n, v in values.items():
            old = st.results.get((s.table, n), z3.BitVecVal(0, v.size(), self.ctx))
            st.results[(s.table, n)] = z3.If(active, v, old)
        self.run(st, s.hit, z3.And(pc, hit))
        self.run(st, s.miss, z3.And(pc, z3.Not(hit)))

    def _assign(self, st: SymState, target: ir.LValue, value: z3.ExprRef, active: z3.BoolRef) -> None:
        match target:
            case ir.HeaderField():
                k = (target.inst, target.field)
                st.fields[k] = z3.If(z3.And(active, st.valid[target.inst]), _bv(value, target.width), st.fields[k])
            case ir.MetaField():
                st.meta[target.name] = z3.If(active, _bv(value, target.width), st.meta[target.name])
            case ir.Local():
                old = st.locals.get(target.name, z3.BitVecVal(0, max(1, target.width), self.ctx))
                st.locals[target.name] = z3.If(active, _bv(value, max(1, target.width)), old)
            case ir.RegRead():
                reg = self.prog.registers[target.reg]
                idx = _bv(self.eval(target.index, st), 64)
                st.writes.setdefault(reg.name, []).append(
                    (z3.And(active, z3.ULT(idx, reg.size)), idx, _bv(value, reg.width)))
            case _:
                assert_never(target)

    # ---- registers, anti-replay windows, ESP -----------------------------------------------

    def state_read(self, st: SymState, name: str, idx: z3.BitVecRef, width: int) -> z3.BitVecRef:
        """Entry ``idx`` of register-like state ``name``: its value before the packet (a
        function of the index), overlaid by the packet's writes."""
        v = self.func(f"state_{name}", idx.size(), z3.BitVecSort(width, self.ctx))(idx)
        for cond, i, w in st.writes.get(name, []):
            v = z3.If(z3.And(cond, i == idx), w, v)
        return v

    def _register(self, st: SymState, e: ir.RegRead) -> z3.BitVecRef:
        reg = self.prog.registers[e.reg]
        idx = _bv(self.eval(e.index, st), 64)
        return z3.If(z3.ULT(idx, reg.size), self.state_read(st, reg.name, idx, reg.width), z3.BitVecVal(0, reg.width,
                                                                                                   self.ctx))

    def _replay_check(self, st: SymState, sa: z3.BitVecRef, seq: z3.BitVecRef) -> z3.BoolRef:
        """RFC 4303 Appendix A over 64-bit numbers, exactly as compiler/interp/state.py."""
        top, bitmap = self.state_read(st, "replay:top", sa, 64), self.state_read(st, "replay:bitmap", sa, 64)
        new, off = z3.UGT(seq, top), top - seq
        seen = z3.Extract(0, 0, z3.LShR(bitmap, off)) == 1
        ok = z3.And(seq != 0, z3.Or(new, z3.And(z3.ULT(off, REPLAY_WINDOW), z3.Not(seen))))
        shift = seq - top
        moved = z3.If(z3.ULT(shift, REPLAY_WINDOW), (bitmap << shift) | 1, z3.BitVecVal(1, 64, self.ctx))
        take = z3.And(self._active, ok)
        st.writes.setdefault("replay:top", []).append((take, sa, z3.If(new, seq, top)))
        st.writes.setdefault("replay:bitmap", []).append(
            (take, sa, z3.If(new, moved, bitmap | (z3.BitVecVal(1, 64, self.ctx) << off))))
        return ok

    def _esn_high(self, st: SymState, sa: z3.BitVecRef, seql: z3.BitVecRef) -> z3.BitVecRef:
        """RFC 4303 Appendix A2.2, as compiler/interp/state.py's esn_high."""
        top = self.state_read(st, "replay:top", sa, 64)
        th, tl = z3.Extract(63, 32, top), z3.Extract(31, 0, top)
        back = tl - (REPLAY_WINDOW - 1)  # modulo 2^32
        case_a = z3.If(z3.UGE(seql, back), th, th + 1)
        case_b = z3.If(z3.And(th != 0, z3.UGE(seql, back)), th - 1, th)
        return z3.If(z3.UGE(tl, REPLAY_WINDOW - 1), case_a, case_b)

    def _esp_fields(self, st: SymState, inst: str) -> list[z3.BitVecRef]:
        """A header's validity and fields as an argument (an invalid one's fields as 0)."""
        c = self.ctx
        h = self.prog.header_of(inst)
        valid = st.valid[inst]
        return [z3.If(valid, z3.BitVecVal(1, 1, c), z3.BitVecVal(0, 1, c)),
                *[z3.If(valid, st.fields[(inst, f.name)], z3.BitVecVal(0, f.width, c)) for f in h.fields]]

    def _esp_decrypt(self, st: SymState, e: ir.ExternCall, tag: str) -> z3.BoolRef:
        """esp_decrypt(_esn, _cbc): whether the ICV verifies, and the plaintext's content and length, are
        functions of the ESP header, the key material and the payload; on success ``outer`` and
        ``esp`` are invalid and the plaintext is the payload."""
        outer, esp = (a.inst for a in e.args[:2] if isinstance(a, ir.HeaderRef))
        assert st.payload is not None
        data = self._concat([*self._esp_fields(st, esp), *[_bv(self.eval(a, st), a.width) for a in e.args[2:]],
                             st.payload, st.std[PAYLOAD]])
        ok = z3.And(st.valid[esp], self.func(f"esp_ok_{tag}", data.size(), z3.BoolSort(self.ctx))(data))
        take = z3.And(self._active, ok)
        for inst in (outer, esp):
            st.valid[inst] = z3.If(take, z3.BoolVal(False, self.ctx), st.valid[inst])
        st.payload = z3.If(take, self.func(f"esp_plain_{tag}", data.size(), z3.BitVecSort(64, self.ctx))(data),
                           st.payload)
        st.std[PAYLOAD] = z3.If(take, self.func(f"esp_plain_len_{tag}", data.size(),
                                                z3.BitVecSort(16, self.ctx))(data), st.std[PAYLOAD])
        return ok

    def _esp_encrypt(self, st: SymState, e: ir.ExternCall, tag: str) -> None:
        """esp_encrypt(_esn, _cbc): the headers after ``esp`` and the payload become a payload whose
        content and length are functions of them and of the key material; ``outer`` and ``esp``
        are filled in as compiler/interp/externs.py does."""
        c = self.ctx
        outer, esp = (a.inst for a in e.args[:2] if isinstance(a, ir.HeaderRef))
        args = [_bv(self.eval(a, st), a.width) for a in e.args[2:]]
        (spi, seq), keys, (src, dst) = args[:2], args[2:-2], args[-2:]  # the key material between
        names = [i.name for i in self.prog.instances]
        after = names[names.index(esp) + 1:]
        assert st.payload is not None
        data = self._concat([*[v for i in after for v in self._esp_fields(st, i)], st.payload, st.std[PAYLOAD],
                             spi, seq, *keys])
        length = self.func(f"esp_sealed_len_{tag}", data.size(), z3.BitVecSort(16, c))(data)
        take = self._active
        st.payload = z3.If(take, self.func(f"esp_sealed_{tag}", data.size(), z3.BitVecSort(64, c))(data), st.payload)
        st.std[PAYLOAD] = z3.If(take, length, st.std[PAYLOAD])
        for i in after:
            st.valid[i] = z3.If(take, z3.BoolVal(False, c), st.valid[i])
        filled = {outer: {"version": 4, "ihl": 5, "total_len": length + 28, "ttl": 64, "protocol": 50, "src": src,
                          "dst": dst},
                  esp: {"spi": spi, "seq": z3.Extract(31, 0, seq) if tag == "esn" else seq}}
        for inst, values in filled.items():
            for f in self.prog.header_of(inst).fields:
                v = values.get(f.name, 0)
                bv = z3.BitVecVal(v, f.width, c) if isinstance(v, int) else _bv(v, f.width)
                st.fields[(inst, f.name)] = z3.If(take, bv, st.fields[(inst, f.name)])
            st.valid[inst] = z3.If(take, z3.BoolVal(True, c), st.valid[inst])

    # ---- expressions -----------------------------------------------------------------------

    def eval(self, e: ir.Expr, st: SymState) -> z3.ExprRef:
        c = self.ctx
        match e:
            case ir.Const():
                return z3.BoolVal(bool(e.value), c) if e.width == ir.BOOL else z3.BitVecVal(e.value, e.width, c)
            case ir.HeaderField():
                return z3.If(st.valid[e.inst], st.fields[(e.inst, e.field)], z3.BitVecVal(0, e.width, c))
            case ir.MetaField():
                return st.meta[e.name]
            case ir.StdField():
                if e.name == "packet_length":
                    return _bv(self.packet_length(st), e.width)
                if e.name not in st.std:
                    raise Unsupported(f"std.{e.name}")
                return _bv(st.std[e.name], e.width)
            case ir.Local():
                return st.locals.get(e.name, z3.BitVecVal(0, max(1, e.width), c))
            case ir.Result():
                return st.results.get((e.table, e.field), z3.BitVecVal(0, e.width, c))
            case ir.Valid():
                return st.valid[e.inst]
            case ir.ChecksumOk():
                h = self.prog.header_of(e.inst)
                data = self._concat([st.fields[(e.inst, f.name)] for f in h.fields])
                if data.size() % 16:
                    raise Unsupported(f"checksum over {h.name}, not a whole number of 16-bit words")
                return z3.And(st.valid[e.inst], _internet_checksum_ok(data))
            case ir.RegRead():
                return self._register(st, e)
            case ir.HeaderRef():
                raise Unsupported("a header-valued argument of an operation the encoding does not know")
            case ir.Hash():
                data = self._concat([_bv(self.eval(a, st), max(1, a.width)) for a in e.args])
                return self.func(f"{e.alg}_{data.size()}", data.size(), z3.BitVecSort(e.width, c))(data)
            case ir.CsumUpdate():
                data = self._concat([_bv(self.eval(a, st), a.width) for a in (e.csum, e.old, e.new)])
                return self.func(f"csum_update_{data.size()}", data.size(), z3.BitVecSort(16, c))(data)
            case ir.ExternCall() if e.name in ESP_DECRYPT:
                return self._esp_decrypt(st, e, ESP_DECRYPT[e.name])
            case ir.ExternCall() if e.name in ESP_ENCRYPT:
                self._esp_encrypt(st, e, ESP_ENCRYPT[e.name])
                return z3.BitVecVal(0, 1, c)
            case ir.ExternCall() if e.name in REPLAY:
                return self._replay_check(st, _bv(self.eval(e.args[0], st), 32), _bv(self.eval(e.args[1], st), 64))
            case ir.ExternCall() if e.name == "esn_high":
                return self._esn_high(st, _bv(self.eval(e.args[0], st), 32), _bv(self.eval(e.args[1], st), 32))
            case ir.ExternCall():
                if any(isinstance(a, ir.HeaderRef) for a in e.args):
                    raise Unsupported(f"operation {e.name} on whole headers")
                data = self._concat([_bv(self.eval(a, st), max(1, a.width)) for a in e.args])
                return self.func(f"extern_{e.name}", data.size(), z3.BitVecSort(max(1, e.width), c))(data)
            case ir.CounterOp():
                if e.method == "count":
                    return z3.BoolVal(True, c)
                idx = _bv(self.eval(e.index, st), 32)
                return self.func(f"meter_{e.obj}", 32, z3.BitVecSort(e.width, c))(idx)
            case ir.Unary():
                v = self.eval(e.operand, st)
                if e.op == "!":
                    return z3.Not(_bool(v))
                return ~_bv(v, e.width) if e.op == "~" else -_bv(v, e.width)
            case ir.Binary():
                return self._binary(e, st)
            case ir.Slice():
                return z3.Extract(e.hi, e.lo, _bv(self.eval(e.base, st), e.base.width))
            case ir.Cast():
                v = self.eval(e.operand, st)
                return _bool(v) if e.width == ir.BOOL else _bv(v, e.width)
            case _:
                assert_never(e)

    def _binary(self, e: ir.Binary, st: SymState) -> z3.ExprRef:
        op = e.op
        if op in ("&&", "||"):
            a = _bool(self.eval(e.left, st))
            outer = self._active  # the right operand runs (its extern calls' effects) only if needed
            self._active = z3.And(outer, a) if op == "&&" else z3.And(outer, z3.Not(a))
            try:
                b = _bool(self.eval(e.right, st))
            finally:
                self._active = outer
            return z3.And(a, b) if op == "&&" else z3.Or(a, b)
        if op == "++":
            return z3.Concat(_bv(self.eval(e.left, st), e.left.width), _bv(self.eval(e.right, st), e.right.width))
        if op in ("<<", ">>"):
            wa = max(1, e.width)
            wb = max(wa, e.right.width)
            a, b = _bv(self.eval(e.left, st), wb), _bv(self.eval(e.right, st), wb)
            shifted = a << b if op == "<<" else z3.LShR(a, b)
            return z3.If(z3.ULT(b, wa), z3.Extract(wa - 1, 0, shifted), z3.BitVecVal(0, wa, self.ctx))
        w = max(e.left.width, e.right.width, e.width, 1)
        a, b = _bv(self.eval(e.left, st), w), _bv(self.eval(e.right, st), w)
        match op:
            case "+":
                return _bv(a + b, e.width)
            case "-":
                return _bv(a - b, e.width)
            case "&":
                return _bv(a & b, e.width)
            case "|":
                return _bv(a | b, e.width)
            case "^":
                return _bv(a ^ b, e.width)
            case "==":
                return a == b
            case "!=":
                return a != b
            case "<":
                return z3.ULT(a, b)
            case "<=":
                return z3.ULE(a, b)
            case ">":
                return z3.UGT(a, b)
            case ">=":
                return z3.UGE(a, b)
        raise Unsupported(f"operator {op}")
