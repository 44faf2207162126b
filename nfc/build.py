"""``nfc build``: front end → passes → placed program → plan → generators
(``emit(placed, plan, out)``) → the manifest ``plan.json`` listing what they wrote, the
report and the proof."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from compiler.content_cache import cache_root
from compiler.irprint import print_program
from compiler.manifest import Plan, plan_from_json
from compiler.pipeline import PASS_NAMES, PASSES, Compilation, compile_program
from compiler.placed import Placed, dump_placed
from compiler.plan import build_plan, dump_plan
from compiler.report import pipeline_svg, resources_svg, text_report
from lang import Diagnostics, SourceMap, Span, load
from lang.diagnostics import InternalError
from nfc._build_dir import source_sha256
from nfc.verify import report, shard_assumption, verify_placed
from targets.names import NameClash
from targets.registry import ALWAYS, GeneratorError, lookup

__all__ = ["build"]

ARTIFACTS = {"report": "report.txt", "pipeline_svg": "pipeline.svg", "resources_svg": "resources.svg",
             "ir": "ir.txt", "plan": "plan.json", "placed": "placed.json"}


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build(args: argparse.Namespace, sources: SourceMap) -> int:
    if args.list_passes:
        for p in PASSES:
            print(f"{p.name:20} {p.what}")
        return 0
    if args.dump_after and args.dump_after not in PASS_NAMES:
        print(f"nfc: unknown pass '{args.dump_after}' (passes: {', '.join(PASS_NAMES)})", file=sys.stderr)
        return 2
    diags = Diagnostics()
    checked = load(args.file, diags, sources)
    diags.raise_if_errors()
    c = compile_program(checked, args.target, diags, args.dump_after, lambda s: print(s, end=""), _progress,
                        args.allow_overcommit, args.place_timeout, None if args.no_cache else cache_root())
    out = Path(args.out or Path("build") / Path(args.file).stem)
    out.mkdir(parents=True, exist_ok=True)
    placed, manifest = placed_and_plan(c, source_sha256(Path(args.file)))
    (out / "placed.json").write_text(dump_placed(placed))
    gen_diags = Diagnostics()
    manifest["generated"] = dict(sorted(_generate(placed, plan_from_json(manifest), out, gen_diags).items()))
    (out / "plan.json").write_text(dump_plan(manifest))
    plan = manifest
    prog = c.need_program()
    typed = plan_from_json(plan)
    report = text_report(typed, prog, c.need_targets().switch)
    (out / "report.txt").write_text(report)
    (out / "pipeline.svg").write_text(pipeline_svg(typed, prog))
    (out / "resources.svg").write_text(resources_svg(typed))
    (out / "ir.txt").write_text(print_program(prog))
    assert c.placement is not None
    how = ("optimal" if c.placement.optimal else "not proved optimal") + (", from the cache" if c.placement_cached
                                                                          else "")
    _progress(f"placed {len(plan['stages'])} stages in {c.placement.solve_seconds:.2f} s ({how}); "
              f"wrote {out}/plan.json, report {out}/report.txt")
    for d in diags.items:  # warnings (errors stopped the build): e.g. W081, servers over-committed
        _progress(sources.render(d))
    gen_diags.raise_if_errors()
    return 0 if args.no_verify else _verify(placed)


def placed_and_plan(c: Compilation, source_sha: str = "") -> tuple[Placed, dict[str, Any]]:
    """What the passes produced as the placed program, and the plan (``generated`` still empty)."""
    if c.placement is None:
        raise InternalError("the build needs a placement")
    return Placed(c.need_program(), c.need_targets(), c.placement, c.bridges), build_plan(c, ARTIFACTS, {}, source_sha)


def _verify(placed: Placed) -> int:
    """The placed program against the spec (Z3); a counterexample is a bug in nfc: exit 1."""
    results = verify_placed(placed)
    proved = [r for r in results if r.proved]
    seconds = sum(r.seconds for r in results)
    _progress(f"verified {len(proved)} of {len(results)} pipelines equal to the spec with z3 in {seconds:.2f} s")
    for line in report([r for r in results if not r.proved]):
        _progress(("note: " if "not encoded" in line else "") + line)
    note = shard_assumption(placed)
    if note is not None:
        _progress(note)
    return 1 if any(r.counterexample is not None for r in results) else 0


def _generate(placed: Placed, plan: Plan, out: Path, diags: Diagnostics) -> dict[str, str]:
    """Run every target's generator; one that cannot generate reports E100 and the others
    still write their artifacts (the build fails after writing the plan)."""
    generated: dict[str, str] = {}
    for spec_kind, name in [(spec.kind, spec.generator) for spec in placed.targets.all()] + [("", n) for n in ALWAYS]:
        gen = lookup(name)
        if gen is None:
            _progress(f"note: no '{name}' code generator: no {spec_kind} code generated")
            continue
        _progress(f"generating {gen.what} code ({name}) ...")
        try:
            generated |= gen.emit(placed, plan, out)
        except GeneratorError as e:
            span = e.span if isinstance(e.span, Span) else Span(placed.program.file, 1, 1, 1, 1)
            if isinstance(e, NameClash):
                diags.error(e.code, e.what, span)
            else:
                diags.error("E100", f"the {name} generator does not support {e.what} yet", span)
    return generated

