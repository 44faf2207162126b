"""The exact placement model: the whole problem as one Z3 ``Optimize`` query.

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
  switch whose size the solver chooses, in entries.
* Objectives, in order: minimise server nanoseconds per offered packet (traffic share ×
  cost model of the server-placed stages and of crossing the link), maximise the expected
  cache hits, maximise cached entries, minimise the MAU stages used (the integer units of
  ``compiler/place_problem.py``).

Z3 proves its answer optimal, but its time grows fast with the program (5 s for 10 stages,
22 s for 50, no answer within a minute for 100), so ``compiler/partition.py`` uses it for
programs of a few stages and the scalable search beyond.  The model is kept as it was when
it placed every program, so the examples' placements (and their goldens) do not change.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import z3

from compiler import ir
from compiler.analysis import Unit, stage_units
from compiler.passes.capabilities import can_run
from compiler.place_problem import Layout, Problem, depends, stateful_objects
from compiler.placement import Segment, UnitPlacement
from compiler.profiles import TargetSet, TargetSpec
from compiler.resources import register_blocks, table_blocks
from compiler.z3_context import fresh_context

__all__ = ["ExactResult", "Incumbent", "solve_exact"]

_HEARD_EVERY_S = 0.1  # solve_exact's on_model: at most this often


@dataclass(frozen=True)
class ExactResult:
    """What the exact model gave within its time: ``optimal`` (with the layout), ``infeasible``
    (no placement exists), or ``timeout`` (the best layout found so far, if any)."""

    status: str
    layout: Layout | None = None
    server_bound: int | None = None  # Z3's lower bound on objective 1 when it stopped early


@dataclass(frozen=True, slots=True)
class Incumbent:
    """A model Z3 found on its way to the optimum, as cheaply as it can be read (for progress
    reports, not for placing): the objectives' values as the model has them (in
    ``compiler/place_problem.py``'s units; the hits are the model's linear proxy, at most the
    true value) and how many of the stages it puts on the switch."""

    objectives: tuple[int, int, int, int]
    on_switch: int


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
    for obj, width, size in stateful_objects(m.prog, u):
        if obj not in seen_objs:
            seen_objs.add(obj)
            sram = sram + register_blocks(width, size, spec)
    return sram, tcam


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


def _build(m: _Model) -> None:
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
                if depends(a, b):
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


def _useful_hits(m: _Model, p: Problem) -> Any:
    """Linear proxy of the expected cache hits, weighted by traffic: entries beyond a
    table's active set add nothing (exact for uniform popularity, see ``hit_rate``)."""
    terms: list[Any] = []
    for name, e in m.cache_e.items():
        c = p.caches[name]
        u = z3.Int(f"useful_{name}")
        m.opt.add(u >= 0, u <= e, u <= c.active)
        terms.append(u * c.weight)
    return z3.Sum(terms) if terms else z3.IntVal(0)


def _objectives(m: _Model, p: Problem) -> tuple[Any, Any, Any, Any]:
    terms: list[Any] = []
    for pl in p.pipelines:
        if m.targets.server is None:
            continue
        terms.append(z3.If(m.has_server[pl.name], pl.io, 0))
        for s in pl.stages:
            terms.append(z3.If(m.seg[s] == Segment.SERVER, p.stages[s].cost, 0))
    server = z3.Sum(terms) if terms else z3.IntVal(0)
    cached = z3.Sum(list(m.cache_e.values())) if m.cache_e else z3.IntVal(0)
    depth = z3.Int("mau_depth")
    for u in m.units:
        m.opt.add(z3.Implies(m.seg[u.stage] != 1, depth >= m.last[u.name] + 1))
    m.opt.add(depth >= 0)
    return server, _useful_hits(m, p), cached, depth


@fresh_context()  # a query of its own: the answer does not depend on the queries before it
def solve_exact(p: Problem, timeout_ms: int, on_model: Callable[[Incumbent], None] | None = None) -> ExactResult:
    """Solve the whole model lexicographically within ``timeout_ms``; ``on_model`` hears of
    the better models Z3 finds on the way (from inside ``check``, on this thread; those that
    lower the server cost, the others at most ten a second)."""
    opt = z3.Optimize()
    opt.set("timeout", max(1, timeout_ms))
    m = _Model(p.prog, p.targets, opt)
    _build(m)
    server, hits, cached, depth = _objectives(m, p)
    if on_model is not None:
        opt.set_on_model(_listener(tuple(m.seg.values()), (server, hits, cached, depth), on_model))
    h_server = opt.minimize(server)
    opt.maximize(hits)
    opt.maximize(cached)
    opt.minimize(depth)
    result = _checked(opt, on_model is not None)
    if result == z3.unsat:
        return ExactResult("infeasible")
    if result == z3.sat:
        return ExactResult("optimal", _layout(m, opt.model()))
    return ExactResult("timeout", _incumbent(m, opt), _int_or_none(h_server.lower()))


def _checked(opt: Any, listened: bool) -> Any:
    """``opt.check()``.  With a model callback, the time limit may strike while the callback
    reads a model: the read fails "canceled", and z3py raises that error again when ``check``
    returns; it is the time limit, as ``unknown`` says it without a callback."""
    try:
        return opt.check()
    except z3.Z3Exception as e:
        if listened and "canceled" in str(e):
            return z3.unknown
        raise


def _incumbent(m: _Model, opt: Any) -> Layout | None:
    """The best model Z3 had when it stopped, if it had one."""
    try:
        model = opt.model()
    except z3.Z3Exception:
        return None
    return _layout(m, model) if model is not None and len(model) else None


def _listener(segments: tuple[Any, ...], terms: tuple[Any, Any, Any, Any], on_model: Callable[[Incumbent], None]
              ) -> Callable[[Any], None]:
    """Z3's model callback: ``on_model`` hears of a model that lowers the server cost, and of
    the others at most every ``_HEARD_EVERY_S`` (Z3 may find a thousand in a few seconds;
    reading each whole would slow it by a fifth).  z3py keeps the callback in a module-level
    table until the ``Optimize`` is collected: it must not hold the ``Optimize`` (nor the
    ``_Model``), or neither is ever freed."""
    last = {"at": -_HEARD_EVERY_S, "server": -1}

    def heard(model: Any) -> None:
        try:
            now, server = time.monotonic(), _val(model, terms[0])
            if server < last["server"] or now - last["at"] >= _HEARD_EVERY_S:
                last["at"], last["server"] = now, server
                values = tuple(_val(model, t) for t in terms)
                on_switch = sum(1 for v in segments if _val(model, v) != Segment.SERVER)
                on_model(Incumbent((values[0], values[1], values[2], values[3]), on_switch))
        except z3.Z3Exception:  # the time limit struck while the model was read ("canceled"): not heard
            pass

    return heard


def _int_or_none(v: Any) -> int | None:
    return int(v.as_long()) if z3.is_int_value(v) else None


def _val(model: Any, v: Any) -> int:
    if isinstance(v, int):
        return v
    return int(model.eval(v, model_completion=True).as_long())


def _layout(m: _Model, model: Any) -> Layout:
    segment = {s: Segment(_val(model, v)) for s, v in m.seg.items()}
    units: list[UnitPlacement] = []
    for u in m.units:
        if segment[u.stage] is Segment.SERVER:
            continue
        f, la = _val(model, m.first[u.name]), _val(model, m.last[u.name])
        sram = tuple(_val(model, m.sram.get((u.name, k), 0)) for k in range(f, la + 1))
        tcam = tuple(_val(model, m.tcam.get((u.name, k), 0)) for k in range(f, la + 1))
        units.append(UnitPlacement(u.name, u.stage, u.tables, f, la, sram, tcam))
    return Layout(segment, tuple(units), {t: _val(model, e) for t, e in m.cache_e.items()})
