"""The externs of TNA (``tofino1_base.p4``) and v1model (``v1model.p4``) that nfc's
programs call, and ``packet_in`` / ``packet_out`` from ``core.p4``.

* CRC16 is CRC-16/ARC (poly 0x8005 reflected, init 0, no final xor) and CRC32 is
  IEEE 802.3 (zlib), as bmv2's ``crc16``/``crc32`` and TNA's ``HashAlgorithm_t.CRC16`` /
  ``CRC32``; the field list is hashed as one bit string, zero-padded to whole bytes.
* Internet checksums (TNA ``Checksum``, v1model ``csum16``) are RFC 1071 one's complement
  sums over the 16-bit words of the concatenated fields.
* An unconfigured meter colours every packet green (TNA and bmv2 both start meters
  unconfigured); a configured one is RFC 2698's trTCM over the bytes of the packet as it
  arrived; the meter's colour is TNA's ``MeterColor_t`` / v1model's encoding.
"""

from __future__ import annotations

import zlib
from collections import Counter as Tally
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from compiler.interp.bits import bit_string, crc16, internet_checksum
from compiler.interp.meter import GREEN, RED, MeterConfig, TrTcm
from emulator.p4.compile import BOOL, Compiler, Fn, Frame, mask
from emulator.p4.types import TypeErrorP4
from emulator.p4.values import Obj, PacketIn, fields_of
from targets.p4 import syntax as p

__all__ = ["CounterObj", "ExternLib", "HashObj", "MeterObj", "RegisterActionObj", "RegisterObj", "instantiate"]

V1_DROP_PORT = 511  # bmv2 simple_switch: mark_to_drop sets egress_spec to the drop port
TNA_RED = 3  # MeterColor_t.RED (tofino1_base.p4)


def _crc(alg: str, data: bytes) -> int:
    if alg in ("CRC16", "crc16"):
        return crc16(data)
    if alg in ("CRC32", "crc32"):
        return zlib.crc32(data)
    raise TypeErrorP4(f"hash algorithm {alg} is not in the executed subset")


def _csum16(parts: list[tuple[int, int]]) -> int:
    """The folded one's complement sum of the 16-bit words of the fields (RFC 1071)."""
    return ~internet_checksum(bit_string(parts)) & 0xFFFF


@dataclass
class HashObj:
    alg: str
    width: int


@dataclass
class ChecksumObj:
    parts: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class CounterObj:
    size: int
    packets: Tally[int] = field(default_factory=Tally)
    bytes: Tally[int] = field(default_factory=Tally)


@dataclass
class MeterObj:
    """A meter's indices: RFC 2698 trTCM (colour-blind, bytes) once P4Runtime set its rates
    (``MeterEntry``); green while unset, as both architectures start."""

    size: int
    config: dict[int, MeterConfig] = field(default_factory=dict)
    buckets: dict[int, TrTcm] = field(default_factory=dict)

    def set(self, index: int, cfg: MeterConfig | None) -> None:
        """Rates for an index (None: back to unset); its buckets start full."""
        self.buckets.pop(index, None)
        if cfg is None:
            self.config.pop(index, None)
        else:
            self.config[index] = cfg
            self.buckets[index] = TrTcm.start(cfg)

    def execute(self, index: int, nbytes: int, now: float) -> int:
        """0 green, 1 yellow, 2 red."""
        b = self.buckets.get(index) if 0 <= index < self.size else None
        return GREEN if b is None else b.colour(nbytes, now)


@dataclass
class RegisterObj:
    """A register's cells (every cell 0 at start: TNA's initial value argument, bmv2's default);
    out-of-range reads give 0 and writes do nothing, as the reference semantics does."""

    size: int
    width: int
    cells: dict[int, int] = field(default_factory=dict)

    def read(self, index: int) -> int:
        return self.cells.get(index, 0) if 0 <= index < self.size else 0

    def write(self, index: int, value: int) -> None:
        if 0 <= index < self.size:
            self.cells[index] = value & mask(self.width)


@dataclass
class RegisterActionObj:
    """A TNA ``RegisterAction``: its register and its ``apply`` body, compiled by the executor
    (a function of a frame holding ``value`` and ``rv``)."""

    register: RegisterObj
    apply: Callable[[Frame], None] | None = None

    def execute(self, f: Frame, index: int) -> int:
        assert self.apply is not None, "the executor compiles apply before any packet"
        inner = dict(f)
        inner["value"], inner["rv"] = self.register.read(index), 0
        self.apply(inner)
        self.register.write(index, inner["value"])
        return int(inner["rv"])


def instantiate(inst: p.Instance, enums: dict[str, int], declared: dict[str, Any] | None = None) -> Any:
    """The run-time object of an extern instance declared in a parser or control (``declared``:
    the block's instances before it, which a ``RegisterAction`` names its register among)."""
    name = inst.type.name
    if name == "Hash":
        alg = inst.args[0]
        assert isinstance(alg, p.Member)
        return HashObj(alg.field, _width_arg(inst))
    if name == "Checksum":
        return ChecksumObj()
    if name in ("Counter", "counter", "DirectCounter", "direct_counter"):
        return CounterObj(_size_arg(inst))
    if name in ("Meter", "meter"):
        return MeterObj(_size_arg(inst))
    if name in ("Register", "register"):
        return RegisterObj(_size_arg(inst), _width_arg(inst))
    if name == "RegisterAction":
        reg = (declared or {}).get(inst.args[0].name) if inst.args and isinstance(inst.args[0], p.Path) else None
        if not isinstance(reg, RegisterObj):
            raise TypeErrorP4(f"{inst.name}: a RegisterAction needs a Register declared before it")
        return RegisterActionObj(reg)
    raise TypeErrorP4(f"extern {name} is not in the executed subset")


def _width_arg(inst: p.Instance) -> int:
    t = inst.type.args[0] if inst.type.args else None
    if not isinstance(t, p.Bits):
        raise TypeErrorP4(f"{inst.name}: {inst.type.name} needs a bit<W> type argument")
    return t.width


def _size_arg(inst: p.Instance) -> int:
    size = inst.args[0] if inst.args else None
    if not isinstance(size, p.Const):
        raise TypeErrorP4(f"{inst.name}: the size must be a literal")
    return size.value


class ExternLib:
    """Extern methods and functions of one architecture (``arch``: tna, t2na or v1model)."""

    def __init__(self, arch: str) -> None:
        self.arch = arch

    # ---- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _list(c: Compiler, e: p.Expr, scope: dict[str, p.Type]) -> Fn:
        """A field list (or one header) as [(value, width)] at run time."""
        if isinstance(e, p.ListExpr):
            items = [c.bits(x, scope) for x in e.items]
            parts = [(fn, c.env.width(t)) for fn, t in items]
            return lambda f: [(fn(f), w) for fn, w in parts]
        obj, _ = c.expr(e, scope)
        return lambda f: [(v, w) for _n, w, v in fields_of(obj(f))]

    def _args(self, call: p.Call, n: int) -> tuple[p.Expr, ...]:
        if len(call.args) != n:
            raise TypeErrorP4(f"{call.target} takes {n} arguments, not {len(call.args)}")
        return call.args

    # ---- methods ---------------------------------------------------------------------------

    def method(self, c: Compiler, inst_type: p.TypeName, obj: Fn, method: str, call: p.Call,
               scope: dict[str, p.Type]) -> tuple[Fn, p.Type]:
        key = (inst_type.name, method)
        if key == ("packet_in", "extract"):
            return self._extract(c, obj, call, scope)
        if key == ("packet_in", "lookahead"):
            w = c.env.width(call.type_args[0])
            return (lambda f: obj(f).lookahead(w)), p.Bits(w)
        if key == ("packet_in", "advance"):
            (n,) = self._args(call, 1)
            amount, _ = c.expr(n, scope)
            return (lambda f: obj(f).advance(amount(f))), p.TypeName("void")
        if key == ("packet_out", "emit"):
            (x,) = self._args(call, 1)
            what, _ = c.expr(x, scope)
            return (lambda f: obj(f).emit(what(f))), p.TypeName("void")
        if key == ("Hash", "get"):
            (data,) = self._args(call, 1)
            parts = self._list(c, data, scope)

            def get(f: Frame) -> int:
                h: HashObj = obj(f)
                return _crc(h.alg, bit_string(parts(f))) & mask(h.width)
            width = c.env.width(inst_type.args[0]) if inst_type.args else 32
            return get, p.Bits(width)
        if inst_type.name == "Checksum":
            return self._checksum(c, obj, method, call, scope)
        if method == "count":
            (index,) = self._args(call, 1)
            idx, _ = c.bits(index, scope)

            def count(f: Frame) -> None:
                ctr: CounterObj = obj(f)
                i = idx(f)
                if i < ctr.size:
                    ctr.packets[i] += 1
                    ctr.bytes[i] += f["__len__"]
            return count, p.TypeName("void")
        if key == ("Meter", "execute"):
            (index,) = self._args(call, 1)
            idx, _ = c.bits(index, scope)

            def execute(f: Frame) -> int:  # MeterColor_t (tofino1_base.p4): GREEN 0, YELLOW 1, RED 3
                colour = obj(f).execute(idx(f), f["__len__"], f["__now__"])
                return TNA_RED if colour == RED else colour
            return execute, p.Bits(8)
        if key == ("RegisterAction", "execute"):
            (index,) = self._args(call, 1)
            idx, _ = c.bits(index, scope)
            return (lambda f: obj(f).execute(f, idx(f))), inst_type.args[2]
        if key == ("register", "read"):  # v1model.p4 (V1MODEL_VERSION 20180101): read(out T, in bit<32>)
            out, index = self._args(call, 2)
            setter, _t = c.lvalue(out, scope)
            idx, _ = c.bits(index, scope)
            return (lambda f: setter(f, obj(f).read(idx(f)))), p.TypeName("void")
        if key == ("register", "write"):
            index, value = self._args(call, 2)
            idx, _ = c.bits(index, scope)
            val, _ = c.bits(value, scope)
            return (lambda f: obj(f).write(idx(f), val(f))), p.TypeName("void")
        if key == ("meter", "execute_meter"):  # v1model.p4: GREEN 0, YELLOW 1, RED 2
            index, out = self._args(call, 2)
            idx, _ = c.bits(index, scope)
            setter, _t = c.lvalue(out, scope)
            return (lambda f: setter(f, obj(f).execute(idx(f), f["__len__"], f["__now__"]))), p.TypeName("void")
        raise TypeErrorP4(f"{inst_type.name}.{method} is not in the executed subset")

    def _extract(self, c: Compiler, obj: Fn, call: p.Call, scope: dict[str, p.Type]) -> tuple[Fn, p.Type]:
        (target,) = self._args(call, 1)
        hdr, t = c.expr(target, scope)
        decl = c.env.decl(t)
        layout = [(n, c.env.width(ft)) for n, ft in decl.fields]

        def extract(f: Frame) -> None:
            pkt: PacketIn = obj(f)
            h: Obj = hdr(f)
            for n, w in layout:
                h.v[n] = pkt.read(w)
            h.valid = True
        return extract, p.TypeName("void")

    def _checksum(self, c: Compiler, obj: Fn, method: str, call: p.Call,
                  scope: dict[str, p.Type]) -> tuple[Fn, p.Type]:
        if method == "add":
            (data,) = self._args(call, 1)
            parts = self._list(c, data, scope)
            return (lambda f: obj(f).parts.extend(parts(f))), p.TypeName("void")
        if method == "verify":
            return (lambda f: _csum16(obj(f).parts) == 0xFFFF), BOOL
        if method == "update":  # (data, zeros_as_ones): the optional flag sends a zero sum as all ones
            data, *zeros = call.args
            parts = self._list(c, data, scope)
            as_ones = c.expr(zeros[0], scope)[0] if zeros else (lambda f: False)

            def update(f: Frame) -> int:
                value = ~_csum16(parts(f)) & 0xFFFF
                return 0xFFFF if value == 0 and as_ones(f) else value
            return update, p.Bits(16)
        raise TypeErrorP4(f"Checksum.{method} is not in the executed subset")

    # ---- free functions (v1model) --------------------------------------------------------------

    def function(self, c: Compiler, name: str, call: p.Call, scope: dict[str, p.Type]) -> tuple[Fn, p.Type] | None:
        if self.arch != "v1model":
            return None
        if name == "mark_to_drop":
            (sm,) = self._args(call, 1)
            meta, _ = c.expr(sm, scope)

            def drop(f: Frame) -> None:
                meta(f).v["egress_spec"] = V1_DROP_PORT
            return drop, p.TypeName("void")
        if name == "hash":
            out, algo, base, data, max_ = self._args(call, 5)
            setter, rt = c.lvalue(out, scope)
            m = mask(c.env.width(rt))
            alg = algo.field if isinstance(algo, p.Member) else ""
            base_fn, _ = c.expr(base, scope)
            max_fn, _ = c.expr(max_, scope)
            parts = self._list(c, data, scope)

            def hash_(f: Frame) -> None:
                h, top = _crc(alg, bit_string(parts(f))), max_fn(f)
                setter(f, (base_fn(f) + (h % top if top else 0)) & m)
            return hash_, p.TypeName("void")
        if name == "update_checksum":
            cond, data, target, _algo = self._args(call, 4)
            when = c.boolean(cond, scope)
            parts = self._list(c, data, scope)
            setter, _ = c.lvalue(target, scope)

            def update(f: Frame) -> None:
                if when(f):
                    setter(f, ~_csum16(parts(f)) & 0xFFFF)
            return update, p.TypeName("void")
        return None

