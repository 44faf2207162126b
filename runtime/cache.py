"""Which entries of a cached table the runtime puts in the switch cache (the full table is on
the server).  The cache must forward exactly as the full table would:

* exact match: any subset is safe; entries are admitted while the cache has room.
* LPM: caching a prefix while a more specific overlapping prefix stays on the server would
  hijack that prefix's traffic (CacheFlow's dependency problem).  Invariant kept here: every
  server prefix inside a cached prefix is cached too.  A new prefix inside a cached one must
  be cached (or, when the cache is full, every cached prefix covering it is evicted); a
  prefix is admitted only if every server prefix inside it is cached already.

Each decision costs O(prefix length x log table), not O(table): the policy keeps the server's
prefixes and the cached ones sorted by (other key fields, address, length), an order in which
the prefixes strictly inside a prefix P form one range; "every server prefix inside P is
cached" is then the two ranges' counts being equal, and the cached prefixes covering P are
found by looking up P cut to each shorter length.

Memory: the policy holds the cached keys (at most the switch's capacity) and, for LPM, the
server's prefixes, 8 bytes each when a key packs into 64 bits (runtime/sorted_keys.py: no
Python object per prefix; the DSR router's VRF + IPv4 prefixes do); for an exact table it only
counts the server's entries (the runtime's writes add a key the server did not have and delete
one it had; a key the manager promotes was hit on the server), so a table of 10M entries costs
no per-entry object either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.sorted_keys import SortedKeys

__all__ = ["CacheDecision", "CachePolicy", "switch_order"]

Key = tuple[int, ...]  # the key fields; for LPM the prefix length last
LENGTH_BITS = 8  # a prefix length (<= 128) and one more, as the sorted order packs it


@dataclass
class CacheDecision:
    install: list[Key] = field(default_factory=list)  # to add to the switch cache
    evict: list[Key] = field(default_factory=list)    # to delete from it first


class CachePolicy:
    def __init__(self, capacity: int, lpm: int | None, width: int, key_widths: Sequence[int] | None = None) -> None:
        """``lpm``: index of the LPM key field (None: exact), ``width``: its width;
        ``key_widths``: every key field's width (None: unknown, the prefixes are kept as
        tuples; given, and the fields with a length byte fit 64 bits: packed, 8 bytes each)."""
        self.capacity = capacity
        self.lpm = lpm
        self.width = width
        self.key_widths = tuple(key_widths) if key_widths is not None else None
        self.cached: set[Key] = set()
        self.served = 0  # entries on the server
        others = [w for i, w in enumerate(self.key_widths or ()) if i != lpm]
        packed = self.key_widths is not None and sum(others) + width + LENGTH_BITS <= 64
        self._widths = [*others, width, LENGTH_BITS] if packed else None
        # LPM: the server's prefixes and the cached ones in sorted order (exact: not kept)
        self.server = SortedKeys(packed)
        self._cached = SortedKeys(packed)
        self._lengths: dict[int, int] = {}  # LPM: prefix length -> server prefixes of it
        self._cached_lengths: dict[int, int] = {}  # LPM: prefix length -> cached prefixes of it

    def empty(self) -> CachePolicy:
        """A policy of the same cache that serves and caches nothing yet."""
        return CachePolicy(self.capacity, self.lpm, self.width, self.key_widths)

    # ---- prefixes ---------------------------------------------------------------------------

    def _cut(self, key: Key, length: int) -> Key:
        """key's prefix cut to ``length`` bits (the other fields kept)."""
        assert self.lpm is not None
        i, drop = self.lpm, self.width - length
        value = key[i] >> drop << drop if length else 0
        return (*key[:i], value, *key[i + 1:-1], length)


    def _order(self, key: Key, value: int, length: int) -> Any:
        """The sort key of key's other fields with this address and length: the other fields,
        then the address, then the length, packed into an int or as a tuple."""
        assert self.lpm is not None
        parts = (*key[:self.lpm], *key[self.lpm + 1:-1], value, length)
        if self._widths is None:
            return parts
        x = 0
        for w, v in zip(self._widths, parts, strict=True):
            x = (x << w) + v  # +: an address range's end (2^width) carries into the field before it
        return x

    def _key(self, x: Any) -> Key:
        """The key of a sort key (``_order``'s inverse)."""
        assert self.lpm is not None
        if self._widths is None:
            parts = list(x)
        else:
            parts = []
            for w in reversed(self._widths):
                parts.append(x & ((1 << w) - 1))
                x >>= w
            parts.reverse()
        *others, value, length = parts
        return (*others[:self.lpm], value, *others[self.lpm:], length)

    def _sorted(self, key: Key) -> Any:
        assert self.lpm is not None
        return self._order(key, key[self.lpm], key[-1])

    def _span(self, key: Key) -> tuple[Any, Any]:
        """The sort keys bounding the prefixes strictly inside key: the same other fields,
        an address in key's range and a longer length (a shorter prefix in that range of
        addresses would have key's address and cover it)."""
        assert self.lpm is not None
        value, length = key[self.lpm], key[-1]
        return self._order(key, value, length + 1), self._order(key, value + (1 << (self.width - length)), 0)

    def _all_inside_cached(self, key: Key) -> bool:
        lo, hi = self._span(key)
        return self.server.count(lo, hi) == self._cached.count(lo, hi)

    def _covering(self, key: Key) -> list[Key]:
        """The cached prefixes covering key, key itself included."""
        above = (self._cut(key, n) for n in sorted(self._cached_lengths) if n < key[-1])  # shortest first
        return [c for c in (*above, key) if c in self.cached]

    def prefixes(self) -> Iterator[Key]:
        """The server's prefixes (LPM), in sorted order."""
        return (self._key(x) for x in self.server)

    # ---- the two sets, with their counts ----------------------------------------------------

    def _serve(self, key: Key, on: bool) -> None:
        if self.lpm is None:
            self.served += 1 if on else -1
        elif (self.server.add if on else self.server.discard)(self._sorted(key)):
            self.served += 1 if on else -1
            _tally(self._lengths, key[-1], on)

    def _cache(self, keys: Iterable[Key], on: bool) -> None:
        for key in keys:
            if on != (key in self.cached):
                (self.cached.add if on else self.cached.discard)(key)
                if self.lpm is not None:
                    (self._cached.add if on else self._cached.discard)(self._sorted(key))
                    _tally(self._cached_lengths, key[-1], on)

    # ---- decisions --------------------------------------------------------------------------

    def serve(self, key: Key) -> None:
        """An entry the server holds, the cache left as it is (a runtime rebuilding its policy)."""
        self._serve(key, True)

    def on_add(self, key: Key) -> CacheDecision:
        d = CacheDecision()
        self._serve(key, True)
        if self.lpm is None:
            if len(self.cached) < self.capacity:
                d.install.append(key)
        else:
            covering = self._covering(key)
            if covering and len(self.cached) >= self.capacity:
                d.evict = self._with_dependants(covering)
            elif covering or (len(self.cached) < self.capacity and self._all_inside_cached(key)):
                d.install.append(key)
        self._cache(d.evict, False)
        self._cache(d.install, True)
        return d

    def _with_dependants(self, keys: list[Key]) -> list[Key]:
        """Evicting a prefix means evicting every cached prefix that covers it as well."""
        out = set(keys)
        for k in keys:
            out.update(self._covering(k))
        return sorted(out, key=lambda k: k[-1])  # the covering ones first: no moment where one hijacks

    def on_delete(self, key: Key) -> CacheDecision:
        self._serve(key, False)
        d = CacheDecision(evict=[key] if key in self.cached else [])
        self._cache(d.evict, False)
        return d

    def undo(self, d: CacheDecision, key: Key, added: bool) -> None:
        """Forget a decision whose server or switch write was undone."""
        self.revert(d)
        self._serve(key, not added)

    def revert(self, d: CacheDecision) -> None:
        """Forget what a decision moved in or out of the cache (its switch write failed)."""
        self._cache(d.install, False)
        self._cache(d.evict, True)

    # ---- what the cache manager asks -------------------------------------------------------

    def match(self, fields: Key) -> Key | None:
        """The server entry a lookup of these key fields hits (LPM: the longest prefix
        holding the address; each length the server has tried in turn, longest first; exact: the fields,
        which the server reported hit); None: a miss."""
        if self.lpm is None:
            return fields  # the server hit it
        for length in sorted(self._lengths, reverse=True):
            key = self._cut((*fields, self.width), length)
            if self._sorted(key) in self.server:
                return key
        return None

    def promote(self, key: Key, unit: int = 1) -> CacheDecision | None:
        """Cache a server entry the traffic wants, if there is room; an LPM prefix with every
        server prefix inside it not cached yet, as one unit of at most ``unit`` entries (they
        go in longest first: ``switch_order``), so it hijacks none.  None: it cannot go in
        (no room, or a bigger unit)."""
        if key in self.cached or len(self.cached) >= self.capacity or \
                (self.lpm is not None and self._sorted(key) not in self.server):
            return None
        inside: list[Key] = []
        if self.lpm is not None:
            lo, hi = self._span(key)
            missing = self.server.count(lo, hi) - self._cached.count(lo, hi)
            if missing:
                if missing + 1 > min(unit, self.capacity - len(self.cached)):
                    return None
                inside = [k for k in map(self._key, self.server.between(lo, hi)) if k not in self.cached]
        d = CacheDecision(install=[*inside, key])
        self._cache(d.install, True)
        return d

    def demote(self, key: Key) -> CacheDecision:
        """Take an entry out of the cache (LPM: with every cached prefix covering it, which
        would otherwise catch its traffic)."""
        d = CacheDecision(evict=self._with_dependants([key]) if self.lpm is not None else [key])
        self._cache(d.evict, False)
        return d


def _tally(counts: dict[int, int], length: int, on: bool) -> None:
    """One prefix of this length more (on) or fewer; a length with none is dropped."""
    n = counts.get(length, 0) + (1 if on else -1)
    if n:
        counts[length] = n
    else:
        del counts[length]


def switch_order(decisions: Iterable[CacheDecision], lpm: bool) -> tuple[list[list[Key]], list[list[Key]]]:
    """What a batch of decisions (made one after the other) changes in the switch cache, as
    writes in the order to send them: deletes, then adds, each a list of keys per write.  A key
    installed and evicted within the batch is not written at all (it never reached the switch:
    deleting it would fail).  For LPM, deletes go shortest prefix first and adds longest first,
    one write per prefix length (a switch may apply a write's updates in any order, P4Runtime
    §12), so at no moment is a prefix cached while a more specific one inside it is not."""
    was: dict[Key, bool] = {}
    now: dict[Key, bool] = {}
    for d in decisions:
        for k in d.evict:
            was.setdefault(k, True)
            now[k] = False
        for k in d.install:
            was.setdefault(k, False)
            now[k] = True
    deletes = [k for k, on in now.items() if was[k] and not on]
    adds = [k for k, on in now.items() if on and not was[k]]
    if not lpm:
        return [deletes] if deletes else [], [adds] if adds else []
    return _by_length(deletes, reverse=False), _by_length(adds, reverse=True)


def _by_length(keys: list[Key], reverse: bool) -> list[list[Key]]:
    groups: dict[int, list[Key]] = {}
    for k in keys:
        groups.setdefault(k[-1], []).append(k)
    return [groups[n] for n in sorted(groups, reverse=reverse)]
