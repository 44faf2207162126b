"""Which entries of a cached table the runtime puts in the switch cache (the full table is on
the server).  The cache must forward exactly as the full table would:

* exact match: any subset is safe; entries are admitted while the cache has room.
* LPM: caching a prefix while a more specific overlapping prefix stays on the server would
  hijack that prefix's traffic (CacheFlow's dependency problem).  Invariant kept here: every
  server prefix inside a cached prefix is cached too.  A new prefix inside a cached one must
  be cached (or, when the cache is full, every cached prefix covering it is evicted); a
  prefix is admitted only if every server prefix inside it is cached already.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CacheDecision", "CachePolicy"]

Key = tuple[int, ...]  # the key fields; for LPM the prefix length last


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
        self.server: set[Key] = set()

    def _covers(self, outer: Key, inner: Key) -> bool:
        """outer's prefix contains inner's (the other key fields equal)."""
        assert self.lpm is not None
        i, w = self.lpm, self.width
        lo, li = outer[-1], inner[-1]
        if lo > li or outer[:i] + outer[i + 1:-1] != inner[:i] + inner[i + 1:-1]:
            return False
        shift = w - lo
        return (outer[i] >> shift) == (inner[i] >> shift) if lo else True

    def on_add(self, key: Key) -> CacheDecision:
        d = CacheDecision()
        self.server.add(key)
        if self.lpm is None:
            if len(self.cached) < self.capacity:
                d.install.append(key)
        else:
            covering = [c for c in self.cached if self._covers(c, key)]
            inside = [s for s in self.server if s != key and self._covers(key, s)]
            if covering and len(self.cached) >= self.capacity:
                d.evict = self._with_dependants(covering)
            elif covering or (len(self.cached) < self.capacity and all(s in self.cached for s in inside)):
                d.install.append(key)
        self.cached.difference_update(d.evict)
        self.cached.update(d.install)
        return d

    def _with_dependants(self, keys: list[Key]) -> list[Key]:
        """Evicting a prefix means evicting every cached prefix that covers it as well."""
        out = set(keys)
        for k in keys:
            out.update(c for c in self.cached if self._covers(c, k))
        return sorted(out, key=lambda k: -k[-1])  # most specific first

    def on_delete(self, key: Key) -> CacheDecision:
        self.server.discard(key)
        d = CacheDecision(evict=[key] if key in self.cached else [])
        self.cached.discard(key)
        return d

    def undo(self, d: CacheDecision, key: Key, added: bool) -> None:
        """Forget a decision whose server or switch write was undone."""
        self.cached.difference_update(d.install)
        self.cached.update(d.evict)
        if added:
            self.server.discard(key)
        else:
            self.server.add(key)
