"""A sorted set of keys kept in chunks: ``array('Q')`` chunks when every key packs into 64
bits (8 bytes an entry, no Python object per entry), lists of tuples otherwise.  Membership,
insertion and removal cost a bisection over the chunks' largest keys, one inside a chunk and
a move of at most ``2 * chunk`` items; ``count(lo, hi)`` costs two bisections and a sum over
the chunks between.  The cache policy (runtime/cache.py) keeps an LPM table's prefixes here,
ordered so that the prefixes inside any prefix form one range."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator, MutableSequence
from typing import Any

__all__ = ["SortedKeys"]


class SortedKeys:
    chunk = 1024  # a chunk is split in two past 2 * chunk items

    def __init__(self, packed: bool) -> None:
        self.packed = packed
        self._chunks: list[MutableSequence[Any]] = []
        self._maxes: list[Any] = []  # each chunk's last (largest) key
        self._len = 0

    def _chunk(self, items: list[Any]) -> MutableSequence[Any]:
        return array("Q", items) if self.packed else items

    def __len__(self) -> int:
        return self._len

    def _find(self, x: Any) -> tuple[int, int]:
        """The chunk holding the first key >= x and its position there; (number of chunks, 0)
        if every key is smaller."""
        i = bisect_left(self._maxes, x)
        return (i, bisect_left(self._chunks[i], x)) if i < len(self._chunks) else (i, 0)

    def __contains__(self, x: Any) -> bool:
        i, j = self._find(x)
        return i < len(self._chunks) and self._chunks[i][j] == x

    def add(self, x: Any) -> bool:
        """False: x was in the set already."""
        i, j = self._find(x)
        if i == len(self._chunks):
            if not self._chunks:
                self._chunks.append(self._chunk([]))
                self._maxes.append(x)
            i = len(self._chunks) - 1
            self._chunks[i].append(x)
            self._maxes[i] = x
        elif self._chunks[i][j] == x:
            return False
        else:
            self._chunks[i].insert(j, x)
        self._len += 1
        c = self._chunks[i]
        if len(c) > 2 * self.chunk:
            right = c[self.chunk:]
            del c[self.chunk:]
            self._chunks.insert(i + 1, right)
            self._maxes[i:i + 1] = [c[-1], right[-1]]
        return True

    def discard(self, x: Any) -> bool:
        """False: x was not in the set."""
        i, j = self._find(x)
        if i == len(self._chunks) or self._chunks[i][j] != x:
            return False
        c = self._chunks[i]
        del c[j]
        self._len -= 1
        if not c:
            del self._chunks[i], self._maxes[i]
        elif j == len(c):
            self._maxes[i] = c[-1]
        return True

    def count(self, lo: Any, hi: Any) -> int:
        """How many keys k have lo <= k < hi."""
        if not lo < hi:
            return 0
        i, j = self._find(lo)
        k, m = self._find(hi)
        if i == k:
            return m - j
        return len(self._chunks[i]) - j + sum(map(len, self._chunks[i + 1:k])) + m

    def between(self, lo: Any, hi: Any) -> Iterator[Any]:
        """The keys k with lo <= k < hi, in order."""
        i, j = self._find(lo)
        for c in self._chunks[i:]:
            for x in c[j:]:
                if x >= hi:
                    return
                yield x
            j = 0

    def __iter__(self) -> Iterator[Any]:
        for c in self._chunks:
            yield from c
