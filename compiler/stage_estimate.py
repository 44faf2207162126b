"""The MAU stages a placement needs once the switch program's own control code is counted.

The partitioner places the program's table units (``compiler/analysis.py``) in MAU stages; the
generated switch program (``targets/p4/lower.py``) also runs code around them that the Tofino
back end places in stages of its own.  Measured with p4c's open-source Tofino back end and its
assembler (``bench/results/real_p4.md``, 2026-12-08), on every example:

* **front**: the parse-time checks and the drops and restores that follow parsing run before any
  lookup (``control_stages_front``);
* **after a lookup's branches**: a lookup whose hit branch does more than its action can (a test,
  a forward to a port from the entry, which is range-checked), whose miss does more than drop,
  or whose miss goes to a server (a switch cache: the bridge and the server port) leaves its
  results to one more stage (``stages_after_branches``);
* **before a hash's use**: a unit that computes a hash runs the hash in a table of its own
  first, a stage before the statements that use it (``stages_before_hash_use``);
* **back**: the final test that drops a packet no stage forwarded (``control_stages_back``);
* and units that both change header validity are placed one after the other (the validity bits
  share PHV containers), as units that depend on each other are.

``estimate`` replays a placement with these: each unit starts after the units it depends on
end (their extra stages included), takes the stages its blocks need packed (at most the span the
placement gave it: the back end packs a table that the placement spread), and the pipeline's
last unit is followed by the back stages.  A target whose profile names none of the figures
costs nothing extra.  ``compiler.partition`` places again in fewer stages while the estimate
exceeds the switch's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from compiler import ir
from compiler.analysis import Unit, stage_units, stmt_exprs, walk_expr, walk_stmts
from compiler.place_problem import depends
from compiler.placement import Placement, UnitPlacement
from compiler.profiles import TargetSpec

__all__ = ["FIGURES", "StageEstimate", "estimate"]

# the profile's resources this estimate reads (each 0 when a profile does not name it)
FIGURES = ("control_stages_front", "stages_after_branches", "stages_before_hash_use", "control_stages_back")


@dataclass(frozen=True)
class StageEstimate:
    stages: int  # MAU stages the program needs, its control code included
    table_stages: int  # those the placement gave its table units (placement.mau_stages_used)
    extra: dict[str, int]  # unit -> stages of control code it adds on its chain (front not included)


def _figure(sw: TargetSpec, key: str) -> int:
    return int(sw.resources.get(key, 0))


def estimate(prog: ir.Program, placement: Placement, sw: TargetSpec, has_server: bool) -> StageEstimate:
    front, after, hashed, back = (_figure(sw, k) for k in FIGURES)
    if not any((front, after, hashed, back)):  # a target whose generated code the figures do not describe
        return StageEstimate(placement.mau_stages_used, placement.mau_stages_used, {})
    placed = {u.name: u for u in placement.units}
    total = 0
    extra: dict[str, int] = {}
    for p in prog.pipelines:
        for segment in {placement.segment[s] for s in p.stages if placement.segment[s].on_switch}:
            units = [u for s in p.stages if placement.segment[s] is segment for u in stage_units(prog, prog.stages[s])]
            end: dict[str, int] = {}
            for i, u in enumerate(units):
                span = _span(placed[u.name], sw) if u.name in placed else 1
                start = max([front] + [end[a.name] + 1 for a in units[:i] if depends(a, u) or _both_validity(a, u)])
                extra[u.name] = (hashed if _hashes(u) else 0) + (after if _branches(prog, u, has_server) else 0)
                end[u.name] = start + span - 1 + extra[u.name]
            if end:
                total = max(total, max(end.values()) + 1 + back)
    return StageEstimate(max(total, placement.mau_stages_used), placement.mau_stages_used, extra)


def _span(u: UnitPlacement, sw: TargetSpec) -> int:
    """The stages the unit's blocks take packed (the back end packs a table into as few stages
    as its memory needs where the placement may have spread it), at most the placement's span."""
    per_s, per_t = sw.res("sram_blocks"), sw.res("tcam_blocks")
    packed = max(1, math.ceil(sum(u.sram) / per_s) if per_s else 1, math.ceil(sum(u.tcam) / per_t) if per_t else 1)
    return min(u.last - u.first + 1, packed)


def _both_validity(a: Unit, b: Unit) -> bool:
    """Do both units make headers valid or invalid?  The Tofino back end keeps the validity bits
    in shared PHV containers, and two tables writing one container are placed one after the other."""
    return any(w[0] == "valid" for w in a.writes) and any(w[0] == "valid" for w in b.writes)


def _hashes(u: Unit) -> bool:
    return any(isinstance(x, ir.Hash) for s in walk_stmts(u.stmts) for e in stmt_exprs(s) for x in walk_expr(e))


def _branches(prog: ir.Program, u: Unit, has_server: bool) -> bool:
    """Does a lookup of ``u`` branch into more than its action and a drop on a miss?"""
    for look in _lookups(u.stmts):
        if prog.tables[look.table].hints.cache and has_server:
            return True
        if any(not isinstance(s, ir.Assign | ir.Push | ir.Pop) for s in look.hit):
            return True
        if len(look.miss) > 1 or any(not isinstance(s, ir.Drop) for s in look.miss):
            return True
    return False


def _lookups(stmts: tuple[ir.Stmt, ...]) -> Iterator[ir.Lookup]:
    return (s for s in walk_stmts(stmts) if isinstance(s, ir.Lookup))
