"""The placement problem as plain data, derived once from the program and its targets, and
the objectives of a candidate placement.

Every placement method reads this: the exact Z3 model (``compiler/partition_exact.py``), the
greedy start (``compiler/place_greedy.py``), the scalable model and its relaxation bounds
(``compiler/place_scale.py``); the checker (``compiler/place_check.py``) deliberately does not.
Facts (docs/partitioner.md states the model):

* per stage, the segments it may take (capabilities, pins, which targets exist) and its
  objective-1 cost on the server; per pipeline, the cost of crossing to the server;
* per unit (``compiler.analysis``), the SRAM/TCAM blocks it needs on the switch apart from
  cache entries, the switch caches it holds, and the units of its pipeline it must follow;
* per switch cache, its size, active set, per-entry memory ratio and objective-2 weight.

Objectives are integers in the units the Z3 model optimises (``objectives``), so the values
of placements found by different methods compare exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

from compiler import ir
from compiler.analysis import (
    Loc,
    Unit,
    Use,
    expr_reads,
    order_free,
    stage_units,
    stage_uses,
    stmt_exprs,
    walk_expr,
    walk_stmts,
)
from compiler.passes.capabilities import can_run
from compiler.passes.validity import longest_extracts
from compiler.placement import Segment, UnitPlacement
from compiler.profiles import TargetSet, TargetSpec
from compiler.resources import register_blocks, table_blocks

__all__ = ["MI", "SCALE", "CacheFacts", "Layout", "PipelineFacts", "Problem", "StageFacts", "UnitFacts",
           "cache_entries_fit", "crossing_ns", "depends", "objectives", "problem_of", "server_stages", "stage_cost_ns",
           "stateful_objects"]

SCALE = 100  # objective 1 in 1/100 ns
MI = 1024 * 1024  # a cache's memory per entry is its blocks for MI entries, over MI


def crossing_ns(prog: ir.Program, pipeline: ir.Pipeline, spec: TargetSpec) -> float:
    """Server nanoseconds one packet of ``pipeline`` spends outside its stages when it visits the
    server: the I/O, the bridge, and ``parse`` per header of its parser's longest path (the server
    parses a raw packet, or takes each header a switch's bridge marks valid: nfc_from_switch)."""
    c = spec.cost
    return c.get("io", 7.5) + c.get("bridge", 2.0) + c.get("parse", 0.0) * longest_extracts(
        prog.parsers[pipeline.parser])


def stage_cost_ns(prog: ir.Program, stage: ir.Stage, spec: TargetSpec,
                  on_server: frozenset[str] | None = None) -> float:
    """Server nanoseconds one packet spends in ``stage`` (the profile's cost model, measured from
    the generated code by bench/bench_cost.py; docs/server.md, "Cost model"): each operation's
    figure (a header push its own: it moves the packet's bytes to make room), each lookup its
    table's, and when an earlier unit of the pipeline wrote a field of the key, that again plus
    the cache misses of a lookup alone (``_relookup_ns``): the burst's bulk lookup (nfc_prefetch)
    answered for the key the packet arrived with, so the generated code looks the new key up
    once more, alone and not prefetched.  A server that runs order-free stages stage by stage
    (its profile's ``stage_major`` op) looks up every stage's keys in bulk at the stage's
    entry: there only a key written earlier in the same stage costs that.  Only writes of
    stages in ``on_server`` count when it is given (what the switch wrote arrives in the packet
    and the bridge header, and the bulk lookup sees it); without it every earlier stage's do,
    which is right for a server-only program and on the safe side for one the switch fronts.
    A lookup in data-plane state, and a ``refresh``, is a lookup of its table alone
    (``nfc_state_find``, never in the bulk lookup), not an insert; ``insert`` prices an insert."""
    c = spec.cost
    facts = _facts_of(prog)
    total = sum(_use_ns(u.op, c) for u in _uses(prog, stage))
    total += sum(c.get("push", 1.0) - c.get("stmt", 1.0) for s in walk_stmts(stage.body) if isinstance(s, ir.Push))
    total += sum(_alone_ns(prog.tables[s.state], c) for s in walk_stmts(stage.body) if isinstance(s, ir.Refresh))
    # stage by stage (a profile with the stage_major op, an order-free program), a key an earlier
    # stage wrote is looked up in bulk at this stage's entry: only a key written in this stage
    # costs more.  Order-free as a whole, not only the stages on the server: the server also runs
    # the stages of a switch cache's miss path, and the generator asks it of them all
    at = facts.position.get(stage.name)
    bulk = "stage_major" in spec.ops and facts.order_free
    written = _Written({}, 0) if bulk or at is None else _Written(facts.first_writes(on_server)[at[0]], at[1])
    for unit in facts.units(stage):
        for t in unit.tables:
            if prog.tables[t].is_state:  # nfc_state_find, alone: never in the burst's bulk lookup
                total += _alone_ns(prog.tables[t], c)
                continue
            once = _lookup_ns(prog.tables[t], c)
            rekeyed = any(written.has(loc) for k in prog.tables[t].keys for loc in expr_reads(k.expr))
            total += once + (once + _relookup_ns(prog.tables[t], c) if rekeyed else 0.0)
        written.here |= unit.writes
    return total


def server_stages(segment: dict[str, Segment]) -> frozenset[str]:
    """The stages a placement puts on the server: ``stage_cost_ns``'s ``on_server``."""
    return frozenset(s for s, seg in segment.items() if seg is Segment.SERVER)


def _use_ns(op: str, c: dict[str, float]) -> float:
    return {"crypto": c.get("crypto", 70.0), "hash": c.get("hash", 2.0),
            "dataplane_insert": c.get("insert", 25.0)}.get(op, c.get("stmt", 1.0))


class _ProgramFacts:
    """What pricing a stage (``stage_cost_ns``) asks of the whole program, derived once per
    program: the partitioner, the plan and the server load each price every stage, and
    deriving these on every call (the units of each earlier stage, ``order_free`` of every
    stage) made a build O(stages²) (issue 47).  ``problem_of`` reads the units from here too."""

    def __init__(self, prog: ir.Program) -> None:
        self.prog = prog  # held: the cache's key is its id, which no other program takes while it lives
        self.position: dict[str, tuple[int, int]] = {}  # stage -> (its first pipeline, its index there)
        for i, p in enumerate(prog.pipelines):
            for j, s in enumerate(p.stages):
                self.position.setdefault(s, (i, j))
        self._units: dict[str, list[Unit]] = {}
        self._first: dict[frozenset[str] | None, list[dict[Loc, int]]] = {}

    @cached_property
    def order_free(self) -> bool:
        """``order_free`` of every stage of every pipeline: once per program, not once per stage."""
        return order_free(self.prog, (s for p in self.prog.pipelines for s in p.stages))

    def units(self, stage: ir.Stage) -> list[Unit]:
        """``stage_units`` of ``stage``, split once (a stage that is not the program's, split anew).
        Shared by every caller: a unit's sets are read here, never changed."""
        if self.prog.stages.get(stage.name) is not stage:
            return stage_units(self.prog, stage)
        units = self._units.get(stage.name)
        if units is None:
            units = self._units[stage.name] = stage_units(self.prog, stage)
        return units

    def first_writes(self, among: frozenset[str] | None) -> list[dict[Loc, int]]:
        """Per pipeline, each location its stages (of ``among``, if given) write -> the index of
        the first that does: a stage's earlier stages wrote ``loc`` iff that index is below its
        own.  One pass over the pipeline, kept per ``among``: the running union that replaced a
        union of every earlier stage's writes per stage priced (O(stages²))."""
        first = self._first.get(among)
        if first is None:
            first = [self._first_writes(p, among) for p in self.prog.pipelines]
            _remember(self._first, among, first, _AMONG_KEPT)
        return first

    def _first_writes(self, p: ir.Pipeline, among: frozenset[str] | None) -> dict[Loc, int]:
        first: dict[Loc, int] = {}
        for j, s in enumerate(p.stages):
            if among is None or s in among:
                for u in self.units(self.prog.stages[s]):
                    for loc in u.writes:
                        first.setdefault(loc, j)
        return first


@dataclass(slots=True)
class _Written:
    """What is written before a lookup of the stage being priced: by the stages before it
    (``first``: location -> index of the first stage to write it, ``at``: the stage's own
    index) and by its own units so far (``here``)."""

    first: dict[Loc, int]
    at: int
    here: set[Loc] = field(default_factory=set)

    def has(self, loc: Loc) -> bool:
        return loc in self.here or self.first.get(loc, self.at) < self.at


_K = TypeVar("_K")
_V = TypeVar("_V")
_PROGRAMS_KEPT = 4  # a build prices one program (and without_caches' copy); tests build many in turn
_AMONG_KEPT = 16  # on_server sets per program: the placement's, and each miss path's stage alone
_facts: dict[int, _ProgramFacts] = {}


def _facts_of(prog: ir.Program) -> _ProgramFacts:
    """The facts of ``prog``, derived on first use and kept while it is among the last few asked
    about (by identity: a program is immutable)."""
    facts = _facts.get(id(prog))
    if facts is None or facts.prog is not prog:
        facts = _ProgramFacts(prog)
        _remember(_facts, id(prog), facts, _PROGRAMS_KEPT)
    return facts


def _remember(memo: dict[_K, _V], key: _K, value: _V, kept: int) -> None:
    """``memo[key] = value``, forgetting the oldest entries beyond ``kept``."""
    memo[key] = value
    while len(memo) > kept:
        memo.pop(next(iter(memo)), None)


def _uses(prog: ir.Program, stage: ir.Stage) -> list[Use]:
    """The operations priced one by one (lookups are priced by their tables; a refresh as a lookup)."""
    return [u for u in stage_uses(prog, stage) if not u.by_table]


def _log_between(size: int, lo: float, hi: float) -> float:
    """Where ``size`` is between ``lo`` (0) and ``hi`` (1) on a log scale, clamped to [0, 1]."""
    return min(1.0, max(0.0, math.log2(max(size, 1) / lo) / math.log2(hi / lo)))


def _relookup_ns(t: ir.Table, c: dict[str, float]) -> float:
    """What a lookup alone costs over one in a burst: the cache misses the bulk lookup overlaps.
    ``relookup`` (``relookup_lpm`` for an LPM table) is measured at 1M entries; a table of at most
    64K (the runtime's NFC_PREFETCH_MIN, below which it deems a table cached) has none;
    log-interpolated between."""
    key = "relookup_lpm" if t.match == "lpm" else "relookup"
    return c.get(key, 0.0) * _log_between(t.size, 65536, 1e6)


def _alone_ns(t: ir.Table, c: dict[str, float]) -> float:
    """A lookup of ``t`` alone, not in a burst's bulk lookup (a data-plane state's: nfc_state_find)."""
    return _lookup_ns(t, c) + _relookup_ns(t, c)


def _lookup_ns(t: ir.Table, c: dict[str, float]) -> float:
    if t.match == "exact":
        lo, hi = c.get("exact_1m", 19.0), c.get("exact_16m", 23.0)
        return lo + (hi - lo) * _log_between(t.size, 1e6, 16e6)
    if t.match == "lpm":
        return c.get("lpm", 6.0)
    # rte_acl classify of 1K rules, of 16K: log-interpolated, extrapolated above (a classifier's
    # tries deepen with its rules), flat below
    lo = c.get("ternary", 40.0)
    return lo + (c.get("ternary_16k", lo) - lo) * max(0.0, math.log2(max(t.size, 1) / 1e3) / 4)


def depends(a: Unit, b: Unit) -> bool:
    """Must unit ``b`` (later in a pass) start after unit ``a`` ends on the switch?"""
    return bool(a.writes & b.reads or a.reads & b.writes or a.writes & b.writes) or (a.may_stop and b.stateful)


@dataclass(frozen=True, slots=True)
class StageFacts:
    name: str
    pipeline: str
    allowed: frozenset[Segment]  # empty: the stage fits no target of this build
    cost: int  # objective-1 units while on the server


@dataclass(frozen=True, slots=True)
class UnitFacts:
    unit: Unit
    pipeline: str
    sram: int  # blocks on the switch, cache entries apart
    tcam: int
    caches: tuple[str, ...]  # its cached tables: their blocks are the placement's choice

    @property
    def name(self) -> str:
        return self.unit.name

    @property
    def stage(self) -> str:
        return self.unit.stage


@dataclass(frozen=True, slots=True)
class PipelineFacts:
    name: str
    stages: tuple[str, ...]
    io: int  # objective-1 units when any of its stages is on the server
    units: tuple[int, ...]  # indices into Problem.units, in pass order
    deps: tuple[tuple[int, int], ...]  # (a, b): b starts after a ends, when both are in one switch pass


@dataclass(frozen=True, slots=True)
class CacheFacts:
    table: str
    size: int
    active: int  # entries that receive the traffic
    weight: int  # objective-2 units per useful cached entry
    per_sram: int  # blocks for MI entries
    per_tcam: int


@dataclass(frozen=True)
class Problem:
    prog: ir.Program
    targets: TargetSet
    stages: dict[str, StageFacts]
    pipelines: tuple[PipelineFacts, ...]
    units: tuple[UnitFacts, ...]
    caches: dict[str, CacheFacts]
    n: int  # MAU stages (0: no switch)
    sram: int  # blocks per MAU stage
    tcam: int

    def fits_switch(self, u: UnitFacts) -> bool:
        """Do unit ``u``'s fixed blocks fit the whole switch at all (every MAU stage's together)?"""
        return u.sram <= self.n * self.sram and u.tcam <= self.n * self.tcam

    @cached_property
    def preds(self) -> dict[int, tuple[int, ...]]:
        """Unit -> every unit of its pipeline it must follow in one switch pass (the pairs of
        ``PipelineFacts.deps`` by their later unit), ascending: grouped once per problem, so
        that ``place_greedy.pass_deps`` cuts them per placement instead of walking every pair."""
        out: dict[int, list[int]] = {}
        for pl in self.pipelines:
            for a, b in pl.deps:
                out.setdefault(b, []).append(a)
        return {b: tuple(sorted(aa)) for b, aa in out.items()}

    @cached_property
    def direct_preds(self) -> dict[int, tuple[int, ...]]:
        """``preds`` less the units it reaches through another of them (a transitive reduction),
        ascending: a unit after these is after all of ``preds``, and there are about as many as
        units where ``preds`` holds up to every pair.  Within a run of a pipeline's units (one
        switch pass) it is the run's own reduction: a chain between two units of a run stays in it."""
        reach: dict[int, int] = {}  # unit -> bit set of every unit it must follow, transitively
        out: dict[int, tuple[int, ...]] = {}
        for b in sorted(self.preds):
            covered, kept = 0, []
            for a in reversed(self.preds[b]):  # latest first: an earlier one reached through it is implied
                if not covered >> a & 1:
                    kept.append(a)
                covered |= reach.get(a, 0) | 1 << a
            reach[b] = covered
            out[b] = tuple(reversed(kept))
        return out


@dataclass(frozen=True)
class Layout:
    """A candidate placement: segments, switch units (MAU stages and blocks) and cache entries."""

    segment: dict[str, Segment]
    units: tuple[UnitPlacement, ...]  # the units on the switch
    cache: dict[str, int]  # cached table -> entries on the switch


def problem_of(prog: ir.Program, targets: TargetSet) -> Problem:
    """Derive the facts once (the order of units and of stateful objects is the Z3 model's)."""
    sw, srv = targets.switch, targets.server
    facts = _facts_of(prog)
    stages = {s: _stage_facts(prog, p, s, targets) for p in prog.pipelines for s in p.stages}
    units: list[UnitFacts] = []
    pipes: list[PipelineFacts] = []
    seen: set[str] = set()
    for p in prog.pipelines:
        first = len(units)
        for s in p.stages:
            for u in facts.units(prog.stages[s]):
                units.append(_unit_facts(prog, p.name, u, sw, seen))
        idx = tuple(range(first, len(units)))
        deps = tuple((a, b) for i, a in enumerate(idx) for b in idx[i + 1:] if depends(units[a].unit, units[b].unit))
        io = int(crossing_ns(prog, p, srv) * round(p.traffic * SCALE)) if srv else 0
        pipes.append(PipelineFacts(p.name, p.stages, io, idx, deps))
    share = _first_traffic(prog, facts)
    caches = {t: _cache_facts(prog.tables[t], share.get(t, 1.0), sw) for u in units for t in u.caches} if sw else {}
    n = int(sw.res("stages")) if sw else 0
    return Problem(prog, targets, stages, tuple(pipes), tuple(units), caches, n,
                   int(sw.res("sram_blocks")) if sw else 0, int(sw.res("tcam_blocks")) if sw else 0)


def _stage_facts(prog: ir.Program, p: ir.Pipeline, name: str, targets: TargetSet) -> StageFacts:
    sw, srv = targets.switch, targets.server
    stage = prog.stages[name]
    allowed = set(Segment)
    if sw is None or not can_run(prog, stage, sw, srv is not None):
        allowed &= {Segment.SERVER}
    if srv is None or not can_run(prog, stage, srv):
        allowed.discard(Segment.SERVER)
    if srv is None or sw is None:
        allowed.discard(Segment.SWITCH_AFTER)
    for u in _facts_of(prog).units(stage):
        for t in u.tables:
            pin = prog.tables[t].hints.pin
            if pin:
                allowed &= {Segment.SERVER} if pin == "server" else {Segment.SWITCH, Segment.SWITCH_AFTER}
    cost = round(stage_cost_ns(prog, stage, srv) * round(p.traffic * SCALE)) if srv else 0
    return StageFacts(name, p.name, frozenset(allowed), cost)


def _unit_facts(prog: ir.Program, pipeline: str, u: Unit, sw: TargetSpec | None, seen: set[str]) -> UnitFacts:
    if sw is None:  # no switch: nothing to cache on
        return UnitFacts(u, pipeline, 0, 0, ())
    sram = tcam = 0
    caches: list[str] = []
    for name in u.tables:
        t = prog.tables[name]
        if t.hints.cache:
            caches.append(name)
            continue
        b = table_blocks(t, t.size, sw)
        sram, tcam = sram + b.sram, tcam + b.tcam
    for obj, width, size in stateful_objects(prog, u):
        if obj not in seen:  # an object several units touch is counted once, at its first user
            seen.add(obj)
            sram += register_blocks(width, size, sw)
    return UnitFacts(u, pipeline, sram, tcam, tuple(caches))


def stateful_objects(prog: ir.Program, u: Unit) -> list[tuple[str, int, int]]:
    """(name, bits per index, indices) of every register, counter and meter unit ``u`` touches."""
    out: list[tuple[str, int, int]] = []
    for loc in sorted(u.reads | u.writes):
        if loc[0] == "reg":
            r = prog.registers[loc[1]]
            out.append((r.name, r.width, r.size))
    for s in walk_stmts(u.stmts):
        for e in stmt_exprs(s):
            for x in walk_expr(e):
                if isinstance(x, ir.CounterOp):
                    c = prog.counters[x.obj]
                    out.append((c.name, 64 if c.kind == "counter" else 128, c.size))
    return out


def _first_traffic(prog: ir.Program, facts: _ProgramFacts) -> dict[str, float]:
    """Table -> the traffic share of the first pipeline that looks it up: one pass over the
    program, not one per cache (was O(caches x stages))."""
    out: dict[str, float] = {}
    for p in prog.pipelines:
        for s in p.stages:
            for u in facts.units(prog.stages[s]):
                for t in u.tables:
                    out.setdefault(t, p.traffic)
    return out


def _cache_facts(t: ir.Table, share: float, sw: TargetSpec) -> CacheFacts:
    """Cache ``t``'s facts; ``share``: the traffic of the first pipeline that looks it up."""
    active = max(1, int(t.size * t.hints.active))
    per = table_blocks(t, MI, sw)
    return CacheFacts(t.name, t.size, active, max(1, round(share * 1e9 / active)), per.sram, per.tcam)


def cache_entries_fit(c: CacheFacts, sram: int, tcam: int) -> int:
    """The most entries of cache ``c`` that ``sram`` and ``tcam`` blocks hold (the model's ratio)."""
    e = min(c.size, sram * MI // c.per_sram if c.per_sram else c.size)
    return min(e, tcam * MI // c.per_tcam) if c.per_tcam else e


def objectives(p: Problem, lay: Layout) -> tuple[int, int, int, int]:
    """The layout's value of each objective, in the model's units: server cost (min), expected
    cache hits (max), cached entries (max), MAU stages used (min).  A cache counts only while
    its stage is on the switch."""
    server = sum(pl.io for pl in p.pipelines if any(lay.segment[s] is Segment.SERVER for s in pl.stages))
    server += sum(f.cost for s, f in p.stages.items() if lay.segment[s] is Segment.SERVER)
    on_switch = {t: e for t, e in lay.cache.items() if t in p.caches and _cache_on_switch(p, t, lay)}
    hits = sum(min(e, p.caches[t].active) * p.caches[t].weight for t, e in on_switch.items())
    depth = max((u.last + 1 for u in lay.units), default=0)
    return server, hits, sum(on_switch.values()), depth


def _cache_on_switch(p: Problem, table: str, lay: Layout) -> bool:
    return any(table in u.caches and lay.segment[u.stage].on_switch for u in p.units)
