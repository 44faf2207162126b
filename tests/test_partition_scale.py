"""The partitioner at scale (issue 13, item 6): a valid greedy start, an optimiser that improves on
it, a time limit that still yields a placement with its optimality gap, and large programs.

Expectations come from the programs' construction (tests/bigprog.py explains each by hand) and
from an independent re-check of the switch budgets, not from the partitioner's own answers."""

from __future__ import annotations

import json
import math
import re

import pytest

from compiler.analysis import stage_units
from compiler.manifest import plan_from_json
from compiler.partition import partition, switch_usage
from compiler.pipeline import PASS_NAMES, PASSES, Compilation, compile_program
from compiler.place_bounds import server_lower_bound
from compiler.place_check import violations
from compiler.place_greedy import greedy
from compiler.place_problem import Layout, objectives, problem_of
from compiler.placement import Segment, UnitPlacement
from compiler.resources import table_blocks
from lang import CompileError, Diagnostics, SourceMap, load
from tests.bigprog import bluebird, bluebird_stages, knapsack, synthetic
from tests.support import ROOT, compile_file, nfc_cli, write

TOFINO1 = {"stages": 12, "sram": 80, "tcam": 24}


def _budgets_hold(c, segment, units: tuple[UnitPlacement, ...], cache: dict[str, int]) -> None:
    """Tofino-1's per-MAU-stage budgets and each switch table's blocks, recomputed here."""
    assert len(units) == len({u.name for u in units})
    for k, b in enumerate(_usage(units)):
        assert b[0] <= TOFINO1["sram"] and b[1] <= TOFINO1["tcam"], f"MAU stage {k} over budget: {b}"
    placed = {u.name: u for u in units}
    for p in c.program.pipelines:
        for s in p.stages:
            for u in stage_units(c.program, c.program.stages[s]):
                if segment[s] is Segment.SERVER:
                    assert u.name not in placed
                    continue
                got = placed[u.name]
                assert 0 <= got.first <= got.last < TOFINO1["stages"]
                for t in u.tables:
                    table = c.program.tables[t]
                    need = table_blocks(table, cache.get(t, 0) if table.hints.cache else table.size, c.targets.switch)
                    assert sum(got.sram) >= need.sram and sum(got.tcam) >= need.tcam, (u.name, t)


def _usage(units: tuple[UnitPlacement, ...]) -> list[tuple[int, int]]:
    use = [(0, 0)] * TOFINO1["stages"]
    for u in units:
        for i, k in enumerate(range(u.first, u.last + 1)):
            use[k] = (use[k][0] + u.sram[i], use[k][1] + u.tcam[i])
    return use


def _before_partition(path: str):
    """The compilation with every pass before the partitioner run (nothing placed yet)."""
    d = Diagnostics()
    c = Compilation(load(path, d, SourceMap()), "tofino+dpdk")
    for p in PASSES[:PASS_NAMES.index("partition")]:
        c = p.run(c, d)
    assert not d.has_errors
    return c


def _servers(segment) -> list[str]:
    return sorted(s for s, g in segment.items() if g is Segment.SERVER)


@pytest.mark.parametrize("program", ["examples", "synthetic", "bluebird"])
def test_greedy_start_obeys_every_constraint(tmp_path, program):
    """The greedy start is valid on its own: the constraint checker finds nothing, the budgets
    recomputed here hold, and segments never decrease along a pipeline."""
    if program == "examples":
        paths = [str(p) for p in sorted((ROOT / "examples").glob("*.nfp"))]
    else:
        paths = [write(tmp_path, synthetic(30) if program == "synthetic" else bluebird(6))]
    for path in paths:
        c = _before_partition(path)
        lay = greedy(problem_of(c.program, c.targets))
        assert lay is not None, path
        assert violations(c.program, c.targets, lay.segment, lay.units, lay.cache) == [], path
        _budgets_hold(c, lay.segment, lay.units, lay.cache)
        for p in c.program.pipelines:
            segs = [lay.segment[s] for s in p.stages]
            assert segs == sorted(segs)


def test_checker_names_what_a_placement_breaks(tmp_path):
    """The checker the partitioner trusts catches a budget overrun and a dependency out of order."""
    c = _before_partition(write(tmp_path, synthetic(6)))
    lay = greedy(problem_of(c.program, c.targets))
    assert lay is not None
    unit = next(u for u in lay.units if sum(u.sram) > 0)
    fat = UnitPlacement(unit.name, unit.stage, unit.tables, unit.first, unit.first, (81,), (0,))
    broken = Layout(lay.segment, tuple(fat if u is unit else u for u in lay.units), lay.cache)
    assert any(f"MAU stage {unit.first} holds" in v for v in violations(c.program, c.targets, broken.segment,
                                                                         broken.units, broken.cache))
    # s0 writes meta.m0, s1 reads it: s1 may not start before s0 ends
    s0, s1 = (next(u for u in lay.units if u.stage == s) for s in ("s0", "s1"))
    early = UnitPlacement(s1.name, s1.stage, s1.tables, s0.last, s0.last + len(s1.sram) - 1, s1.sram, s1.tcam)
    units = tuple(early if u is s1 else u for u in lay.units)
    assert any("depends on s0#0" in v for v in violations(c.program, c.targets, lay.segment, units, lay.cache))


@pytest.mark.parametrize("pad", [0, 9], ids=["exact model", "scalable search"])
def test_suboptimal_greedy_start_is_improved_to_the_optimum(tmp_path, pad):
    """tests/bigprog.knapsack: 1400 blocks for 960, so a (35 % of the traffic) or b and c (20 %
    each) go to the server.  The greedy relieves the switch by the most blocks per share (b, then
    c: 40 %); the optimum sends a alone (35 %).  Given time, the partitioner finds it and proves
    it optimal.  With 9 small pipelines padded on (12 stages) the scalable search runs instead of
    the exact model, and must find it too."""
    c = compile_file(write(tmp_path, knapsack(pad)))
    p = problem_of(c.program, c.targets)
    start = greedy(p)
    assert start is not None and _servers(start.segment) == ["s_b", "s_c"]
    pl = c.placement
    assert _servers(pl.segment) == ["s_a"]
    assert objectives(p, start)[0] > pl.optimality.values[0]
    assert pl.optimal and pl.optimality.gap == 0.0
    assert pl.optimality.method == ("exact" if pad == 0 else "scalable")
    # one pipeline's crossing: its traffic share times (I/O + bridge + its stage) in the profile's ns
    ns = c.targets.server.cost
    stage = pl.server_ns["p_a"] - ns["io"] - ns["bridge"]
    assert pl.server_ns_per_packet == pytest.approx(0.35 * (ns["io"] + ns["bridge"] + stage))
    assert pl.server_ns["p_b"] == pl.server_ns["p_c"] == 0.0


def test_floor_bound_is_below_the_optimum_and_above_memory_blind_zero(tmp_path):
    """With memory ignored every pipeline could stay on the switch (bound 0); the budget forces
    at least 960 - ... blocks off it, so the Lagrangian bound is positive, and no more than the
    optimum's cost (a alone: 35 % of one crossing)."""
    c = compile_file(write(tmp_path, knapsack()))
    p = problem_of(c.program, c.targets)
    floor = server_lower_bound(p)
    assert floor is not None
    assert 0 < floor.bound <= c.placement.optimality.values[0]


def test_tiny_time_limit_still_yields_a_valid_placement_with_its_gap():
    """A 1 ms limit stops the exact model before it answers: a greedy placement is kept, checked,
    and reported as not proved optimal, with its gap against the bounds, and W080 says so.  On
    cgnat no stage needs a server (server cost 0, proved), and the caches hold less than the
    free memory could: the open objective is the cache hits."""
    c = compile_file(str(ROOT / "examples/cgnat.nfp"))
    d = Diagnostics()
    pl = partition(c.program, c.targets, d, timeout_ms=1)
    assert pl is not None
    assert violations(c.program, c.targets, pl.segment, pl.units, pl.cache_entries) == []
    _budgets_hold(c, pl.segment, pl.units, pl.cache_entries)
    q = pl.optimality
    assert q.stopped_at_limit and not pl.optimal and q.time_limit_s == 0.001
    assert q.values[0] == q.bounds[0] == 0
    assert q.open_objective == 1 and q.bounds[1] is not None and q.values[1] < q.bounds[1]
    assert q.gap == pytest.approx((q.bounds[1] - q.values[1]) / q.bounds[1])
    (w,) = [x for x in d.items if x.code != "W088"]  # W088: cgnat's control code, whatever the limit
    outbound = 1 + (ROOT / "examples/cgnat.nfp").read_text().splitlines().index("pipeline outbound {")
    assert (w.code, w.severity.value, w.span.line, w.span.col) == ("W080", "warning", outbound, 1)
    assert w.message.startswith("placement not proved optimal: the partitioner stopped at its 0.001 s time limit; "
                                "max expected cache hits is ")


def test_place_timeout_flag_reaches_the_plan_and_the_report(tmp_path):
    """``nfc build --place-timeout``: the limit, the gap and its objective in plan.json (read back
    by the manifest), a gap table in the report, W080 on stderr, exit 0."""
    out = tmp_path / "out"
    r = nfc_cli("build", "examples/cgnat.nfp", "-o", str(out), "--place-timeout", "0.001", "--no-verify")
    assert r.returncode == 0, r.stderr
    assert "warning[W080]" in r.stderr and "not proved optimal" in r.stderr
    solver = json.loads((out / "plan.json").read_text())["solver"]
    assert solver["time_limit_s"] == 0.001 and solver["stopped_at_time_limit"] is True
    assert solver["optimal"] is False and solver["gap_objective"] == "max expected cache hits"
    assert 0 < solver["gap"] <= 1 and solver["objective_values"][1] < solver["objective_bounds"][1]
    info = plan_from_json(json.loads((out / "plan.json").read_text())).solver
    assert info is not None and info.gap == solver["gap"] and info.stopped_at_time_limit
    report = (out / "report.txt").read_text()
    assert "optimality gap: " in report and "stopped at its 0.001 s time limit (--place-timeout)" in report


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "soon"])
def test_place_timeout_must_be_a_positive_number(bad):
    r = nfc_cli("build", "examples/vpn_gateway.nfp", "--place-timeout", bad)
    assert r.returncode == 2 and "--place-timeout: must be a positive number of seconds" in r.stderr


def test_place_timeout_applies_to_its_own_compilation_only(tmp_path):
    src = write(tmp_path, knapsack())
    diags = Diagnostics()
    limited = compile_program(load(src, diags, SourceMap()), "tofino+dpdk", diags, place_timeout_s=0.001)
    assert limited.placement.optimality.time_limit_s == 0.001
    assert compile_file(src).placement.optimality.time_limit_s == 60


def test_plan_without_the_new_solver_fields_still_loads():
    plan = json.loads((ROOT / "tests/golden/examples/vpn_gateway/plan.json").read_text())
    plan["solver"] = {k: plan["solver"][k] for k in ("engine", "objectives", "optimal")}
    info = plan_from_json(plan).solver
    assert info is not None and info.optimal and info.gap is None and info.method == ""


def test_sixty_stage_program_places_on_every_budget(tmp_path):
    """60 stages in 12 pipelines, more table memory than the switch holds: every stage placed,
    the switch stages within Tofino-1's budgets, each dependent unit after the one it needs."""
    c = compile_file(write(tmp_path, synthetic(60)))
    pl = c.placement
    assert set(pl.segment) == {f"s{i}" for i in range(60)}
    assert violations(c.program, c.targets, pl.segment, pl.units, pl.cache_entries) == []
    _budgets_hold(c, pl.segment, pl.units, pl.cache_entries)
    assert max(b.sram for b in switch_usage(pl, 12)) <= 80
    # the 40M-entry LPM tables need 40M / 512 = 78,125 TCAM blocks, the switch has 12 x 24: a server holds them
    huge = [t for t in c.program.tables.values() if t.size == 40_000_000]
    assert len(huge) == 8 and all(pl.where(f"s{t.name[1:]}") == "server" for t in huge)
    assert pl.optimality.method == "scalable" and pl.optimality.bounds[0] is not None


def test_bluebird_copies_keep_the_papers_cache_size(tmp_path):
    """bluebird x 24 (53 stages): the copies' small tables fit around the CA-to-PA cache, which
    keeps the 6 MAU stages x 80 blocks of the example (221,140 entries; tests/test_partition.py)."""
    c = compile_file(write(tmp_path, bluebird(24)))
    assert len(c.placement.segment) == bluebird_stages(24) == 53
    assert c.placement.cache_entries["ca_to_pa"] == math.floor(480 * 1024 * 1024 / 2276)


def test_server_only_build_of_a_cached_table_places_it_on_the_server():
    """--target dpdk: no switch to cache on, so Bluebird's cached table is an ordinary server
    table (found by tests/nfp_fuzz.py: the relaxation looked for the cache's blocks)."""
    c = compile_file(str(ROOT / "examples/bluebird_tor.nfp"), "dpdk", allow_overcommit=True)
    assert set(c.placement.segment.values()) == {Segment.SERVER}
    assert c.placement.optimal and c.placement.units == ()


def test_program_that_fits_nowhere_is_still_E080(tmp_path):
    """No placement at all (a switch-only build with a table beyond the switch) stays an error."""
    with pytest.raises(CompileError) as e:
        compile_file(write(tmp_path, synthetic(12)), "tofino")
    assert [d.code for d in e.value.diagnostics] == ["E080"]


def test_a_switch_cache_left_without_entries_sends_every_packet_to_the_server(tmp_path):
    """synthetic(30): the placement keeps t26's stage on the switch but leaves its cache no
    block.  P4 has no table of size 0 (p4c rejects it; the lint's P4L060 made the build fail
    E100): the lookup is lowered as its miss path, every packet to the server, and the build,
    the lint and the proof pass."""
    src = write(tmp_path, synthetic(30))
    c = compile_file(src)
    assert c.placement.cache_entries["t26"] == 0 and c.placement.where("s26") == "switch"
    out = tmp_path / "build"
    r = nfc_cli("build", src, "-o", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    tna = (out / "switch/tna.p4").read_text()
    assert not re.search(r"^\s*table t26 \{", tna, re.M)
    assert re.search(r"lookup t26, \S+: its switch cache has no entry", tna)
    assert c.placement.cache_entries["t2"] > 0 and re.search(r"^\s*table t2 \{", tna, re.M)  # still a table
    assert "verified" in r.stderr
