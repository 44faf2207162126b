"""Why a program does not fit: named tables, resources, amounts and remedies.

Called when the partitioner's model is unsatisfiable.  Checks, in order: a table that
alone exceeds the switch, all switch-bound tables together, and the longest chain of
dependent units against the number of MAU stages.
"""

from __future__ import annotations

from compiler import ir
from compiler.analysis import stage_units
from compiler.passes.capabilities import can_run
from compiler.profiles import TargetSet, TargetSpec
from compiler.resources import Blocks, table_blocks
from lang.diagnostics import Diagnostics

__all__ = ["explain_unfit", "max_entries"]


def _capacity(sw: TargetSpec) -> Blocks:
    n = int(sw.res("stages"))
    return Blocks(n * int(sw.res("sram_blocks")), n * int(sw.res("tcam_blocks")))


def _fits(b: Blocks, cap: Blocks) -> bool:
    return b.sram <= cap.sram and b.tcam <= cap.tcam


def max_entries(t: ir.Table, sw: TargetSpec, cap: Blocks | None = None) -> int:
    """The largest entry count of ``t`` that fits in ``cap`` (default: the whole switch)."""
    cap = cap or _capacity(sw)
    lo, hi = 0, max(t.size, 1)
    while _fits(table_blocks(t, hi, sw), cap) and hi < 1 << 40:
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(table_blocks(t, mid, sw), cap):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _switch_bound(prog: ir.Program, targets: TargetSet) -> list[ir.Stage]:
    """Stages that cannot go to a server in this build."""
    return [s for s in prog.stages.values() if not can_run(prog, s, targets.server)]


def _pinned_away(prog: ir.Program, targets: TargetSet, diags: Diagnostics) -> bool:
    """A table pinned to a kind of target the build does not have."""
    have = {"switch": targets.switch is not None, "server": targets.server is not None}
    bad = [t for t in prog.tables.values() if t.hints.pin in have and not have[t.hints.pin]]
    for t in bad:
        stage = next((s.name for s in prog.stages.values() for u in stage_units(prog, s) if t.name in u.tables), "?")
        diags.error("E080", f"table '{t.name}' is pinned to the {t.hints.pin} ('pin = {t.hints.pin};'), but this build "
                    f"has no {t.hints.pin} target: stage '{stage}' cannot be placed", t.span,
                    notes=(f"build with a {t.hints.pin} target (--target tofino+dpdk), or remove the pin",))
    return bool(bad)


def explain_unfit(prog: ir.Program, targets: TargetSet, diags: Diagnostics) -> None:
    sw = targets.switch
    where = prog.first_pipeline_span
    if _pinned_away(prog, targets, diags):
        return
    if sw is None:
        diags.error("E080", "the program does not fit the chosen targets", where)
        return
    cap = _capacity(sw)
    bound = _switch_bound(prog, targets)
    tables = [prog.tables[t] for s in bound for u in stage_units(prog, s) for t in u.tables
              if not prog.tables[t].hints.cache]
    for t in tables:
        need = table_blocks(t, t.size, sw)
        if not _fits(need, cap):
            _too_big(prog, t, need, cap, sw, targets, diags)
            return
    total = Blocks(0, 0)
    for t in tables:
        total = total + table_blocks(t, t.size, sw)
    if not _fits(total, cap):
        names = ", ".join(f"'{t.name}'" for t in tables)
        diags.error("E080", f"the switch-bound tables ({names}) need {total.sram} SRAM and {total.tcam} TCAM blocks "
                    f"together; {sw.name} has {cap.sram} and {cap.tcam}", where,
                    notes=("shrink the largest with a smaller size, mark one 'cache = true', or add a server",))
        return
    diags.error("E080", f"the stages do not fit the {int(sw.res('stages'))} MAU stages of {sw.name}: dependent "
                "lookups need more stages in sequence, or memory per stage is too fragmented", where,
                notes=("reduce dependencies between consecutive stages, or place some on a server",))


def _too_big(prog: ir.Program, t: ir.Table, need: Blocks, cap: Blocks, sw: TargetSpec, targets: TargetSet,
             diags: Diagnostics) -> None:
    res, got, have = ("SRAM", need.sram, cap.sram) if need.sram > cap.sram else ("TCAM", need.tcam, cap.tcam)
    fit = max_entries(t, sw)
    notes = [f"{sw.name} has {have} {res} blocks in all ({int(sw.res('stages'))} stages x "
             f"{int(sw.res('sram_blocks' if res == 'SRAM' else 'tcam_blocks'))}); the table is {got / have:.1f}x "
             "too large",
             f"alone on the switch it would fit with size <= {fit} entries"]
    if targets.server is None:
        notes.append("or build with a server target (--target tofino+dpdk) so it can run there, whole or behind "
                     "a switch cache ('cache = true;')")
    else:
        notes.append("or add 'cache = true;' to keep only the hot entries on the switch")
    stage = next((s.name for s in prog.stages.values() for u in stage_units(prog, s) if t.name in u.tables), "?")
    diags.error("E080", f"stage '{stage}' does not fit on {sw.name}: its table '{t.name}' ({t.size} entries, "
                f"{t.match} match, {t.key_bits}-bit key, {t.value_bits}-bit value) needs {got} {res} blocks",
                t.span, notes=tuple(notes))
