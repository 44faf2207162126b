"""Property tests of the partitioner: every placement it returns is re-checked here,
independently of the solver model, on random chains of tables."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.analysis import stage_units
from compiler.partition import switch_usage
from compiler.resources import table_blocks
from lang import CompileError
from tests.support import compile_file, write

KINDS = ("exact", "lpm", "ternary")


def program(tables: list[tuple[str, int, int]]) -> str:
    """A chain of stages, each looking up one table keyed on what the previous one wrote."""
    out = ['import "std/headers.nfp";', "packet { eth: ethernet; ip: ipv4; }",
           "metadata { " + " ".join(f"m{i}: bit<32>;" for i in range(len(tables) + 1)) + " }",
           "parser p { state start { extract eth; extract ip; transition accept; } }"]
    names = []
    for i, (kind, size, vbits) in enumerate(tables):
        key = "ip.dst" if i == 0 else f"meta.m{i}"
        out.append(f"table t{i} {{ key {{ {key}: {kind}; }} value {{ v: bit<{vbits}>; }} size = {size}; }}")
        out.append(f"stage s{i} {{ lookup t{i} {{ hit(r) {{ meta.m{i + 1} = bit<32>(r.v); }} "
                   f"miss {{ drop(miss{i}); }} }} }}")
        names.append(f"s{i}")
    out.append(f"stage out {{ forward(bit<16>(meta.m{len(tables)}[15:0])); }}")
    out.append(f"pipeline main {{ ports = [0..7]; parser = p; stages = [{', '.join([*names, 'out'])}]; }}")
    out.append("deployment d { switch = tofino1; servers = [dpdk_server]; server_ports = [32]; rate = 1Mpps; }")
    return "\n".join(out) + "\n"


tables_st = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(1, 400_000), st.sampled_from([8, 32, 64, 128])),
                     min_size=1, max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables_st)
def test_placement_is_valid(tmp_path, tables):
    try:
        c = compile_file(write(tmp_path, program(tables)))
    except CompileError as e:  # only "does not fit" is acceptable, and only with a server present it cannot be
        raise AssertionError([d.message for d in e.diagnostics]) from e
    prog, pl, sw = c.program, c.placement, c.targets.switch
    seg = [pl.segment[s] for s in prog.pipelines[0].stages]
    assert seg == sorted(seg), "segments must not decrease along the pipeline"
    # per-stage budgets, recomputed from the unit allocations
    for b in switch_usage(pl, int(sw.res("stages"))):
        assert b.sram <= sw.res("sram_blocks") and b.tcam <= sw.res("tcam_blocks")
    units = {u.stage: u for u in pl.units}
    for i, _ in enumerate(tables):
        t = prog.tables[f"t{i}"]
        if pl.segment[f"s{i}"] == 1:
            assert f"s{i}" not in units
            continue
        u = units[f"s{i}"]
        need = table_blocks(t, t.size, sw)
        assert (sum(u.sram), sum(u.tcam)) == (need.sram, need.tcam), "a switch table gets exactly its blocks"
    # each table reads what the previous stage wrote: strictly later MAU stages within a pass
    on_switch = [s for s in prog.pipelines[0].stages if pl.segment[s] != 1]
    for a, b in itertools.pairwise(on_switch):
        if pl.segment[a] == pl.segment[b]:
            assert units[a].last < units[b].first
    # a table too big for the whole switch must be on the server
    cap_s, cap_t = 12 * 80, 12 * 24
    for i, _ in enumerate(tables):
        need = table_blocks(prog.tables[f"t{i}"], prog.tables[f"t{i}"].size, sw)
        if need.sram > cap_s or need.tcam > cap_t:
            assert pl.segment[f"s{i}"] == 1
    assert all(len(stage_units(prog, prog.stages[s])) >= 1 for s in prog.pipelines[0].stages)
