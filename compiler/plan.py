"""The ``plan.json`` manifest: placement, bridge headers, resources and artifact paths.

Deterministic: keys sorted, no timestamps or timings, so golden tests can pin it.
Tools read artifact paths from ``artifacts``, never by guessing.
"""

from __future__ import annotations

import importlib.metadata
import json
from dataclasses import asdict
from typing import Any

from compiler import ir
from compiler.analysis import stage_objects, stage_units
from compiler.irprint import print_expr
from compiler.manifest import PLAN_VERSION, TablePlacement
from compiler.partition import stage_cost_ns, switch_usage
from compiler.pipeline import Compilation
from compiler.place_problem import server_stages
from compiler.placement import OBJECTIVES, Placement, Segment
from compiler.profiles import TargetSet, TargetSpec
from compiler.resources import entries_share, server_bytes, server_share_bytes, table_blocks
from compiler.server_load import ServerLoad
from compiler.shard import monotonic_cells, server_state, steering
from compiler.stage_estimate import estimate

__all__ = ["PLAN_VERSION", "build_plan", "dump_plan"]



def _src(span: Any) -> str:
    return f"{span.file}:{span.line}"


def _spec(t: TargetSpec | None) -> dict[str, Any] | None:
    if t is None:
        return None
    return {"name": t.name, "kind": t.kind, "generator": t.generator, "profile": t.source,
            "resources": dict(sorted(t.resources.items()))}


def _table_entry(prog: ir.Program, t: ir.Table, pl: Placement, sw: TargetSpec | None, srv: TargetSpec | None,
                 load: ServerLoad | None) -> dict[str, Any]:
    stage = next((s for s in prog.stages.values() for u in stage_units(prog, s) if t.name in u.tables
                  and s.name in pl.segment), None)  # a stage in no pipeline (W001) is placed nowhere
    where = TablePlacement.UNUSED
    if stage is not None:
        where = TablePlacement(pl.where(stage.name))
    if t.hints.cache and where is TablePlacement.SWITCH:  # a cache on the switch, the full table on a server
        where = TablePlacement.CACHED
    out: dict[str, Any] = {
        "name": t.name, "kind": "state" if t.is_state else "table", "match": t.match, "size": t.size,
        "key_bits": t.key_bits, "value_bits": t.value_bits, "placement": where.value,
        "stage": stage.name if stage else None,
        "source": _src(t.span),
        "keys": [{"name": k.name, "match": k.match, "width": k.expr.width} for k in t.keys],
        "values": [{"name": v.name, "width": v.width} | ({"secret": True} if v.secret else {}) for v in t.values],
    }
    on_switch = where.on_switch and sw is not None
    entries = pl.cache_entries.get(t.name, t.size) if on_switch else 0
    if on_switch and sw is not None:
        b = table_blocks(t, entries, sw)
        units = [u for u in pl.units if t.name in u.tables]
        out["switch"] = {"entries": entries, "sram_blocks": b.sram, "tcam_blocks": b.tcam,
                         "mau_stages": [units[0].first, units[0].last] if units else None}
    if where.on_server and srv is not None:
        out["server"] = {"entries": t.size, "memory_bytes": server_bytes(t, srv)}
        if load is not None and t.name in load.sharded:  # each server holds the entries of its share
            out["server"]["shard_fields"] = list(load.sharded[t.name])  # of these key fields
            n = load.spread.get(t.name, 1)
            if n > 1:  # spread evenly: what each server is sized for and holds
                out["server"]["share"] = {"servers": n, "entries": entries_share(t.size, n),
                                          "memory_bytes": server_share_bytes(t, srv, n)}
    if t.idle_limits is not None and where is TablePlacement.CACHED:  # the cache manager's policy
        out["idle_limits"] = [{"occupancy": occ, "seconds": sec} for occ, sec in t.idle_limits]
    return out


def build_plan(c: Compilation, artifacts: dict[str, str], generated: dict[str, str], source_sha256: str = ""
               ) -> dict[str, Any]:
    prog, pl, ts = c.need_program(), c.placement, c.need_targets()
    assert pl is not None
    sw, srv = ts.switch, ts.server
    stages = []
    for p in prog.pipelines:
        for s in p.stages:
            seg = pl.segment[s]
            entry: dict[str, Any] = {"name": s, "pipeline": p.name, "placement": pl.where(s),
                                     "segment": seg.label, "source": _src(prog.stages[s].span)}
            if seg is Segment.SERVER and srv is not None:
                entry["server_ns"] = round(stage_cost_ns(prog, prog.stages[s], srv, server_stages(pl.segment)), 2)
            stages.append(entry)
    switch_res: dict[str, Any] | None = None
    if sw is not None:
        usage = switch_usage(pl, int(sw.res("stages")))
        switch_res = {
            "mau_stages_used": pl.mau_stages_used,
            "mau_stages_with_control": estimate(prog, pl, sw, srv is not None).stages,
            "per_stage": [{"stage": k, "sram_blocks": u.sram, "tcam_blocks": u.tcam} for k, u in enumerate(usage)],
            "sram_blocks": sum(u.sram for u in usage), "tcam_blocks": sum(u.tcam for u in usage),
            "sram_capacity": int(sw.res("stages") * sw.res("sram_blocks")),
            "tcam_capacity": int(sw.res("stages") * sw.res("tcam_blocks")),
        }
    server_res = _server_resources(pl, c.server_load)
    return {
        "plan_version": PLAN_VERSION,
        "source": prog.file,
        "source_sha256": source_sha256,
        "compiler_version": compiler_version(),
        "target": ts.label,
        "targets": {"switch": _spec(sw), "server": _spec(srv), "servers": ts.n_servers,
                    "server_ports": list(ts.server_ports),
                    "shard": _shard(prog, pl, ts) if sw and srv else None},
        "stages": stages,
        "tables": [_table_entry(prog, t, pl, sw, srv, c.server_load) for t in prog.tables.values()],
        "objects": _objects(prog, pl),
        "bridges": [b.to_json() for b in c.bridges],
        "resources": {"switch": switch_res, "server": server_res},
        "cache_miss_paths": [asdict(x) | {"hit_rate": round(x.hit_rate, 4), "server_ns": round(x.server_ns, 2)}
                             for x in pl.misses],
        "drop_reasons": list(prog.reasons),
        "solver": {"engine": "z3 Optimize", "objectives": list(OBJECTIVES), "optimal": pl.optimal}
        | (pl.optimality.to_json() if pl.optimality else {}),
        "artifacts": dict(sorted(artifacts.items())),
        "generated": dict(sorted(generated.items())),
    }


def _shard(prog: ir.Program, pl: Placement, ts: TargetSet) -> dict[str, Any] | None:
    """``shard by``: the selector, each server's share of its values and the state the servers
    keep that packets write (lost with its server) (compiler/shard.py)."""
    shard = prog.deployment.shard if prog.deployment is not None else None
    ports = ts.server_ports
    if shard is None or not ports:
        return None
    state = server_state(prog, pl, ts)
    st = steering(shard, len(ports))
    ends = [*st.bounds[1:], 1 << st.selector.width]
    return {"by": shard.method, "keys": [print_expr(k) for k in shard.keys], "source": str(shard.span),
            "selector_bits": st.selector.width, "bucket_bits": st.bucket_bits,
            "state": [*state.keyed, *state.assumed],
            "shares": [{"server": i, "port": port, "first": lo, "last": hi - 1}
                       for i, (port, lo, hi) in enumerate(zip(ports, st.bounds, ends, strict=True))]}


def _objects(prog: ir.Program, pl: Placement) -> list[dict[str, Any]]:
    """Every register, counter and meter: its kind, size, width and the side whose stages use
    it, where the runtime reads and writes it (``switch``, ``server``, ``switch and server``:
    each keeps a copy, ``unused``); a ``monotonic`` register also says which tables' value fields
    index it (``cells_from``: the cells an entry counts in; empty: some index is not one)."""
    sides: dict[str, set[str]] = {}
    for name, st in prog.stages.items():
        if name not in pl.segment:  # a stage no pipeline runs (W001)
            continue
        side = "server" if pl.segment[name] is Segment.SERVER else "switch"
        for obj in stage_objects(st):
            sides.setdefault(obj, set()).add(side)
    decls = [(r.name, "register", r.width, r.size, r.span) for r in prog.registers.values()]
    decls += [(o.name, o.kind, 64 if o.kind == "counter" else 0, o.size, o.span) for o in prog.counters.values()]
    cells = monotonic_cells(prog, pl)
    mono = {r.name: {"monotonic": True, "cells_from": [list(c) for c in cells.get(r.name, ())]}
            for r in prog.registers.values() if r.monotonic}
    return [{"name": n, "kind": k, "width": w, "size": size, "source": _src(span),
             "placement": " and ".join(sorted(sides[n], reverse=True)) if n in sides else "unused"} | mono.get(n, {})
            for n, k, w, size, span in decls]


def _server_resources(pl: Placement, load: ServerLoad | None) -> dict[str, Any] | None:
    """The ``check-server-fit`` pass's figures: needed and available per resource (memory per server,
    cores and link over all servers) and which of them are over-committed (``--allow-overcommit``)."""
    if load is None:
        return None
    ghz = load.server.resources.get("clock_ghz", 2.0)
    return {
        "ns_per_packet": {k: round(v, 2) for k, v in pl.server_ns.items()},
        "cycles_per_packet": {k: round(v * ghz, 1) for k, v in pl.server_ns.items()},
        "weighted_ns_per_offered_packet": round(pl.server_ns_per_packet, 2),
        "offered_rate_pps": load.rate_pps,
        "cores_needed": round(load.cores.needed, 2),
        "cores_available": int(load.cores.available),
        "memory_bytes": int(load.memory.needed),
        "memory_available_bytes": int(load.memory.available),
        "crossing_share": round(pl.crossing_share, 4),
        "link_gbps_needed": round(load.link.needed, 2),
        "link_gbps_available": load.link.available,
        "servers_carrying": load.servers,
        "overcommitted": [m.resource.value for m in load.margins if not m.fits],
    }


def compiler_version() -> str:
    try:
        return importlib.metadata.version("nfc")
    except importlib.metadata.PackageNotFoundError:  # running from a tree that was not installed
        return "unknown"


def dump_plan(plan: dict[str, Any]) -> str:
    return json.dumps(plan, indent=2, sort_keys=True) + "\n"
