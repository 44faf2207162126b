"""The symbol tables of a checked program and the facts about names later stages share.

``Symbols`` holds every top-level declaration by kind; ``CheckedProgram`` adds the type of
every expression.  Also here: the built-in names, the property units, and the scope a
statement is checked in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lang import ast
from lang.types import Type

__all__ = [
    "BUILTINS",
    "COUNTER_METHODS",
    "HASHES",
    "MATCH_KINDS",
    "PIPELINE_PROPS",
    "SHARD_METHODS",
    "STD_FIELDS",
    "TABLE_PROPS",
    "CheckedProgram",
    "Scope",
    "Symbols",
    "is_field_ref",
    "is_hit_ref",
    "key_field_name",
    "quantity_count",
    "quantity_fraction",
    "quantity_seconds",
]

STD_FIELDS: dict[str, int] = {"ingress_port": 16, "timestamp": 48, "packet_length": 16}
MATCH_KINDS = ("exact", "lpm", "ternary", "range")
HASHES = {"crc16": 16, "crc32": 32}
BUILTINS = ("valid", "checksum_ok", "csum_update", *HASHES)
TABLE_PROPS = {"size", "active", "updates", "traffic", "skew", "timeout", "pin", "cache", "refresh", "holds_ports",
               "idle_limits"}
PIPELINE_PROPS = {"ports", "parser", "stages", "traffic"}
SHARD_METHODS = ("hash", "range")  # a deployment's shard by: how its key picks a server
COUNTER_METHODS = {"counter": ("count",), "meter": ("execute",)}


@dataclass
class Symbols:
    """Every top-level name of the program, by kind, in declaration order."""

    headers: dict[str, ast.HeaderDecl] = field(default_factory=dict)
    instances: dict[str, ast.Instance] = field(default_factory=dict)
    metadata: dict[str, ast.FieldDecl] = field(default_factory=dict)
    consts: dict[str, ast.ConstDecl] = field(default_factory=dict)
    parsers: dict[str, ast.ParserDecl] = field(default_factory=dict)
    tables: dict[str, ast.TableDecl] = field(default_factory=dict)
    registers: dict[str, ast.RegisterDecl] = field(default_factory=dict)
    counters: dict[str, ast.CounterDecl] = field(default_factory=dict)
    externs: dict[str, ast.ExternDecl] = field(default_factory=dict)
    stages: dict[str, ast.StageDecl] = field(default_factory=dict)
    pipelines: dict[str, ast.PipelineDecl] = field(default_factory=dict)
    ports: dict[str, ast.PortsDecl] = field(default_factory=dict)
    targets: dict[str, ast.TargetDecl] = field(default_factory=dict)
    deployments: dict[str, ast.DeploymentDecl] = field(default_factory=dict)

    def kind_of(self, name: str) -> str | None:
        for kind in ("headers", "instances", "consts", "parsers", "tables", "registers", "counters",
                     "externs", "stages", "pipelines", "ports", "targets", "deployments"):
            if name in getattr(self, kind):
                return kind
        return None

    def header_of(self, instance: str) -> ast.HeaderDecl | None:
        inst = self.instances.get(instance)
        return self.headers.get(inst.header_type) if inst else None


@dataclass
class CheckedProgram:
    """A program that passed checking: its symbols and the type of every expression."""

    main_file: str
    symbols: Symbols
    types: dict[int, Type]
    const_values: dict[str, int]
    hit_tables: dict[int, str]  # id(Lookup) -> table, for convenience of later passes

    def type_of(self, e: ast.Expr) -> Type:
        return self.types[id(e)]


@dataclass
class Scope:
    locals: dict[str, Type] = field(default_factory=dict)
    hits: dict[str, str] = field(default_factory=dict)  # hit variable -> table
    in_parser: bool = False

    def child(self) -> Scope:
        return Scope(dict(self.locals), dict(self.hits), self.in_parser)


def is_field_ref(e: ast.Expr) -> bool:
    return isinstance(e, ast.Member) and isinstance(e.base, ast.Name)


def is_hit_ref(e: ast.Member, scope: Scope) -> bool:
    return isinstance(e.base, ast.Name) and e.base.ident in scope.hits


def key_field_name(e: ast.Expr) -> str:
    """The control-plane name of a key field: ``ipv4.dst`` → ``ipv4_dst``."""
    if isinstance(e, ast.Member) and isinstance(e.base, ast.Name):
        return f"{e.base.ident}_{e.field}"
    return "key"


# ---- property values ------------------------------------------------------------------

_COUNT_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def quantity_count(v: ast.PropValue) -> int | None:
    """A count: ``4096``, ``16M`` (decimal), ``64Ki`` (binary)."""
    if isinstance(v, ast.IntLit) and v.width is None:
        return v.value
    if isinstance(v, ast.Quantity) and v.unit in _COUNT_UNITS and math.isfinite(v.number):
        return int(v.number * _COUNT_UNITS[v.unit])
    return None


def quantity_seconds(v: ast.PropValue) -> float | None:
    if isinstance(v, ast.Quantity) and v.unit in _TIME_UNITS:
        return v.number * _TIME_UNITS[v.unit]
    return None


def quantity_fraction(v: ast.PropValue) -> float | None:
    if isinstance(v, ast.Quantity) and v.unit == "%":
        return v.number / 100
    if isinstance(v, ast.IntLit) and v.width is None and v.value in (0, 1):
        return float(v.value)
    return None
