"""Concrete table contents and the match semantics of every match kind.

An entry gives, per key field, a ``Match``: exact value, value/prefix length (lpm),
value/mask (ternary) or low/high (range).  A lookup returns the winning entry:

* exact-only tables: the entry equal on every field (keys are unique);
* with a ternary or range field, whatever else the key has (an lpm field too): the
  matching entry with the highest ``priority`` (P4Runtime §9.1 gives such a table's
  entries a priority); among equal priorities the one inserted first;
* otherwise, with an lpm field: the matching entry with the longest prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler import ir
from compiler.interp.bits import mask

__all__ = ["Entry", "Match", "TableContents", "TableError"]


class TableError(ValueError):
    """A bad entry: wrong key names, value out of range, duplicate, table full."""


@dataclass(frozen=True, slots=True)
class Match:
    value: int
    arg: int | None = None  # lpm: prefix length; ternary: mask; range: high bound

    def matches(self, kind: str, width: int, v: int) -> bool:
        if kind == "exact":
            return v == self.value
        if kind == "lpm":
            plen = width if self.arg is None else self.arg
            m = mask(width) ^ mask(width - plen)
            return (v & m) == (self.value & m)
        if kind == "ternary":
            m = mask(width) if self.arg is None else self.arg
            return (v & m) == (self.value & m)
        hi = self.value if self.arg is None else self.arg
        return self.value <= v <= hi


@dataclass(frozen=True, slots=True)
class Entry:
    key: tuple[Match, ...]  # in the table's key order
    values: dict[str, int] = field(hash=False)
    priority: int = 0


class TableContents:
    """The entries of one table, checked against its declaration."""

    def __init__(self, table: ir.Table) -> None:
        self.table = table
        self.entries: list[Entry] = []
        self._exact: dict[tuple[int, ...], Entry] = {}

    def _check(self, e: Entry) -> None:
        t = self.table
        if len(e.key) != len(t.keys):
            raise TableError(f"{t.name}: entry has {len(e.key)} key fields, table has {len(t.keys)}")
        for k, m in zip(t.keys, e.key, strict=True):
            w = k.expr.width
            if not 0 <= m.value <= mask(w):
                raise TableError(f"{t.name}.{k.name}: value {m.value} does not fit in bit<{w}>")
            if k.match == "lpm" and m.arg is not None and not 0 <= m.arg <= w:
                raise TableError(f"{t.name}.{k.name}: prefix length {m.arg} must be 0..{w}")
            if k.match == "range" and m.arg is not None and not m.value <= m.arg <= mask(w):
                raise TableError(f"{t.name}.{k.name}: range {m.value}..{m.arg} is empty or too wide")
        names = {v.name for v in t.values}
        if set(e.values) != names:
            raise TableError(f"{t.name}: entry values must be exactly {sorted(names)}, not {sorted(e.values)}")
        for v in t.values:
            if not 0 <= e.values[v.name] <= mask(v.width):
                raise TableError(f"{t.name}.{v.name}: value {e.values[v.name]} does not fit in bit<{v.width}>")

    def _ident(self, e: Entry) -> tuple[object, ...]:
        return (tuple((m.value, m.arg) for m in e.key), e.priority)

    def insert(self, e: Entry) -> None:
        self._check(e)
        if any(self._ident(x) == self._ident(e) for x in self._candidates(e)):
            raise TableError(f"{self.table.name}: an entry with this key already exists")
        if len(self.entries) >= self.table.size:
            raise TableError(f"{self.table.name}: table is full ({self.table.size} entries)")
        self.entries.append(e)
        if self.table.match == "exact":
            self._exact[tuple(m.value for m in e.key)] = e

    def _candidates(self, e: Entry) -> list[Entry]:
        if self.table.match == "exact":
            hit = self._exact.get(tuple(m.value for m in e.key))
            return [hit] if hit else []
        return self.entries

    def delete(self, key: tuple[Match, ...], priority: int = 0) -> Entry:
        probe = Entry(key, {}, priority)
        for x in self._candidates(probe):
            if self._ident(x) == self._ident(probe):
                self.entries.remove(x)
                if self.table.match == "exact":
                    del self._exact[tuple(m.value for m in x.key)]
                return x
        raise TableError(f"{self.table.name}: no entry with this key")

    def lookup(self, values: tuple[int, ...]) -> Entry | None:
        if self.table.match == "exact":
            return self._exact.get(values)
        best: Entry | None = None
        best_rank = -1
        for e in self.entries:
            if all(m.matches(k.match, k.expr.width, v) for k, m, v in zip(self.table.keys, e.key, values, strict=True)):
                rank = self._rank(e)
                if rank > best_rank:
                    best, best_rank = e, rank
        return best

    def _rank(self, e: Entry) -> int:
        if self.table.match == "lpm":  # the key's most general kind: no ternary or range field
            k, m = next((k, m) for k, m in zip(self.table.keys, e.key, strict=True) if k.match == "lpm")
            return k.expr.width if m.arg is None else m.arg
        return e.priority
