"""Which server a packet goes to: a deployment's ``shard by`` as one selector expression and
the bounds that split the selector's values among the servers, in the deployment's order.

``shard by hash(k, ...)`` selects by CRC-16/ARC of the keys (as the language's ``crc16``), so
server ``i`` of ``N`` takes the hashes in ``[i * 65536 / N, (i + 1) * 65536 / N)``;
``shard by range(k)`` splits the key's own values the same way.  Target-neutral: a switch
generator lowers the selector and compares it with the bounds; a table on the server holds
every entry (replicated), and its state is the shard's (docs/language.md, "Sharding").
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from compiler import ir

__all__ = ["Steering", "steering"]

HASH = "crc16"
HASH_BITS = 16


@dataclass(frozen=True, slots=True)
class Steering:
    selector: ir.Expr  # crc16(keys) for hash, the key itself for range
    bounds: tuple[int, ...]  # server i takes selector values from bounds[i] (bounds[0] == 0)

    def server_of(self, value: int) -> int:
        """The server (index into the deployment's servers) of one selector value."""
        return bisect_right(self.bounds, value) - 1


def steering(shard: ir.Shard, servers: int) -> Steering:
    selector = ir.Hash(HASH, shard.keys, HASH_BITS, shard.span) if shard.method == "hash" else shard.keys[0]
    top = 1 << selector.width
    return Steering(selector, tuple(i * top // servers for i in range(max(1, servers))))
