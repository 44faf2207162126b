"""The types of .nfp expressions."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_WIDTH", "Bits", "Bool", "IntLiteral", "Type", "show"]

MAX_WIDTH = 2048


@dataclass(frozen=True, slots=True)
class Bits:
    """An unsigned bit vector ``bit<width>``; arithmetic wraps modulo 2**width."""

    width: int


@dataclass(frozen=True, slots=True)
class Bool:
    pass


@dataclass(frozen=True, slots=True)
class IntLiteral:
    """An integer literal whose width comes from the context it is used in."""

    value: int


Type = Bits | Bool | IntLiteral


def show(t: Type) -> str:
    match t:
        case Bits(width=w):
            return f"bit<{w}>"
        case Bool():
            return "bool"
        case IntLiteral():
            return "integer literal"
