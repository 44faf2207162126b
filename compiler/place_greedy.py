"""A greedy placement: fast (milliseconds for a hundred stages), valid by construction, and
usually good; the start the solvers improve on and the fallback when their time runs out.

1. **Segments.**  Each pipeline sends the server the shortest run of stages that covers the
   stages only a server can run (``minimal_segments``): with non-negative stage costs no
   placement costs less (objective 1's lower bound).
2. **Layout.**  List scheduling of the switch units into MAU stages: a unit is ready once the
   units it depends on are placed; among ready units the one with the longest chain of
   dependants goes first, at the start that lets it end earliest, its blocks taken stage by
   stage from what is free.  A cache unit reserves the slack of its pass (the MAU stages its
   pass's longest chain leaves unused) so its cache can spread, and units placed after it keep
   out of those MAU stages if their own chains leave room.
3. **Relief.**  When a unit or a chain does not fit, one more stage goes to the server: the
   move (extending a pipeline's server run by one stage, or opening one) that frees most of
   the short resource per nanosecond it adds; then the layout is tried again.  Once it fits,
   relief that later relief made unnecessary is undone, costliest stage first.
4. **Caches** take the free blocks of the MAU stages between the units they depend on and the
   units that depend on them, best hits per block first: first the whole blocks of their
   active entries, then the last, partly useful, block (objective 2), then up to their size
   (objective 3).  Then the layout is made again with every unit keeping out of the caches'
   MAU stages from the start, and the better of the two kept.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

from compiler.place_problem import MI, CacheFacts, Layout, Problem, UnitFacts, cache_entries_fit, objectives
from compiler.placement import Segment, UnitPlacement

__all__ = ["REFINE_ROUNDS", "greedy", "minimal_segments", "pass_deps"]

REFINE_ROUNDS = 2  # layouts again with the caches' MAU stages known from the start


def _server_only(p: Problem, stage: str) -> bool:
    allowed = p.stages[stage].allowed
    too_big = any(not p.fits_switch(u) for u in p.units if u.stage == stage)
    return allowed == {Segment.SERVER} or (too_big and Segment.SERVER in allowed)


def minimal_segments(p: Problem) -> dict[str, Segment] | None:
    """Each pipeline's shortest server run covering its server-only stages; None when the
    stages' allowed segments contradict (a switch-only stage between two server-only ones)."""
    seg: dict[str, Segment] = {}
    for pl in p.pipelines:
        forced = [i for i, s in enumerate(pl.stages) if _server_only(p, s)]
        run = (forced[0], forced[-1]) if forced else None
        for i, s in enumerate(pl.stages):
            want = _segment_at(i, run)
            if want not in p.stages[s].allowed:
                return None
            seg[s] = want
    return seg


def _segment_at(i: int, run: tuple[int, int] | None) -> Segment:
    if run is None or i < run[0]:
        return Segment.SWITCH
    return Segment.SERVER if i <= run[1] else Segment.SWITCH_AFTER


def pass_deps(p: Problem, seg: dict[str, Segment]) -> dict[int, list[int]]:
    """Unit -> the units it must follow, within one switch pass of its pipeline: each list
    ascending, the units in the order of their first pair in ``PipelineFacts.deps``.

    Called per layout tried, so not a walk over every pair of units (O(units²) a call, issue
    47): a pipeline's segments come in runs (switch, server, switch after), so the units of one
    pass are one run and a unit's predecessors in its pass a tail of ``Problem.preds``, found
    by bisection.  Segments not in runs take the walk over the pairs."""
    preds: dict[int, list[int]] = {}
    for pl in p.pipelines:
        starts = _pass_starts(p, pl.units, seg)
        if starts is None:
            _pairwise_pass_deps(p, pl.deps, seg, preds)
        else:
            preds.update(_in_pass(p, pl.units, seg, starts, p.preds))
    return preds


def _direct_deps(p: Problem, seg: dict[str, Segment]) -> dict[int, list[int]]:
    """``pass_deps`` less the pairs implied through a third unit (``Problem.direct_preds``): what
    the layout reads of them (which units are ready, the earliest start, the longest chains, a
    cache's window) is the same, and there are about as many as units, not as pairs of units,
    for every layout tried.  Segments not in runs take ``pass_deps`` whole."""
    preds: dict[int, list[int]] = {}
    for pl in p.pipelines:
        starts = _pass_starts(p, pl.units, seg)
        if starts is None:
            return pass_deps(p, seg)
        preds.update(_in_pass(p, pl.units, seg, starts, p.direct_preds))
    return preds


def _in_pass(p: Problem, units: tuple[int, ...], seg: dict[str, Segment], starts: dict[int, int],
             before: dict[int, tuple[int, ...]]) -> list[tuple[int, list[int]]]:
    """(unit, the units of ``before`` it follows in its switch pass) of a pipeline's ``units``,
    in the order of their first pair: those from its pass's first unit on, ``starts``."""
    found: list[tuple[int, list[int]]] = []
    for b in units:
        earlier = before.get(b, ())
        if earlier and seg[p.units[b].stage].on_switch:
            tail = earlier[bisect_left(earlier, starts[b]):]
            if tail:
                found.append((b, list(tail)))
    return sorted(found, key=lambda e: (e[1][0], e[0]))


def _pass_starts(p: Problem, units: tuple[int, ...], seg: dict[str, Segment]) -> dict[int, int] | None:
    """Unit of ``units`` (a pipeline's, in pass order) -> the first unit of its run of units in
    one segment; None when some segment's units are not one run."""
    starts: dict[int, int] = {}
    done: set[Segment] = set()
    current, start = None, 0
    for i in units:
        g = seg[p.units[i].stage]
        if g is not current:
            if g in done:
                return None
            done.add(g)
            current, start = g, i
        starts[i] = start
    return starts


def _pairwise_pass_deps(p: Problem, deps: tuple[tuple[int, int], ...], seg: dict[str, Segment],
                        preds: dict[int, list[int]]) -> None:
    """``pass_deps`` of one pipeline, pair by pair: for segments not in runs."""
    for a, b in deps:
        sa, sb = seg[p.units[a].stage], seg[p.units[b].stage]
        if sa is sb and sa.on_switch:
            preds.setdefault(b, []).append(a)


def _span(p: Problem, u: UnitFacts) -> int:
    """The fewest MAU stages unit ``u``'s fixed blocks spread over."""
    return max(1, math.ceil(u.sram / p.sram) if p.sram else 1, math.ceil(u.tcam / p.tcam) if p.tcam else 1)


@dataclass
class _Failure:
    unit: int  # the unit that did not fit
    chain: bool  # its pass's chain of dependent units is longer than the switch


@dataclass
class _Board:
    """MAU stage memory still free, and the units placed so far."""

    sram: list[int]
    tcam: list[int]
    spans: dict[int, tuple[int, int, list[int], list[int]]]  # unit -> first, last, blocks per stage
    wanted: list[bool]  # MAU stages a cache unit spans: other units keep out of them if they can


def greedy(p: Problem, start: dict[str, Segment] | None = None) -> Layout | None:
    """A valid placement from segments ``start`` (default: ``minimal_segments``), or None when
    this heuristic finds none (the solvers may still)."""
    seg = start or minimal_segments(p)
    if seg is None:
        return None
    fitted = _fit(p, seg)
    if fitted is None:
        return None
    seg, board = _give_back(p, fitted[0], fitted[1], frozenset(s for s, g in seg.items() if g is Segment.SERVER))
    best = _fill_caches(p, seg, board)
    for _ in range(REFINE_ROUNDS):  # lay out again, every unit avoiding the caches' stages from the start
        again = _lay_out(p, seg, reserve=True, wanted=_cache_stages(p, board))
        if not isinstance(again, _Board):
            break
        board = again
        best = max(best, _fill_caches(p, seg, board), key=lambda lay: _rank(p, lay))
    return best


def _cache_stages(p: Problem, board: _Board) -> list[bool]:
    """The MAU stages the cache units span on ``board``."""
    wanted = [False] * p.n
    for i, (first, last, _, _) in board.spans.items():
        if p.units[i].caches:
            wanted[first:last + 1] = [True] * (last - first + 1)
    return wanted


def _rank(p: Problem, lay: Layout) -> tuple[int, int, int, int]:
    """Larger is better: objectives 2 to 4 (the segments, and so objective 1, are the same)."""
    _, hits, cached, depth = objectives(p, lay)
    return 0, hits, cached, -depth


def _fit(p: Problem, seg: dict[str, Segment]) -> tuple[dict[str, Segment], _Board] | None:
    """Lay out ``seg``, sending one more stage to the server after each failure (step 3)."""
    current: dict[str, Segment] | None = seg
    while current is not None:
        board = _try(p, current)
        if isinstance(board, _Board):
            return current, board
        current = _relieve(p, current, board)
    return None


def _try(p: Problem, seg: dict[str, Segment]) -> _Board | _Failure:
    board = _lay_out(p, seg, reserve=True)
    if isinstance(board, _Failure):  # the caches' reserved stages may be what pushed a chain out
        board = _lay_out(p, seg, reserve=False)
    return board


def _give_back(p: Problem, seg: dict[str, Segment], board: _Board, kept: frozenset[str]
               ) -> tuple[dict[str, Segment], _Board]:
    """Undo relief that later relief made unnecessary: each stage sent to the server beyond
    ``kept``, at an end of its pipeline's server run, costliest first, returns to the switch
    if the layout still fits."""
    tried: set[str] = set()
    while True:
        ends = [s for s in _run_ends(p, seg) if s not in kept and s not in tried]
        if not ends:
            return seg, board
        s = max(ends, key=lambda x: (p.stages[x].cost, x))
        tried.add(s)
        back = _without_server(p, seg, s)
        if back is not None:
            again = _try(p, back)
            if isinstance(again, _Board):
                seg, board = back, again


def _run_ends(p: Problem, seg: dict[str, Segment]) -> list[str]:
    out = []
    for pl in p.pipelines:
        run = [s for s in pl.stages if seg[s] is Segment.SERVER]
        out += sorted({run[0], run[-1]}) if run else []
    return out


def _without_server(p: Problem, seg: dict[str, Segment], stage: str) -> dict[str, Segment] | None:
    """``seg`` with ``stage`` (an end of its pipeline's server run) back on the switch, if allowed."""
    pl = next(x for x in p.pipelines if stage in x.stages)
    run = [i for i, s in enumerate(pl.stages) if seg[s] is Segment.SERVER and s != stage]
    out = dict(seg)
    for i, s in enumerate(pl.stages):
        out[s] = _segment_at(i, (run[0], run[-1]) if run else None)
        if out[s] not in p.stages[s].allowed:
            return None
    return out


def _lay_out(p: Problem, seg: dict[str, Segment], reserve: bool, wanted: list[bool] | None = None
             ) -> _Board | _Failure:
    """List scheduling of the switch units (module docstring, step 2); ``wanted``: MAU stages to
    keep free for caches from the start."""
    on = [i for i, u in enumerate(p.units) if seg[u.stage].on_switch]
    preds = _direct_deps(p, seg)
    succs = _successors(preds)
    tail = _tails(p, on, succs)
    spans = _cache_reserve(p, on, preds, tail) if reserve else {}
    for i in on:
        if tail[i] > p.n:
            return _Failure(i, chain=True)
    board = _Board([p.sram] * p.n, [p.tcam] * p.n, {}, list(wanted) if wanted else [False] * p.n)
    waiting = {i: len(preds.get(i, [])) for i in on}
    ready = [i for i in on if waiting[i] == 0]
    while ready:
        ready.sort(key=lambda i: (-tail[i], i))
        i = ready.pop(0)
        start = max((board.spans[a][1] + 1 for a in preds.get(i, [])), default=0)
        if not _place(p, board, i, start, spans.get(i, 1), p.n - tail[i] + _span(p, p.units[i])):
            return _Failure(i, chain=False)
        for b in succs.get(i, []):
            waiting[b] -= 1
            if waiting[b] == 0:
                ready.append(b)
    return board


def _successors(preds: dict[int, list[int]]) -> dict[int, list[int]]:
    succs: dict[int, list[int]] = {}
    for b, aa in preds.items():
        for a in aa:
            succs.setdefault(a, []).append(b)
    return succs


def _tails(p: Problem, on: list[int], succs: dict[int, list[int]]) -> dict[int, int]:
    """Unit -> MAU stages from its start to the end of its pass's longest chain through it."""
    tail: dict[int, int] = {}
    for i in sorted(on, reverse=True):  # successors come later in program order
        tail[i] = _span(p, p.units[i]) + max((tail[b] for b in succs.get(i, [])), default=0)
    return tail


def _cache_reserve(p: Problem, on: list[int], preds: dict[int, list[int]], tail: dict[int, int]) -> dict[int, int]:
    """Cache unit -> MAU stages it reserves: its span plus the slack of the chain through it,
    shared with the other caches of that chain."""
    head: dict[int, int] = {}
    for i in on:  # stages before the unit starts, on the longest chain into it
        head[i] = max((head[a] + _span(p, p.units[a]) for a in preds.get(i, [])), default=0)
    caches = [i for i in on if p.units[i].caches]
    out: dict[int, int] = {}
    for i in caches:
        slack = p.n - head[i] - tail[i]
        sharing = sum(1 for j in caches if p.units[j].pipeline == p.units[i].pipeline and
                      p.units[j].stage != p.units[i].stage) + 1
        out[i] = _span(p, p.units[i]) + max(0, slack // sharing)
    return out


def _place(p: Problem, board: _Board, i: int, start: int, reserve: int, latest: int) -> bool:
    """Put unit ``i`` at a start >= ``start``: one that keeps it out of the caches' MAU stages if
    it can end by ``latest`` (the units after it still fit), else the one that ends earliest."""
    u = p.units[i]
    best: tuple[tuple[int, int, int], int, int, list[int], list[int]] | None = None
    for k in range(start, p.n):
        got = _take(board, k, u.sram, u.tcam, p.n)
        if got is None:
            continue
        last = max(got[0], min(k + reserve - 1, p.n - 1))
        crowding = sum(a + b for j, (a, b) in enumerate(zip(got[1], got[2], strict=True)) if board.wanted[k + j])
        key = (0, crowding, last) if last < latest and not u.caches else (1, last, crowding)
        if best is None or key < best[0]:
            best = (key, k, last, got[1], got[2])
    if best is None:
        return False
    _, k, last, s, t = best
    for j in range(k, last + 1):
        board.sram[j] -= s[j - k] if j - k < len(s) else 0
        board.tcam[j] -= t[j - k] if j - k < len(t) else 0
        board.wanted[j] = board.wanted[j] or bool(u.caches)
    width = last - k + 1
    board.spans[i] = (k, last, _pad(s, width), _pad(t, width))
    return True


def _pad(xs: list[int], width: int) -> list[int]:
    return (xs + [0] * width)[:width]


def _take(board: _Board, k: int, sram: int, tcam: int, n: int) -> tuple[int, list[int], list[int]] | None:
    """Blocks taken stage by stage from ``k``: (last stage used, SRAM per stage, TCAM per stage)."""
    s_left, t_left, s, t = sram, tcam, [], []
    j = k
    while True:
        if j >= n:
            return None
        a, b = min(board.sram[j], s_left), min(board.tcam[j], t_left)
        s.append(a)
        t.append(b)
        s_left, t_left = s_left - a, t_left - b
        if s_left == 0 and t_left == 0:
            return j, s, t
        j += 1


def _relieve(p: Problem, seg: dict[str, Segment], fail: _Failure) -> dict[str, Segment] | None:
    """``seg`` with one more stage on the server (see module docstring), or None if none can go."""
    short_s = fail.chain or p.units[fail.unit].sram > 0
    short_t = fail.chain or p.units[fail.unit].tcam > 0
    best: tuple[float, dict[str, Segment]] | None = None
    for pl in p.pipelines:
        if fail.chain and pl.name != p.units[fail.unit].pipeline:
            continue
        for moved in _moves(p, pl.stages, seg):
            freed = _freed(p, moved, short_s, short_t, fail.chain)
            if freed <= 0:
                continue
            added = sum(p.stages[s].cost for s in moved) + (pl.io if not _visits(pl.stages, seg) else 0)
            score = freed / (added + 1)
            if best is None or score > best[0]:
                best = (score, _with_server(pl.stages, seg, moved))
    return best[1] if best else None


def _visits(stages: tuple[str, ...], seg: dict[str, Segment]) -> bool:
    return any(seg[s] is Segment.SERVER for s in stages)


def _moves(p: Problem, stages: tuple[str, ...], seg: dict[str, Segment]) -> list[tuple[str, ...]]:
    """Stages that could join (or open) the pipeline's server run, one at a time."""
    run = [i for i, s in enumerate(stages) if seg[s] is Segment.SERVER]
    options = [run[0] - 1, run[-1] + 1] if run else list(range(len(stages)))
    out: list[tuple[str, ...]] = []
    for i in options:
        if 0 <= i < len(stages) and Segment.SERVER in p.stages[stages[i]].allowed:
            after = stages[i + 1:] if not run else ()
            if all(Segment.SWITCH_AFTER in p.stages[s].allowed for s in after):
                out.append((stages[i],))
    return out


def _freed(p: Problem, moved: tuple[str, ...], short_s: bool, short_t: bool, chain: bool) -> float:
    units = [u for u in p.units if u.stage in moved]
    if chain:
        return float(sum(_span(p, u) for u in units))
    return (sum(u.sram for u in units) / (p.n * p.sram) if short_s and p.sram else 0.0) + \
        (sum(u.tcam for u in units) / (p.n * p.tcam) if short_t and p.tcam else 0.0)


def _with_server(stages: tuple[str, ...], seg: dict[str, Segment], moved: tuple[str, ...]) -> dict[str, Segment]:
    out = dict(seg)
    run = [i for i, s in enumerate(stages) if seg[s] is Segment.SERVER or s in moved]
    for i, s in enumerate(stages):
        out[s] = _segment_at(i, (run[0], run[-1]))
    return out


def _fill_caches(p: Problem, seg: dict[str, Segment], board: _Board) -> Layout:
    """Give the caches the free blocks around them (module docstring, step 4)."""
    preds = _direct_deps(p, seg)
    succs = _successors(preds)
    cache: dict[str, int] = {t: 0 for t in p.caches}
    offers = []  # (value per block, unit, table, goal): fullest value first
    for i in board.spans:
        for t in p.units[i].caches:
            c = p.caches[t]
            per_block = MI / max(1, c.per_sram)
            partial = (_goal(c, "active") - _goal(c, "full")) / per_block  # useful share of the last block
            offers += [(c.weight * per_block, i, t, "full"), (c.weight * per_block * partial, i, t, "active"),
                       (per_block / 1e12, i, t, "size")]  # beyond the active set: entries only (objective 3)
    windows = {i: (max((board.spans[a][1] + 1 for a in preds.get(i, [])), default=0),
                   min((board.spans[b][0] - 1 for b in succs.get(i, [])), default=p.n - 1))
               for _, i, _, _ in offers}
    crowd = [sum(1 for lo, hi in windows.values() if lo <= k <= hi) for k in range(p.n)]
    for _, i, t, goal in sorted(offers, key=lambda o: (-o[0], o[1], o[2])):
        lo, hi = min(windows[i][0], board.spans[i][0]), max(windows[i][1], board.spans[i][1])
        order = sorted(range(lo, hi + 1), key=lambda k: (crowd[k], k))  # stages other caches cannot use first
        _grow(p, board, i, t, order, goal, cache)
    return Layout(dict(seg), _units(p, board), cache)


def _grow(p: Problem, board: _Board, i: int, table: str, order: list[int], goal: str,
          cache: dict[str, int]) -> None:
    """Grow cache ``table`` of unit ``i`` towards its goal with the free blocks of the MAU stages
    ``order`` (its window: after the units it follows, before those that follow it), in that order."""
    c = p.caches[table]
    first, last, s, t = board.spans[i]
    lo, hi = min(order), max(order)
    have_s, have_t = _blocks(cache[table], c.per_sram), _blocks(cache[table], c.per_tcam)
    free_s, free_t = sum(board.sram[k] for k in order), sum(board.tcam[k] for k in order)
    entries = max(cache[table], min(_goal(c, goal), cache_entries_fit(c, have_s + free_s, have_t + free_t)))
    more_s, more_t = _blocks(entries, c.per_sram) - have_s, _blocks(entries, c.per_tcam) - have_t
    if more_s <= 0 and more_t <= 0:
        return
    s = [0] * (first - lo) + s + [0] * (hi - last)
    t = [0] * (first - lo) + t + [0] * (hi - last)
    for j in order:
        a, b = min(board.sram[j], max(0, more_s)), min(board.tcam[j], max(0, more_t))
        board.sram[j], board.tcam[j] = board.sram[j] - a, board.tcam[j] - b
        s[j - lo], t[j - lo] = s[j - lo] + a, t[j - lo] + b
        more_s, more_t = more_s - a, more_t - b
    used = [j for j in order if s[j - lo] or t[j - lo]] + [first, last]
    f, la = min(used), max(used)
    board.spans[i] = (f, la, s[f - lo:la - lo + 1], t[f - lo:la - lo + 1])
    cache[table] = entries


def _goal(c: CacheFacts, goal: str) -> int:
    """Entries cache ``c`` grows to in a round: ``full``, the active entries that fill whole SRAM
    blocks (a block only partly useful waits, so another cache may fill it with useful entries);
    ``active``, all active entries; ``size``, the whole table (objective 3)."""
    useful = min(c.size, c.active)
    if goal == "full":
        return min(useful, useful * c.per_sram // MI * MI // c.per_sram if c.per_sram else useful)
    return useful if goal == "active" else c.size


def _blocks(entries: int, per: int) -> int:
    """Blocks ``entries`` cache entries take at ``per`` blocks for MI entries."""
    return -(-entries * per // MI)


def _units(p: Problem, board: _Board) -> tuple[UnitPlacement, ...]:
    out = []
    for i in sorted(board.spans):
        u = p.units[i]
        first, last, s, t = board.spans[i]
        out.append(UnitPlacement(u.name, u.stage, u.unit.tables, first, last, tuple(s), tuple(t)))
    return tuple(out)
