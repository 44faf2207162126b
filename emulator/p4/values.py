"""Run-time values of the P4 executor: header and struct instances, and the packet cursor.

Bit strings are Python ints whose width the compiler knows statically (see
``emulator.p4.types``); a header or struct instance is an ``Obj`` holding its fields by name,
with ``valid`` for headers (``None`` for structs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from targets.p4 import syntax as p

__all__ = ["Obj", "PacketError", "PacketIn", "PacketOut", "fields_of"]


@dataclass(slots=True)
class Obj:
    """A header (``valid`` is a bool) or a struct (``valid`` is None) instance."""

    decl: p.HeaderType | p.Struct
    v: dict[str, object] = field(default_factory=dict)
    valid: bool | None = None


def fields_of(o: Obj) -> list[tuple[str, int, int]]:
    """(name, width, value) of a header's fields in declaration order."""
    out = []
    for name, t in o.decl.fields:
        assert isinstance(t, p.Bits), f"header field {o.decl.name}.{name} must be bit<N> after typedef resolution"
        out.append((name, t.width, int(o.v[name])))  # type: ignore[call-overload]
    return out


class PacketError(Exception):
    """The parser read past the end of the packet (P4 ``error.PacketTooShort``)."""


class PacketIn:
    """``packet_in``: a byte string read from the front, bit by bit."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.bits = len(data) * 8
        self.pos = 0  # in bits

    def _peek(self, width: int) -> int:
        if self.pos + width > self.bits:
            raise PacketError(f"{width} bits at bit {self.pos} of a {self.bits}-bit packet")
        first, last = self.pos // 8, (self.pos + width + 7) // 8
        chunk = int.from_bytes(self.data[first:last], "big")
        return (chunk >> ((last * 8) - self.pos - width)) & ((1 << width) - 1)

    def read(self, width: int) -> int:
        value = self._peek(width)
        self.pos += width
        return value

    def lookahead(self, width: int) -> int:
        return self._peek(width)

    def advance(self, width: int) -> None:
        if self.pos + width > self.bits:
            raise PacketError(f"advance by {width} bits past the end")
        self.pos += width

    def rest(self) -> bytes:
        """The bytes the parser did not consume (the payload the deparser appends)."""
        return self.data[(self.pos + 7) // 8:]


class PacketOut:
    """``packet_out``: the headers the deparser emits, then the unparsed payload."""

    def __init__(self) -> None:
        self.acc = 0
        self.nbits = 0

    def write(self, width: int, value: int) -> None:
        self.acc = (self.acc << width) | (value & ((1 << width) - 1))
        self.nbits += width

    def emit(self, o: Obj) -> None:
        if o.valid is None:  # a struct: its members in order
            for name, _t in o.decl.fields:
                member = o.v[name]
                if isinstance(member, Obj):
                    self.emit(member)
            return
        if o.valid:
            for _name, width, value in fields_of(o):
                self.write(width, value)

    def bytes(self) -> bytes:
        if self.nbits % 8:
            raise PacketError(f"the deparser emitted {self.nbits} bits, not a whole number of bytes")
        return self.acc.to_bytes(self.nbits // 8, "big") if self.nbits else b""
