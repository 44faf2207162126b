"""After ``bridge``: a ``shard by`` key that nothing on the switch sets before a cut, and a
``monotonic`` register a move could not carry.

The switch reads the keys where a packet leaves for the servers.  Metadata starts at 0, so a
pipeline whose switch part sets none of the keys before a cut sends all its packets to one
server (the one selector value 0 picks): with state on the servers that is seldom meant —
the other pipeline's packets of the same flow or tunnel go elsewhere — so it is W085, at the
clause, naming the pipeline and the path.  The switch part counted is generous: every switch
stage before the cut, and for a cache's miss path the whole stage that looks the table up.

A ``monotonic`` register the servers index other than by a value of a table the shards split
is E061, at the index: when buckets move, the runtime carries forward the cells of the moved
entries (runtime/carry.py), and it could not tell which cells such an index counts in — a
sequence number that is a nonce would start again on the new server.
"""

from __future__ import annotations

from compiler import ir
from compiler.analysis import Loc, expr_reads, stmt_writes, walk_stmts
from compiler.placement import Bridge, Direction, Placement, Segment
from compiler.profiles import TargetSet
from compiler.shard import monotonic_strays
from lang.diagnostics import Diagnostics

__all__ = ["check_monotonic", "check_shard_keys"]


def check_shard_keys(prog: ir.Program, placement: Placement, bridges: tuple[Bridge, ...], targets: TargetSet,
                     diags: Diagnostics) -> None:
    shard = prog.deployment.shard if prog.deployment is not None else None
    if shard is None or targets.switch is None or targets.server is None or len(targets.server_ports) < 2:
        return
    keys: set[Loc] = set().union(*(expr_reads(k) for k in shard.keys))
    for b in bridges:
        if b.direction is not Direction.TO_SERVER:
            continue
        written = {loc for st in _switch_stages_before(prog, placement, b) for s in walk_stmts(st.body)
                   for loc in stmt_writes(prog, s)}
        if not keys & written:
            diags.warning("W085", f"pipeline '{b.pipeline}' sends packets to the servers ({b.path}) before its switch "
                          "part sets any shard key: they all go to one server", shard.span,
                          notes=("set the key in a stage the switch runs before the cut (its metadata is 0 "
                                 "otherwise)",))


def check_monotonic(prog: ir.Program, placement: Placement, targets: TargetSet, diags: Diagnostics) -> None:
    for r in monotonic_strays(prog, placement, targets):
        diags.error("E061", f"monotonic register '{r.reg}' is indexed here by something other than a value of a table "
                    "the shards split: a move between servers could not tell which cells go with a bucket",
                    r.index.span,
                    notes=("index it by a value field of a table keyed by every shard key, matched exactly "
                           "(sa_seq[sa.seq_index] with sa an entry of outbound_sa, keyed by meta.tunnel)",))


def _switch_stages_before(prog: ir.Program, placement: Placement, b: Bridge) -> list[ir.Stage]:
    pl = next(p for p in prog.pipelines if p.name == b.pipeline)
    out: list[ir.Stage] = []
    for name in pl.stages:
        stage = prog.stages[name]
        if b.miss is not None and any(isinstance(s, ir.Lookup) and s.table == b.miss for s in walk_stmts(stage.body)):
            return [*out, stage]  # the miss path leaves from inside this stage
        if name == b.before_stage:
            break
        if placement.segment[name] is Segment.SWITCH:
            out.append(stage)
    return out
