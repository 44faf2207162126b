"""Placements kept by content (``compiler/content_cache.py``): the partitioner's answer for a
program and its targets is stored under a key of the typed IR, the resolved targets, the time
limit and the compiler's own sources, and a build of the same program takes it instead of
solving again (the partitioner is most of a build's time: cgnat's Z3 Optimize takes 5 s).

Only a placement proved optimal and found without a diagnostic is kept: one cut short by the
time limit depends on the machine's speed, and its warning belongs to the run that met it.

Before: ``partition(prog, targets, diags, timeout_ms)`` on every build.
After: ``cached_partition(prog, targets, diags, timeout_ms, root)`` — the same placement,
solved once per content.
"""

from __future__ import annotations

import json
from pathlib import Path

from compiler import ir
from compiler.content_cache import compiler_fingerprint, content_key, entry, locked, store
from compiler.partition import partition
from compiler.placed import PlacedError, decode, encode
from compiler.placement import Placement
from compiler.profiles import TargetSet
from compiler.z3_context import fresh_context
from lang.diagnostics import Diagnostics

__all__ = ["cached_partition", "placement_key"]

_KIND, _FILE = "placement", "placement.json"


def placement_key(prog: ir.Program, targets: TargetSet, timeout_ms: int | None) -> str:
    """What decides a placement: the program, its targets, the time limit and the compiler."""
    return content_key(compiler_fingerprint(), json.dumps(encode(prog), sort_keys=True),
                       json.dumps(encode(targets), sort_keys=True), str(timeout_ms))


def cached_partition(prog: ir.Program, targets: TargetSet, diags: Diagnostics, timeout_ms: int | None,
                     root: Path | None) -> tuple[Placement | None, bool]:
    """``partition``'s answer, from the cache under ``root`` when it holds one (None: no cache);
    the placement and whether it came from the cache."""
    if root is None:
        return _solve(prog, targets, diags, timeout_ms), False
    key = placement_key(prog, targets, timeout_ms)
    with locked(root, _KIND, key):  # a second process building the same program waits, then reads it
        kept = _load(entry(root, _KIND, key, _FILE))
        if kept is not None:
            return kept, True
        before = len(diags.items)
        placement = _solve(prog, targets, diags, timeout_ms)
        if placement is not None and placement.optimal and len(diags.items) == before:
            store(root, _KIND, key, _FILE, json.dumps(encode(placement), sort_keys=True).encode())
        return placement, False


def _solve(prog: ir.Program, targets: TargetSet, diags: Diagnostics, timeout_ms: int | None) -> Placement | None:
    with fresh_context():  # the same program gets the same placement, whatever ran before in this process
        return partition(prog, targets, diags, timeout_ms=timeout_ms)


def _load(path: Path | None) -> Placement | None:
    """The placement in ``path``; None when there is none or it is unreadable (made again)."""
    if path is None:
        return None
    try:
        placement = decode(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError, PlacedError):
        return None
    return placement if isinstance(placement, Placement) else None
