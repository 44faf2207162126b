"""Reading a build folder back: ``plan.json``, the placed program (recompiled from the
source the plan names), the switch model (the built P4 program, executed) and ``--inject PORT=PCAP`` arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compiler.pipeline import Compilation, compile_program
from lang import Diagnostics, SourceMap, load
from targets.switchmodel import SwitchModel

__all__ = ["open_build", "parse_injects"]


def open_build(out: Path, sources: SourceMap, arch: str = "tna") -> tuple[dict[str, Any], Compilation, SwitchModel]:
    plan = json.loads((out / "plan.json").read_text())
    diags = Diagnostics()
    c = compile_program(load(plan["source"], diags, sources), plan["target"], diags)
    assert c.placement is not None
    return plan, c, SwitchModel.from_build(out, arch)


def parse_injects(items: list[str]) -> list[tuple[int, Path]]:
    out = []
    for item in items:
        port, _, path = item.partition("=")
        out.append((int(port), Path(path)))
    return out
