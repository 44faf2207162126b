"""Which entries of a cached table the runtime puts in the switch cache (the full table is on
the server).  The cache must forward exactly as the full table would:

* exact match: any subset is safe; entries are admitted while the cache has room.
* LPM: caching a prefix while a more specific overlapping prefix stays on the server would
  hijack that prefix's traffic (CacheFlow's dependency problem).  Invariant kept here: every
  server prefix inside a cached prefix is cached too.  A new prefix inside a cached one must
  be cached (or, when the cache is full, every cached prefix covering it is evicted); a
  prefix is admitted only if every server prefix inside it is cached already.

Each decision costs O(prefix length), not O(table): for every prefix P (its other key fields,
its bits, its length) the policy counts the server prefixes and the cached prefixes strictly
inside it, kept up to date along the path of shorter prefixes above each one added or removed;
"every server prefix inside P is cached" is then the two counts of P being equal, and the
cached prefixes covering P are found by looking up P cut to each shorter length.

Memory: the policy holds the cached keys (at most the switch's capacity) and, for LPM, the
server's prefixes and their counts; for an exact table it only counts the server's entries
(the runtime's writes add a key the server did not have and delete one it had; a key the
manager promotes was hit on the server), so a table of 10M entries costs no per-entry object.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = ["CacheDecision", "CachePolicy", "switch_order"]

Key = tuple[int, ...]  # the key fields; for LPM the prefix length last
SERVER, CACHED = 0, 1  # the two counts of a prefix


@dataclass
class CacheDecision:
    install: list[Key] = field(default_factory=list)  # to add to the switch cache
    evict: list[Key] = field(default_factory=list)    # to delete from it first


class CachePolicy:
    def __init__(self, capacity: int, lpm: int | None, width: int) -> None:
        """``lpm``: index of the LPM key field (None: exact), ``width``: its width."""
        self.capacity = capacity
        self.lpm = lpm
        self.width = width
        self.cached: set[Key] = set()
        self.server: set[Key] = set()  # LPM: the server's prefixes (exact: not kept, only counted)
        self.served = 0  # entries on the server
        self._inside: dict[Key, list[int]] = {}  # LPM: prefix -> [server, cached] prefixes strictly inside

    # ---- prefixes ---------------------------------------------------------------------------

    def _cut(self, key: Key, length: int) -> Key:
        """key's prefix cut to ``length`` bits (the other fields kept)."""
        assert self.lpm is not None
        i, drop = self.lpm, self.width - length
        value = key[i] >> drop << drop if length else 0
        return (*key[:i], value, *key[i + 1:-1], length)

    def _above(self, key: Key) -> Iterator[Key]:
        """The prefixes strictly covering key, shortest first."""
        return (self._cut(key, length) for length in range(key[-1]))

    def _count(self, key: Key, which: int, delta: int) -> None:
        for outer in self._above(key):
            counts = self._inside.setdefault(outer, [0, 0])
            counts[which] += delta
            if counts == [0, 0]:
                del self._inside[outer]

    def _all_inside_cached(self, key: Key) -> bool:
        counts = self._inside.get(key)
        return counts is None or counts[SERVER] == counts[CACHED]

    def _covering(self, key: Key) -> list[Key]:
        """The cached prefixes covering key, key itself included."""
        return [c for c in (*self._above(key), key) if c in self.cached]

    # ---- the two sets, with their counts ----------------------------------------------------

    def _serve(self, key: Key, on: bool) -> None:
        if self.lpm is None:
            self.served += 1 if on else -1
        elif on != (key in self.server):
            (self.server.add if on else self.server.discard)(key)
            self.served += 1 if on else -1
            self._count(key, SERVER, 1 if on else -1)

    def _cache(self, keys: Iterable[Key], on: bool) -> None:
        for key in keys:
            if on != (key in self.cached):
                (self.cached.add if on else self.cached.discard)(key)
                if self.lpm is not None:
                    self._count(key, CACHED, 1 if on else -1)

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
        holding the address; each shorter length tried in turn, O(width); exact: the fields,
        which the server reported hit); None: a miss."""
        if self.lpm is None:
            return fields  # the server hit it
        for length in range(self.width, -1, -1):
            key = self._cut((*fields, self.width), length)
            if key in self.server:
                return key
        return None

    def promote(self, key: Key, unit: int = 1) -> CacheDecision | None:
        """Cache a server entry the traffic wants, if there is room; an LPM prefix with every
        server prefix inside it not cached yet, as one unit of at most ``unit`` entries (they
        go in longest first: ``switch_order``), so it hijacks none.  None: it cannot go in
        (no room, or a bigger unit)."""
        if key in self.cached or len(self.cached) >= self.capacity or (self.lpm is not None and key not in self.server):
            return None
        inside: list[Key] = []
        if self.lpm is not None and not self._all_inside_cached(key):
            counts = self._inside[key]
            missing = counts[SERVER] - counts[CACHED]
            if missing + 1 > min(unit, self.capacity - len(self.cached)):
                return None
            inside = self._uncached_inside(key)
        d = CacheDecision(install=[*inside, key])
        self._cache(d.install, True)
        return d

    def _uncached_inside(self, key: Key) -> list[Key]:
        """The server prefixes strictly inside key and not cached: a walk down the prefixes
        that have any inside them (``_inside``), O(their number x width)."""
        assert self.lpm is not None
        out: list[Key] = []
        todo = [key]
        while todo:
            outer = todo.pop()
            length = outer[-1]
            if length == self.width:
                continue
            value, shift = outer[self.lpm], self.width - length - 1
            for bit in (0, 1):
                child = (*outer[:self.lpm], value | bit << shift, *outer[self.lpm + 1:-1], length + 1)
                if child in self.server and child not in self.cached:
                    out.append(child)
                counts = self._inside.get(child)
                if counts is not None and counts[SERVER] > counts[CACHED]:
                    todo.append(child)
        return out

    def demote(self, key: Key) -> CacheDecision:
        """Take an entry out of the cache (LPM: with every cached prefix covering it, which
        would otherwise catch its traffic)."""
        d = CacheDecision(evict=self._with_dependants([key]) if self.lpm is not None else [key])
        self._cache(d.evict, False)
        return d


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
