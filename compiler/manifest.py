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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PLAN_VERSION", "BridgeInfo", "Direction", "FieldInfo", "Plan", "PlanError", "StageInfo", "TableInfo",
           "TablePlacement", "TargetInfo", "load_plan", "plan_from_json", "read_json"]

PLAN_VERSION = 2  # 2: source_sha256, compiler_version, artifacts.placed, bridges[].required


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


class Direction(enum.Enum):
    TO_SERVER = "switch->server"
    TO_SWITCH = "server->switch"


@dataclass(frozen=True, slots=True)
class FieldInfo:
    name: str
    width: int
    match: str = ""  # key fields: exact, lpm, ternary, range
    offset: int = 0  # bridge fields: bit offset in the bridge header


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

    @property
    def state(self) -> bool:
        """Data-plane state (inserted by the program), not control-plane entries."""
        return self.kind == "state"

    @property
    def on_switch(self) -> bool:
        return self.placement.on_switch

    @property
    def on_server(self) -> bool:
        return self.placement.on_server

    @property
    def cached(self) -> bool:
        return self.placement.cached

    @property
    def lpm(self) -> int | None:
        """The index of the LPM key field, if any."""
        return next((i for i, k in enumerate(self.keys) if k.match == "lpm"), None)


@dataclass(frozen=True, slots=True)
class StageInfo:
    name: str
    pipeline: str
    on_server: bool
    segment: str  # "switch" | "server" | "switch (after server)"
    source: str


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


@dataclass(frozen=True, slots=True)
class TargetInfo:
    name: str
    kind: str  # "switch" | "server"
    generator: str
    profile: str
    resources: dict[str, float]


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
    raw: dict[str, Any]  # the whole document (resources, solver, cache_miss_paths), for reports

    def table(self, name: str) -> TableInfo:
        return next(t for t in self.tables if t.name == name)

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


def _table(t: dict[str, Any]) -> TableInfo:
    return TableInfo(t["name"], t["kind"], t["match"], int(t["size"]), TablePlacement(t["placement"]), t.get("stage"),
                     t["source"], tuple(FieldInfo(k["name"], int(k["width"]), k["match"]) for k in t["keys"]),
                     tuple(FieldInfo(v["name"], int(v["width"])) for v in t["values"]),
                     int(t.get("switch", {}).get("entries", 0)))


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
            stages=tuple(StageInfo(s["name"], s["pipeline"], s["placement"] == "server", s["segment"], s["source"])
                         for s in data["stages"]),
            tables=tuple(_table(t) for t in data["tables"]),
            bridges=tuple(_bridge(b) for b in data["bridges"]),
            drop_reasons=tuple(data["drop_reasons"]),
            artifacts=dict(data["artifacts"]), generated=dict(data["generated"]), raw=data)
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
