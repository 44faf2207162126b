"""``nfc verify OUT``: Z3 proves the placed program of a build equal to its spec, pipeline by
pipeline (compiler/verify/partition_eq.py); ``nfc build`` runs the same check unless
``--no-verify``.  A difference prints its counterexample: the input packet as a scapy
expression, the table contents involved, and the two outcomes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compiler.placed import Placed
from compiler.shard import server_state
from compiler.verify.partition_eq import PipelineProof, verify_partition
from lang import SourceMap
from nfc._build_dir import open_placed

__all__ = ["report", "shard_assumption", "verify_placed"]


def verify_placed(p: Placed, timeout_s: float = 60.0) -> list[PipelineProof]:
    return verify_partition(p.program, p.placement, p.bridges, int(timeout_s * 1000),
                            switch=p.targets.switch is not None)


def shard_assumption(p: Placed) -> str | None:
    """What a proof of a sharded build (``shard by``) takes for granted: it proves the program
    each server runs; the servers keep state apart, so the whole is the spec when each piece
    of state is used by one shard's packets: by construction for state keyed by the shard
    keys, by the entries and the traffic for the rest, which the note names."""
    shard = p.program.deployment.shard if p.program.deployment is not None else None
    if shard is None or p.targets.switch is None or p.targets.server is None or len(p.targets.server_ports) < 2:
        return None
    state = server_state(p.program, p.placement, p.targets)
    head = (f"note: shard by {shard.method} over {len(p.targets.server_ports)} servers: proved for the program each "
            "server runs")
    if not state.keyed and not state.assumed:
        return f"{head}; the servers keep no state, so the whole is the spec"
    keyed = f"; kept on one server by its key: {', '.join(state.keyed)}" if state.keyed else ""
    assumed = (f"; assumed used by one shard's packets (docs/runtime.md, \"Sharded servers\"): "
               f"{', '.join(state.assumed)}") if state.assumed else ""
    return head + keyed + assumed


def report(results: list[PipelineProof]) -> list[str]:
    lines = []
    for r in results:
        if r.proved:
            lines.append(f"{r.pipeline}: proved in {r.seconds:.2f} s")
            continue
        lines.append(f"{r.pipeline}: NOT proved ({r.seconds:.2f} s): {r.what}")
        cex = r.counterexample
        if cex is not None:
            lines.append(f"  input on port {cex.port}: {cex.scapy}")
            for table, rows in cex.tables.items():
                for key, values in rows:
                    lines.append(f"  table {table}: {key} -> {values if values is not None else 'no entry'}")
            for table, keys in cex.cached.items():
                lines.append(f"  switch cache {table} holds: {keys}")
            lines.append(f"  spec:   {cex.spec}")
            lines.append(f"  placed: {cex.placed}")
    return lines


def verify(args: argparse.Namespace, sources: SourceMap) -> int:
    _plan, placed = open_placed(Path(args.out))  # the program in OUT, whatever the source says now
    results = verify_placed(placed, args.timeout)
    for line in report(results):
        print(line)
    differ = [r for r in results if r.counterexample is not None]
    unproved = [r for r in results if not r.proved]
    note = shard_assumption(placed)
    if note is not None:
        print(note, file=sys.stderr)
    print(f"{len(results) - len(unproved)} of {len(results)} pipelines proved equal to the spec"
          f"{'' if not unproved else f'; {len(differ)} differ, {len(unproved) - len(differ)} not encoded'}",
          file=sys.stderr)
    return 1 if unproved else 0
