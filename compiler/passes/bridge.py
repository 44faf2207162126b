"""Pass ``bridge``: the header that carries a packet's non-packet state across each cut.

Precondition: a placement.  A pipeline with a server segment has two cuts:
switch → server (before its first server stage) and server → switch (after its last).
Header fields travel in the packet itself; the bridge carries what does not:

* an 8-bit cut id, so the receiver knows which pipeline and cut the packet is at;
* one validity bit per header instance that may be valid at the cut (from
  ``check-validity``), so the receiver re-parses the packet exactly;
* every metadata / std field that is live at the cut: read by a later stage before a
  later stage writes it unconditionally;
* the egress port when it was chosen before the cut and may not be chosen again after.

Fields are laid out in order (cut id, validity bits, then fields by name), padded to
whole bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import ir
from compiler.analysis import Unit, stage_units
from compiler.partition import Placement
from lang.check import STD_FIELDS

__all__ = ["EGRESS", "Bridge", "BridgeField", "compute_bridges"]

EGRESS = "egress_port"


@dataclass(frozen=True, slots=True)
class BridgeField:
    name: str  # "meta.customer", "std.ingress_port", "egress_port"
    width: int
    offset: int  # bit offset from the start of the bridge header


@dataclass(frozen=True, slots=True)
class Bridge:
    cut_id: int
    pipeline: str
    path: str  # "main", or "miss:<table>" for the miss path of a switch-cached table
    direction: str  # "switch->server" | "server->switch"
    after_stage: str | None
    before_stage: str | None
    valid_bits: tuple[str, ...]  # instance names, bit i = instance i
    fields: tuple[BridgeField, ...]
    bits: int

    @property
    def bytes(self) -> int:
        return self.bits // 8


Locs = set[tuple[str, ...]] | None  # None: the block never falls through (drops or punts)


def _must(stmts: tuple[ir.Stmt, ...]) -> Locs:
    """Locations written on every path through ``stmts`` that continues processing."""
    out: set[tuple[str, ...]] = set()
    for s in stmts:
        got: Locs = set()
        if isinstance(s, ir.Assign) and isinstance(s.target, ir.MetaField):
            got = {("meta", s.target.name)}
        elif isinstance(s, ir.Forward):
            got = {("std", "egress")}
        elif isinstance(s, ir.Drop | ir.Punt):
            return None
        elif isinstance(s, ir.If):
            got = _meet(_must(s.then), _must(s.orelse))
        elif isinstance(s, ir.Lookup):
            got = _meet(_must(s.hit), _must(s.miss))
        if got is None:
            return None
        out |= got
    return out


def _meet(a: Locs, b: Locs) -> Locs:
    if a is None:
        return b
    if b is None:
        return a
    return a & b


def _must_writes(u: Unit) -> set[tuple[str, ...]]:
    return _must(u.stmts) or set()


def _live_after(prog: ir.Program, stages: tuple[str, ...]) -> set[tuple[str, ...]]:
    live: set[tuple[str, ...]] = {("std", "egress")}
    for s in reversed(stages):
        for u in reversed(stage_units(prog, prog.stages[s])):
            live = (live - _must_writes(u)) | u.reads
    return live


def _layout(cut_id: int, p: ir.Pipeline, path: str, direction: str, before: tuple[str, ...], after: tuple[str, ...],
            prog: ir.Program, valid: frozenset[str]) -> Bridge:
    live = _live_after(prog, after)
    fields: list[tuple[str, int]] = []
    meta_w = {f.name: f.width for f in prog.metadata}
    for loc in sorted(live):
        if loc[0] == "meta":
            fields.append((f"meta.{loc[1]}", meta_w[loc[1]]))
        elif loc[0] == "std" and loc[1] in STD_FIELDS:
            fields.append((f"std.{loc[1]}", STD_FIELDS[loc[1]]))
    if ("std", "egress") in live and any(("std", "egress") in u.writes for s in before
                                         for u in stage_units(prog, prog.stages[s])):
        fields.append((EGRESS, 16))
    valid_bits = tuple(i.name for i in prog.instances if i.name in valid)
    offset = 8 + len(valid_bits)
    laid: list[BridgeField] = []
    for name, width in fields:
        laid.append(BridgeField(name, width, offset))
        offset += width
    bits = offset + (-offset % 8)
    return Bridge(cut_id, p.name, path, direction, before[-1] if before else None, after[0] if after else None,
                  valid_bits, tuple(laid), bits)


def compute_bridges(prog: ir.Program, placement: Placement, validity: dict[str, frozenset[str]],
                    has_switch: bool = True) -> tuple[Bridge, ...]:
    """The bridge headers of every switch/server cut (none when there is no switch)."""
    out: list[Bridge] = []
    for p in prog.pipelines:
        seg = [placement.segment[s] for s in p.stages]
        if 1 not in seg or (all(x == 1 for x in seg) and not has_switch):
            continue
        i = seg.index(1)
        j = len(seg) - seg[::-1].index(1)
        pre, mid, post = p.stages[:i], p.stages[i:j], p.stages[j:]
        valid_in = validity[p.stages[i]]
        valid_out = validity[p.stages[j]] if j < len(p.stages) else validity[f"{p.name}:end"]
        out.append(_layout(len(out) + 1, p, "main", "switch->server", pre, mid + post, prog, valid_in))
        out.append(_layout(len(out) + 1, p, "main", "server->switch", pre + mid, post, prog, valid_out))
    for miss in placement.misses:
        p = prog.pipeline_of(miss.stage)
        i = p.stages.index(miss.stage)
        pre, mid, post = p.stages[:i], p.stages[i : i + 1], p.stages[i + 1 :]
        valid_out = validity[post[0]] if post else validity[f"{p.name}:end"]
        path = f"miss:{miss.table}"
        out.append(_layout(len(out) + 1, p, path, "switch->server", pre, mid + post, prog, validity[miss.stage]))
        out.append(_layout(len(out) + 1, p, path, "server->switch", pre + mid, post, prog, valid_out))
    return tuple(out)
