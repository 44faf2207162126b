"""Lower bounds on objective 1 (server cost) without a solver, and segments that attain them.

Every placement gives each pipeline one *option*: the run of stages it sends to the server
(possibly none), which fixes its server cost and the SRAM and TCAM blocks its switch stages
take apart from caches (a cache may hold nothing).  The switch holds at most its total blocks.
Choosing one option per pipeline under that budget (and nothing else: not per MAU stage, not
the dependency chains) is a multiple-choice knapsack, a relaxation of placement: its optimum
is a lower bound on every placement's cost.

* **Exactly**, by dynamic programming over the pipelines on (SRAM, TCAM) used, keeping only
  the states no other state beats in cost and both resources (Pareto); tenths of a second for
  a hundred stages.  It gives up beyond ``MAX_STATES`` states or ``MAX_WORK`` steps.
* Else by its **Lagrangian relaxation**, for multipliers λ, μ >= 0 on the two budgets,

      L(λ, μ) = Σ_pipelines min_option (cost + λ·SRAM + μ·TCAM) − λ·SRAM_total − μ·TCAM_total,

  a lower bound for every λ, μ (weak duality) and concave, so a few rounds of ternary search per
  coordinate find a good one; it is evaluated once more in exact rational arithmetic, so float
  rounding cannot make it invalid.  It is the knapsack's linear-programming bound, weaker.

Either way the options chosen are a start for the greedy (``ServerBound.segment``): they trade
cost against memory across all pipelines at once, where the greedy's relief goes one stage at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import partial

from compiler.place_problem import MI, PipelineFacts, Problem
from compiler.placement import Segment

__all__ = ["MAX_STATES", "MAX_WORK", "ServerBound", "server_lower_bound"]

MAX_STATES = 20_000  # Pareto states of the knapsack after a pipeline
MAX_WORK = 3_000_000  # states x options over all pipelines

_Option = tuple[int, int, int]  # cost, SRAM blocks, TCAM blocks
_Run = tuple[int, int] | None  # first and last stage on the server, or none
_State = tuple[int, int]  # SRAM, TCAM used


@dataclass(frozen=True)
class ServerBound:
    bound: int  # proven lower bound on objective 1
    exact: bool  # the knapsack's optimum (else its Lagrangian bound)
    segment: dict[str, Segment]  # the options that attain it: a start for the greedy
    hits: int | None = None  # with ``exact``: at most this many objective-2 units at cost ``bound``


def server_lower_bound(p: Problem) -> ServerBound | None:
    """A proven lower bound on objective 1 and segments that attain the relaxation; None when some
    pipeline has no possible option or no choice of options fits the switch (no placement exists)."""
    per_pipe = [_options(p, pl) for pl in p.pipelines]
    if any(not o for o in per_pipe):
        return None
    options = [[o for o, _ in opts] for opts in per_pipe]
    cap_s, cap_t = p.n * p.sram, p.n * p.tcam
    found = _knapsack(options, cap_s, cap_t)
    if found is None:
        return _lagrangian(p, per_pipe, options, cap_s, cap_t)
    if not found.cheapest:
        return None
    bound = sum(options[k][j][0] for k, j in enumerate(found.picked))
    hits = max(_hits_within(p, cap_s - s, cap_t - t) for s, t in found.cheapest)
    return ServerBound(bound, True, _segments(p, [per_pipe[k][j][1] for k, j in enumerate(found.picked)]), hits)


def _hits_within(p: Problem, sram: int, tcam: int) -> int:
    """At most the objective-2 units caches fit in ``sram`` and ``tcam`` free blocks, wherever:
    the better of the two fractional knapsacks that each keep one of the budgets (both relax it)."""
    by_sram = _fractional([(c.weight, c.per_sram, min(c.size, c.active)) for c in p.caches.values()], sram)
    by_tcam = _fractional([(c.weight, c.per_tcam, min(c.size, c.active)) for c in p.caches.values()], tcam)
    return math.floor(min(by_sram, by_tcam))


def _fractional(items: list[tuple[int, int, int]], blocks: int) -> Fraction:
    """Most value of (value per entry, blocks per MI entries, entries at most) in ``blocks``."""
    total, room = Fraction(0), Fraction(blocks * MI)
    for w, per, most in sorted(items, key=lambda x: Fraction(x[0], max(x[1], 1)), reverse=True):
        take = Fraction(most) if per == 0 else min(Fraction(most), room / per)
        total += w * take
        room -= take * per
    return total


def _segments(p: Problem, runs: list[_Run]) -> dict[str, Segment]:
    return {s: _segment(i, run) for pl, run in zip(p.pipelines, runs, strict=True) for i, s in enumerate(pl.stages)}


@dataclass(frozen=True)
class _Choice:
    picked: list[int]  # option per pipeline of a cheapest choice within the budgets
    cheapest: list[_State]  # the blocks the cheapest choices use (Pareto); empty: nothing fits


def _knapsack(options: list[list[_Option]], cap_s: int, cap_t: int) -> _Choice | None:
    """The multiple-choice knapsack by dynamic programming; None if it grew past its limits."""
    layers: list[dict[_State, tuple[int, _State, int]]] = []  # state -> cost, previous state, option
    states: dict[_State, int] = {(0, 0): 0}
    work = 0
    for opts in options:
        work += len(states) * len(opts)
        if work > MAX_WORK:
            return None
        layer: dict[_State, tuple[int, _State, int]] = {}
        for (s, t), c in states.items():
            for j, (oc, os_, ot) in enumerate(opts):
                key = (s + os_, t + ot)
                if key[0] <= cap_s and key[1] <= cap_t and (key not in layer or c + oc < layer[key][0]):
                    layer[key] = (c + oc, (s, t), j)
        layer = {k: layer[k] for k in _pareto({k: v[0] for k, v in layer.items()}, cap_s)}
        if not layer:
            return _Choice([], [])
        if len(layer) > MAX_STATES:
            return None
        layers.append(layer)
        states = {k: v[0] for k, v in layer.items()}
    state = min(states, key=lambda k: (states[k], k))
    cheapest = [k for k, c in states.items() if c == states[state]]
    picked: list[int] = []
    for layer in reversed(layers):
        _, prev, j = layer[state]
        picked.append(j)
        state = prev
    return _Choice(picked[::-1], cheapest)


def _pareto(states: dict[_State, int], cap_s: int) -> list[_State]:
    """The states no other state matches or beats in cost, SRAM and TCAM at once: by cost, then
    kept if every cheaper state kept uses more TCAM or more SRAM (a Fenwick tree of the least
    TCAM among kept states, by SRAM, answers that in log time)."""
    tree = [math.inf] * (cap_s + 2)
    kept: list[_State] = []
    for s, t in sorted(states, key=lambda k: (states[k], k)):
        i, least = s + 1, math.inf
        while i > 0:
            least = min(least, tree[i])
            i -= i & -i
        if least <= t:
            continue
        kept.append((s, t))
        i = s + 1
        while i < len(tree):
            tree[i] = min(tree[i], t)
            i += i & -i
    return kept


def _lagrangian(p: Problem, per_pipe: list[list[tuple[_Option, _Run]]], options: list[list[_Option]], cap_s: int,
                cap_t: int) -> ServerBound:
    lam, mu = 0.0, 0.0
    if p.n:
        top = float(sum(max(c for c, _, _ in o) for o in options) + 1)
        for _ in range(3):  # coordinate ascent: λ with μ fixed, then μ with λ fixed
            lam = _argmax(partial(_dual_in_lam, options, mu, cap_s, cap_t), top)
            mu = _argmax(partial(_dual, options, lam, cap_s=cap_s, cap_t=cap_t), top)
    exact = _dual_exact(options, Fraction(lam), Fraction(mu), cap_s, cap_t)
    bound = max(math.ceil(exact), sum(min(c for c, _, _ in o) for o in options))
    runs = [min(opts, key=lambda x: (x[0][0] + lam * x[0][1] + mu * x[0][2], x[0][0]))[1] for opts in per_pipe]
    return ServerBound(bound, False, _segments(p, runs))


def _options(p: Problem, pl: PipelineFacts) -> list[tuple[_Option, _Run]]:
    """(cost, SRAM, TCAM) of every server run the pipeline's stages allow, the empty one included."""
    stages = pl.stages
    units = {s: [u for u in (p.units[i] for i in pl.units) if u.stage == s] for s in stages}
    fits = {s: all(p.fits_switch(u) for u in units[s]) for s in stages}
    out: list[tuple[_Option, _Run]] = []
    runs: list[_Run] = [None, *((a, b) for a in range(len(stages)) for b in range(a, len(stages)))]
    for run in runs:
        segs = [_segment(i, run) for i in range(len(stages))]
        if any(g not in p.stages[s].allowed or (g.on_switch and not fits[s])
               for s, g in zip(stages, segs, strict=True)):
            continue
        cost = (pl.io + sum(p.stages[s].cost for s in stages[run[0]:run[1] + 1])) if run else 0
        on = [u for s, g in zip(stages, segs, strict=True) if g.on_switch for u in units[s]]
        out.append(((cost, sum(u.sram for u in on), sum(u.tcam for u in on)), run))
    return out


def _segment(i: int, run: _Run) -> Segment:
    if run is None or i < run[0]:
        return Segment.SWITCH
    return Segment.SERVER if i <= run[1] else Segment.SWITCH_AFTER


def _dual(options: list[list[_Option]], lam: float, mu: float, cap_s: int, cap_t: int) -> float:
    return sum(min(c + lam * s + mu * t for c, s, t in o) for o in options) - lam * cap_s - mu * cap_t


def _dual_in_lam(options: list[list[_Option]], mu: float, cap_s: int, cap_t: int, lam: float) -> float:
    return _dual(options, lam, mu, cap_s, cap_t)


def _dual_exact(options: list[list[_Option]], lam: Fraction, mu: Fraction, cap_s: int, cap_t: int) -> Fraction:
    return sum((min(c + lam * s + mu * t for c, s, t in o) for o in options), Fraction(0)) - lam * cap_s - mu * cap_t


def _argmax(f: Callable[[float], float], top: float) -> float:
    """Ternary search for the maximum of a concave function on [0, top]."""
    lo, hi = 0.0, top
    for _ in range(40):
        a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if f(a) < f(b):
            lo = a
        else:
            hi = b
    return lo
