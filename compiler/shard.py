"""Which server a packet goes to: a deployment's ``shard by`` as one selector expression and
the bounds that split the selector's values among the servers, in the deployment's order.

``shard by hash(k, ...)`` selects by CRC-16/ARC of the keys (as the language's ``crc16``), so
server ``i`` of ``N`` takes the hashes in ``[i * 65536 / N, (i + 1) * 65536 / N)``;
``shard by range(k)`` splits the key's own values the same way.  Target-neutral: a switch
generator lowers the selector and compares it with the bounds; a table on the server holds
every entry (replicated) unless the shards split its entries (``sharded_tables``), and its
state is the shard's (docs/language.md, "Sharding").
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from compiler import ir
from compiler.analysis import Loc, stmt_writes, walk_stmts
from compiler.placement import Placement, Segment
from compiler.profiles import TargetSet
from compiler.server_load import server_tables

__all__ = ["Steering", "sharded_tables", "steering"]

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


def sharded_tables(prog: ir.Program, pl: Placement, ts: TargetSet) -> dict[str, tuple[int, ...]]:
    """The server tables whose entries the shards split: table -> the positions of its key
    fields that are the shard keys, in the clause's order.  A table qualifies when every shard
    key is a metadata field it matches exactly and no code the servers run writes those
    fields: a packet then looks the table up with the very values that picked its server, so
    the server owning an entry (the share of those values) is the only one that can need it.
    Data-plane state is each server's own anyway, and a table on the switch alone is whole."""
    shard = prog.deployment.shard if prog.deployment is not None else None
    if shard is None or ts.switch is None or ts.server is None or len(ts.server_ports) < 2:
        return {}
    names = [k.name for k in shard.keys if isinstance(k, ir.MetaField)]
    if len(names) != len(shard.keys) or _server_writes(prog, pl) & {("meta", n) for n in names}:
        return {}
    out: dict[str, tuple[int, ...]] = {}
    for t in server_tables(prog, pl):
        at = [next((i for i, k in enumerate(t.keys) if k.match == "exact" and isinstance(k.expr, ir.MetaField)
                    and k.expr.name == n), None) for n in names]
        if not t.is_state and None not in at:
            out[t.name] = tuple(i for i in at if i is not None)
    return out


def _server_writes(prog: ir.Program, pl: Placement) -> set[Loc]:
    """What the servers' code may write: every server stage, and the whole of a stage whose
    cached lookup's miss path the servers run."""
    cached = {t.name for t in prog.tables.values() if t.hints.cache}
    out: set[Loc] = set()
    for stage in prog.stages.values():
        stmts = list(walk_stmts(stage.body))
        if pl.segment.get(stage.name) is Segment.SERVER or any(
                isinstance(s, ir.Lookup) and s.table in cached for s in stmts):
            out |= {loc for s in stmts for loc in stmt_writes(prog, s)}
    return out
