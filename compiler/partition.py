"""The partitioner: decides where every stage runs, with Z3's optimiser.

Model (docs/partitioner.md has the full statement):

* Each pipeline's stages get a ``Segment`` (``compiler/placement.py``): ``SWITCH`` (before
  the server), ``SERVER`` or ``SWITCH_AFTER``, non-decreasing along the pipeline (the solver
  sees them as the integers 0, 1, 2): a packet goes switch → server → switch at most once.
* A stage may only go where its target has every operation and match kind it uses.
* Each stage splits into units (``compiler.analysis``); a unit on the switch occupies MAU
  stages ``first..last`` and receives SRAM/TCAM blocks there; per MAU stage the blocks of
  all units fit the target's budget; a unit that depends on an earlier one of the same
  pass (read-after-write, write-after-read, write-after-write, or a drop before a
  stateful effect) starts after it ends.
* A table with ``cache = true`` keeps its full copy on the server and a cache on the
  switch whose size the solver chooses.
* Objectives, in order: minimise server nanoseconds per offered packet (traffic share ×
  cost model of the server-placed stages and of crossing the link), maximise cached
  entries, minimise the MAU stages used.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import z3

from compiler import ir
from compiler.analysis import Unit, stage_units, stage_uses
from compiler.explain import explain_unfit
from compiler.passes.capabilities import can_run
from compiler.placement import MissPath, Placement, Segment, UnitPlacement
from compiler.profiles import TargetSet, TargetSpec
from compiler.resources import Blocks, register_blocks, server_bytes, table_blocks
from lang.diagnostics import Diagnostics, Span

__all__ = ["SOLVER_TIMEOUT_MS", "partition", "stage_cost_ns"]

SOLVER_TIMEOUT_MS = 60_000
SCALE = 100  # objective in 1/100 ns


def stage_cost_ns(prog: ir.Program, stage: ir.Stage, spec: TargetSpec) -> float:
    """Server nanoseconds one packet spends in ``stage`` (the profile's cost model)."""
    c = spec.cost
    total = 0.0
    for use in stage_uses(prog, stage):
        if use.op == "lookup":
            continue
        if use.op.startswith("match:"):
            continue
        total += {"crypto": c.get("crypto", 70.0), "hash": c.get("hash", 2.0),
                  "dataplane_insert": c.get("insert", 25.0)}.get(use.op, c.get("stmt", 1.0))
    for unit in stage_units(prog, stage):
        for t in unit.tables:
            total += _lookup_ns(prog.tables[t], c)
    return total


def _lookup_ns(t: ir.Table, c: dict[str, float]) -> float:
    if t.match == "exact":
        lo, hi = c.get("exact_1m", 19.0), c.get("exact_16m", 23.0)
        frac = min(1.0, max(0.0, math.log2(max(t.size, 1) / 1e6) / 4))
        return lo + (hi - lo) * frac
    if t.match == "lpm":
        return c.get("lpm", 6.0)
    return c.get("ternary", 40.0)


# ---- the model ------------------------------------------------------------------------------


@dataclass
class _Model:
    prog: ir.Program
    targets: TargetSet
    opt: Any
    seg: dict[str, Any] = field(default_factory=dict)
    units: list[Unit] = field(default_factory=list)
    first: dict[str, Any] = field(default_factory=dict)
    last: dict[str, Any] = field(default_factory=dict)
    sram: dict[tuple[str, int], Any] = field(default_factory=dict)
    tcam: dict[tuple[str, int], Any] = field(default_factory=dict)
    cache_e: dict[str, Any] = field(default_factory=dict)
    has_server: dict[str, Any] = field(default_factory=dict)


def _depends(a: Unit, b: Unit) -> bool:
    return bool(a.writes & b.reads or a.reads & b.writes or a.writes & b.writes) or (a.may_stop and b.stateful)


def _unit_need(m: _Model, u: Unit, spec: TargetSpec, seen_objs: set[str]) -> tuple[Any, Any]:
    """(SRAM, TCAM) blocks unit ``u`` needs on the switch: ints, or solver terms for caches."""
    sram: Any = 0
    tcam: Any = 0
    for name in u.tables:
        t = m.prog.tables[name]
        if t.hints.cache:
            s, c = _cache_vars(m, t, spec)
            sram, tcam = sram + s, tcam + c
        else:
            b = table_blocks(t, t.size, spec)
            sram, tcam = sram + b.sram, tcam + b.tcam
    for obj, width, size in _stateful_objects(m.prog, u):
        if obj not in seen_objs:
            seen_objs.add(obj)
            sram = sram + register_blocks(width, size, spec)
    return sram, tcam


def _stateful_objects(prog: ir.Program, u: Unit) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    for loc in sorted(u.reads | u.writes):
        if loc[0] == "reg":
            r = prog.registers[loc[1]]
            out.append((r.name, r.width, r.size))
    from compiler.analysis import stmt_exprs, walk_expr, walk_stmts

    for s in walk_stmts(u.stmts):
        for e in stmt_exprs(s):
            for x in walk_expr(e):
                if isinstance(x, ir.CounterOp):
                    c = prog.counters[x.obj]
                    out.append((c.name, 64 if c.kind == "counter" else 128, c.size))
    return out


def _cache_vars(m: _Model, t: ir.Table, spec: TargetSpec) -> tuple[Any, Any]:
    """Cache size variables: entries E, SRAM blocks B (B·cap >= E), TCAM blocks for lpm/ternary."""
    e = z3.Int(f"cache_{t.name}")
    m.cache_e[t.name] = e
    m.opt.add(e >= 0, e <= t.size)
    per = table_blocks(t, 1024 * 1024, spec)  # blocks for 1Mi entries: the per-entry ratio
    b = z3.Int(f"cache_sram_{t.name}")
    m.opt.add(b >= 0, b * (1024 * 1024) >= e * per.sram)
    c: Any = 0
    if per.tcam:
        c = z3.Int(f"cache_tcam_{t.name}")
        m.opt.add(c >= 0, c * (1024 * 1024) >= e * per.tcam)
    return b, c


def _build(m: _Model, diags: Diagnostics) -> None:
    prog, ts = m.prog, m.targets
    sw, srv = ts.switch, ts.server
    for p in prog.pipelines:
        prev = None
        hs = z3.Bool(f"server_{p.name}")
        m.has_server[p.name] = hs
        for sname in p.stages:
            stage = prog.stages[sname]
            s = z3.Int(f"seg_{sname}")
            m.seg[sname] = s
            m.opt.add(s >= Segment.SWITCH, s <= Segment.SWITCH_AFTER)
            if prev is not None:
                m.opt.add(prev <= s)
            prev = s
            if not can_run(prog, stage, sw, srv is not None) or sw is None:
                m.opt.add(s == Segment.SERVER)
            if not can_run(prog, stage, srv) or srv is None:
                m.opt.add(s != Segment.SERVER)
            if srv is None or sw is None:
                m.opt.add(s != Segment.SWITCH_AFTER)
            for pin in _pins(prog, stage):
                m.opt.add(s == Segment.SERVER if pin == "server" else s != Segment.SERVER)
            m.opt.add(z3.Implies(s == Segment.SERVER, hs))
        m.opt.add(z3.Implies(hs, z3.Or([m.seg[x] == Segment.SERVER for x in p.stages] or [z3.BoolVal(False)])))
        for x in p.stages:  # a pipeline that never visits the server is all "segment 0"
            m.opt.add(z3.Implies(z3.Not(hs), m.seg[x] == Segment.SWITCH))
    if sw is not None:
        _switch_resources(m, sw)


def _pins(prog: ir.Program, stage: ir.Stage) -> list[str]:
    return [prog.tables[t].hints.pin or "" for u in stage_units(prog, stage) for t in u.tables
            if prog.tables[t].hints.pin]


def _switch_resources(m: _Model, sw: TargetSpec) -> None:
    n = int(sw.res("stages"))
    seen: set[str] = set()
    per_stage_sram: list[list[Any]] = [[] for _ in range(n)]
    per_stage_tcam: list[list[Any]] = [[] for _ in range(n)]
    for p in m.prog.pipelines:
        units = [u for s in p.stages for u in stage_units(m.prog, m.prog.stages[s])]
        for u in units:
            _place_unit(m, u, sw, n, seen, per_stage_sram, per_stage_tcam)
        for i, a in enumerate(units):
            for b in units[i + 1 :]:
                if _depends(a, b):
                    sa, sb = m.seg[a.stage], m.seg[b.stage]
                    m.opt.add(z3.Implies(z3.And(sa != 1, sa == sb), m.last[a.name] < m.first[b.name]))
    for k in range(n):
        if per_stage_sram[k]:
            m.opt.add(z3.Sum(per_stage_sram[k]) <= int(sw.res("sram_blocks")))
        if per_stage_tcam[k]:
            m.opt.add(z3.Sum(per_stage_tcam[k]) <= int(sw.res("tcam_blocks")))


def _place_unit(m: _Model, u: Unit, sw: TargetSpec, n: int, seen: set[str],
                per_sram: list[list[Any]], per_tcam: list[list[Any]]) -> None:
    m.units.append(u)
    first, last = z3.Int(f"first_{u.name}"), z3.Int(f"last_{u.name}")
    m.first[u.name], m.last[u.name] = first, last
    m.opt.add(first >= 0, last <= n - 1, first <= last)
    on = m.seg[u.stage] != 1
    need_s, need_t = _unit_need(m, u, sw, seen)
    if isinstance(need_s, int) and isinstance(need_t, int) and need_s == 0 and need_t == 0:
        m.opt.add(first == last)
        return
    for kind, need, per in (("s", need_s, per_sram), ("t", need_t, per_tcam)):
        if isinstance(need, int) and need == 0:
            continue
        cells = []
        for k in range(n):
            a = z3.Int(f"{kind}_{u.name}_{k}")
            (m.sram if kind == "s" else m.tcam)[(u.name, k)] = a
            m.opt.add(a >= 0, z3.Implies(a > 0, z3.And(first <= k, k <= last)))
            per[k].append(a)
            cells.append(a)
        m.opt.add(z3.Sum(cells) == z3.If(on, need, 0))


def _useful_hits(m: _Model) -> Any:
    """Linear proxy of the expected cache hits, weighted by traffic: entries beyond a
    table's active set add nothing (exact for uniform popularity, see ``hit_rate``)."""
    terms: list[Any] = []
    for name, e in m.cache_e.items():
        t = m.prog.tables[name]
        active = max(1, int(t.size * t.hints.active))
        share = next((p.traffic for p in m.prog.pipelines for s in p.stages
                      if any(name in u.tables for u in stage_units(m.prog, m.prog.stages[s]))), 1.0)
        u = z3.Int(f"useful_{name}")
        m.opt.add(u >= 0, u <= e, u <= active)
        terms.append(u * max(1, round(share * 1e9 / active)))
    return z3.Sum(terms) if terms else z3.IntVal(0)


def _objectives(m: _Model) -> tuple[Any, Any, Any, Any]:
    prog, srv = m.prog, m.targets.server
    terms: list[Any] = []
    for p in prog.pipelines:
        share = round(p.traffic * SCALE)
        if srv is None:
            continue
        io = srv.cost.get("io", 7.5) + srv.cost.get("bridge", 2.0)
        terms.append(z3.If(m.has_server[p.name], int(io * share), 0))
        for s in p.stages:
            cost = round(stage_cost_ns(prog, prog.stages[s], srv) * share)
            terms.append(z3.If(m.seg[s] == Segment.SERVER, cost, 0))
    server = z3.Sum(terms) if terms else z3.IntVal(0)
    cached = z3.Sum(list(m.cache_e.values())) if m.cache_e else z3.IntVal(0)
    depth = z3.Int("mau_depth")
    for u in m.units:
        m.opt.add(z3.Implies(m.seg[u.stage] != 1, depth >= m.last[u.name] + 1))
    m.opt.add(depth >= 0)
    return server, _useful_hits(m), cached, depth


def partition(prog: ir.Program, targets: TargetSet, diags: Diagnostics,
              timeout_ms: int = SOLVER_TIMEOUT_MS) -> Placement | None:
    """Place every stage; on failure add a diagnostic that explains what does not fit."""
    started = time.monotonic()
    ctx_opt = z3.Optimize()
    ctx_opt.set("timeout", timeout_ms)
    m = _Model(prog, targets, ctx_opt)
    _build(m, diags)
    server, hits, cached, depth = _objectives(m)
    ctx_opt.minimize(server)
    ctx_opt.maximize(hits)
    ctx_opt.maximize(cached)
    ctx_opt.minimize(depth)
    result = ctx_opt.check()
    elapsed = time.monotonic() - started
    if result == z3.unsat:
        explain_unfit(prog, targets, diags)
        return None
    if result == z3.unknown:
        try:
            model = ctx_opt.model()
        except z3.Z3Exception:
            model = None
        if model is None or len(model) == 0:
            diags.error("E080", f"the partitioner found no placement within {timeout_ms / 1000:.0f} s",
                        prog.pipelines[0].span if prog.pipelines else Span(prog.file, 1, 1, 1, 1))
            return None
    return _extract(m, ctx_opt.model(), result == z3.sat, elapsed)


def _val(model: Any, v: Any) -> int:
    if isinstance(v, int):
        return v
    return int(model.eval(v, model_completion=True).as_long())


def _extract(m: _Model, model: Any, optimal: bool, elapsed: float) -> Placement:
    prog, srv = m.prog, m.targets.server
    segment = {s: Segment(_val(model, v)) for s, v in m.seg.items()}
    units: list[UnitPlacement] = []
    n = int(m.targets.switch.res("stages")) if m.targets.switch else 0
    for u in m.units:
        if segment[u.stage] is Segment.SERVER:
            continue
        f, la = _val(model, m.first[u.name]), _val(model, m.last[u.name])
        sram = tuple(_val(model, m.sram.get((u.name, k), 0)) for k in range(f, la + 1))
        tcam = tuple(_val(model, m.tcam.get((u.name, k), 0)) for k in range(f, la + 1))
        units.append(UnitPlacement(u.name, u.stage, u.tables, f, la, sram, tcam))
    cache = {t: _val(model, e) for t, e in m.cache_e.items()}
    server_ns: dict[str, float] = {}
    weighted = 0.0
    for p in prog.pipelines:
        ns = 0.0
        if srv is not None and any(segment[s] is Segment.SERVER for s in p.stages):
            ns = srv.cost.get("io", 7.5) + srv.cost.get("bridge", 2.0)
            ns += sum(stage_cost_ns(prog, prog.stages[s], srv) for s in p.stages if segment[s] is Segment.SERVER)
        server_ns[p.name] = ns
        weighted += ns * p.traffic
    misses = _miss_paths(prog, segment, cache, srv)
    weighted += sum(x.server_ns * (1 - x.hit_rate) * prog.pipeline_of(x.stage).traffic for x in misses)
    crossing = sum(p.traffic for p in prog.pipelines if server_ns[p.name] > 0)
    crossing += sum((1 - x.hit_rate) * prog.pipeline_of(x.stage).traffic for x in misses)
    cores = weighted * m.targets.rate_pps / 1e9
    memory = sum(server_bytes(t) for t in prog.tables.values() if _on_server(prog, t.name, segment))
    depth = max((u.last + 1 for u in units), default=0)
    del n
    return Placement(segment, tuple(units), cache, server_ns, weighted, cores, memory, depth, optimal, elapsed,
                     misses, crossing)


def hit_rate(t: ir.Table, cached: int) -> float:
    """Expected share of lookups a switch cache of ``cached`` entries answers.

    The ``active`` share of entries receives the traffic; within them popularity follows
    Zipf with exponent ``skew`` (0: uniform).  The cache holds the most popular entries
    (the cache manager promotes on hits): hit rate = H(cached, s) / H(active, s), with the
    generalised harmonic number approximated by its integral.
    """
    active = max(1.0, t.size * t.hints.active)
    if cached >= active:
        return 1.0
    if cached <= 0:
        return 0.0
    s = t.hints.skew

    def h(n: float) -> float:
        if abs(s - 1.0) < 1e-9:
            return math.log(n) + 1.0
        return float((n ** (1 - s) - s) / (1 - s))

    return min(1.0, h(cached) / h(active)) if s > 0 else cached / active


def _miss_paths(prog: ir.Program, segment: dict[str, Segment], cache: dict[str, int],
                srv: TargetSpec | None) -> tuple[MissPath, ...]:
    out: list[MissPath] = []
    for name, entries in sorted(cache.items()):
        t = prog.tables[name]
        stage = next(s for s in prog.stages.values() for u in stage_units(prog, s) if name in u.tables)
        if segment[stage.name] is Segment.SERVER or srv is None:
            continue
        ns = srv.cost.get("io", 7.5) + srv.cost.get("bridge", 2.0) + stage_cost_ns(prog, stage, srv)
        out.append(MissPath(name, stage.name, prog.pipeline_of(stage.name).name, entries, hit_rate(t, entries), ns))
    return tuple(out)


def _on_server(prog: ir.Program, table: str, segment: dict[str, Segment]) -> bool:
    if prog.tables[table].hints.cache:
        return True
    for s in prog.stages.values():
        for u in stage_units(prog, s):
            if table in u.tables and segment.get(s.name) is Segment.SERVER:
                return True
    return False


def switch_usage(placement: Placement, n_stages: int) -> list[Blocks]:
    """SRAM/TCAM blocks used per MAU stage."""
    use = [Blocks(0, 0) for _ in range(n_stages)]
    for u in placement.units:
        for i, k in enumerate(range(u.first, u.last + 1)):
            use[k] = use[k] + Blocks(u.sram[i], u.tcam[i])
    return use
