"""Bytes of a bridge header (layout from ``compiler.passes.bridge``): the cut id, one
validity bit per listed header, then the fields, most significant bit first, padded to
whole bytes.  Used by the switch model, and the reference every generator must match."""

from __future__ import annotations

from compiler.interp.bits import mask
from compiler.passes.bridge import Bridge

__all__ = ["BridgeError", "decode", "encode"]


class BridgeError(ValueError):
    """Bytes that are not a bridge header of the expected cut (too short, wrong cut id)."""


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
    values = {f.name: value >> (b.bits - f.offset - f.width) & mask(f.width) for f in b.fields}
    return valid, values
