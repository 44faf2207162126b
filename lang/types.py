"""The types of .nfp expressions."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_WIDTH", "Bits", "Bool", "IntLiteral", "Type", "Unknown", "show"]

MAX_WIDTH = 2048


@dataclass(frozen=True, slots=True)
class Bits:
    """An unsigned bit vector ``bit<width>``; arithmetic wraps modulo 2**width."""

    width: int


@dataclass(frozen=True, slots=True)
class Bool:
    pass


@dataclass(frozen=True, slots=True)
class Unknown:
    """The type of an expression whose error was already reported: compatible with
    everything, so one mistake does not cascade into more diagnostics."""


@dataclass(frozen=True, slots=True)
class IntLiteral:
    """An integer literal whose width comes from the context it is used in."""

    value: int


Type = Bits | Bool | IntLiteral | Unknown


def show(t: Type) -> str:
    match t:
        case Bits(width=w):
            return f"bit<{w}>"
        case Bool():
            return "bool"
        case IntLiteral():
            return "integer literal"
        case Unknown():
            return "unknown"
