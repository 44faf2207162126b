"""Which server a packet goes to: a deployment's ``shard by`` as one selector expression and
the bounds that split the selector's values among the servers, in the deployment's order.

``shard by hash(k, ...)`` selects by CRC-16/ARC of the keys (as the language's ``crc16``);
``shard by range(k)`` by the key's own value.  The selector's top ``bucket_bits`` bits (at
most 8) are its *bucket*, the unit the runtime moves between servers (a server added, removed
or failed: runtime/steering.py); server ``i`` of ``N`` starts with buckets ``[i * B / N,
(i + 1) * B / N)`` of ``B``, i.e. the selector values from ``bounds[i]``.  Target-neutral: a
switch generator lowers the selector, compares it with the bounds and keys its steering
table (bucket -> server port, written by the runtime) by the bucket; a table on the server holds
every entry (replicated) unless the shards split its entries (``sharded_tables``), and its
state is the shard's (docs/language.md, "Sharding").
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

from compiler import ir
from compiler.analysis import stage_objects, stmt_exprs, stmt_writes, walk_expr, walk_stmts
from compiler.placement import Placement, Segment
from compiler.profiles import TargetSet
from compiler.resources import BUCKET_BITS
from compiler.server_load import server_tables

__all__ = ["BUCKET_BITS", "ServerState", "Steering", "monotonic_cells", "monotonic_reads", "monotonic_strays",
           "server_state", "sharded_tables", "steering"]

HASH = "crc16"
HASH_BITS = 16


@dataclass(frozen=True, slots=True)
class Steering:
    selector: ir.Expr  # crc16(keys) for hash, the key itself for range
    bounds: tuple[int, ...]  # server i takes selector values from bounds[i] (bounds[0] == 0)
    bucket_bits: int  # the selector's top bits that are its bucket

    @property
    def bucket_shift(self) -> int:
        return self.selector.width - self.bucket_bits

    def server_of(self, value: int) -> int:
        """The server (index into the deployment's servers) of one selector value."""
        return bisect_right(self.bounds, value) - 1


def steering(shard: ir.Shard, servers: int) -> Steering:
    if shard.method == "hash":  # the keys' bits padded to whole bytes by a zero field of its own, so the
        pad = -sum(k.width for k in shard.keys) % 8  # target hashes what ShardInfo.server_of does
        keys = (*shard.keys, ir.Const(0, pad, shard.span)) if pad else shard.keys
        selector: ir.Expr = ir.Hash(HASH, keys, HASH_BITS, shard.span)
    else:
        selector = shard.keys[0]
    bits = min(BUCKET_BITS, selector.width)
    n = max(1, servers)  # bucket-aligned bounds: a server's buckets are whole
    return Steering(selector, tuple((i * (1 << bits) // n) << (selector.width - bits) for i in range(n)), bits)


def sharded_tables(prog: ir.Program, pl: Placement, ts: TargetSet) -> dict[str, tuple[int, ...]]:
    """The server tables whose entries the shards split: table -> the positions of its key
    fields that are the shard keys, in the clause's order.  A table qualifies when every shard
    key is a metadata field it matches exactly and no code the servers run writes those
    fields: a packet then looks the table up with the very values that picked its server, so
    the server owning an entry (the share of those values) is the only one that can need it.
    Data-plane state is each server's own anyway, and a table on the switch alone is whole."""
    return {n: at for n, at in _keyed(prog, pl, ts).items() if not prog.tables[n].is_state}


@dataclass(frozen=True, slots=True)
class ServerState:
    """What the servers of a sharded build keep that packets change, by whether the sharding
    itself keeps it on one server (``keyed``: state tables whose key holds the shard keys) or
    only the entries and the traffic can (``assumed``: other state tables, registers and
    meters the servers use, the windows and pools of stateful externs)."""

    keyed: tuple[str, ...]
    assumed: tuple[str, ...]


def server_state(prog: ir.Program, pl: Placement, ts: TargetSet) -> ServerState:
    keyed = _keyed(prog, pl, ts)
    stages = _server_run(prog, pl)
    tables = {s.table if isinstance(s, ir.Lookup) else s.state for st in stages for s in walk_stmts(st.body)
              if isinstance(s, ir.Lookup | ir.Insert | ir.Remove | ir.Refresh)}
    state = sorted(t for t in tables if prog.tables[t].is_state)
    objects = sorted(o for st in stages for o in stage_objects(st)
                     if o in prog.registers or (o in prog.counters and prog.counters[o].kind == "meter"))
    stateful = {"wide_state", "dataplane_insert"}  # an extern that keeps state of its own (stdlib/ops.nfp)
    externs = sorted({f"{x.name} state" for st in stages for s in walk_stmts(st.body) for e in stmt_exprs(s)
                      for x in walk_expr(e) if isinstance(x, ir.ExternCall)
                      and stateful & set(prog.externs[x.name].requires)})
    return ServerState(tuple(t for t in state if t in keyed),
                       tuple([*(t for t in state if t not in keyed), *dict.fromkeys(objects), *externs]))


def monotonic_cells(prog: ir.Program, pl: Placement) -> dict[str, tuple[tuple[str, str], ...]]:
    """Per ``monotonic`` register the servers use, the table value fields that index it, as
    (table, field): ``sa_seq[sa.seq_index]`` with ``sa`` an ``outbound_sa`` entry gives
    (outbound_sa, seq_index) — the cells an entry counts in, which the runtime keeps in range
    and, where the table is split, moves with the entry's bucket (runtime/carry.py); empty when
    some index is anything else (``monotonic_strays``)."""
    out: dict[str, set[tuple[str, str]] | None] = {}
    for r in monotonic_reads(prog, _server_run(prog, pl)):
        cells = out.setdefault(r.reg, set())
        if cells is not None and isinstance(r.index, ir.Result):
            cells.add((r.index.table, r.index.field))
        else:
            out[r.reg] = None
    return {reg: tuple(sorted(cells or ())) for reg, cells in out.items()}


def monotonic_strays(prog: ir.Program, pl: Placement, ts: TargetSet) -> list[ir.RegRead]:
    """The accesses of ``monotonic`` registers on the servers of a sharded build whose index is
    not a value of a table the shards split: a move could not tell which cells go with a
    bucket (E061, compiler/passes/shard_keys.py)."""
    if len(ts.server_ports) < 2 or ts.switch is None or ts.server is None:
        return []
    split = sharded_tables(prog, pl, ts)
    return [r for r in monotonic_reads(prog, _server_run(prog, pl))
            if not (isinstance(r.index, ir.Result) and r.index.table in split)]


def monotonic_reads(prog: ir.Program, stages: Iterable[ir.Stage]) -> list[ir.RegRead]:
    """Every read and write of a ``monotonic`` register in ``stages``."""
    out: list[ir.RegRead] = []
    for st in stages:
        for s in walk_stmts(st.body):
            reads = [s.target] if isinstance(s, ir.Assign) and isinstance(s.target, ir.RegRead) else []
            reads += [x for e in stmt_exprs(s) for x in walk_expr(e) if isinstance(x, ir.RegRead)]
            out += [r for r in reads if prog.registers[r.reg].monotonic]
    return out


def _keyed(prog: ir.Program, pl: Placement, ts: TargetSet) -> dict[str, tuple[int, ...]]:
    """Server tables and state whose key holds every shard key, matched exactly, where no
    server code changes the keys: table -> those key fields' positions, in the clause's order."""
    shard = prog.deployment.shard if prog.deployment is not None else None
    if shard is None or ts.switch is None or ts.server is None or len(ts.server_ports) < 2:
        return {}
    names = [k.name for k in shard.keys if isinstance(k, ir.MetaField)]
    writes = {loc for st in _server_run(prog, pl) for s in walk_stmts(st.body) for loc in stmt_writes(prog, s)}
    if len(names) != len(shard.keys) or writes & {("meta", n) for n in names}:
        return {}
    out: dict[str, tuple[int, ...]] = {}
    for t in prog.tables.values():
        at = [next((i for i, k in enumerate(t.keys) if k.match == "exact" and isinstance(k.expr, ir.MetaField)
                    and k.expr.name == n), None) for n in names]
        if None not in at:
            out[t.name] = tuple(i for i in at if i is not None)
    return {t.name: out[t.name] for t in server_tables(prog, pl) if t.name in out} | \
        {n: at for n, at in out.items() if prog.tables[n].is_state}


def _server_run(prog: ir.Program, pl: Placement) -> list[ir.Stage]:
    """The stages whose code the servers run: every server stage, and the whole of a stage
    whose cached lookup's miss path the servers run."""
    cached = {t.name for t in prog.tables.values() if t.hints.cache}
    return [st for st in prog.stages.values() if pl.segment.get(st.name) is Segment.SERVER
            or any(isinstance(s, ir.Lookup) and s.table in cached for s in walk_stmts(st.body))]
