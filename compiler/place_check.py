"""Check a placement against every constraint of the placement model, independently of how
it was found (docs/partitioner.md, Constraints).

The partitioner runs it on every candidate (the exact model's, the scalable model's, the
greedy start's) before choosing one, and the tests run it on what the partitioner returns.
It recomputes what it checks from the IR, the analysis and the resource model, not from the
solvers' data (``compiler/place_problem.Problem``; only the definitions of a dependency and of
a unit's stateful objects are shared), so a slip in a model or in the greedy shows up here as
a named violation:

* segments: non-decreasing along each pipeline; a pipeline with no server stage is all
  ``SWITCH``; each stage on a target that can run it; pins obeyed; ``SWITCH_AFTER`` only in a
  build with both a switch and a server;
* units: every unit of a switch stage is placed once, within the MAU stages, with one block
  count per MAU stage of its span, a unit without memory in one MAU stage;
* memory: each unit receives at least the blocks of its tables (a cache: of its entries) and
  of the registers and counters it is first to touch; no MAU stage exceeds its budget;
* dependencies: a unit that depends on an earlier one of the same pass starts after it ends.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from compiler import ir
from compiler.analysis import Unit, stage_units
from compiler.passes.capabilities import can_run
from compiler.place_problem import depends, stateful_objects
from compiler.placement import Segment, UnitPlacement
from compiler.profiles import TargetSet, TargetSpec
from compiler.resources import Blocks, register_blocks, table_blocks

__all__ = ["violations"]

_MI = 1024 * 1024


def violations(prog: ir.Program, targets: TargetSet, segment: Mapping[str, Segment],
               units: tuple[UnitPlacement, ...], cache: Mapping[str, int]) -> list[str]:
    """Every constraint the placement breaks, in words (empty: the placement is valid)."""
    out = _segment_violations(prog, targets, segment)
    if out:
        return out
    sw = targets.switch
    if sw is None:
        return [f"unit {u.name} is on a switch, but the build has none" for u in units]
    placed = {u.name: u for u in units}
    ir_units = [u for p in prog.pipelines for s in p.stages for u in stage_units(prog, prog.stages[s])]
    on = [u for u in ir_units if segment[u.stage].on_switch]
    out += _unit_violations(on, placed, int(sw.res("stages")))
    if out:
        return out
    out += _memory_violations(prog, sw, ir_units, on, placed, cache)
    out += _dependency_violations(prog, segment, placed)
    return out


def _segment_violations(prog: ir.Program, targets: TargetSet, segment: Mapping[str, Segment]) -> list[str]:
    out: list[str] = []
    sw, srv = targets.switch, targets.server
    for p in prog.pipelines:
        if any(s not in segment for s in p.stages):
            out.append(f"pipeline {p.name}: a stage has no segment")
            continue
        segs = [segment[s] for s in p.stages]
        if any(a > b for a, b in itertools.pairwise(segs)):
            out.append(f"pipeline {p.name}: segments decrease along the pipeline")
        if Segment.SERVER not in segs and any(x is not Segment.SWITCH for x in segs):
            out.append(f"pipeline {p.name} visits no server but has stages after one")
        for s in p.stages:
            out += _stage_violations(prog, prog.stages[s], segment[s], sw, srv)
    return out


def _stage_violations(prog: ir.Program, stage: ir.Stage, seg: Segment, sw: TargetSpec | None,
                      srv: TargetSpec | None) -> list[str]:
    out: list[str] = []
    if seg is Segment.SERVER and not can_run(prog, stage, srv):
        out.append(f"stage {stage.name} is on a server that cannot run it")
    if seg.on_switch and not can_run(prog, stage, sw, srv is not None):
        out.append(f"stage {stage.name} is on a switch that cannot run it")
    if seg is Segment.SWITCH_AFTER and (sw is None or srv is None):
        out.append(f"stage {stage.name} is after a server in a build without both targets")
    pins = {prog.tables[t].hints.pin for u in stage_units(prog, stage) for t in u.tables} - {None, ""}
    if ("server" in pins and seg is not Segment.SERVER) or ("switch" in pins and seg is Segment.SERVER):
        out.append(f"stage {stage.name} is not where its table's pin says")
    return out


def _unit_violations(on: list[Unit], placed: dict[str, UnitPlacement], n: int) -> list[str]:
    out: list[str] = []
    names = {u.name for u in on}
    out += [f"unit {name} is placed, but its stage is not on the switch" for name in placed if name not in names]
    for u in on:
        p = placed.get(u.name)
        if p is None:
            out.append(f"unit {u.name} of a switch stage is not placed")
        elif not 0 <= p.first <= p.last < n:
            out.append(f"unit {u.name} spans MAU stages {p.first}..{p.last}, outside 0..{n - 1}")
        elif len(p.sram) != p.last - p.first + 1 or len(p.tcam) != len(p.sram):
            out.append(f"unit {u.name} has block counts for {len(p.sram)} MAU stages, spans {p.last - p.first + 1}")
        elif min(p.sram + p.tcam, default=0) < 0:
            out.append(f"unit {u.name} has a negative block count")
    return out


def _memory_violations(prog: ir.Program, sw: TargetSpec, ir_units: list[Unit], on: list[Unit],
                       placed: dict[str, UnitPlacement], cache: Mapping[str, int]) -> list[str]:
    out: list[str] = []
    owner: dict[str, str] = {}  # a register or counter is counted once, at the first unit to touch it
    for u in ir_units:
        for name, _w, _s in stateful_objects(prog, u):
            owner.setdefault(name, u.name)
    for u in on:
        need = _need(prog, sw, u, owner, cache)
        p = placed[u.name]
        if sum(p.sram) < need.sram or sum(p.tcam) < need.tcam:
            out.append(f"unit {u.name} needs {need.sram} SRAM / {need.tcam} TCAM blocks, has {sum(p.sram)} / "
                       f"{sum(p.tcam)}")
        if need == Blocks(0, 0) and not any(prog.tables[t].hints.cache for t in u.tables) and p.first != p.last:
            out.append(f"unit {u.name} needs no memory but spans several MAU stages")
        out += [f"cache of {t} holds {cache.get(t, 0)} entries, not 0..{prog.tables[t].size}"
                for t in u.tables if prog.tables[t].hints.cache and not 0 <= cache.get(t, 0) <= prog.tables[t].size]
    for k in range(int(sw.res("stages"))):
        s = sum(p.sram[k - p.first] for p in placed.values() if p.first <= k <= p.last)
        t = sum(p.tcam[k - p.first] for p in placed.values() if p.first <= k <= p.last)
        if s > sw.res("sram_blocks") or t > sw.res("tcam_blocks"):
            out.append(f"MAU stage {k} holds {s} SRAM / {t} TCAM blocks, more than {int(sw.res('sram_blocks'))} / "
                       f"{int(sw.res('tcam_blocks'))}")
    return out


def _need(prog: ir.Program, sw: TargetSpec, u: Unit, owner: dict[str, str], cache: Mapping[str, int]) -> Blocks:
    total = Blocks(0, 0)
    for name in u.tables:
        t = prog.tables[name]
        if t.hints.cache:  # B blocks hold E entries when B x 1Mi >= E x (blocks for 1Mi entries)
            per = table_blocks(t, _MI, sw)
            e = cache.get(name, 0)
            total = total + Blocks(-(-e * per.sram // _MI), -(-e * per.tcam // _MI))
        else:
            total = total + table_blocks(t, t.size, sw)
    for name, width, size in stateful_objects(prog, u):
        if owner[name] == u.name:
            total = total + Blocks(register_blocks(width, size, sw), 0)
            owner[name] = ""  # once, even if the unit touches it twice
    return total


def _dependency_violations(prog: ir.Program, segment: Mapping[str, Segment],
                           placed: dict[str, UnitPlacement]) -> list[str]:
    out: list[str] = []
    for p in prog.pipelines:
        units = [u for s in p.stages for u in stage_units(prog, prog.stages[s])]
        for i, a in enumerate(units):
            for b in units[i + 1:]:
                same_pass = segment[a.stage] is segment[b.stage] and segment[a.stage].on_switch
                if same_pass and depends(a, b) and placed[a.name].last >= placed[b.name].first:
                    out.append(f"unit {b.name} depends on {a.name} but starts at MAU stage {placed[b.name].first}, "
                               f"not after {placed[a.name].last}")
    return out

