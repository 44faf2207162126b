"""Reading a build folder back: ``plan.json``, the placed program (``placed.json``, loaded
without the front end: the source is not needed), the switch model (the built P4 program,
executed) and ``--inject PORT=PCAP`` arguments.  When the source the plan names is at hand
and differs from what was built, a warning names both hashes: the folder's program runs."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.manifest import Plan, PlanError, load_plan

if TYPE_CHECKING:  # loaded when a command opens a build, not when the command line is parsed
    from compiler.placed import Placed
    from emulator.switchmodel import SwitchModel

__all__ = ["BuildError", "open_build", "open_placed", "parse_injects", "source_sha256"]


class BuildError(Exception):
    """A build folder that cannot be used: no plan, another version, a missing artifact."""


def source_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def open_placed(out: Path) -> tuple[Plan, Placed]:
    """``plan.json`` and the placed program of build folder ``out`` (BuildError if unusable)."""
    from compiler.placed import PlacedError, load_placed

    try:
        plan = load_plan(out)
        placed = load_placed(plan.path(out, "placed"))
    except (PlanError, PlacedError) as e:
        raise BuildError(str(e)) from e
    _check_source(out, plan)
    return plan, placed


def _check_source(out: Path, plan: Plan) -> None:
    src, built = Path(plan.source), plan.source_sha256
    if not built or not src.is_file():
        return
    now = source_sha256(src)
    if now != built:
        print(f"warning: {src} has changed since {out} was built (built from sha256 {built}, the file now has "
              f"{now}); using the program in {out}: rebuild to use the new source", file=sys.stderr)


def open_build(out: Path, arch: str = "tna") -> tuple[Plan, Placed, SwitchModel]:
    from emulator.switchmodel import SwitchModel

    plan, placed = open_placed(out)
    return plan, placed, SwitchModel.from_build(out, arch)


def parse_injects(items: list[str]) -> list[tuple[int, Path]]:
    out = []
    for item in items:
        port, _, path = item.partition("=")
        out.append((int(port), Path(path)))
    return out
