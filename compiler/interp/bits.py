"""Bit-level packing of header fields (network byte order) and the RFC 1071 checksum."""

from __future__ import annotations

from compiler import ir
from compiler.manifest import bit_string, crc16  # one definition: the plan's shard hash is crc16

__all__ = ["bit_string", "crc16", "csum_update", "internet_checksum", "mask", "pack", "unpack"]


def mask(width: int) -> int:
    return (1 << width) - 1


def unpack(h: ir.HeaderType, data: bytes) -> dict[str, int]:
    """Split ``h.bits // 8`` bytes into field values, most significant bit first."""
    value = int.from_bytes(data[: h.bits // 8], "big")
    out: dict[str, int] = {}
    shift = h.bits
    for f in h.fields:
        shift -= f.width
        out[f.name] = (value >> shift) & mask(f.width)
    return out


def pack(h: ir.HeaderType, fields: dict[str, int]) -> bytes:
    value = 0
    for f in h.fields:
        value = (value << f.width) | (fields.get(f.name, 0) & mask(f.width))
    return value.to_bytes(h.bits // 8, "big")


def csum_update(csum: int, old: int, new: int, width: int) -> int:
    """RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), 16-bit one's complement, word by word."""
    total = ~csum & 0xFFFF
    for shift in range(width - 16, -1, -16):
        total += (~(old >> shift) & 0xFFFF) + ((new >> shift) & 0xFFFF)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def internet_checksum(data: bytes) -> int:
    """RFC 1071: one's complement of the one's complement sum of 16-bit words."""
    if len(data) % 2:
        data += b"\0"
    total = sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
