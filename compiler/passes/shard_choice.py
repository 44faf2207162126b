"""Pass ``choose-shard``: a deployment of several servers behind a switch that does not say
``shard by`` gets one chosen, so that every server carries traffic and the largest table the
servers can split is split if it is placed on them (issue 16: "the default chosen by the
partitioner when the spec is silent").  The pass runs before placement, so the choice cannot
know the placement: a table that ends on the switch, or whose key the servers' code rewrites,
is not split (compiler/shard.py ``sharded_tables``), though the packets are still spread.

The choice: of the tables with exact-match metadata keys that some stage sets (metadata no
stage writes is always 0 and would send everything to one server), the one of most server
memory (``server_bytes``: its size times its entry); its exact metadata keys, in key order, are
the keys of ``shard by hash(...)``.  A table keyed exactly by the shard keys is split among the
servers when the placement puts it there (compiler/shard.py, ``sharded_tables``), so the
servers hold a share each rather than a copy.  The choice is W086 at the deployment, naming the
table and the clause to write to keep it or choose another.  With no such table the servers
cannot be told apart by any key the switch knows: W084 (check-ports), and every packet goes to
the first server.  All declared servers are used: more servers, more cores, memory and link.
"""

from __future__ import annotations

from dataclasses import replace

from compiler import ir
from compiler.analysis import stmt_writes, walk_stmts
from compiler.profiles import TargetSet
from compiler.resources import server_bytes
from lang.diagnostics import Diagnostics

__all__ = ["choose_shard"]


def choose_shard(prog: ir.Program, targets: TargetSet, diags: Diagnostics) -> tuple[ir.Program, TargetSet]:
    dep = prog.deployment
    if dep is None or dep.shard is not None or targets.switch is None or targets.server is None \
            or targets.n_servers < 2 or len(targets.server_ports) != targets.n_servers:
        return prog, targets
    written = {loc for st in prog.stages.values() for s in walk_stmts(st.body) for loc in stmt_writes(prog, s)}
    best: tuple[int, ir.Table, tuple[ir.Expr, ...]] | None = None
    for t in prog.tables.values():
        keys: tuple[ir.Expr, ...] = tuple(dict.fromkeys(
            k.expr for k in t.keys
            if k.match == "exact" and isinstance(k.expr, ir.MetaField) and ("meta", k.expr.name) in written))
        if keys and (best is None or server_bytes(t, targets.server) > best[0]):
            best = (server_bytes(t, targets.server), t, keys)
    if best is None:
        return prog, targets
    _size, table, chosen = best
    names = ", ".join("meta." + k.name for k in chosen if isinstance(k, ir.MetaField))
    clause = f"shard by hash({names});"
    diags.warning("W086", f"{targets.n_servers} servers and no 'shard by': sharding by the key of table "
                  f"'{table.name}', the largest keyed by metadata ({clause})", dep.span,
                  notes=(f"write '{clause}' in the deployment to keep this choice, or choose another key",))
    shard = ir.Shard("hash", chosen, dep.span)
    return replace(prog, deployment=replace(dep, shard=shard)), replace(targets, sharded=True)
