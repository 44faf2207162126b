"""Targets are data: capability specs read from ``stdlib/targets/*.toml``.

A source file may declare its own target derived from a profile
(``target srv = dpdk_server { cores = 18; clock = 2.3GHz; }``) and a deployment (which
switch, which servers, the server-facing switch ports, the offered packet rate).
``--target`` picks from these: ``tofino+dpdk`` (the deployment's switch and servers),
``tofino`` or ``dpdk`` alone, or profile / declared target names joined by ``+``.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from compiler import ir
from lang.diagnostics import Diagnostics, Span
from lang.loader import STDLIB

__all__ = ["PROFILE_DIR", "TargetSet", "TargetSpec", "load_profiles", "resolve_targets"]

PROFILE_DIR = STDLIB / "targets"
# Source property -> (resource key, unit conversions accepted)
_UNIT_PROPS: dict[str, tuple[str, dict[str, float]]] = {
    "clock": ("clock_ghz", {"GHz": 1.0, "MHz": 1e-3, "": 1.0}),
    "memory": ("memory_gib", {"GiB": 1.0, "MiB": 1 / 1024, "TiB": 1024.0, "": 1.0}),
    "link": ("link_gbps", {"Gbps": 1.0, "Mbps": 1e-3, "": 1.0}),
}


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """One target's capabilities, resources and cost model."""

    name: str
    kind: str  # "switch" | "server"
    generator: str
    description: str
    match_kinds: tuple[str, ...]
    max_key_bits: int
    ops: frozenset[str]
    resources: dict[str, float] = field(hash=False)
    cost: dict[str, float] = field(hash=False)
    source: str = ""

    def res(self, key: str) -> float:
        return self.resources[key]


@dataclass(frozen=True, slots=True)
class TargetSet:
    """The targets one build may place stages on."""

    switch: TargetSpec | None
    server: TargetSpec | None
    n_servers: int = 1
    rate_pps: float = 0.0
    server_ports: tuple[int, ...] = ()
    label: str = ""

    def all(self) -> tuple[TargetSpec, ...]:
        return tuple(t for t in (self.switch, self.server) if t is not None)


def _spec(data: dict[str, Any], source: str) -> TargetSpec:
    t = data["target"]
    return TargetSpec(
        name=t["name"],
        kind=t["kind"],
        generator=t["generator"],
        description=t.get("description", ""),
        match_kinds=tuple(data["match"]["kinds"]),
        max_key_bits=int(data["match"]["max_key_bits"]),
        ops=frozenset(data["capabilities"]["ops"]),
        resources={k: float(v) for k, v in data.get("resources", {}).items()},
        cost={k: float(v) for k, v in data.get("cost", {}).items()},
        source=source,
    )


def load_profiles(folder: Path = PROFILE_DIR) -> dict[str, TargetSpec]:
    """Every target profile shipped in ``stdlib/targets``."""
    out: dict[str, TargetSpec] = {}
    for path in sorted(folder.glob("*.toml")):
        with path.open("rb") as f:
            spec = _spec(tomllib.load(f), f"stdlib/targets/{path.name}")
        out[spec.name] = spec
    return out


def _derive(base: TargetSpec, decl: ir.TargetDecl, diags: Diagnostics) -> TargetSpec:
    resources = dict(base.resources)
    ops = set(base.ops)
    kinds = base.match_kinds
    for p in decl.props:
        if p.name == "ops":
            ops = set(p.names)
        elif p.name == "kinds":
            kinds = p.names
        elif p.name in _UNIT_PROPS:
            key, units = _UNIT_PROPS[p.name]
            if p.number is None or p.unit not in units:
                shown = ", ".join(u for u in units if u)
                diags.error("E060", f"{p.name} must be a number with one of the units {shown}", p.span)
                continue
            resources[key] = p.number * units[p.unit]
        elif p.name in resources and p.number is not None:
            resources[p.name] = p.number
        else:
            known = sorted([*resources, *_UNIT_PROPS, "ops", "kinds"])
            diags.error("E060", f"unknown property '{p.name}' for a {base.kind} target (known: {', '.join(known)})",
                        p.span)
    return replace(base, name=decl.name, ops=frozenset(ops), match_kinds=tuple(kinds), resources=resources,
                   source=f"{decl.span.file}:{decl.span.line}")


def _catalogue(prog: ir.Program, diags: Diagnostics) -> dict[str, TargetSpec]:
    cat = load_profiles()
    for decl in prog.targets.values():
        base = cat.get(decl.base or "")
        if base is None:
            diags.error("E060", f"target '{decl.name}' must derive from a known profile "
                        f"(one of {', '.join(sorted(cat))}), not '{decl.base}'", decl.span)
            continue
        cat[decl.name] = _derive(base, decl, diags)
    return cat


def _deployment(prog: ir.Program) -> dict[str, ir.PropVal]:
    return {p.name: p for p in prog.deployment.props} if prog.deployment else {}


def _ports(p: ir.PropVal | None) -> tuple[int, ...]:
    if p is None:
        return ()
    out: list[int] = []
    for r in p.names:
        lo, _, hi = r.partition("..")
        out += range(int(lo), int(hi or lo) + 1)
    return tuple(out)


def resolve_targets(prog: ir.Program, flag: str, diags: Diagnostics) -> TargetSet | None:
    """The targets named by ``--target`` (with the program's deployment filling in aliases)."""
    cat = _catalogue(prog, diags)
    dep = _deployment(prog)
    where = prog.deployment.span if prog.deployment else Span(prog.file, 1, 1, 1, 1)
    dep_switch = dep["switch"].text if "switch" in dep else None
    dep_servers = dep["servers"].names if "servers" in dep else ()
    switch: TargetSpec | None = None
    server: TargetSpec | None = None
    for part in flag.split("+"):
        name = part.strip()
        if name == "tofino":
            name = dep_switch or "tofino1"
        elif name == "dpdk":
            name = dep_servers[0] if dep_servers else "dpdk_server"
        spec = cat.get(name)
        if spec is None:
            diags.error("E060", f"unknown target '{part}' in --target (known: tofino, dpdk, {', '.join(sorted(cat))})",
                        where)
            return None
        if spec.kind == "switch":
            switch = spec
        else:
            server = spec
    rate = dep.get("rate")
    rate_pps = (rate.number or 0) * {"Mpps": 1e6, "Kpps": 1e3, "": 1.0}.get(rate.unit, 1.0) if rate else 0.0
    return TargetSet(switch, server, max(1, len(dep_servers)), rate_pps, _ports(dep.get("server_ports")), flag)
