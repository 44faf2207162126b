"""Targets are data: capability specs read from ``stdlib/targets/*.toml``.

A source file may declare its own target derived from a profile
(``target srv = dpdk_server { cores = 18; clock = 2.3GHz; }``) and a deployment (which
switch, which servers, the server-facing switch ports, the offered packet rate).
``--target`` picks from these: ``tofino+dpdk`` (the deployment's switch and servers),
``tofino`` or ``dpdk`` alone, or profile / declared target names joined by ``+``.  The
aliases (``tofino``, ``dpdk``) are declared by the profiles themselves (``aliases`` in
their TOML): an alias means the deployment's target of that kind, else the profile.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from compiler import ir
from lang.diagnostics import Diagnostics, Span
from lang.loader import STDLIB

__all__ = ["PROFILE_DIR", "SERVER_MEMORY", "ProfileError", "TargetSet", "TargetSpec", "load_profiles",
           "resolve_targets"]

PROFILE_DIR = STDLIB / "targets"
# Source property -> (resource key, unit conversions accepted)
_UNIT_PROPS: dict[str, tuple[str, dict[str, float]]] = {
    "clock": ("clock_ghz", {"GHz": 1.0, "MHz": 1e-3, "": 1.0}),
    "memory": ("memory_gib", {"GiB": 1.0, "MiB": 1 / 1024, "TiB": 1024.0, "": 1.0}),
    "link": ("link_gbps", {"Gbps": 1.0, "Mbps": 1e-3, "": 1.0}),
}


# What a source may set a resource to (a derived target, or a deployment's link): beyond these,
# later passes would divide by zero, loop over absurd stage counts or shift by absurd port
# widths.  Keys not listed here keep the generic bound of lang.limits.MAX_PROPERTY_NUMBER.
RESOURCE_RANGES: dict[str, tuple[float, float]] = {
    "stages": (1, 64), "sram_blocks": (0, 1024), "sram_words": (1, 2**20), "sram_bits": (1, 4096),
    "tcam_blocks": (0, 1024), "tcam_entries": (1, 2**20), "tcam_bits": (1, 4096), "tables_per_stage": (1, 1024),
    "phv_bits": (1, 2**16), "exact_load": (0.01, 1), "ports": (1, 2**16), "port_bits": (1, 16),
    "port_gbps": (0.001, 1e6), "cpu_port": (0, 2**16 - 1),
    "control_stages_front": (0, 64), "stages_after_branches": (0, 64), "stages_before_hash_use": (0, 64),
    "control_stages_back": (0, 64),
    "salu_fields": (0, 64), "salu_word_bits": (1, 128), "salu_comparisons": (0, 64), "salu_operations": (0, 64),
    "cores": (1, 4096), "clock_ghz": (0.001, 100), "memory_gib": (2**-20, 2**20), "link_gbps": (0.001, 1e6),
}
MAX_RATE_PPS = 1e12  # a deployment's rate: a thousand times a Tofino's packet rate
MAX_SERVERS = 1024  # servers in one deployment


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """One target's capabilities, resources and cost model."""

    name: str
    kind: str  # "switch" | "server"
    generator: str  # the code generator's name (targets/registry.py)
    description: str
    match_kinds: tuple[str, ...]
    max_key_bits: int
    ops: frozenset[str]
    resources: dict[str, float] = field(hash=False)
    cost: dict[str, float] = field(hash=False)
    memory: dict[str, float] = field(hash=False, default_factory=dict)  # a server's table layout (resources.py)
    source: str = ""
    aliases: tuple[str, ...] = ()  # --target names for "this kind of target": the deployment's, else this one
    register_cells: tuple[int, ...] = ()  # the register cell widths a stateful ALU keeps (): any

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
    sharded: bool = False  # the deployment says which server a packet goes to (shard by)

    @property
    def carrying(self) -> int:
        """The servers that carry traffic: behind a switch, each one when it shards over them
        and else the first alone (it gets every packet); without a switch, each (its own NICs)."""
        return self.n_servers if self.switch is None or self.sharded else 1

    def all(self) -> tuple[TargetSpec, ...]:
        return tuple(t for t in (self.switch, self.server) if t is not None)


# what a server profile's [memory] describes: the layout of its tables (compiler/resources.py)
SERVER_MEMORY = ("hash_bucket_bytes", "hash_bucket_slots", "hash_key_header", "hash_key_align", "hash_ring_slot",
                 "hash_max_entries", "key_unit", "inline_value_bits", "inline_lpm_value_bits",
                 "inline_lpm6_value_bits", "record_words", "state_record_words", "state_record_align",
                 "malloc_overhead", "grow_from", "grow_by", "grow_past_div", "state_max", "state_room_div",
                 "state_room_add", "lpm_root_bytes", "lpm_route_bytes", "lpm_vrf_route_bytes", "acl_rule_bytes",
                 "acl_chunk_bytes")


# what the runtime can take of them (nfc_rt.h, nfc_lpm.h: a data word of 64 bits, a trie's of 56, 55)
_MEMORY_RANGES = {"grow_from": (8, 2**30), "grow_by": (2, 1024), "grow_past_div": (1, 1024),
                  "state_room_div": (1, 2**20), "inline_value_bits": (0, 64), "inline_lpm_value_bits": (0, 56),
                  "inline_lpm6_value_bits": (0, 55), "key_unit": (1, 64), "state_max": (8, 2**30),
                  "state_room_add": (0, 2**20)}


class ProfileError(ValueError):
    """A shipped target profile that lacks what its kind needs."""


def _spec(data: dict[str, Any], source: str) -> TargetSpec:
    t = data["target"]
    memory = data.get("memory", {})
    lacking = [k for k in SERVER_MEMORY if k not in memory] if t["kind"] == "server" else []
    if lacking:
        raise ProfileError(f"{source}: a server profile's [memory] lacks {', '.join(lacking)}")
    bad = [f"{k} = {memory[k]} (the runtime takes {lo}..{hi})" for k, (lo, hi) in _MEMORY_RANGES.items()
           if k in memory and not lo <= memory[k] <= hi]
    if bad:
        raise ProfileError(f"{source}: {'; '.join(bad)}")
    return TargetSpec(
        name=t["name"],
        kind=t["kind"],
        generator=t["generator"],
        description=t.get("description", ""),
        match_kinds=tuple(data["match"]["kinds"]),
        max_key_bits=int(data["match"]["max_key_bits"]),
        ops=frozenset(data["capabilities"]["ops"]),
        resources={k: float(v) for k, v in data.get("resources", {}).items()},
        register_cells=tuple(int(w) for w in data["capabilities"].get("register_cells", ())),
        cost={k: float(v) for k, v in data.get("cost", {}).items()},
        memory={k: float(v) for k, v in data.get("memory", {}).items()},
        source=source,
        aliases=tuple(t.get("aliases", ())),
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
            resources[key] = _in_range(key, p.number * units[p.unit], p, diags)
        elif p.name in resources and p.number is not None:
            resources[p.name] = _in_range(p.name, p.number, p, diags)
        else:
            known = sorted([*resources, *_UNIT_PROPS, "ops", "kinds"])
            diags.error("E060", f"unknown property '{p.name}' for a {base.kind} target (known: {', '.join(known)})",
                        p.span)
    return replace(base, name=decl.name, ops=frozenset(ops), match_kinds=tuple(kinds), resources=resources,
                   source=f"{decl.span.file}:{decl.span.line}", aliases=())


def _in_range(key: str, value: float, p: ir.PropVal, diags: Diagnostics) -> float:
    """``value`` for resource ``key`` if within ``RESOURCE_RANGES``; else E090 (and the value, as the
    build stops after this pass)."""
    lo, hi = RESOURCE_RANGES.get(key, (0, math.inf))
    if not lo <= value <= hi:
        diags.error("E090", f"{p.name} must be between {_num(lo, p)} and {_num(hi, p)}, "
                    f"not {p.number:g}{p.unit}", p.span)
    return value


def _num(x: float, p: ir.PropVal) -> str:
    """A bound in the unit the user wrote ``p`` in."""
    _, units = _UNIT_PROPS.get(p.name, ("", {"": 1.0}))
    return f"{x / units.get(p.unit, 1.0):g}{p.unit}"


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


# What a deployment may say; ``link`` is each server's switch-facing bandwidth (as a server target's ``link``)
_DEPLOYMENT_PROPS = ("switch", "servers", "server_ports", "rate", "link")
_RATE_UNITS = {"Mpps": 1e6, "Kpps": 1e3, "pps": 1.0, "": 1.0}


def _deployment(prog: ir.Program, diags: Diagnostics) -> dict[str, ir.PropVal]:
    props = {p.name: p for p in prog.deployment.props} if prog.deployment else {}
    for p in props.values():
        if p.name not in _DEPLOYMENT_PROPS:
            diags.error("E060", f"unknown deployment property '{p.name}' (known: {', '.join(_DEPLOYMENT_PROPS)})",
                        p.span)
    rate = props.get("rate")
    if rate is not None and (rate.number is None or rate.unit not in _RATE_UNITS):
        diags.error("E060", "rate must be a number of packets per second with one of the units Mpps, Kpps, pps",
                    rate.span)
    elif rate is not None and rate.number is not None and rate.number * _RATE_UNITS[rate.unit] > MAX_RATE_PPS:
        diags.error("E090", f"rate must be at most {MAX_RATE_PPS / 1e6:g}Mpps, not {rate.number:g}{rate.unit}",
                    rate.span)
    servers = props.get("servers")
    if servers is not None and len(servers.names) > MAX_SERVERS:
        diags.error("E090", f"a deployment has at most {MAX_SERVERS} servers, not {len(servers.names)}", servers.span)
    return props


def _with_link(server: TargetSpec, link: ir.PropVal, diags: Diagnostics) -> TargetSpec:
    """The deployment's ``link = N Gbps`` as each server's switch-facing bandwidth."""
    _, units = _UNIT_PROPS["link"]
    if link.number is None or link.unit not in units:
        diags.error("E060", "link must be a number with one of the units Gbps, Mbps", link.span)
        return server
    gbps = _in_range("link_gbps", link.number * units[link.unit], link, diags)
    return replace(server, resources={**server.resources, "link_gbps": gbps})


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
    dep = _deployment(prog, diags)
    where = prog.deployment.span if prog.deployment else Span(prog.file, 1, 1, 1, 1)
    dep_servers = dep["servers"].names if "servers" in dep else ()
    declared = {"switch": dep["switch"].text if "switch" in dep else None,
                "server": dep_servers[0] if dep_servers else None}
    aliases = {a: p for p in cat.values() for a in p.aliases}  # a profile's TOML names its aliases
    switch: TargetSpec | None = None
    server: TargetSpec | None = None
    for part in flag.split("+"):
        name = part.strip()
        if name in aliases:  # the deployment's target of that kind, else the profile that owns the alias
            name = declared[aliases[name].kind] or aliases[name].name
        spec = cat.get(name)
        if spec is None:
            known = ", ".join([*sorted(aliases), *sorted(cat)])
            diags.error("E060", f"unknown target '{part}' in --target (known: {known})", where)
            return None
        if spec.kind == "switch":
            switch = spec
        else:
            server = spec
    if server is not None and "link" in dep:
        server = _with_link(server, dep["link"], diags)
    rate = dep.get("rate")
    rate_pps = (rate.number or 0) * _RATE_UNITS.get(rate.unit, 1.0) if rate else 0.0
    sharded = prog.deployment is not None and prog.deployment.shard is not None
    return TargetSet(switch, server, max(1, len(dep_servers)), rate_pps, _ports(dep.get("server_ports")), flag, sharded)
