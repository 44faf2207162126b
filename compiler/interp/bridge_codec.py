"""Bytes of a bridge header (layout from ``compiler.passes.bridge``): the cut id, one
validity bit per listed header, then the fields, most significant bit first, padded to
whole bytes.  Used by the switch model, and the reference every generator must match."""

from __future__ import annotations

from compiler import ir
from compiler.interp.bits import mask, unpack
from compiler.interp.exec import Ctx
from compiler.placement import EGRESS, EGRESS_SET, Bridge

__all__ = ["BridgeError", "decode", "encode", "pack_ctx", "unpack_into"]


class BridgeError(ValueError):
    """Bytes that are not a bridge header of the expected cut (too short, wrong cut id, a
    required validity bit clear), or whose packet is shorter than the headers the bridge says
    are there."""

    @property
    def reason(self) -> str:
        return "truncated" if str(self) == "truncated" else "bad_bridge"


def encode(b: Bridge, valid: dict[str, bool], values: dict[str, int]) -> bytes:
    value = b.cut_id << (b.bits - 8)
    for i, inst in enumerate(b.valid_bits):
        if valid.get(inst):
            value |= 1 << (b.bits - 9 - i)
    for f in b.fields:
        value |= (values.get(f.name, 0) & mask(f.width)) << (b.bits - f.offset - f.width)
    return value.to_bytes(b.bytes, "big")


def decode(b: Bridge, data: bytes) -> tuple[dict[str, bool], dict[str, int]]:
    if len(data) < b.bytes:
        raise BridgeError(f"bridge #{b.cut_id} needs {b.bytes} bytes, got {len(data)}")
    value = int.from_bytes(data[: b.bytes], "big")
    if value >> (b.bits - 8) != b.cut_id:
        raise BridgeError(f"cut id {value >> (b.bits - 8)} is not {b.cut_id}")
    valid = {inst: bool(value >> (b.bits - 9 - i) & 1) for i, inst in enumerate(b.valid_bits)}
    missing = [inst for inst in b.required if not valid[inst]]
    if missing:
        raise BridgeError(f"bridge #{b.cut_id} says {', '.join(missing)} is invalid, which cannot be at this cut")
    values = {f.name: value >> (b.bits - f.offset - f.width) & mask(f.width) for f in b.fields}
    return valid, values


def pack_ctx(b: Bridge, ctx: Ctx) -> bytes:
    """The bridge header for packet ``ctx`` at cut ``b``."""
    valid = {i: ctx.headers.get(i) is not None for i in b.valid_bits}
    values = {}
    for f in b.fields:
        kind, _, name = f.name.partition(".")
        if f.name == EGRESS:
            values[f.name] = ctx.egress or 0
        elif f.name == EGRESS_SET:
            values[f.name] = int(ctx.egress is not None)
        else:
            values[f.name] = ctx.meta.get(name, 0) if kind == "meta" else ctx.std.get(name, 0)
    return encode(b, valid, values)


def unpack_into(b: Bridge, data: bytes, ctx: Ctx, program: ir.Program) -> None:
    """Decode bridge + packet into ``ctx``: re-parse the headers its validity bits name,
    restore the bridged fields; the rest is payload.  BridgeError (reason "bad_bridge" or
    "truncated") when the bytes do not fit."""
    valid, values = decode(b, data)
    offset = b.bytes
    for inst in b.valid_bits:
        if valid[inst]:
            h = program.header_of(inst)
            if offset + h.bits // 8 > len(data):
                raise BridgeError("truncated")
            ctx.headers[inst] = unpack(h, data[offset : offset + h.bits // 8])
            offset += h.bits // 8
    ctx.payload = data[offset:]
    ctx.parsed = True
    for name, value in values.items():
        kind, _, field = name.partition(".")
        if name == EGRESS:
            ctx.egress = value if values.get(EGRESS_SET) else None
        elif name == EGRESS_SET:
            continue
        elif kind == "meta":
            ctx.meta[field] = value
        else:
            ctx.std[field] = value
