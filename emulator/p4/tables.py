"""Match-action table contents, as a P4Runtime server writes them (P4Runtime spec §9.1).

An entry matches per key field: exact value, value/prefix length (lpm), value/mask
(ternary) or low/high (range).  The winner is the only exact match; in a table whose key
has a ternary, range or optional field, the highest priority (P4Runtime §9.1: such a
table's entries carry one, whatever other fields the key has; equal priorities: the entry
inserted first); otherwise, with an lpm field, the longest prefix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["PRIORITY_KINDS", "DuplicateEntry", "KeyField", "Match", "MissingEntry", "P4Table", "TableEntry",
           "TableError", "TableFull", "TableState"]

PRIORITY_KINDS = frozenset({"ternary", "range", "optional"})  # a key with one of these ranks by priority


class TableError(ValueError):
    """A bad write: wrong key, value out of range, unknown action, duplicate, missing, full."""


class DuplicateEntry(TableError):
    """insert() of an entry whose key (match and priority) is already present."""


class MissingEntry(TableError):
    """delete() or modify() of a key that is not present."""


class TableFull(TableError):
    """insert() into a table that holds ``size`` entries."""


@dataclass(frozen=True, slots=True)
class Match:
    value: int
    arg: int | None = None  # lpm: prefix length; ternary: mask; range: high bound


@dataclass(frozen=True, slots=True)
class TableEntry:
    key: tuple[Match, ...]
    action: str
    params: dict[str, int] = field(hash=False)
    priority: int = 0


@dataclass(frozen=True, slots=True)
class KeyField:
    name: str
    match: str  # exact | lpm | ternary | range
    width: int


# a table's contents, as snapshot() took them: its entries in insertion order and the exact index
TableState = tuple[tuple[TableEntry, ...], dict[tuple[int, ...], TableEntry] | None]


def _m(w: int) -> int:
    return (1 << w) - 1


class P4Table:
    def __init__(self, name: str, keys: tuple[KeyField, ...], actions: dict[str, tuple[tuple[str, int], ...]],
                 default: str, size: int, idle: bool = False) -> None:
        """``idle``: the table keeps each entry's idle time (TNA ``idle_timeout``, v1model
        ``support_timeout``): the time of its last hit, or of its insertion (``idle_ns``)."""
        self.name = name
        self.idle = idle
        self._hit_at: dict[tuple[object, ...], float] = {}  # identity -> time.monotonic() of the last hit
        self.keys = keys
        self.actions = actions  # action name -> (param name, width) in order
        self.default = default
        self.size = size
        # every entry by its identity (match and priority), in insertion order: the order decides
        # between overlapping entries of equal rank, and a write finds its entry in O(1)
        self._by_ident: dict[tuple[object, ...], TableEntry] = {}
        self._exact: dict[tuple[int, ...], TableEntry] | None = (
            {} if all(k.match == "exact" for k in keys) else None)
        # the lpm field whose prefix length ranks entries: only in a table without priorities
        self._lpm = None if any(k.match in PRIORITY_KINDS for k in keys) else next(
            (i for i, k in enumerate(keys) if k.match == "lpm"), None)

    def _check(self, e: TableEntry) -> None:
        if len(e.key) != len(self.keys):
            raise TableError(f"{self.name}: entry has {len(e.key)} key fields, the table has {len(self.keys)}")
        for k, m in zip(self.keys, e.key, strict=True):
            if not 0 <= m.value <= _m(k.width):
                raise TableError(f"{self.name}.{k.name}: value {m.value} does not fit in bit<{k.width}>")
            if k.match == "lpm" and m.arg is not None and not 0 <= m.arg <= k.width:
                raise TableError(f"{self.name}.{k.name}: prefix length must be 0..{k.width}, not {m.arg}")
            if k.match == "range" and m.arg is not None and not m.value <= m.arg <= _m(k.width):
                raise TableError(f"{self.name}.{k.name}: range {m.value}..{m.arg} is empty or too wide")
        params = self.actions.get(e.action)
        if params is None:
            raise TableError(f"{self.name}: action {e.action} is not an action of this table")
        if set(e.params) != {n for n, _ in params}:
            raise TableError(f"{self.name}: {e.action} takes {sorted(n for n, _ in params)}, not {sorted(e.params)}")
        for n, w in params:
            if not 0 <= e.params[n] <= _m(w):
                raise TableError(f"{self.name}: {e.action}.{n} = {e.params[n]} does not fit in bit<{w}>")

    @staticmethod
    def _ident(e: TableEntry) -> tuple[object, ...]:
        return (tuple((m.value, m.arg) for m in e.key), e.priority)

    @property
    def entries(self) -> list[TableEntry]:
        """The entries in insertion order."""
        return list(self._by_ident.values())

    def _find(self, probe: TableEntry) -> TableEntry | None:
        return self._by_ident.get(self._ident(probe))

    def get(self, key: tuple[Match, ...], priority: int = 0) -> TableEntry | None:
        """The entry with this key (match and priority), if there is one."""
        return self._find(TableEntry(key, "", {}, priority))

    def insert(self, e: TableEntry) -> None:
        self._check(e)
        if self._find(e) is not None:
            raise DuplicateEntry(f"{self.name}: an entry with this key already exists")
        if len(self._by_ident) >= self.size:
            raise TableFull(f"{self.name}: table is full ({self.size} entries)")
        self._by_ident[self._ident(e)] = e
        if self.idle:
            self._hit_at[self._ident(e)] = time.monotonic()
        if self._exact is not None:
            self._exact[tuple(m.value for m in e.key)] = e

    def delete(self, key: tuple[Match, ...], priority: int = 0) -> TableEntry:
        found = self.get(key, priority)
        if found is None:
            raise MissingEntry(f"{self.name}: no entry with this key")
        del self._by_ident[self._ident(found)]
        self._hit_at.pop(self._ident(found), None)
        if self._exact is not None:
            del self._exact[tuple(m.value for m in found.key)]
        return found

    def modify(self, e: TableEntry) -> None:
        """The entry with ``e``'s key gets ``e``'s action, in place (its rank among entries of
        equal priority stays)."""
        self._check(e)
        old = self._find(e)
        if old is None:
            raise MissingEntry(f"{self.name}: no entry with this key")
        self._by_ident[self._ident(old)] = e  # same identity: the entry keeps its place
        if self._exact is not None:
            self._exact[tuple(m.value for m in e.key)] = e

    def snapshot(self) -> TableState:
        """The contents now, for restore(): a batch of writes that must be all or nothing
        (P4Runtime ROLLBACK_ON_ERROR) goes back to it, entries in their original order, which
        decides between overlapping entries of equal priority."""
        return tuple(self._by_ident.values()), None if self._exact is None else dict(self._exact)

    def restore(self, state: TableState) -> None:
        entries, exact = state
        self._by_ident = {self._ident(e): e for e in entries}
        if self.idle:  # an entry deleted and put back counts as inserted now
            now = time.monotonic()
            self._hit_at = {k: self._hit_at.get(k, now) for k in self._by_ident}
        self._exact = None if exact is None else dict(exact)

    def clear(self) -> None:
        self.restore(((), None if self._exact is None else {}))

    def hit(self, e: TableEntry) -> None:
        """A packet hit ``e``: its idle time starts again."""
        if self.idle:
            self._hit_at[self._ident(e)] = time.monotonic()

    def last_hit(self, e: TableEntry) -> float:
        """``time.monotonic()`` of ``e``'s last hit (or insertion)."""
        return self._hit_at.get(self._ident(e), 0.0)

    def idle_ns(self, e: TableEntry) -> int:
        """Nanoseconds since ``e`` was last hit (or inserted, if never hit)."""
        return max(0, int((time.monotonic() - self._hit_at.get(self._ident(e), time.monotonic())) * 1e9))

    def lookup(self, values: tuple[int, ...]) -> TableEntry | None:
        if self._exact is not None:
            return self._exact.get(values)
        best: TableEntry | None = None
        best_rank = -1
        for e in self._by_ident.values():
            if all(_matches(k, m, v) for k, m, v in zip(self.keys, e.key, values, strict=True)):
                rank = self._rank(e)
                if rank > best_rank:
                    best, best_rank = e, rank
        return best

    def _rank(self, e: TableEntry) -> int:
        if self._lpm is not None:
            m = e.key[self._lpm]
            return self.keys[self._lpm].width if m.arg is None else m.arg
        return e.priority


def _matches(k: KeyField, m: Match, v: int) -> bool:
    if k.match == "exact":
        return v == m.value
    if k.match == "lpm":
        plen = k.width if m.arg is None else m.arg
        pm = _m(k.width) ^ _m(k.width - plen)
        return (v & pm) == (m.value & pm)
    if k.match == "ternary":
        tm = _m(k.width) if m.arg is None else m.arg
        return (v & tm) == (m.value & tm)
    hi = m.value if m.arg is None else m.arg
    return m.value <= v <= hi
