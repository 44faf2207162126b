"""Pass ``bridge``: the header that carries a packet's non-packet state across each cut.

Precondition: a placement.  A pipeline with a server segment has two cuts:
switch → server (before its first server stage) and server → switch (after its last).
Header fields travel in the packet itself; the bridge carries what does not:

* an 8-bit cut id, so the receiver knows which pipeline and cut the packet is at;
* one validity bit per header instance that may be valid at the cut (from
  ``check-validity``), so the receiver re-parses the packet exactly; the bits of the
  headers valid on every path to the cut (``must_be_valid``) are *required*: a receiver
  drops a bridge with one of them clear as ``bad_bridge``;
* every metadata / std field that is live at the cut: read by a later stage before a
  later stage writes it unconditionally (not ``std.packet_length``: each side reads it off the
  packet it holds);
* the egress port when it was chosen before the cut and may not be chosen again after, with
  a bit that says whether it was chosen on this packet's path (port 0 is a port).

Fields are laid out in order (cut id, validity bits, then fields by name), each field in
bytes of its own and right-aligned in them (a 12-bit field is 4 bits of padding and its 12
bits), so that on Tofino each sits in the bits of a container it would take as metadata and
one action's writes of the header read at most two PHV sources per container (p4c's Tofino
back end refused the VPN gateway's bridge when its 12-bit fields shared bytes with the
validity bits and straddled byte boundaries); the padding is zeros.
"""

from __future__ import annotations

from compiler import ir
from compiler.analysis import expr_reads, loc_of, stage_units, stmt_exprs
from compiler.passes.validity import must_be_valid
from compiler.placement import EGRESS, EGRESS_SET, Bridge, BridgeField, Direction, Placement, Segment
from lang.symbols import STD_FIELDS

__all__ = ["EGRESS", "Bridge", "BridgeField", "compute_bridges"]


Loc = tuple[str, ...]
EGRESS_LOC: Loc = ("std", "egress")


def _reads(prog: ir.Program, s: ir.Stmt) -> set[Loc]:
    out: set[Loc] = set()
    for e in stmt_exprs(s):
        out |= expr_reads(e)
    if isinstance(s, ir.Lookup):
        for k in prog.tables[s.table].keys:
            out |= expr_reads(k.expr)
    if isinstance(s, ir.Insert | ir.Remove | ir.Refresh):
        for k in prog.tables[s.state].keys:
            out |= expr_reads(k.expr)
    return out


def live_before(prog: ir.Program, stmts: tuple[ir.Stmt, ...], live: set[Loc]) -> set[Loc]:
    """Classic backward liveness: the locations read before being written on some path."""
    for s in reversed(stmts):
        if isinstance(s, ir.Drop | ir.Punt):
            live = set()
        elif isinstance(s, ir.If):
            live = live_before(prog, s.then, live) | live_before(prog, s.orelse, live)
        elif isinstance(s, ir.Lookup):
            live = live_before(prog, s.hit, live) | live_before(prog, s.miss, live)
        elif isinstance(s, ir.Assign):
            target = loc_of(s.target)
            if target is not None and not isinstance(s.target, ir.RegRead):
                live = live - {target}
        elif isinstance(s, ir.Forward):
            live = live - {EGRESS_LOC}
        live = live | _reads(prog, s)
    return live


def _live_after(prog: ir.Program, stages: tuple[str, ...]) -> set[Loc]:
    live: set[Loc] = {EGRESS_LOC}
    for s in reversed(stages):
        live = live_before(prog, prog.stages[s].body, live)
    return live


def _layout(cut_id: int, p: ir.Pipeline, miss: str | None, direction: Direction, before: tuple[str, ...],
            after: tuple[str, ...], prog: ir.Program, valid: frozenset[str], must: frozenset[str]) -> Bridge:
    live = _live_after(prog, after)
    fields: list[tuple[str, int]] = []
    meta_w = {f.name: f.width for f in prog.metadata}
    for loc in sorted(live):
        if loc[0] == "meta":
            fields.append((f"meta.{loc[1]}", meta_w[loc[1]]))
        elif loc[0] == "std" and loc[1] in STD_FIELDS and loc[1] != "packet_length":
            fields.append((f"std.{loc[1]}", STD_FIELDS[loc[1]]))
    if ("std", "egress") in live and any(("std", "egress") in u.writes for s in before
                                         for u in stage_units(prog, prog.stages[s])):
        fields += [(EGRESS, 16), (EGRESS_SET, 1)]
    valid_bits = tuple(i.name for i in prog.instances if i.name in valid)
    required = tuple(i for i in valid_bits if i in must)
    offset = 8 + len(valid_bits)
    laid: list[BridgeField] = []
    for name, width in fields:
        offset += -offset % 8 + -width % 8  # from the next byte, right-aligned to end on a byte
        laid.append(BridgeField(name, width, offset))
        offset += width
    bits = offset + (-offset % 8)
    return Bridge(cut_id, p.name, miss, direction, before[-1] if before else None, after[0] if after else None,
                  valid_bits, required, tuple(laid), bits)


def compute_bridges(prog: ir.Program, placement: Placement, validity: dict[str, frozenset[str]],
                    has_switch: bool = True) -> tuple[Bridge, ...]:
    """The bridge headers of every switch/server cut (none when there is no switch)."""
    out: list[Bridge] = []
    must = must_be_valid(prog)
    for p in prog.pipelines:
        seg = [placement.segment[s] for s in p.stages]
        if Segment.SERVER not in seg or not has_switch:
            continue
        i = seg.index(Segment.SERVER)
        j = len(seg) - seg[::-1].index(Segment.SERVER)
        pre, mid, post = p.stages[:i], p.stages[i:j], p.stages[j:]
        at_in = p.stages[i]
        at_out = p.stages[j] if j < len(p.stages) else f"{p.name}:end"
        out.append(_layout(len(out) + 1, p, None, Direction.TO_SERVER, pre, mid + post, prog, validity[at_in],
                           must[at_in]))
        out.append(_layout(len(out) + 1, p, None, Direction.TO_SWITCH, pre + mid, post, prog, validity[at_out],
                           must[at_out]))
    for miss in placement.misses:
        p = prog.pipeline_of(miss.stage)
        i = p.stages.index(miss.stage)
        pre, mid, post = p.stages[:i], p.stages[i : i + 1], p.stages[i + 1 :]
        at_out = post[0] if post else f"{p.name}:end"
        out.append(_layout(len(out) + 1, p, miss.table, Direction.TO_SERVER, pre, mid + post, prog,
                           validity[miss.stage], must[miss.stage]))
        out.append(_layout(len(out) + 1, p, miss.table, Direction.TO_SWITCH, pre + mid, post, prog, validity[at_out],
                           must[at_out]))
    return tuple(out)
