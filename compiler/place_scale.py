"""Placement at scale: a relaxation that bounds the objectives and proposes segments, and a
layout model that places the switch units for fixed segments (issue 13, item 6).

**The relaxation** (``relax``) keeps the segment choice of the exact model
(``compiler/partition_exact.py``) but replaces the per-MAU-stage memory by the whole switch's
and a unit's span of MAU stages by its first stage (``level``), the units it depends on ending
``span`` stages before it (a unit spreads its fixed blocks over at least that many); caches
are real numbers of blocks and entries.  Every placement satisfies it, so its lexicographic
optimum bounds the real one: objective 1 from below, then, for placements that reach that
bound, objective 2 from above, and so on (``Bounds``).  It is small (no per-stage variables),
so Z3 solves it for a hundred stages in seconds.

**The layout model** (``lay_out``) is the exact model with the segments fixed: unconditional
dependencies (reduced to the transitive reduction), caches counted in blocks with real-valued
entries (a block holds a fixed number of entries), and symmetry broken between pipelines that
are identical up to their names (their first units start in program order).  Its result is
turned back into whole entries, so it is checked and scored as any other placement.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import z3

from compiler.place_greedy import pass_deps
from compiler.place_problem import MI, Layout, Problem, cache_entries_fit
from compiler.placement import Segment, UnitPlacement
from compiler.z3_context import fresh_context

__all__ = ["LAYOUT_WORK", "RELAX_WORK", "Bounds", "Relaxed", "lay_out", "relax"]

# Work limits (Z3 rlimit units; on a 2-core 2.3 GHz machine about 2.5 million a second).  The
# relaxation needs under 0.3 million when it can settle objective 1 at all; the layout model
# settles programs of up to ~40 units within its limit.
RELAX_WORK = 5_000_000
LAYOUT_WORK = 20_000_000


@dataclass(frozen=True)
class Bounds:
    """Proven bounds: no placement costs less than ``server`` (objective 1); one that reaches it
    has at most ``hits`` (2), then at most ``cached`` (3), then at least ``depth`` MAU stages (4).
    None: not known (the solver ran out of time before it got there)."""

    server: int | None = None
    hits: int | None = None
    cached: int | None = None
    depth: int | None = None

    def as_tuple(self) -> tuple[int | None, int | None, int | None, int | None]:
        return self.server, self.hits, self.cached, self.depth


@dataclass(frozen=True)
class Relaxed:
    bounds: Bounds
    segment: dict[str, Segment] | None  # the relaxation's optimal segments (a proposal), if it got there
    infeasible: bool = False  # the relaxation has no solution: no placement exists


def _num(v: Any) -> Fraction | None:
    if z3.is_int_value(v):
        return Fraction(v.as_long())
    if z3.is_rational_value(v):
        return Fraction(v.numerator_as_long(), v.denominator_as_long())
    return None


class _Z3:
    """One query in a fresh Z3 context (so its answer does not depend on earlier queries), with
    a wall-clock limit and a work limit (Z3's ``rlimit``: the same on every machine, so where the
    search stops, and so its answer, does not depend on the machine's speed)."""

    def __init__(self, timeout_ms: int, work: int) -> None:
        self.ctx = z3.Context()
        self.opt = z3.Optimize(ctx=self.ctx)
        self.opt.set("timeout", max(1, timeout_ms))
        self.opt.set("rlimit", work)

    def int(self, name: str) -> Any:
        return z3.Int(name, self.ctx)

    def real(self, name: str) -> Any:
        return z3.Real(name, self.ctx)

    def sum(self, terms: list[Any]) -> Any:
        return z3.Sum(terms) if terms else z3.IntVal(0, self.ctx)

    def true(self, b: bool) -> Any:
        return z3.BoolVal(b, self.ctx)

    def add(self, *cs: Any) -> None:
        self.opt.add(*cs)


def _segments(p: Problem, q: _Z3) -> dict[str, Any]:
    """Segment variables with the exact model's constraints (allowed, monotone, all-switch
    without a server); ``#pipeline``: whether the pipeline visits a server."""
    seg: dict[str, Any] = {}
    for pl in p.pipelines:
        hs = z3.Bool(f"server_{pl.name}", q.ctx)
        prev = None
        for s in pl.stages:
            v = seg[s] = q.int(f"seg_{s}")
            allowed = p.stages[s].allowed
            q.add(z3.Or([v == int(a) for a in allowed]) if allowed else q.true(False))
            if prev is not None:
                q.add(prev <= v)
            prev = v
            q.add(z3.Implies(v == Segment.SERVER, hs), z3.Implies(z3.Not(hs), v == Segment.SWITCH))
        q.add(z3.Implies(hs, z3.Or([seg[s] == Segment.SERVER for s in pl.stages] or [q.true(False)])))
        seg[f"#{pl.name}"] = hs
    return seg


def _server_cost(p: Problem, q: _Z3, seg: dict[str, Any]) -> Any:
    terms = [z3.If(seg[f"#{pl.name}"], pl.io, 0) for pl in p.pipelines if pl.io]
    terms += [z3.If(seg[s] == Segment.SERVER, f.cost, 0) for s, f in p.stages.items() if f.cost]
    return q.sum(terms)


def _span(p: Problem, i: int) -> int:
    u = p.units[i]
    return max(1, math.ceil(u.sram / p.sram) if p.sram else 1, math.ceil(u.tcam / p.tcam) if p.tcam else 1)


def _cache_stage(p: Problem, table: str) -> str:
    return next(u.stage for u in p.units if table in u.caches)


@fresh_context()  # a query of its own: the answer does not depend on the queries before it
def relax(p: Problem, timeout_ms: int, server: int | None = None, work: int = RELAX_WORK) -> Relaxed:
    """Solve the relaxation (module docstring) within ``timeout_ms`` and ``work``; bounds for what
    it proved.  ``server``: objective 1's optimum, already known (a placement reaches a proven lower
    bound): the relaxation is held to it and bounds the later objectives only."""
    q = _Z3(timeout_ms, work)
    seg = _segments(p, q)
    on = {s: seg[s] != Segment.SERVER for s in p.stages}
    depth = q.int("depth")
    q.add(depth >= 0, depth <= p.n)
    cache_blocks, hits, entries = _relaxed_caches(p, q, on)
    used_s, used_t = _levels(p, q, seg, on, depth, cache_blocks)
    cache_s = q.sum([b for b, _ in cache_blocks.values()])
    cache_t = q.sum([k for _, k in cache_blocks.values()])
    if p.n:
        q.add(used_s + cache_s <= depth * p.sram, used_t + cache_t <= depth * p.tcam)
    cost = _server_cost(p, q, seg)
    if server is not None:
        q.add(cost == server)
    handles = [q.opt.minimize(cost), q.opt.maximize(hits), q.opt.maximize(entries), q.opt.minimize(depth)]
    result = q.opt.check()
    if result == z3.unsat:
        return Relaxed(Bounds(), None, infeasible=True)
    solved = result == z3.sat
    return Relaxed(_bounds(handles, solved), _model_segments(p, q, seg) if solved else None)


def _relaxed_caches(p: Problem, q: _Z3, on: dict[str, Any]) -> tuple[dict[str, tuple[Any, Any]], Any, Any]:
    """Real-valued cache blocks (SRAM, TCAM) per cache, and hits and entries as sums.  Whole
    entries would make the bounds exact, but Z3 takes seconds instead of tenths for them; the
    real ones exceed the whole ones by less than one entry per cache."""
    blocks: dict[str, tuple[Any, Any]] = {}
    hits, entries = [], []
    for t, c in p.caches.items():
        b, k, y, w = (q.real(f"{x}_{t}") for x in ("sram", "tcam", "entries", "useful"))
        q.add(b >= 0, k >= 0, y >= 0, w >= 0, y <= c.size, w <= y, w <= c.active, y * c.per_sram <= b * MI)
        if c.per_tcam:
            q.add(y * c.per_tcam <= k * MI)
        q.add(z3.Implies(z3.Not(on[_cache_stage(p, t)]), y == 0))
        blocks[t] = (b, k)
        hits.append(w * c.weight)
        entries.append(y)
    return blocks, q.sum(hits), q.sum(entries)


def _bounds(handles: list[Any], solved: bool) -> Bounds:
    """What the optimiser proved: every objective's optimum when it finished; else only its lower
    bound on objective 1 (the later objectives' figures are not bounds before it settles them)."""
    if not solved:
        lo = _num(handles[0].lower())
        return Bounds(server=None if lo is None else math.ceil(lo))
    values = [_num(h.value()) for h in handles]
    return Bounds(*(None if v is None else math.ceil(v) if i in (0, 3) else math.floor(v)
                    for i, v in enumerate(values)))


def _levels(p: Problem, q: _Z3, seg: dict[str, Any], on: dict[str, Any], depth: Any,
            cache_blocks: dict[str, tuple[Any, Any]]) -> tuple[Any, Any]:
    """Each switch unit's first MAU stage and the MAU stages it spans (its fixed blocks' fewest;
    a cache unit's as many as its blocks need), after the units it depends on; fixed blocks as sums."""
    level, reach = {}, {}
    sram, tcam = [], []
    for i, u in enumerate(p.units):
        lv = level[i] = q.real(f"level_{i}")
        r = reach[i] = _span(p, i) if not u.caches else q.real(f"reach_{i}")
        q.add(lv >= 0, z3.Implies(on[u.stage], z3.And(lv + r <= p.n, depth >= lv + r)))
        if u.caches:
            q.add(r >= _span(p, i), u.sram + q.sum([cache_blocks[t][0] for t in u.caches]) <= r * p.sram,
                  u.tcam + q.sum([cache_blocks[t][1] for t in u.caches]) <= r * p.tcam)
        if u.sram:
            sram.append(z3.If(on[u.stage], u.sram, 0))
        if u.tcam:
            tcam.append(z3.If(on[u.stage], u.tcam, 0))
    for pl in p.pipelines:
        for a, b in pl.deps:
            sa, sb = seg[p.units[a].stage], seg[p.units[b].stage]
            q.add(z3.Implies(z3.And(sa == sb, sa != Segment.SERVER), level[b] >= level[a] + reach[a]))
    return q.sum(sram), q.sum(tcam)


def _model_segments(p: Problem, q: _Z3, seg: dict[str, Any]) -> dict[str, Segment]:
    model = q.opt.model()
    return {s: Segment(model.eval(seg[s], model_completion=True).as_long()) for s in p.stages}


# ---- the layout model ------------------------------------------------------------------------


@fresh_context()  # a query of its own: the answer does not depend on the queries before it
def lay_out(p: Problem, segment: dict[str, Segment], timeout_ms: int, work: int = LAYOUT_WORK) -> Layout | None:
    """The best layout for fixed segments (objectives 2-4) found within ``timeout_ms`` and ``work``,
    or None (none exists, or none found in time)."""
    q = _Z3(timeout_ms, work)
    on = [i for i, u in enumerate(p.units) if segment[u.stage].on_switch]
    first = {i: q.int(f"first_{i}") for i in on}
    last = {i: q.int(f"last_{i}") for i in on}
    blocks, hits, entries = _block_caches(p, q, {p.units[i].stage for i in on})
    cells = _allocations(p, q, on, first, last, blocks)
    for a, b in _reduced(pass_deps(p, segment)):
        q.add(last[a] < first[b])
    _break_symmetry(p, q, segment, first)
    depth = q.int("depth")
    q.add(depth >= 0, *(depth >= last[i] + 1 for i in on))
    q.opt.maximize(hits)
    q.opt.maximize(entries)
    q.opt.minimize(depth)
    if q.opt.check() == z3.unsat:
        return None
    try:
        model = q.opt.model()
    except z3.Z3Exception:
        return None
    if model is None or not len(model):
        return None
    return _layout(p, segment, model, on, first, last, cells, blocks)


def _block_caches(p: Problem, q: _Z3, stages_on: set[str]) -> tuple[dict[str, tuple[Any, Any]], Any, Any]:
    """Each cache's SRAM and TCAM blocks (integers, TCAM in proportion to SRAM), and objectives 2
    and 3 counted per block: a block holds MI / per_sram entries, useful up to the active ones."""
    out: dict[str, tuple[Any, Any]] = {}
    hits, entries = [], []
    for t, c in p.caches.items():
        b, k, useful = q.int(f"cache_sram_{t}"), q.int(f"cache_tcam_{t}"), q.int(f"useful_{t}")
        top = -(-c.size * c.per_sram // MI) if _cache_stage(p, t) in stages_on else 0
        q.add(b >= 0, b <= top, k >= 0, k * c.per_sram >= b * c.per_tcam, k * c.per_sram < (b + 1) * c.per_tcam
              if c.per_tcam else k == 0)
        q.add(useful >= 0, useful <= b, useful <= -(-c.active * c.per_sram // MI))
        per_block = z3.RealVal(Fraction(MI, c.per_sram), q.ctx)
        hits.append(useful * per_block * c.weight)
        entries.append(b * per_block)
        out[t] = (b, k)
    return out, q.sum(hits), q.sum(entries)


def _allocations(p: Problem, q: _Z3, on: list[int], first: dict[int, Any], last: dict[int, Any],
                 blocks: dict[str, tuple[Any, Any]]) -> dict[tuple[int, str, int], Any]:
    """Blocks per unit per MAU stage inside its span; each MAU stage within its budget."""
    cells: dict[tuple[int, str, int], Any] = {}
    per_stage: dict[tuple[str, int], list[Any]] = {}
    for i in on:
        u = p.units[i]
        q.add(first[i] >= 0, last[i] <= p.n - 1, first[i] <= last[i])
        if not u.caches and u.sram == 0 and u.tcam == 0:
            q.add(first[i] == last[i])
            continue
        for kind, fixed, j in (("s", u.sram, 0), ("t", u.tcam, 1)):
            need = fixed + q.sum([blocks[t][j] for t in u.caches])
            row = []
            for k in range(p.n):
                a = cells[(i, kind, k)] = q.int(f"{kind}_{i}_{k}")
                q.add(a >= 0, z3.Implies(a > 0, z3.And(first[i] <= k, k <= last[i])))
                per_stage.setdefault((kind, k), []).append(a)
                row.append(a)
            q.add(q.sum(row) == need)
    for (kind, _k), xs in per_stage.items():
        q.add(q.sum(xs) <= (p.sram if kind == "s" else p.tcam))
    return cells


def _reduced(preds: dict[int, list[int]]) -> list[tuple[int, int]]:
    """The dependency pairs minus those implied by a chain through a third unit."""
    reach: dict[int, int] = {}  # unit -> bit set of the units it must follow, transitively
    out = []
    for b in sorted(preds):
        covered = 0
        for a in sorted(preds[b], reverse=True):  # latest first: an earlier one reached through it is implied
            if not covered >> a & 1:
                out.append((a, b))
            covered |= reach.get(a, 0) | 1 << a
        reach[b] = covered
    return out


def _break_symmetry(p: Problem, q: _Z3, segment: dict[str, Segment], first: dict[int, Any]) -> None:
    """Pipelines identical but for their names: the earlier one's first switch unit starts no later."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for pl in p.pipelines:
        on = [i for i in pl.units if i in first]
        if not on or any(p.units[i].caches for i in pl.units):
            continue
        base = pl.units[0]
        sig = (tuple((p.units[i].sram, p.units[i].tcam, segment[p.units[i].stage]) for i in pl.units),
               tuple((a - base, b - base) for a, b in pl.deps))
        groups.setdefault(sig, []).append(on[0])
    for heads in groups.values():
        for a, b in itertools.pairwise(heads):
            q.add(first[a] <= first[b])


def _layout(p: Problem, segment: dict[str, Segment], model: Any, on: list[int], first: dict[int, Any],
            last: dict[int, Any], cells: dict[tuple[int, str, int], Any],
            blocks: dict[str, tuple[Any, Any]]) -> Layout:
    def val(v: Any) -> int:
        return int(model.eval(v, model_completion=True).as_long())

    units = []
    for i in on:
        u = p.units[i]
        f, la = val(first[i]), val(last[i])
        s = tuple(val(cells[(i, "s", k)]) if (i, "s", k) in cells else 0 for k in range(f, la + 1))
        t = tuple(val(cells[(i, "t", k)]) if (i, "t", k) in cells else 0 for k in range(f, la + 1))
        units.append(UnitPlacement(u.name, u.stage, u.unit.tables, f, la, s, t))
    cache = {t: cache_entries_fit(c, val(blocks[t][0]), val(blocks[t][1])) for t, c in p.caches.items()}
    return Layout(dict(segment), tuple(units), cache)
