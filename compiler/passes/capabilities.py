"""Pass ``check-capabilities``: every stage must be placeable on some chosen target.

Precondition: lowered IR and resolved targets.  For each stage, the operations and match
kinds it uses (``compiler.analysis.stage_uses``) are compared with each chosen target's
capability spec.  A use no target in the catalogue supports is E070 ("unsupported on
every target"); one the chosen targets lack is E071 ("unsupported on <target>").  The
partitioner reads the same capability data.
"""

from __future__ import annotations

from compiler import ir
from compiler.analysis import Use, parser_uses, stage_objects, stage_units, stage_uses, walk_stmts
from compiler.profiles import TargetSet, TargetSpec, load_profiles
from compiler.register_access import NotOne, accessed_registers, one_access
from lang.diagnostics import Diagnostics

__all__ = ["SALU_LIMITS", "can_run", "check_capabilities", "needs", "supports"]

# uses ``KIND:N`` a switch's stateful ALU bounds, and the profile resource that bounds each
SALU_LIMITS = {"register_fields": "salu_fields", "register_word": "salu_word_bits",
               "register_comparisons": "salu_comparisons", "register_operations": "salu_operations"}


def supports(spec: TargetSpec, use: Use) -> bool:
    """Can ``spec`` do this one use: an op, a match kind (``match:lpm``), a key width (``key_bits:N``)?"""
    kind, _, arg = use.op.partition(":")
    if kind == "match":
        return arg in spec.match_kinds
    if kind == "key_bits":
        return int(arg) <= spec.max_key_bits
    if kind == "register_cell":  # a profile without cell_widths keeps registers of any width
        return not spec.register_cells or int(arg) in spec.register_cells
    if kind in SALU_LIMITS:  # a profile without the resource has no stateful ALU to fit
        limit = spec.resources.get(SALU_LIMITS[kind])
        return limit is None or int(arg) <= limit
    return use.op in spec.ops


def needs(prog: ir.Program, stage: ir.Stage, miss_to_server: bool = False) -> list[Use]:
    """Everything a target must support to run ``stage``: its ops and match kinds, and each table's key
    width.  With ``miss_to_server`` (asked of a switch in a build with a server) the miss branches of
    cached lookups run on the server and are not asked."""
    uses = stage_uses(prog, stage, skip_cached_miss=miss_to_server) + _register_uses(prog, stage)
    for unit in stage_units(prog, stage):
        for name in unit.tables:
            t = prog.tables[name]
            uses.append(Use(f"key_bits:{t.key_bits}", t.span, f"the {t.key_bits}-bit key of table '{t.name}'"))
    return uses


def _register_uses(prog: ir.Program, stage: ir.Stage) -> list[Use]:
    """Beyond ``register``: ``wide_state`` for a register wider than 32 bits, else
    ``register_cell:W``; ``register_sequence`` where a register is not one stateful ALU's: its
    accesses in the stage are not one read-modify-write (``compiler.register_access``), another
    stage uses it too (a packet passes the ALU once, and a copy on the server would not be the
    switch's), or the stage looks up a switch cache (a miss runs the stage again on the server,
    with a copy of its own); and what the one read-modify-write asks of an ALU
    (``register_fields:N``, ``register_word:BITS``, ``register_comparisons:N``,
    ``register_operations:N``), which a switch profile's ``salu_*`` resources bound."""
    out: list[Use] = []
    for name in accessed_registers(stage.body):
        r = prog.registers[name]
        if r.width > 32:
            out.append(Use("wide_state", r.span, f"the {r.width}-bit register '{name}'"))
        else:
            out.append(Use(f"register_cell:{r.width}", r.span, f"the {r.width}-bit cells of register '{name}'"))
        others = sorted(o.name for o in prog.stages.values() if o.name != stage.name and name in stage_objects(o))
        if others:
            out.append(Use("register_sequence", r.span, f"register '{name}' used by stage '{stage.name}' and by "
                           f"{', '.join(repr(o) for o in others)} (one stateful ALU, passed once per packet)"))
        cached = next((s for s in walk_stmts(stage.body) if isinstance(s, ir.Lookup)
                       and prog.tables[s.table].hints.cache), None)
        if cached is not None:
            out.append(Use("register_sequence", cached.span, f"register '{name}' in a stage that looks up switch "
                           f"cache '{cached.table}' (a miss runs the stage again on the server)"))
        found = one_access(prog, stage.body, name)
        if isinstance(found, NotOne):
            out.append(Use("register_sequence", found.span, found.reason))
            continue
        span, sh = (found.write or found.at).span, found.shape
        fields = f" ({', '.join(sh.fields)})" if sh.fields else ""
        out += [Use(f"register_fields:{len(sh.fields)}", span, f"the write to register '{name}' reading "
                    f"{len(sh.fields)} packet fields{fields}"),
                Use(f"register_word:{sh.widest}", span, f"the write to register '{name}' with a "
                    f"{sh.widest}-bit operand"),
                Use(f"register_comparisons:{sh.comparisons}", span, f"the write to register '{name}' under "
                    f"{sh.comparisons} comparisons"),
                Use(f"register_operations:{sh.operations}", span, f"the write to register '{name}' of "
                    f"{sh.operations} operations")]
    return out


def can_run(prog: ir.Program, stage: ir.Stage, spec: TargetSpec | None, miss_to_server: bool = False) -> bool:
    """The one capability predicate: can ``spec`` run the whole stage?"""
    return spec is not None and all(supports(spec, u) for u in needs(prog, stage, miss_to_server))


def check_capabilities(prog: ir.Program, targets: TargetSet, diags: Diagnostics) -> None:
    catalogue = list(load_profiles().values())
    chosen = targets.all()
    _check_parsers(prog, targets.switch or targets.server, diags)
    for stage in prog.stages.values():
        uses = needs(prog, stage)
        miss_to_server = targets.server is not None
        if any(can_run(prog, stage, t, t.kind == "switch" and miss_to_server) for t in chosen):
            continue
        lacking = [u for u in uses if not any(supports(t, u) for t in chosen)]
        for u in _first_per_op(lacking):
            _report(stage, u, chosen, catalogue, diags)
        if not lacking:
            names = ", ".join(t.name for t in chosen)
            diags.error("E071", f"stage '{stage.name}' needs operations that no single target among {names} has "
                        "together", stage.span, notes=tuple(
                            f"{t.name} lacks {', '.join(sorted({u.op for u in uses if not supports(t, u)}))}"
                            for t in chosen))


def _check_parsers(prog: ir.Program, parsing: TargetSpec | None, diags: Diagnostics) -> None:
    """Parsers run on the first target a packet meets (the switch when there is one): what they
    read must be there."""
    if parsing is None:
        return
    for graph in prog.parsers.values():
        for u in _first_per_op([u for u in parser_uses(graph) if not supports(parsing, u)]):
            diags.error("E071", f"{u.what} in parser '{graph.name}' is unsupported on {parsing.name}, which runs the "
                        f"parsers: it needs capability '{u.op}'", u.span,
                        notes=("read it in a stage instead: the partitioner places that stage where it exists",))


def _first_per_op(uses: list[Use]) -> list[Use]:
    seen: set[str] = set()
    out: list[Use] = []
    for u in uses:
        if u.op not in seen:
            seen.add(u.op)
            out.append(u)
    return out


def _report(stage: ir.Stage, u: Use, chosen: tuple[TargetSpec, ...], catalogue: list[TargetSpec],
            diags: Diagnostics) -> None:
    kind, _, arg = u.op.partition(":")
    need = {"match": f"{arg} match", "key_bits": f"keys of {arg} bits",
            "register_cell": f"registers of {arg}-bit cells",
            **{k: f"a stateful ALU that takes {v.removeprefix('salu_').replace('_', ' ')} {arg}"
               for k, v in SALU_LIMITS.items()}}.get(kind, f"capability '{u.op}'")
    elsewhere = sorted(t.name for t in catalogue if supports(t, u))
    names = ", ".join(t.name for t in chosen) or "no target"
    if not elsewhere:
        diags.error("E070", f"{u.what} in stage '{stage.name}' is unsupported on every target: no target profile "
                    f"has {need}", u.span)
        return
    diags.error("E071", f"{u.what} in stage '{stage.name}' is unsupported on {names}: it needs {need}", u.span,
                notes=(f"{', '.join(elsewhere)} can run it: add one to --target",))
