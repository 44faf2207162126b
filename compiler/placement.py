"""The data types of a placed program: where each stage runs (``Segment``), the switch
resources each unit takes, the switch caches and their miss paths (``Placement``), and the
bridge headers that carry a packet's state across each cut (``Bridge``).

The partitioner (``compiler/partition.py``) makes the ``Placement``, the ``bridge`` pass
(``compiler/passes/bridge.py``) the bridges; generators and executors read both.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

from compiler.manifest import Direction

__all__ = ["EGRESS", "EGRESS_SET", "OBJECTIVES", "Bridge", "BridgeField", "Direction", "MissPath", "Optimality",
           "Placement", "Segment", "UnitPlacement", "find_bridge"]

EGRESS = "egress_port"  # the bridge field that carries an egress port chosen before the cut
EGRESS_SET = "egress_set"  # beside it, 1 bit: whether a port was chosen (0 is a port, not "none")


class Segment(enum.IntEnum):
    """Where a stage runs.  A pipeline's stages go through the segments in this order."""

    SWITCH = 0  # on the switch, before any server stage
    SERVER = 1
    SWITCH_AFTER = 2  # on the switch, after the server stages

    @property
    def label(self) -> str:
        return {Segment.SWITCH: "switch", Segment.SERVER: "server",
                Segment.SWITCH_AFTER: "switch (after server)"}[self]

    @property
    def on_switch(self) -> bool:
        return self is not Segment.SERVER


@dataclass(frozen=True, slots=True)
class UnitPlacement:
    name: str
    stage: str
    tables: tuple[str, ...]
    first: int
    last: int
    sram: tuple[int, ...]  # blocks per MAU stage first..last
    tcam: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MissPath:
    """A switch-cached table: a lookup miss on the switch sends the packet to the server,
    which runs the table's stage against the full table and returns it to the switch."""

    table: str
    stage: str
    pipeline: str
    cached_entries: int
    hit_rate: float
    server_ns: float  # per packet that misses


# The partitioner's objectives, lexicographic (first first), as plan.json names them.
OBJECTIVES = ("min server ns/packet", "max expected cache hits", "max cached entries", "min MAU stages")
_MINIMISED = (True, False, False, True)
# Objective values in the solver's integer units -> the units a user reads: server ns per offered
# packet (the model counts 1/100 ns x traffic percent), expected hits per offered packet (x 1e9).
_UNIT = (100.0, 1e9, 1.0, 1.0)


@dataclass(frozen=True, slots=True)
class Optimality:
    """How good a placement is known to be: its value of each objective (in ``OBJECTIVES``'
    order, the solver's integer units) against the best proven bound on it.

    Lexicographic: the first objective whose bound is unknown or differs from the value is the
    *open* one; the ones before it are optimal, the ones after it do not matter yet.  The gap
    is |value - bound| / max(|value|, |bound|) on the open objective: 0 when proved optimal,
    None when no bound is known."""

    values: tuple[int, int, int, int]
    bounds: tuple[int | None, int | None, int | None, int | None]
    method: str  # "exact": one Z3 model of the whole problem; "scalable": greedy + relaxation + layout model
    time_limit_s: float  # --place-timeout
    stopped_at_limit: bool  # the time limit cut the search short

    @property
    def proved(self) -> bool:
        return self.open_objective is None

    @property
    def open_objective(self) -> int | None:
        """Index of the first objective not proved optimal (None: all are)."""
        for i, (v, b) in enumerate(zip(self.values, self.bounds, strict=True)):
            if b is None or (v > b if _MINIMISED[i] else v < b):
                return i
        return None

    @property
    def gap(self) -> float | None:
        i = self.open_objective
        if i is None:
            return 0.0
        v, b = self.values[i], self.bounds[i]
        if b is None:
            return None
        return abs(v - b) / max(abs(v), abs(b))

    def shown(self, i: int, x: int | None) -> float | int | None:
        """Objective ``i``'s value (or bound) ``x`` in the unit a user reads (entries and MAU stages
        are counts)."""
        if x is None:
            return None
        return x if _UNIT[i] == 1 else round(x / _UNIT[i], 9)

    def to_json(self) -> dict[str, Any]:
        """As plan.json's ``solver`` has it, beside ``optimal`` (compiler/manifest.py ``SolverInfo``)."""
        i, gap = self.open_objective, self.gap
        return {"method": self.method, "time_limit_s": self.time_limit_s,
                "stopped_at_time_limit": self.stopped_at_limit,
                "objective_values": [self.shown(k, v) for k, v in enumerate(self.values)],
                "objective_bounds": [self.shown(k, b) for k, b in enumerate(self.bounds)],
                "gap": None if gap is None else float(f"{gap:.3g}"),
                "gap_objective": None if i is None else OBJECTIVES[i]}


@dataclass(frozen=True, slots=True)
class Placement:
    segment: dict[str, Segment]  # stage -> where it runs
    units: tuple[UnitPlacement, ...]
    cache_entries: dict[str, int]  # cached table -> entries on the switch
    server_ns: dict[str, float]  # pipeline -> server ns per packet of that pipeline
    server_ns_per_packet: float  # weighted over pipelines (objective 1)
    cores_needed: float
    server_memory_bytes: int
    mau_stages_used: int
    optimal: bool
    solve_seconds: float
    misses: tuple[MissPath, ...] = ()
    crossing_share: float = 0.0  # share of offered packets that visit a server
    optimality: Optimality | None = None  # the objectives against their bounds (None: not recorded)

    def link_gbps(self, rate_pps: float, mean_bytes: float) -> float:
        """Switch→server traffic (the same flows back) at ``rate_pps`` offered."""
        return rate_pps * self.crossing_share * mean_bytes * 8 / 1e9

    def where(self, stage: str) -> str:
        return "switch" if self.segment[stage].on_switch else "server"

    def stages_in(self, stages: tuple[str, ...], segment: Segment) -> tuple[str, ...]:
        """Those of ``stages`` (a pipeline's, in order) that run in ``segment``."""
        return tuple(s for s in stages if self.segment[s] is segment)

    def server_part(self, stages: tuple[str, ...], b: Bridge) -> tuple[str, ...]:
        """What the server runs of a pipeline with ``stages`` for a packet that came over
        switch→server bridge ``b``: the cached table's stage on a miss path, else its server stages."""
        if b.miss is not None:
            return (b.before_stage,) if b.before_stage else ()
        return self.stages_in(stages, Segment.SERVER)


@dataclass(frozen=True, slots=True)
class BridgeField:
    name: str  # "meta.customer", "std.ingress_port", "egress_port"
    width: int
    offset: int  # bit offset from the start of the bridge header


@dataclass(frozen=True, slots=True)
class Bridge:
    cut_id: int
    pipeline: str
    miss: str | None  # the switch-cached table whose miss path this is; None: the pipeline's main cut
    direction: Direction
    after_stage: str | None
    before_stage: str | None
    valid_bits: tuple[str, ...]  # instance names, bit i = instance i
    required: tuple[str, ...]  # the valid_bits that must be set (the header is valid on every path)
    fields: tuple[BridgeField, ...]
    bits: int

    @property
    def bytes(self) -> int:
        return self.bits // 8

    def pads(self) -> tuple[tuple[int, int], ...]:
        """The (bit offset, width) of each run of padding after the validity bits, in order:
        the bits no field holds, written as zeros."""
        out: list[tuple[int, int]] = []
        at = 8 + len(self.valid_bits)
        for f in sorted(self.fields, key=lambda f: f.offset):
            if f.offset > at:
                out.append((at, f.offset - at))
            at = f.offset + f.width
        if self.bits > at:
            out.append((at, self.bits - at))
        return tuple(out)

    @property
    def path(self) -> str:
        """As plan.json and the name map write it: ``main`` or ``miss:<table>``."""
        return "main" if self.miss is None else f"miss:{self.miss}"

    def to_json(self) -> dict[str, Any]:
        """As plan.json has it (compiler/manifest.py ``BridgeInfo``)."""
        fields = {k: v for k, v in asdict(self).items() if k != "miss"}
        return fields | {"path": self.path, "direction": self.direction.value, "bytes": self.bytes}


def find_bridge(bridges: tuple[Bridge, ...], pipeline: str, direction: Direction,
                miss: str | None = None) -> Bridge | None:
    """The bridge of ``pipeline``'s main cut (or of ``miss``'s miss path) in ``direction``."""
    return next((b for b in bridges if b.pipeline == pipeline and b.miss == miss and b.direction is direction), None)
