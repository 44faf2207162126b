"""The pass manager: the order of passes is the one list ``PASSES`` below.

Each pass reads a ``Compilation`` and returns it with one more part filled in.  The
manager stops at the first pass that reports an error, can dump what a named pass
produced (``--dump-after PASS``) and reports progress for long steps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from compiler import ir
from compiler.irprint import print_program
from compiler.lower import lower
from compiler.partition_progress import reporting
from compiler.passes.bridge import compute_bridges
from compiler.passes.capabilities import check_capabilities
from compiler.passes.names import check_names
from compiler.passes.ports import check_ports
from compiler.passes.server_fit import check_server_fit
from compiler.passes.shard_choice import choose_shard
from compiler.passes.shard_keys import check_monotonic, check_shard_keys
from compiler.passes.validity import check_validity
from compiler.place_cache import cached_partition
from compiler.placement import Bridge, Placement
from compiler.profiles import TargetSet, resolve_targets
from compiler.server_load import ServerLoad
from lang.diagnostics import Diagnostics, InternalError
from lang.symbols import CheckedProgram

__all__ = ["PASSES", "PASS_NAMES", "Compilation", "Pass", "compile_program"]


@dataclass(frozen=True)
class Compilation:
    checked: CheckedProgram
    target_flag: str
    allow_overcommit: bool = False  # --allow-overcommit: servers short of a resource are a warning, not E081
    place_timeout_s: float | None = None  # --place-timeout: the partitioner's time limit (None: its default)
    cache: Path | None = None  # placements kept by content here (compiler/place_cache.py; None: solved every time)
    program: ir.Program | None = None
    validity: dict[str, frozenset[str]] | None = None
    targets: TargetSet | None = None
    placement: Placement | None = None
    placement_cached: bool = False  # the placement came from the cache
    server_load: ServerLoad | None = None  # None: no server in this build
    bridges: tuple[Bridge, ...] = ()

    def need_program(self) -> ir.Program:
        if self.program is None:
            raise InternalError("pass needs the IR before it is built")
        return self.program

    def need_targets(self) -> TargetSet:
        if self.targets is None:
            raise InternalError("pass needs resolved targets")
        return self.targets

    def need_placement(self) -> Placement:
        if self.placement is None:
            raise InternalError("pass needs a placement")
        return self.placement


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Compilation, Diagnostics], Compilation]
    dump: Callable[[Compilation], str]
    what: str


def _lower(c: Compilation, d: Diagnostics) -> Compilation:
    return replace(c, program=lower(c.checked))


def _names(c: Compilation, d: Diagnostics) -> Compilation:
    check_names(c.need_program(), d)
    return c


def _validity(c: Compilation, d: Diagnostics) -> Compilation:
    return replace(c, validity=check_validity(c.need_program(), d))


def _targets(c: Compilation, d: Diagnostics) -> Compilation:
    targets = resolve_targets(c.need_program(), c.target_flag, d)
    if targets is not None and targets.server is None:  # no server to hold the full table: no cache either
        return replace(c, targets=targets, program=without_caches(c.need_program()))
    return replace(c, targets=targets)


def without_caches(prog: ir.Program) -> ir.Program:
    """The program with every ``cache = true`` table a whole table (a build without a server)."""
    tables = {n: replace(t, hints=replace(t.hints, cache=False)) for n, t in prog.tables.items()}
    return replace(prog, tables=tables)


def _ports(c: Compilation, d: Diagnostics) -> Compilation:
    return replace(c, targets=check_ports(c.need_program(), c.need_targets(), d))


def _choose_shard(c: Compilation, d: Diagnostics) -> Compilation:
    program, targets = choose_shard(c.need_program(), c.need_targets(), d)
    return replace(c, program=program, targets=targets)


def _capabilities(c: Compilation, d: Diagnostics) -> Compilation:
    check_capabilities(c.need_program(), c.need_targets(), d)
    return c


def _partition(c: Compilation, d: Diagnostics) -> Compilation:
    timeout_ms = None if c.place_timeout_s is None else max(1, round(c.place_timeout_s * 1000))
    placement, cached = cached_partition(c.need_program(), c.need_targets(), d, timeout_ms, c.cache)
    return replace(c, placement=placement, placement_cached=cached)


def _server_fit(c: Compilation, d: Diagnostics) -> Compilation:
    load = check_server_fit(c.need_program(), c.need_placement(), c.need_targets(), c.allow_overcommit, d)
    return replace(c, server_load=load)


def _bridge(c: Compilation, d: Diagnostics) -> Compilation:
    if c.placement is None or c.validity is None:
        raise InternalError("bridge pass needs a placement")
    has_switch = c.need_targets().switch is not None
    bridges = compute_bridges(c.need_program(), c.placement, c.validity, has_switch)
    check_shard_keys(c.need_program(), c.placement, bridges, c.need_targets(), d)
    check_monotonic(c.need_program(), c.placement, c.need_targets(), d)
    return replace(c, bridges=bridges)


def _dump_ir(c: Compilation) -> str:
    return print_program(c.need_program())


def _dump_validity(c: Compilation) -> str:
    return "\n".join(f"{k}: {sorted(v)}" for k, v in sorted((c.validity or {}).items())) + "\n"


def _dump_targets(c: Compilation) -> str:
    t = c.need_targets()
    return json.dumps({"switch": t.switch.name if t.switch else None, "server": t.server.name if t.server else None,
                       "servers": t.n_servers, "rate_pps": t.rate_pps}, indent=2) + "\n"


def _dump_placement(c: Compilation) -> str:
    return json.dumps(asdict(c.placement) if c.placement else None, indent=2, default=str) + "\n"


def _dump_server_load(c: Compilation) -> str:
    load = c.server_load
    if load is None:
        return "null\n"
    margins = {m.resource.value: {"needed": m.needed, "available": m.available, "unit": m.unit,
                                  "users": [[p.what, str(p.span), p.amount] for p in m.parts]}
               for m in load.margins}
    return json.dumps({"server": load.server.name, "servers": load.servers, "rate_pps": load.rate_pps} | margins,
                      indent=2) + "\n"


def _dump_bridges(c: Compilation) -> str:
    return json.dumps([b.to_json() for b in c.bridges], indent=2) + "\n"


PASSES: list[Pass] = [
    Pass("lower", _lower, _dump_ir, "build the typed IR"),
    Pass("check-names", _names, _dump_ir, "check names against the names nfc generates"),
    Pass("check-validity", _validity, _dump_validity, "check header validity"),
    Pass("resolve-targets", _targets, _dump_targets, "resolve target profiles"),
    Pass("check-capabilities", _capabilities, _dump_ir, "check target capabilities"),
    Pass("choose-shard", _choose_shard, _dump_ir, "choose how several servers share the traffic"),
    Pass("check-ports", _ports, _dump_targets, "check port numbers against the switch"),
    Pass("partition", _partition, _dump_placement, "place stages (Z3 Optimize)"),
    Pass("check-server-fit", _server_fit, _dump_server_load, "check server memory, cores and link"),
    Pass("bridge", _bridge, _dump_bridges, "lay out bridge headers"),
]
PASS_NAMES = [p.name for p in PASSES]


def compile_program(
    checked: CheckedProgram,
    target_flag: str,
    diags: Diagnostics,
    dump_after: str | None = None,
    dump: Callable[[str], None] | None = None,
    progress: Callable[[str], None] | None = None,
    allow_overcommit: bool = False,
    place_timeout_s: float | None = None,
    cache: Path | None = None,
) -> Compilation:
    """Run every pass in order; stop after the first with errors (raises CompileError).
    ``allow_overcommit``: servers short of memory, cores or link are warned about (W081), not an error;
    ``place_timeout_s``: the partitioner's time limit (None: its default); ``cache``: a folder of
    placements kept by content (``compiler/content_cache.py``; None: the partitioner solves);
    ``progress``: a line before each pass, its time when long, and the partitioner's progress
    while it places (``compiler/partition_progress.py``)."""
    c = Compilation(checked, target_flag, allow_overcommit, place_timeout_s, cache)
    with reporting(progress):  # a long pass reports from inside too (the partitioner)
        for i, p in enumerate(PASSES, 1):
            started = time.monotonic()
            if progress:
                progress(f"[{i}/{len(PASSES)}] {p.what} ...")
            c = p.run(c, diags)
            diags.raise_if_errors()
            if progress and time.monotonic() - started > 0.5:
                progress(f"      {p.name} took {time.monotonic() - started:.1f} s")
            if dump_after == p.name and dump is not None:
                dump(p.dump(c))
    return c
