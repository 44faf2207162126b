"""``plan.json`` as typed data: what a build folder promises its readers (the runtime, ``nfc
run``, the switch model, operators' tools).

A leaf module: the standard library only, so any reader can import it without the
compiler.  ``compiler/plan.py`` writes the file; ``load_plan`` reads it back, checks
``plan_version`` and refuses a plan it does not understand with a message that says what
to do.  Placement is an enum with predicates (``on_switch``, ``on_server``, ``cached``):
nothing tests a placement string by substring.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "PLAN_VERSION",
    "BridgeInfo",
    "Direction",
    "FieldInfo",
    "MauStageUse",
    "MissPathInfo",
    "ObjectInfo",
    "ObjectPlacement",
    "Plan",
    "PlanError",
    "ServerResource",
    "ServerResources",
    "ShardInfo",
    "ShardShare",
    "SolverInfo",
    "StageInfo",
    "SwitchResources",
    "TableInfo",
    "TablePlacement",
    "TargetInfo",
    "load_plan",
    "mask_prefix",
    "plan_from_json",
    "prefix_mask",
    "read_json",
]

# 2: source_sha256, compiler_version, artifacts.placed, bridges[].required
# 3: resources.server.memory_available_bytes is one server's memory (each holds every server table),
#    resources.server.overcommitted
# 4: objects (registers, counters, meters: kind, size, width, placement); tables[].values[].secret
# 5: targets.shard (shard by: the shares, the servers' state), tables[].server.shard_fields,
#    resources.server.servers_carrying
# 6: targets.shard.bucket_bits (the buckets the runtime moves between servers)
# 7: objects[].monotonic, objects[].cells_from (registers a move carries forward)
# 8: tables[].server.share (a table the servers split evenly: over how many, each one's entries and bytes)
PLAN_VERSION = 8


class PlanError(ValueError):
    """A plan.json this nfc cannot read: missing, not JSON, another version, a missing field."""


class TablePlacement(enum.Enum):
    SWITCH = "switch"
    SERVER = "server"
    CACHED = "switch cache + server"  # a switch cache in front of the server's full table
    UNUSED = "unused"  # declared, looked up by no stage

    @property
    def on_switch(self) -> bool:
        return self in (TablePlacement.SWITCH, TablePlacement.CACHED)

    @property
    def on_server(self) -> bool:
        return self in (TablePlacement.SERVER, TablePlacement.CACHED)

    @property
    def cached(self) -> bool:
        return self is TablePlacement.CACHED


class ServerResource(enum.Enum):
    """What the ``check-server-fit`` pass checks (E081); ``--allow-overcommit`` lets a build exceed it."""

    MEMORY = "memory"  # bytes of server tables on each server
    CORES = "cores"  # cores for the deployment's rate, over all servers
    LINK = "link"  # Gbit/s crossing to the servers (their NICs in a server-only build), over all servers


class Direction(enum.Enum):
    TO_SERVER = "switch->server"
    TO_SWITCH = "server->switch"


@dataclass(frozen=True, slots=True)
class FieldInfo:
    name: str
    width: int
    match: str = ""  # key fields: exact, lpm, ternary, range
    offset: int = 0  # bridge fields: bit offset in the bridge header
    secret: bool = False  # a table value marked ``secret`` (a key): the runtime never shows it


@dataclass(frozen=True, slots=True)
class TableInfo:
    name: str
    kind: str  # "table" | "state"
    match: str
    size: int
    placement: TablePlacement
    stage: str | None
    source: str  # file:line
    keys: tuple[FieldInfo, ...]
    values: tuple[FieldInfo, ...]
    switch_entries: int  # entries the switch holds (the cache's size for a cached table)
    sram_blocks: int = 0  # on the switch
    tcam_blocks: int = 0
    mau_stages: tuple[int, int] | None = None  # first, last MAU stage on the switch
    server_bytes: int = 0  # the full table's memory on each server (0: not on a server)
    idle_limits: tuple[tuple[float, float], ...] | None = None  # a cache's (occupancy, seconds), fullest first
    shard_fields: tuple[int, ...] = ()  # the key fields that are the shard keys: each server holds its share
    share_servers: int = 1  # split evenly over this many servers (shard by hash): each holds and is sized for
    share_bytes: int = 0  # its share, of these bytes (0: each server holds the whole table)
    lpm: int | None = field(init=False, default=None)  # the index of the LPM key field, if any

    def __post_init__(self) -> None:  # asked once per entry the runtime writes: computed once
        object.__setattr__(self, "lpm", next((i for i, k in enumerate(self.keys) if k.match == "lpm"), None))

    @property
    def state(self) -> bool:
        """Data-plane state (inserted by the program), not control-plane entries."""
        return self.kind == "state"

    @property
    def classified(self) -> bool:
        """A ternary or range key field: entries have priorities (and the server classifies)."""
        return self.match in ("ternary", "range")

    @property
    def record_key_fields(self) -> int:
        """Numbers in the key part of a server record (docs/control.md): the key fields, then an
        LPM table's prefix length, or a classified table's prefix length / mask / high bound of
        each non-exact field and its priority."""
        if self.classified:
            return len(self.keys) + sum(k.match != "exact" for k in self.keys) + 1
        return len(self.keys) + (self.lpm is not None)

    @property
    def on_switch(self) -> bool:
        return self.placement.on_switch

    @property
    def on_server(self) -> bool:
        return self.placement.on_server

    @property
    def cached(self) -> bool:
        return self.placement.cached


class ObjectPlacement(enum.Enum):
    SWITCH = "switch"
    SERVER = "server"
    BOTH = "switch and server"  # stages on both sides use it: each side keeps its own copy
    UNUSED = "unused"


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """A register, counter or meter: where its stages run, so where the runtime reads and writes it."""

    name: str
    kind: str  # register | counter | meter
    size: int  # indices
    width: int  # a register's bits (counters: 64; meters: 0)
    placement: ObjectPlacement
    source: str
    monotonic: bool = False  # a register whose cells a move between servers carries forward, never back
    cells_from: tuple[tuple[str, str], ...] = ()  # (split table, value field): a moved entry's cell; none: all


@dataclass(frozen=True, slots=True)
class StageInfo:
    name: str
    pipeline: str
    on_server: bool
    segment: str  # "switch" | "server" | "switch (after server)"
    source: str
    server_ns: float | None = None  # server nanoseconds per packet (server stages only)


@dataclass(frozen=True, slots=True)
class BridgeInfo:
    cut_id: int
    pipeline: str
    path: str  # "main" or "miss:<table>"
    direction: Direction
    after_stage: str | None
    before_stage: str | None
    valid_bits: tuple[str, ...]
    required: tuple[str, ...]
    fields: tuple[FieldInfo, ...]
    bits: int

    @property
    def bytes(self) -> int:
        return self.bits // 8


@dataclass(frozen=True, slots=True)
class TargetInfo:
    name: str
    kind: str  # "switch" | "server"
    generator: str
    profile: str
    resources: dict[str, float]


def prefix_mask(length: int, width: int) -> int:
    """The ternary mask of a ``width``-bit prefix of ``length`` bits: how a switch table writes an
    ``.nfp`` lpm key it matches as ternary (the name map's match field says ``"prefix": true``)."""
    return (1 << width) - (1 << (width - length))


def mask_prefix(mask: int, width: int) -> int:
    """The prefix length of a mask ``prefix_mask`` made (its leading ones)."""
    return width - ((~mask) & ((1 << width) - 1)).bit_length()


def bit_string(parts: list[tuple[int, int]]) -> bytes:
    """(value, width) pairs concatenated as one bit string, zero-padded at the end to bytes
    (how P4 hashes and checksums see a field list)."""
    value, bits = 0, 0
    for v, w in parts:
        value, bits = (value << w) | (v & ((1 << w) - 1)), bits + w
    pad = -bits % 8
    return (value << pad).to_bytes((bits + pad) // 8, "big")


def crc16(data: bytes) -> int:
    """CRC-16/ARC (poly 0x8005 reflected, init 0): P4's ``HashAlgorithm.crc16``, the language's
    ``crc16`` and ``shard by hash``'s (defined here, in the plan's leaf module, because the
    runtime computes a split table entry's server from the plan alone)."""
    crc = 0
    for b in data:  # a byte at a time (the runtime hashes every entry of a split table it moves)
        crc = (crc >> 8) ^ _CRC16_TABLE[(crc ^ b) & 0xFF]
    return crc


def _crc16_byte(b: int) -> int:
    crc = b
    for _ in range(8):
        crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


_CRC16_TABLE = tuple(_crc16_byte(b) for b in range(256))


@dataclass(frozen=True, slots=True)
class ShardShare:
    server: int  # index into the deployment's servers
    port: int  # the switch port wired to it
    first: int  # the selector values it takes, first..last
    last: int


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """``shard by``: which server a packet goes to (compiler/shard.py)."""

    by: str  # hash | range
    keys: tuple[str, ...]
    source: str
    selector_bits: int
    shares: tuple[ShardShare, ...]  # one per declared server: the buckets it starts with
    state: tuple[str, ...] = ()  # what the servers keep that packets write: lost with a server
    bucket_bits: int = 0  # the selector's top bits: the bucket the runtime moves between servers

    @property
    def buckets(self) -> int:
        return 1 << self.bucket_bits

    @property
    def ports(self) -> list[int]:
        """The declared servers' switch ports, in order."""
        return [s.port for s in self.shares]

    def bucket_of(self, keys: Sequence[tuple[int, int]]) -> int:
        """The bucket of a packet or entry whose shard keys are ``keys`` ((value, width), in
        the clause's order): the top bits of CRC-16/ARC of their bit string for hash, of the
        key itself for range, as the switch computes it."""
        selector = crc16(bit_string(list(keys))) if self.by == "hash" else keys[0][0] & ((1 << keys[0][1]) - 1)
        return selector >> (self.selector_bits - self.bucket_bits)

    def home(self, bucket: int) -> int:
        """The declared server (index into ``shares``) a bucket goes to unless steered away."""
        first = bucket << (self.selector_bits - self.bucket_bits)
        return next((i for i, s in enumerate(self.shares) if s.first <= first <= s.last), 0)

    def server_of(self, keys: Sequence[tuple[int, int]]) -> int:
        """The declared server of a packet or entry (its bucket's home)."""
        return self.home(self.bucket_of(keys))


@dataclass(frozen=True, slots=True)
class MauStageUse:
    stage: int
    sram_blocks: int
    tcam_blocks: int


@dataclass(frozen=True, slots=True)
class SwitchResources:
    mau_stages_used: int
    per_stage: tuple[MauStageUse, ...]  # one per MAU stage of the chip
    sram_blocks: int
    tcam_blocks: int
    sram_capacity: int
    tcam_capacity: int
    # with the generated program's control code (compiler/stage_estimate.py); 0 in older plans
    mau_stages_with_control: int = 0


@dataclass(frozen=True, slots=True)
class ServerResources:
    """The servers' load at the deployment's rate (``compiler/server_load.py``)."""

    ns_per_packet: dict[str, float]  # pipeline -> server ns per packet of that pipeline
    cycles_per_packet: dict[str, float]
    weighted_ns_per_offered_packet: float
    offered_rate_pps: float
    cores_needed: float
    cores_available: int  # all servers that carry traffic
    memory_bytes: int  # on each server
    memory_available_bytes: int  # one server's
    crossing_share: float  # of the offered packets
    link_gbps_needed: float
    link_gbps_available: float  # all servers that carry traffic
    overcommitted: tuple[ServerResource, ...]  # short, built with --allow-overcommit
    servers_carrying: int = 1  # of the deployment's servers: those traffic reaches (cores, link are theirs)


@dataclass(frozen=True, slots=True)
class MissPathInfo:
    """A switch cache's misses: the server runs ``stage`` on the full table."""

    table: str
    stage: str
    pipeline: str
    cached_entries: int
    hit_rate: float
    server_ns: float  # per missed packet


@dataclass(frozen=True, slots=True)
class SolverInfo:
    engine: str
    objectives: tuple[str, ...]  # lexicographic, first first
    optimal: bool
    # How the placement was found and how good it is known to be (docs/partitioner.md, Optimality);
    # absent from plans written before them.
    method: str = ""  # "exact" | "scalable"
    time_limit_s: float | None = None  # --place-timeout
    stopped_at_time_limit: bool = False
    objective_values: tuple[float, ...] = ()  # per objective: server ns per offered packet, expected hits ...
    objective_bounds: tuple[float | None, ...] = ()  # the best proven bound on each (None: unknown)
    gap: float | None = None  # on gap_objective: |value - bound| / max(|value|, |bound|); None: unknown
    gap_objective: str | None = None  # the first objective not proved optimal (None: all are)


@dataclass(frozen=True, slots=True)
class Plan:
    plan_version: int
    source: str
    source_sha256: str
    compiler_version: str
    target: str  # the --target label
    switch: TargetInfo | None
    server: TargetInfo | None
    servers: int
    server_ports: tuple[int, ...]
    stages: tuple[StageInfo, ...]
    tables: tuple[TableInfo, ...]
    bridges: tuple[BridgeInfo, ...]
    drop_reasons: tuple[str, ...]
    artifacts: dict[str, str]  # name -> path relative to the build folder
    generated: dict[str, str]
    switch_resources: SwitchResources | None = None
    server_resources: ServerResources | None = None
    cache_miss_paths: tuple[MissPathInfo, ...] = ()
    solver: SolverInfo | None = None
    objects: tuple[ObjectInfo, ...] = ()
    shard: ShardInfo | None = None  # with a switch and servers: the steering

    @property
    def server_count(self) -> int:
        """Server programs that carry traffic: one per share, else one."""
        return len(self.shard.shares) if self.shard is not None else 1

    def table(self, name: str) -> TableInfo:
        return next(t for t in self.tables if t.name == name)

    def object(self, name: str) -> ObjectInfo | None:
        return next((o for o in self.objects if o.name == name), None)

    def path(self, out: Path, artifact: str) -> Path:
        """Where ``artifact`` (a key of ``generated`` or ``artifacts``) is in build folder ``out``."""
        rel = self.generated.get(artifact) or self.artifacts.get(artifact)
        if rel is None:
            raise PlanError(f"{out}: the build has no {artifact} (built for {self.target})")
        return out / rel


def _target(t: dict[str, Any] | None) -> TargetInfo | None:
    if t is None:
        return None
    return TargetInfo(t["name"], t["kind"], t["generator"], t.get("profile", ""),
                      {k: float(v) for k, v in t.get("resources", {}).items()})


def _shard(s: dict[str, Any] | None) -> ShardInfo | None:
    if s is None:
        return None
    return ShardInfo(s["by"], tuple(s["keys"]), s["source"], int(s["selector_bits"]),
                     tuple(ShardShare(int(x["server"]), int(x["port"]), int(x["first"]), int(x["last"]))
                           for x in s["shares"]), tuple(s.get("state", ())), int(s["bucket_bits"]))


def _table(t: dict[str, Any]) -> TableInfo:
    sw, mau = t.get("switch") or {}, (t.get("switch") or {}).get("mau_stages")
    share = (t.get("server") or {}).get("share") or {}
    return TableInfo(t["name"], t["kind"], t["match"], int(t["size"]), TablePlacement(t["placement"]), t.get("stage"),
                     t["source"], tuple(FieldInfo(k["name"], int(k["width"]), k["match"]) for k in t["keys"]),
                     tuple(FieldInfo(v["name"], int(v["width"]), secret=bool(v.get("secret"))) for v in t["values"]),
                     int(sw.get("entries", 0)), int(sw.get("sram_blocks", 0)), int(sw.get("tcam_blocks", 0)),
                     (int(mau[0]), int(mau[1])) if mau else None, int((t.get("server") or {}).get("memory_bytes", 0)),
                     tuple((float(x["occupancy"]), float(x["seconds"])) for x in t["idle_limits"])
                     if "idle_limits" in t else None,
                     tuple(int(i) for i in (t.get("server") or {}).get("shard_fields", ())),
                     int(share.get("servers", 1)), int(share.get("memory_bytes", 0)))


def _stage(s: dict[str, Any]) -> StageInfo:
    ns = s.get("server_ns")
    return StageInfo(s["name"], s["pipeline"], s["placement"] == "server", s["segment"], s["source"],
                     float(ns) if ns is not None else None)


def _switch_resources(r: dict[str, Any] | None) -> SwitchResources | None:
    if r is None:
        return None
    return SwitchResources(int(r["mau_stages_used"]),
                           tuple(MauStageUse(int(u["stage"]), int(u["sram_blocks"]), int(u["tcam_blocks"]))
                                 for u in r["per_stage"]),
                           int(r["sram_blocks"]), int(r["tcam_blocks"]), int(r["sram_capacity"]),
                           int(r["tcam_capacity"]), int(r.get("mau_stages_with_control", 0)))


def _server_resources(r: dict[str, Any] | None) -> ServerResources | None:
    if r is None:
        return None
    return ServerResources(
        {k: float(v) for k, v in r["ns_per_packet"].items()}, {k: float(v) for k, v in r["cycles_per_packet"].items()},
        float(r["weighted_ns_per_offered_packet"]), float(r["offered_rate_pps"]), float(r["cores_needed"]),
        int(r["cores_available"]), int(r["memory_bytes"]), int(r["memory_available_bytes"]),
        float(r["crossing_share"]), float(r["link_gbps_needed"]), float(r["link_gbps_available"]),
        tuple(ServerResource(x) for x in r.get("overcommitted", ())), int(r.get("servers_carrying", 1)))


def _miss_path(x: dict[str, Any]) -> MissPathInfo:
    return MissPathInfo(x["table"], x["stage"], x["pipeline"], int(x["cached_entries"]), float(x["hit_rate"]),
                        float(x["server_ns"]))


def _solver(s: dict[str, Any] | None) -> SolverInfo | None:
    if not s:
        return None
    limit, gap = s.get("time_limit_s"), s.get("gap")
    return SolverInfo(s["engine"], tuple(s["objectives"]), bool(s["optimal"]), s.get("method", ""),
                      None if limit is None else float(limit), bool(s.get("stopped_at_time_limit", False)),
                      tuple(float(v) for v in s.get("objective_values", ())),
                      tuple(None if b is None else float(b) for b in s.get("objective_bounds", ())),
                      None if gap is None else float(gap), s.get("gap_objective"))


def _bridge(b: dict[str, Any]) -> BridgeInfo:
    return BridgeInfo(int(b["cut_id"]), b["pipeline"], b["path"], Direction(b["direction"]), b.get("after_stage"),
                      b.get("before_stage"), tuple(b["valid_bits"]), tuple(b.get("required", ())),
                      tuple(FieldInfo(f["name"], int(f["width"]), offset=int(f["offset"])) for f in b["fields"]),
                      int(b["bits"]))


def plan_from_json(data: Any, where: str = "plan.json") -> Plan:
    if not isinstance(data, dict):
        raise PlanError(f"{where}: not a plan (a JSON object is expected)")
    version = data.get("plan_version")
    if version != PLAN_VERSION:
        raise PlanError(f"{where}: plan version {version}, this nfc reads version {PLAN_VERSION}: rebuild with "
                        "this nfc")
    try:
        targets = data["targets"]
        return Plan(
            plan_version=version, source=data["source"], source_sha256=data.get("source_sha256", ""),
            compiler_version=data.get("compiler_version", ""), target=data["target"],
            switch=_target(targets.get("switch")), server=_target(targets.get("server")),
            servers=int(targets.get("servers", 1)), server_ports=tuple(targets.get("server_ports", ())),
            shard=_shard(targets.get("shard")),
            stages=tuple(_stage(s) for s in data["stages"]),
            tables=tuple(_table(t) for t in data["tables"]),
            bridges=tuple(_bridge(b) for b in data["bridges"]),
            drop_reasons=tuple(data["drop_reasons"]),
            artifacts=dict(data["artifacts"]), generated=dict(data["generated"]),
            switch_resources=_switch_resources(data.get("resources", {}).get("switch")),
            server_resources=_server_resources(data.get("resources", {}).get("server")),
            cache_miss_paths=tuple(_miss_path(x) for x in data.get("cache_miss_paths", ())),
            solver=_solver(data.get("solver")),
            objects=tuple(ObjectInfo(o["name"], o["kind"], int(o["size"]), int(o["width"]),
                                     ObjectPlacement(o["placement"]), o["source"], bool(o.get("monotonic")),
                                     tuple((str(t), str(f)) for t, f in o.get("cells_from", ())))
                          for o in data["objects"]))
    except (KeyError, TypeError, ValueError) as e:
        raise PlanError(f"{where}: malformed plan ({type(e).__name__}: {e})") from e


def read_json(path: Path, missing: str, error: type[ValueError]) -> Any:
    """The JSON document at ``path``; ``error`` saying ``missing`` (or that it is not JSON) if not."""
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise error(f"{missing} ({path}: {e.strerror})") from e
    except json.JSONDecodeError as e:
        raise error(f"{path}: not JSON ({e})") from e


def load_plan(out: Path) -> Plan:
    """The plan of build folder ``out`` (PlanError when there is none this nfc can read)."""
    path = out / "plan.json"
    return plan_from_json(read_json(path, f"{out}: not a build folder (no plan.json)", PlanError), str(path))
