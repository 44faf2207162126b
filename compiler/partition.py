"""The partitioner: decides where every stage runs, and how sure it is of the answer.

docs/partitioner.md states the model (segments, units in MAU stages, per-stage memory,
dependencies, caches; four objectives in lexicographic order) and the algorithm:

1. **Greedy start** (``compiler/place_greedy.py``): a valid placement in milliseconds, kept as
   the fallback whatever happens next.
2. **Optimiser**, within the time limit (``--place-timeout``, 60 s by default):
   * a program of at most ``EXACT_MAX_STAGES`` stages: the exact model, the whole problem in
     one Z3 ``Optimize`` query (``compiler/partition_exact.py``), which proves its answer optimal;
   * a larger one: the scalable search: a knapsack bound on the server cost whose choice is
     another greedy start (``compiler/place_bounds.py``), a Z3 relaxation for the bounds on the
     later objectives, and a Z3 layout model for fixed segments (``compiler/place_scale.py``).
3. **Choice**: every candidate is checked against the constraints (``compiler/place_check.py``);
   the best by the objectives wins, and its values are compared with the best bounds proved
   (``Optimality``).  A placement not proved optimal carries its gap and warning W080; only
   when no valid placement is found at all is it E080.

While it searches, a listener (``compiler/partition_progress.py``) hears every few seconds how
long it has run and the best placement so far: the greedy starts', the Z3 models the exact
model finds on the way, the layout model's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from compiler import ir
from compiler.analysis import stage_units
from compiler.explain import explain_unfit
from compiler.partition_exact import Incumbent, solve_exact
from compiler.partition_progress import PlaceProgress
from compiler.place_bounds import ServerBound, server_lower_bound
from compiler.place_check import violations
from compiler.place_greedy import greedy
from compiler.place_problem import (
    Layout,
    Problem,
    crossing_ns,
    objectives,
    problem_of,
    server_stages,
    stage_cost_ns,
)
from compiler.place_scale import Bounds, lay_out, relax
from compiler.placement import OBJECTIVES, MissPath, Optimality, Placement, Segment
from compiler.profiles import TargetSet, TargetSpec
from compiler.resources import Blocks, server_bytes
from compiler.stage_estimate import estimate
from lang.diagnostics import Diagnostics, InternalError

__all__ = ["EXACT_MAX_STAGES", "EXACT_RELAX_SHARE", "GAP_TOLERANCE", "LAYOUT_MAX_UNITS", "RELAX_SHARE",
           "SOLVER_TIMEOUT_MS", "gap_text", "hit_rate", "partition", "stage_cost_ns", "switch_usage"]

SOLVER_TIMEOUT_MS = 60_000  # the default time limit
EXACT_MAX_STAGES = 8  # programs up to this many stages get the exact model (the examples have 5 to 7)
RELAX_SHARE = 0.3  # of the time left, for the scalable search's relaxation
EXACT_RELAX_SHARE = 0.1  # for the bounds of the exact model's answer, should the time run out
LAYOUT_MAX_UNITS = 40  # the layout model is tried for programs up to this many units
# A placement this close to its bound is not worth more search, nor a warning unless the time ran
# out (the relative gap at which MIP solvers stop by default, e.g. Gurobi's MIPGap, HiGHS').
GAP_TOLERANCE = 1e-4

@dataclass(frozen=True)
class _Outcome:
    layout: Layout | None  # the best valid candidate
    bounds: Bounds
    method: str
    stopped_at_limit: bool
    infeasible: bool = False  # proved: no placement exists


class _Clock:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.monotonic()

    def left_ms(self, share: float = 1.0) -> int:
        """Milliseconds of ``share`` of the time that is left (at least 1)."""
        left = self.seconds - (time.monotonic() - self.started)
        return max(1, int(left * 1000 * share))

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def out(self) -> bool:
        return self.elapsed() >= self.seconds


def partition(prog: ir.Program, targets: TargetSet, diags: Diagnostics,
              timeout_ms: int | None = None) -> Placement | None:
    """Place every stage within the time limit (``timeout_ms``, else ``time_limit``'s, else 60 s);
    on failure add a diagnostic that explains what does not fit.  The listener set by
    ``compiler.partition_progress.reporting``, if any, hears how the search goes.

    W088 when the switch program's own control code (``compiler.stage_estimate``) would take
    it past the switch's MAU stages: the placement counts the table units' stages only, and the
    Tofino back end places the rest too."""
    placement = _partition(prog, targets, diags, timeout_ms)
    sw = targets.switch
    if placement is None or sw is None:
        return placement
    n = int(sw.res("stages"))
    est = estimate(prog, placement, sw, targets.server is not None)
    if est.stages > n:
        where = prog.first_pipeline_span
        diags.warning("W088", f"the switch program needs about {est.stages} MAU stages with its control code "
                              f"(checks, drops, the branches after lookups, hashes); {sw.name} has {n} and its "
                              f"tables are placed in {est.table_stages}", where,
                      notes=("the Tofino back end is likely to refuse it (docs/partitioner.md, "
                             "\"Control code\")",))
    return placement


def _partition(prog: ir.Program, targets: TargetSet, diags: Diagnostics, timeout_ms: int | None) -> Placement | None:
    limit = (timeout_ms if timeout_ms is not None else SOLVER_TIMEOUT_MS) / 1000
    clock = _Clock(limit)
    p = problem_of(prog, targets)
    with PlaceProgress(limit, started=clock.started) as progress:
        progress.step("greedy start")
        start = _offered(p, progress, _checked(p, greedy(p), "the greedy start"), "greedy start")
        n_stages = sum(len(pl.stages) for pl in prog.pipelines)
        out = _exact(p, start, clock, progress) if n_stages <= EXACT_MAX_STAGES else \
            _scalable(p, start, clock, progress)
    if out.infeasible:
        explain_unfit(prog, targets, diags)
        return None
    if out.layout is None:
        where = prog.first_pipeline_span
        diags.error("E080", f"the partitioner found no placement within {limit:g} s", where,
                    notes=("give it more time with --place-timeout SECONDS",))
        return None
    quality = Optimality(objectives(p, out.layout), out.bounds.as_tuple(), out.method, limit, out.stopped_at_limit)
    if _worth_warning(quality):
        _warn_open(prog, quality, diags)
    return _placement(prog, targets, out.layout, quality, clock.elapsed())


def _checked(p: Problem, lay: Layout | None, what: str) -> Layout | None:
    """``lay`` if it obeys every constraint; an internal error if not (a bug in ``what``)."""
    if lay is None:
        return None
    broken = violations(p.prog, p.targets, lay.segment, lay.units, lay.cache)
    if broken:
        raise InternalError(f"{what} broke the placement model: {'; '.join(broken[:3])} (this is a bug in nfc, "
                            "please report it)")
    return lay


def _key(p: Problem, lay: Layout) -> tuple[int, int, int, int]:
    """Sort key: smaller is better, objective by objective."""
    server, hits, cached, depth = objectives(p, lay)
    return server, -hits, -cached, depth


def _best(p: Problem, *cands: Layout | None) -> Layout | None:
    valid = [c for c in cands if c is not None]
    return min(valid, key=lambda c: _key(p, c)) if valid else None


# ---- progress (compiler/partition_progress.py) -------------------------------------------------


def _offered(p: Problem, progress: PlaceProgress, lay: Layout | None, source: str) -> Layout | None:
    """``lay``, offered to ``progress`` as a candidate found by ``source``."""
    if lay is not None and progress.active:
        progress.offer(_key(p, lay), lambda: _described(p, objectives(p, lay), _on_switch(lay)), source)
    return lay


def _on_switch(lay: Layout) -> int:
    return sum(1 for s in lay.segment.values() if s.on_switch)


def _incumbent(p: Problem, progress: PlaceProgress) -> Callable[[Incumbent], None] | None:
    """What the exact model tells ``progress`` of each model Z3 finds (None without a listener:
    Z3 then builds no model on the way)."""
    if not progress.active:
        return None

    def heard(m: Incumbent) -> None:
        server, hits, cached, depth = m.objectives
        progress.offer((server, -hits, -cached, depth), lambda: _described(p, m.objectives, m.on_switch),
                       "Z3 Optimize")

    return heard


def _described(p: Problem, values: tuple[int, int, int, int], on_switch: int) -> str:
    """A placement's objectives as a person reads them."""
    q = Optimality(values, (None, None, None, None), "", 0, False)
    cached = [f"{values[2]:,} cached entries"] if p.caches else []
    return ", ".join([f"{on_switch} of {len(p.stages)} stages on the switch", f"server {q.shown(0, values[0]):g} "
                      "ns/packet", *cached, f"{values[3]} MAU stages"])


# ---- the searches -----------------------------------------------------------------------------


def _exact(p: Problem, start: Layout | None, clock: _Clock, progress: PlaceProgress) -> _Outcome:
    """The exact model.  Should the time run out: its incumbent, the greedy start or the greedy
    from the knapsack bound's choice, whichever is best, against the bounds of the knapsack and
    of the relaxation (computed first, in a tenth of the time)."""
    floor = server_lower_bound(p)
    bounds = Bounds()
    if floor is not None:
        at_lower = start is not None and objectives(p, start)[0] == floor.bound
        progress.step("bounds (Z3 relaxation)")
        bounds = _merged(floor, relax(p, clock.left_ms(EXACT_RELAX_SHARE), floor.bound if at_lower else None).bounds)
    progress.step("exact model (Z3 Optimize)")
    r = solve_exact(p, clock.left_ms(), _incumbent(p, progress))
    if r.status == "infeasible":
        if start is not None:
            raise InternalError("the exact placement model found no placement, but the greedy start is one "
                                "(this is a bug in nfc, please report it)")
        return _Outcome(None, Bounds(), "exact", False, infeasible=True)
    if r.status == "optimal":
        lay = _checked(p, r.layout, "the exact model")
        assert lay is not None
        return _Outcome(lay, Bounds(*objectives(p, lay)), "exact", False)
    incumbent = r.layout if r.layout and not violations(p.prog, p.targets, r.layout.segment, r.layout.units,
                                                        r.layout.cache) else None
    if r.server_bound is not None and (bounds.server is None or r.server_bound > bounds.server):
        bounds = Bounds(server=r.server_bound)
    knapsack_start = _checked(p, greedy(p, floor.segment), "the greedy start from the knapsack bound") if floor \
        else None
    return _Outcome(_best(p, incumbent, start, knapsack_start), bounds, "exact", True)


def _scalable(p: Problem, start: Layout | None, clock: _Clock, progress: PlaceProgress) -> _Outcome:
    """Greedy placements from the minimal segments and from the knapsack bound's; bounds (the
    knapsack's in tenths of a second, then the Z3 relaxation's); the greedy and, for programs of
    up to ``LAYOUT_MAX_UNITS`` units, the layout model on the relaxation's segments and the best
    placement's, while a gap is left."""
    progress.step("knapsack bound")
    floor = server_lower_bound(p)
    if floor is None:
        return _Outcome(None, Bounds(), "scalable", False, infeasible=True)
    knapsack_start = _checked(p, greedy(p, floor.segment), "the greedy start from the knapsack bound")
    best = _best(p, start, _offered(p, progress, knapsack_start, "greedy from the knapsack bound"))
    at_lower = best is not None and objectives(p, best)[0] == floor.bound
    progress.step("bounds (Z3 relaxation)")
    relaxed = relax(p, clock.left_ms(RELAX_SHARE), floor.bound if at_lower else None)
    if relaxed.infeasible:
        if best is not None:  # a valid placement satisfies the relaxation: its model is wrong
            raise InternalError("the placement relaxation has no solution, but a greedy placement is one (this is a "
                                "bug in nfc, please report it)")
        return _Outcome(None, Bounds(), "scalable", False, infeasible=True)
    bounds = _merged(floor, relaxed.bounds)
    if relaxed.segment is not None:
        relaxed_start = _checked(p, greedy(p, relaxed.segment), "the greedy start from the relaxation")
        best = _best(p, best, _offered(p, progress, relaxed_start, "greedy from the relaxation"))
    if len(p.units) <= LAYOUT_MAX_UNITS:
        for seg in (relaxed.segment, best.segment if best else None):
            if seg is not None and not _meets(p, best, bounds) and not clock.out():
                progress.step("layout model (Z3)")
                laid = _checked(p, lay_out(p, seg, clock.left_ms(0.5)), "the layout model")
                best = _best(p, best, _offered(p, progress, laid, "layout model"))
    if best is None and not clock.out():  # nothing found yet: the exact model may still find one, or prove none
        return replace(_exact(p, None, clock, progress), method="scalable")
    return _Outcome(best, bounds, "scalable", clock.out())


def _merged(floor: ServerBound, relaxed: Bounds) -> Bounds:
    """The knapsack's bounds and the Z3 relaxation's, the tighter of each.  Each bound after the
    first holds for placements that reach the ones before it, so a relaxation that settled a
    weaker (lower) server bound has nothing to say about placements at the knapsack's, and of two
    hit bounds at the same server bound, the later bounds come with the relaxation's only."""
    if relaxed.server is None or relaxed.server < floor.bound:
        return Bounds(server=floor.bound, hits=floor.hits)
    if relaxed.server > floor.bound or floor.hits is None:
        return relaxed
    if relaxed.hits is None or floor.hits < relaxed.hits:
        return Bounds(server=floor.bound, hits=floor.hits)
    return relaxed


def _meets(p: Problem, lay: Layout | None, bounds: Bounds) -> bool:
    """Is ``lay`` within ``GAP_TOLERANCE`` of ``bounds`` (nothing left worth searching for)?"""
    if lay is None:
        return False
    gap = Optimality(objectives(p, lay), bounds.as_tuple(), "", 0, False).gap
    return gap is not None and gap <= GAP_TOLERANCE


def _worth_warning(q: Optimality) -> bool:
    """W080 when the time limit cut the search short, or when the server cost or the cache hits
    (the objectives a deployment feels) may be more than ``GAP_TOLERANCE`` from their optimum.
    Gaps on the tie-breaks (cached entries beyond the active sets, MAU stages) are in the report
    and plan.json only."""
    if q.proved:
        return False
    return q.stopped_at_limit or (q.open_objective in (0, 1) and (q.gap is None or q.gap > GAP_TOLERANCE))


def _warn_open(prog: ir.Program, q: Optimality, diags: Diagnostics) -> None:
    """W080: the placement is the best found, not proved optimal; how far from the bound it may be."""
    i = q.open_objective
    assert i is not None
    why = (f"the partitioner stopped at its {q.time_limit_s:g} s time limit" if q.stopped_at_limit else
           "the scalable search proved no tighter bound")
    value, bound = q.shown(i, q.values[i]), q.shown(i, q.bounds[i])
    if q.gap is None:
        how = f"{OBJECTIVES[i]} is {value:g}, its bound unknown"
    else:
        how = f"{OBJECTIVES[i]} is {value:g} against a proven bound of {bound:g} (gap {gap_text(q.gap)})"
    where = prog.first_pipeline_span
    hint = ("give the partitioner more time with --place-timeout SECONDS" if q.stopped_at_limit else
            "the bound may be loose: the scalable search's relaxations ignore where in the switch memory is free")
    diags.warning("W080", f"placement not proved optimal: {why}; {how}", where,
                  notes=(f"this is the best placement found; {hint}",))


def gap_text(gap: float) -> str:
    """A gap as a percentage a reader can compare: 2.7 %, 0.3 %, 0.0004 %."""
    return f"{gap:.1%}" if gap >= 0.001 else f"{gap * 100:.2g}%"


# ---- the placement ----------------------------------------------------------------------------


def _placement(prog: ir.Program, targets: TargetSet, lay: Layout, quality: Optimality, elapsed: float) -> Placement:
    srv = targets.server
    segment = lay.segment
    server_ns: dict[str, float] = {}
    weighted = 0.0
    for p in prog.pipelines:
        ns = 0.0
        if srv is not None and any(segment[s] is Segment.SERVER for s in p.stages):
            ns = crossing_ns(prog, p, srv)
            on = server_stages(segment)
            ns += sum(stage_cost_ns(prog, prog.stages[s], srv, on) for s in p.stages if s in on)
        server_ns[p.name] = ns
        weighted += ns * p.traffic
    misses = _miss_paths(prog, segment, lay.cache, srv)
    weighted += sum(x.server_ns * (1 - x.hit_rate) * prog.pipeline_of(x.stage).traffic for x in misses)
    crossing = sum(p.traffic for p in prog.pipelines if server_ns[p.name] > 0)
    crossing += sum((1 - x.hit_rate) * prog.pipeline_of(x.stage).traffic for x in misses)
    cores = weighted * targets.rate_pps / 1e9
    memory = 0 if srv is None else sum(server_bytes(t, srv) for t in prog.tables.values()
                                       if _on_server(prog, t.name, segment))
    depth = max((u.last + 1 for u in lay.units), default=0)
    return Placement(dict(segment), lay.units, dict(lay.cache), server_ns, weighted, cores, memory, depth,
                     quality.proved, elapsed, misses, crossing, quality)


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
        # the miss path runs this stage alone on the server: what earlier stages wrote is in the bridge
        ns = crossing_ns(prog, prog.pipeline_of(stage.name), srv) + stage_cost_ns(prog, stage, srv,
                                                                                 frozenset({stage.name}))
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
