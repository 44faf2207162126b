"""What a placement asks of the servers: memory, cores at the offered rate, link bandwidth.

Computed once from the partitioner's figures (``Placement.server_memory_bytes``,
``cores_needed``, ``crossing_share``) and the server profile, by the ``check-server-fit``
pass, which keeps it in the ``Compilation``; the plan's ``resources.server`` section and
the report read it from there.  Each resource also lists what uses it (tables, stages,
pipelines, cache misses), largest first, so a diagnostic can name the culprit.

The model (docs/partitioner.md, "Server resources"):

* memory is per server: every server holds every server table in full, except a table the
  servers split (``spread``: its share), so the sum of what each holds must fit one server's
  memory;
* cores and link bandwidth are shared: the offered ``rate`` spreads over all servers, so
  the need is compared with cores × servers and link × servers;
* link: the packets that visit a server cross the link both ways at the profile's
  ``mean_packet_bytes`` (full duplex: the need is one direction).  In a build with a
  switch that is the share of the traffic the partitioner sends to the servers; in a
  server-only build (``--target dpdk``) every packet arrives on the servers' own NICs,
  and ``link`` is their NIC bandwidth.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from compiler import ir
from compiler.analysis import stage_units
from compiler.manifest import ServerResource
from compiler.partition import stage_cost_ns
from compiler.place_problem import crossing_ns
from compiler.place_problem import server_stages as placed_on_server
from compiler.placement import Placement, Segment
from compiler.profiles import TargetSet, TargetSpec
from compiler.resources import server_bytes, server_share_bytes
from lang.diagnostics import Span

__all__ = ["Margin", "Part", "PartKind", "ServerLoad", "fmt_bytes", "server_load", "server_tables", "spread"]


class PartKind(enum.Enum):
    TABLE = "table"
    STAGE = "stage"
    PIPELINE = "pipeline"
    IO = "packet I/O of pipeline"
    MISSES = "misses of the switch cache of table"


@dataclass(frozen=True, slots=True)
class Part:
    """One user of a resource: a table's bytes, a stage's cores, a pipeline's Gbit/s."""

    kind: PartKind
    name: str  # of the table, stage or pipeline
    span: Span
    amount: float

    @property
    def what(self) -> str:
        return f"{self.kind.value} '{self.name}'"


@dataclass(frozen=True, slots=True)
class Margin:
    """One server resource: needed against available (``unit``), and who needs it."""

    resource: ServerResource
    needed: float
    available: float
    unit: str  # "bytes" | "cores" | "Gbit/s"
    parts: tuple[Part, ...]  # largest first; they add up to ``needed``

    @property
    def fits(self) -> bool:
        return self.needed <= self.available

    @property
    def headroom(self) -> float:
        """Available minus needed (negative: over-committed)."""
        return self.available - self.needed


@dataclass(frozen=True, slots=True)
class ServerLoad:
    server: TargetSpec
    servers: int  # those that carry traffic (TargetSet.carrying)
    rate_pps: float
    mean_packet_bytes: float
    behind_switch: bool  # False: a server-only build, ``link`` is the servers' NICs
    memory: Margin  # bytes on each server
    cores: Margin  # cores at ``rate_pps``, all servers that carry traffic (TargetSet.carrying)
    link: Margin  # Gbit/s one way, all servers that carry traffic
    unsharded: bool = False  # behind a switch without shard by: one server carries it all
    sharded: dict[str, tuple[int, ...]] = field(default_factory=dict)  # compiler/shard.py sharded_tables
    spread: dict[str, int] = field(default_factory=dict)  # of those, over how many servers evenly (``spread``)


    @property
    def margins(self) -> tuple[Margin, Margin, Margin]:
        return self.memory, self.cores, self.link


def server_tables(prog: ir.Program, pl: Placement) -> list[ir.Table]:
    """The tables the servers hold (in full, or a split one's share): those of server stages and
    every switch-cached table."""
    on_server = {t for p in prog.pipelines for s in p.stages if pl.segment[s] is Segment.SERVER
                 for u in stage_units(prog, prog.stages[s]) for t in u.tables}
    return [t for t in prog.tables.values() if t.hints.cache or t.name in on_server]


def server_load(prog: ir.Program, pl: Placement, ts: TargetSet,
                sharded: dict[str, tuple[int, ...]] | None = None) -> ServerLoad | None:
    """The three margins of a build with servers (None without); a table of ``sharded``
    (compiler/shard.py) takes its share of each server's memory, the rest all of it."""
    srv = ts.server
    if srv is None:
        return None
    mean_bytes = srv.cost.get("mean_packet_bytes", 512)
    sharded = sharded or {}

    over = spread(prog, ts, sharded)

    def held(t: ir.Table) -> int:  # bytes of t on each server
        return server_share_bytes(t, srv, over.get(t.name, 1))

    saved = sum(server_bytes(t, srv) - held(t) for t in server_tables(prog, pl))
    memory = Margin(ServerResource.MEMORY, pl.server_memory_bytes - saved,
                    int(srv.resources.get("memory_gib", 0) * 2**30), "bytes",
                    _largest(Part(PartKind.TABLE, t.name, t.span, held(t)) for t in server_tables(prog, pl)))
    cores = Margin(ServerResource.CORES, pl.cores_needed, srv.resources.get("cores", 1) * ts.carrying, "cores",
                   _largest(_core_parts(prog, pl, srv, ts.rate_pps)))
    link = Margin(ServerResource.LINK, pl.link_gbps(ts.rate_pps, mean_bytes),
                  srv.resources.get("link_gbps", 0) * ts.carrying, "Gbit/s",
                  _largest(_link_parts(prog, pl, ts.rate_pps * mean_bytes * 8 / 1e9)))
    return ServerLoad(srv, ts.carrying, ts.rate_pps, mean_bytes, ts.switch is not None, memory, cores, link,
                      unsharded=ts.switch is not None and not ts.sharded, sharded=sharded, spread=over)


def spread(prog: ir.Program, ts: TargetSet, sharded: Iterable[str]) -> dict[str, int]:
    """Over how many servers each table of ``sharded`` (compiler/shard.py) spreads its entries
    evenly: every server that carries traffic when a hash picks a packet's server; 1 when a
    range does (one server may be given them all).  The memory model prices a server's share of
    such a table (``server_share_bytes``) and the server generator sizes the table for it."""
    even = prog.deployment is not None and prog.deployment.shard is not None and prog.deployment.shard.method == "hash"
    return {t: ts.carrying if even else 1 for t in sharded}


def _largest(parts: Iterable[Part]) -> tuple[Part, ...]:
    return tuple(sorted((p for p in parts if p.amount > 0), key=lambda p: -p.amount))


def _core_parts(prog: ir.Program, pl: Placement, srv: TargetSpec, rate_pps: float) -> list[Part]:
    """Cores per contributor: a pipeline's packet I/O, bridge and parse (``crossing_ns``), each server
    stage, each cache's misses (the terms of ``Placement.server_ns_per_packet``, times the rate)."""
    per_ns = rate_pps / 1e9  # cores one nanosecond per offered packet costs
    out: list[Part] = []
    on_server = placed_on_server(pl.segment)
    for p in prog.pipelines:
        server_stages = [prog.stages[s] for s in p.stages if s in on_server]
        if server_stages:
            out.append(Part(PartKind.IO, p.name, p.span, p.traffic * crossing_ns(prog, p, srv) * per_ns))
        out += [Part(PartKind.STAGE, s.name, s.span, p.traffic * stage_cost_ns(prog, s, srv, on_server) * per_ns)
                for s in server_stages]
    for x in pl.misses:
        share = (1 - x.hit_rate) * prog.pipeline_of(x.stage).traffic
        out.append(Part(PartKind.MISSES, x.table, prog.tables[x.table].span, share * x.server_ns * per_ns))
    return out


def _link_parts(prog: ir.Program, pl: Placement, gbps_all: float) -> list[Part]:
    """Gbit/s per contributor: each pipeline that visits a server, each cache's misses
    (the terms of ``Placement.crossing_share``, times the offered Gbit/s)."""
    out = [Part(PartKind.PIPELINE, p.name, p.span, p.traffic * gbps_all) for p in prog.pipelines
           if pl.server_ns.get(p.name, 0) > 0]
    for x in pl.misses:
        share = (1 - x.hit_rate) * prog.pipeline_of(x.stage).traffic
        out.append(Part(PartKind.MISSES, x.table, prog.tables[x.table].span, share * gbps_all))
    return out


def fmt_bytes(n: int) -> str:
    """``n`` bytes for a reader: 165.6 GiB, 525.6 MiB, 12 B."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
