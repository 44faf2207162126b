"""The switch generator: TNA program, its v1model twin, P4Info and the name map.

The generator named ``tna`` (the ``generator`` of the Tofino profiles).  Writes into
``OUT/switch/``; returns the artifact paths for ``plan.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compiler.manifest import Plan
from compiler.placed import Placed
from targets.bmv2.arch import V1Model
from targets.generator import GeneratorError
from targets.p4.arch import Arch
from targets.p4.lint import LintError, lint
from targets.p4.lower import lower_switch
from targets.p4.names import check_p4_names
from targets.p4.p4info import build_p4info, p4info_text
from targets.p4.printer import print_program
from targets.tofino.arch import TNA

__all__ = ["TnaGenerator"]


class TnaGenerator:
    name = "tna"
    what = "switch"

    def emit(self, placed: Placed, plan: Plan, out: Path) -> dict[str, str]:
        return emit(placed, plan, out)


def emit(placed: Placed, plan: Plan, out: Path) -> dict[str, str]:
    prog, placement, targets = placed.program, placed.placement, placed.targets
    switch = plan.switch.resources if plan.switch else {}
    chip, cpu_port = int(switch.get("chip", 1)), int(switch.get("cpu_port", 192))
    folder = out / "switch"
    folder.mkdir(parents=True, exist_ok=True)
    key_widths = {t.name: [k.expr.width for k in t.keys] for t in prog.tables.values()}
    artifacts: dict[str, str] = {}
    name_map: dict[str, Any] = {"source": prog.file}
    findings: list[tuple[str, LintError]] = []
    archs: tuple[tuple[Arch, str], ...] = ((TNA(chip), "tna.p4"), (V1Model(), "v1model.p4"))
    for arch, file in archs:
        p4, names = lower_switch(prog, placement, placed.bridges, targets.server_ports, arch, cpu_port)
        lint_arch = "t2na" if arch.name == "tna" and chip == 2 else arch.name
        check_p4_names(prog, p4, arch, lint_arch)
        findings += [(file, e) for e in lint(p4, lint_arch)]
        (folder / file).write_text(print_program(p4))
        info, runtime = build_p4info(p4, arch.name, key_widths)
        info_file = f"{arch.name}.p4info.txtpb"
        (folder / info_file).write_text(p4info_text(info))
        artifacts[f"switch_{arch.name}"] = f"switch/{file}"
        artifacts[f"p4info_{arch.name}"] = f"switch/{info_file}"
        name_map[arch.name] = {"p4runtime": runtime, "tables": names.tables}
        name_map["drop_reasons"] = names.reasons
        name_map["punt_reasons"] = names.punts
        name_map["pipelines"] = names.pipelines
        name_map["bridges"] = {str(k): v for k, v in names.bridges.items()}
    (folder / "name_map.json").write_text(json.dumps(name_map, indent=2, sort_keys=True) + "\n")
    artifacts["name_map"] = "switch/name_map.json"
    (folder / "lint.txt").write_text("".join(f"{file}: {e}\n" for file, e in findings))
    artifacts["switch_lint"] = "switch/lint.txt"
    _reject(findings, prog.pipelines[0].span if prog.pipelines else None)
    return artifacts


def _reject(findings: list[tuple[str, LintError]], span: object) -> None:
    """A lint error is a generator bug: real p4c would reject the program, or (P4L050) it
    would read a value P4 leaves unspecified where the reference semantics reads 0."""
    bad = [f"{file}: {e}" for file, e in findings if e.severity == "error"]
    if bad:
        raise GeneratorError("internal error, please report: the generated P4 breaks a target rule "
                             "(docs/switch.md):\n" + "\n".join(bad), span)
