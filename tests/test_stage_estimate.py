"""The MAU stages a placement needs with the generated switch program's control code
(``compiler/stage_estimate.py``): the estimate is checked against what p4c's Tofino back end and
its assembler placed (the oracle: ``tools/real-p4/``, bench/results/real_p4.md, 2026-12-08, with
the generator of this commit's parent), and a build over the chip's stages says so (W088)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compiler.partition import partition
from compiler.stage_estimate import FIGURES, estimate
from lang.diagnostics import Diagnostics
from tests.support import ROOT, compile_file, nfc_cli

# (program, MAU stages the partitioner was given for the tables) -> MAU stages of the compiled TNA
# program (`bfas`: "using N", or the last stage of its context.json + 1), 12 where it assembled
COMPILED = {("examples/vpn_gateway.nfp", 12): 11, ("examples/dsr_router.nfp", 12): 16,
            ("examples/bluebird_tor.nfp", 12): 17,
            # placed in fewer stages, leaving room for the control code: both caches smaller
            ("examples/dsr_router.nfp", 8): 12, ("examples/bluebird_tor.nfp", 7): 14}


@pytest.mark.parametrize(("source", "stages"), sorted(COMPILED))
def test_the_estimate_is_never_below_what_the_tofino_back_end_placed(source, stages):
    """Never below (a placement the estimate fits in 12 stages compiles), at most 2 above: Bluebird's
    switch cache is 480 SRAM blocks to nfc's model (6 stages packed), the back end's 4 stages."""
    c = compile_file(str(ROOT / source))
    sw = c.targets.switch
    placement = c.placement
    if stages != int(sw.res("stages")):
        tighter = replace(c.targets, switch=replace(sw, resources={**sw.resources, "stages": stages}))
        placement = partition(c.program, tighter, Diagnostics())
    est = estimate(c.program, placement, sw, c.targets.server is not None)
    assert est.table_stages == placement.mau_stages_used <= stages and est.stages > est.table_stages
    assert COMPILED[source, stages] <= est.stages <= COMPILED[source, stages] + 2


def test_a_profile_without_the_figures_costs_only_the_tables_stages():
    c = compile_file(str(ROOT / "examples/bluebird_tor.nfp"))
    sw = c.targets.switch
    bare = replace(sw, resources={k: v for k, v in sw.resources.items() if k not in FIGURES})
    assert estimate(c.program, c.placement, bare, True).stages == c.placement.mau_stages_used


def test_a_build_past_the_chips_stages_warns_and_reports_the_estimate(tmp_path):
    r = nfc_cli("build", str(ROOT / "examples/bluebird_tor.nfp"), "-o", str(tmp_path / "out"), "--no-verify")
    assert r.returncode == 0, r.stderr
    assert "warning[W088]: the switch program needs about 19 MAU stages" in r.stderr
    report = (tmp_path / "out/report.txt").read_text()
    assert "about 19 MAU stages (W088: more than the chip has)" in report
    r = nfc_cli("build", str(ROOT / "examples/vpn_gateway.nfp"), "-o", str(tmp_path / "vpn"), "--no-verify")
    assert r.returncode == 0 and "W088" not in r.stderr, r.stderr
