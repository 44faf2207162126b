"""The human-readable placement report: a text table (placement, tables, caches, bridges,
resources and the margin of every resource checked: needed / available / headroom), a
pipeline picture coloured by target and a per-MAU-stage resource chart (both SVG, written
directly: no tool needed).  All three read the typed plan (``compiler.manifest.Plan``)."""

from __future__ import annotations

from compiler import ir
from compiler.analysis import stage_units
from compiler.explain import max_entries
from compiler.manifest import Plan, ServerResource, SolverInfo
from compiler.passes.capabilities import needs, supports
from compiler.profiles import TargetSpec
from compiler.resources import table_blocks
from compiler.server_load import fmt_bytes

__all__ = ["pipeline_svg", "resources_svg", "text_report", "why_server"]

COLOURS = {"switch": "#4e79a7", "server": "#f28e2b"}
_ARTIFACT_PREFIX = {"switch": "switch_", "server": "server_"}


def why_server(prog: ir.Program, stage: ir.Stage, sw: TargetSpec | None) -> str:
    """Why a stage is not on the switch: what the switch cannot do and which tables do not fit."""
    if sw is None:
        return "no switch in this build"
    reasons: list[str] = []
    lacking = sorted({u.what for u in needs(prog, stage) if not supports(sw, u)})
    if lacking:
        reasons.append(f"{sw.name} cannot do {', '.join(lacking)}")
    cap = int(sw.res("stages") * sw.res("sram_blocks")), int(sw.res("stages") * sw.res("tcam_blocks"))
    for u in stage_units(prog, stage):
        for name in u.tables:
            t = prog.tables[name]
            b = table_blocks(t, t.size, sw)
            if b.sram > cap[0] or b.tcam > cap[1]:
                reasons.append(f"table '{name}' ({t.size:,} entries) needs {b.sram:,} SRAM / {b.tcam:,} TCAM blocks; "
                               f"{sw.name} has {cap[0]} / {cap[1]} (fits up to {max_entries(t, sw):,} entries)")
    return "; ".join(reasons) or "the switch's remaining resources do not fit it next to the other stages"


def _row(cols: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return [_row(header, widths), _row(["-" * w for w in widths], widths), *(_row(r, widths) for r in rows)]


def text_report(plan: Plan, prog: ir.Program, sw: TargetSpec | None) -> str:
    names = " + ".join(x for x in [plan.switch and plan.switch.name,
                                    plan.server and f"{plan.servers} x {plan.server.name}"] if x)
    out = [f"nfc placement report: {plan.source}", f"target: {plan.target} ({names})", ""]
    for p in prog.pipelines:
        out.append(f"pipeline {p.name} ({p.traffic:.0%} of traffic)")
        rows = []
        for s in (x for x in plan.stages if x.pipeline == p.name):
            why = why_server(prog, prog.stages[s.name], sw) if s.on_server else ""
            rows.append([s.name, s.segment, s.source, str(s.server_ns) if s.server_ns is not None else "", why])
        out += ["  " + r for r in _table(["stage", "placement", "source", "server ns", "why not on the switch"], rows)]
        out.append("")
    out += [*_tables_section(plan), "", *_cache_section(plan), *_bridges_section(plan), "",
            *_resources_section(plan), *_margins_section(plan)]
    if plan.solver is not None:
        proof = "proved optimal" if plan.solver.optimal else "NOT proved optimal"
        out.append(f"solver: {plan.solver.engine}, {proof} for: {'; then '.join(plan.solver.objectives)}")
        out += _gap_section(plan.solver)
    if plan.generated:
        out.append("generated: " + ", ".join(f"{k} ({v})" for k, v in plan.generated.items()))
    missing = [t.kind for t in (plan.switch, plan.server)
               if t and not any(k.startswith(_ARTIFACT_PREFIX[t.kind]) for k in plan.generated)]
    if missing:
        out.append(f"code generation: no {' or '.join(missing)} code was generated (generator not implemented yet)")
    return "\n".join(out) + "\n"


def _gap_section(s: SolverInfo) -> list[str]:
    """How far a placement not proved optimal may be from the optimum (nothing for a proved one)."""
    if s.optimal or not s.objective_values:
        return []
    how = {"exact": "exact model", "scalable": "scalable search"}.get(s.method, s.method)
    how += f", stopped at its {s.time_limit_s:g} s time limit (--place-timeout)" if s.stopped_at_time_limit else ""
    rows = [[name, f"{v:g}", "unknown" if b is None else f"{b:g}"]
            for name, v, b in zip(s.objectives, s.objective_values, s.objective_bounds, strict=True)]
    gap = "unknown" if s.gap is None else f"{s.gap:.3%}"
    before = "" if s.gap_objective == s.objectives[0] else "; the objectives before it are optimal"
    return [f"optimality gap: {gap} on '{s.gap_objective}' ({how}){before}",
            *("  " + r for r in _table(["objective", "placement", "proven bound"], rows))]


def _tables_section(plan: Plan) -> list[str]:
    rows = []
    for t in plan.tables:
        on_sw = t.on_switch and plan.switch is not None
        mau = t.mau_stages
        memory = fmt_bytes(t.server_bytes) if t.on_server else ""
        if t.on_server and t.shard_fields:  # each server holds its share of the entries
            by = ", ".join(t.keys[i].name for i in t.shard_fields)
            if t.share_bytes:
                memory = f"{fmt_bytes(t.share_bytes)} on each of {t.share_servers} (sharded by {by})"
            elif plan.shard is not None and plan.shard.by == "range":
                memory += f" (sharded by range of {by}: a server may hold all)"
            else:  # one server carries the traffic
                memory += f" (sharded by {by})"
        rows.append([t.name, t.match, f"{t.size:,}", t.placement.value, f"{t.switch_entries:,}" if on_sw else "",
                     str(t.sram_blocks) if on_sw else "", str(t.tcam_blocks) if on_sw else "",
                     f"{mau[0]}..{mau[1]}" if on_sw and mau else "", memory])
    return ["tables", *("  " + r for r in _table(
        ["table", "match", "size", "placement", "switch entries", "SRAM", "TCAM", "MAU", "server memory"], rows))]


def _cache_section(plan: Plan) -> list[str]:
    out = []
    for x in plan.cache_miss_paths:
        out.append(f"switch cache of '{x.table}': {x.cached_entries:,} entries on the switch; expected hit rate "
                   f"{x.hit_rate:.1%}; a miss goes to the server, which runs stage '{x.stage}' on the full "
                   f"table ({x.server_ns} ns per missed packet) and returns the packet to the switch")
    return [*out, ""] if out else []


def _bridges_section(plan: Plan) -> list[str]:
    out = ["bridge headers"]
    if not plan.bridges:
        why = "no switch in this build" if plan.switch is None else "no stage runs on a server"
        return [*out, f"  (none: {why})"]
    for b in plan.bridges:
        fields = ", ".join(f"{f.name}:{f.width}" for f in b.fields) or "no fields"
        out.append(f"  #{b.cut_id} {b.pipeline} {b.path} {b.direction.value} ({b.bytes} bytes): cut_id:8, "
                   f"valid[{', '.join(b.valid_bits)}], {fields}")
    return out


def _resources_section(plan: Plan) -> list[str]:
    out: list[str] = []
    sw, srv = plan.switch_resources, plan.server_resources
    if sw and plan.switch:
        per_s, per_t = int(plan.switch.resources["sram_blocks"]), int(plan.switch.resources["tcam_blocks"])
        out.append(f"switch {plan.switch.name}: {sw.mau_stages_used} of {len(sw.per_stage)} MAU stages used; "
                   f"SRAM {sw.sram_blocks}/{sw.sram_capacity} blocks, TCAM {sw.tcam_blocks}/{sw.tcam_capacity}")
        if sw.mau_stages_with_control > sw.mau_stages_used:
            out.append(f"  with the generated control code (checks, drops, the branches after lookups, hashes) "
                       f"about {sw.mau_stages_with_control} MAU stages"
                       + (" (W088: more than the chip has)" if sw.mau_stages_with_control > len(sw.per_stage) else ""))
        rows = [[str(s.stage), f"{s.sram_blocks}/{per_s}", f"{s.tcam_blocks}/{per_t}",
                 "#" * round(20 * s.sram_blocks / per_s) + "|" + "*" * round(20 * s.tcam_blocks / per_t)]
                for s in sw.per_stage]
        out += ["  " + r for r in _table(["MAU", "SRAM", "TCAM", "SRAM # | TCAM *"], rows)]
    if srv and plan.server:
        ns = ", ".join(f"{k} {v} ns ({srv.cycles_per_packet[k]} cycles)" for k, v in srv.ns_per_packet.items())
        out.append(f"server {plan.server.name}: per packet {ns}")
        out.append(f"  {srv.weighted_ns_per_offered_packet} ns per offered packet (traffic shares and cache misses "
                   f"included); {srv.crossing_share:.1%} of the offered packets visit a server")
    return out


def _margins_section(plan: Plan) -> list[str]:
    """Needed / available / headroom for every resource the build was checked against."""
    rows: list[list[str]] = []
    sw, srv = plan.switch_resources, plan.server_resources
    if sw and plan.switch:
        name = plan.switch.name
        rows += [_margin(f"{name} MAU stages", sw.mau_stages_used, len(sw.per_stage), "{:g}"),
                 *([_margin(f"{name} MAU stages with control code", sw.mau_stages_with_control, len(sw.per_stage),
                            "{:g}")] if sw.mau_stages_with_control else []),
                 _margin(f"{name} SRAM blocks", sw.sram_blocks, sw.sram_capacity, "{:g}"),
                 _margin(f"{name} TCAM blocks", sw.tcam_blocks, sw.tcam_capacity, "{:g}")]
    if srv and plan.server:
        link = "switch-server links" if plan.switch else "server NICs"
        over = set(srv.overcommitted)
        who = f"{srv.servers_carrying} x {plan.server.name}"
        if srv.servers_carrying < plan.servers:
            who = f"the first {plan.server.name} of {plan.servers}: no shard by"
        rows += [_margin(f"server memory (each {plan.server.name})", srv.memory_bytes, srv.memory_available_bytes,
                         "bytes", ServerResource.MEMORY in over),
                 _margin(f"server cores ({who})", srv.cores_needed,
                         srv.cores_available, "{:,.2f}", ServerResource.CORES in over),
                 _margin(f"{link} ({who})", srv.link_gbps_needed,
                         srv.link_gbps_available, "{:,.2f} Gbit/s", ServerResource.LINK in over)]
    if not rows:
        return []
    rate = f" at {srv.offered_rate_pps / 1e6:g} Mpps offered" if srv else ""
    return [f"margins{rate}", *("  " + r for r in _table(["resource", "needed", "available", "headroom"], rows))]


def _margin(what: str, needed: float, available: float, fmt: str, overcommitted: bool = False) -> list[str]:
    def show(x: float) -> str:
        return ("-" if x < 0 else "") + fmt_bytes(int(abs(x))) if fmt == "bytes" else fmt.format(x)

    head = available - needed
    share = f" ({head / available:.0%})" if available > 0 else ""
    flag = "  OVER-COMMITTED (--allow-overcommit)" if overcommitted else ""
    return [what, show(needed), show(available), f"{show(head)}{share}{flag}"]


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def pipeline_svg(plan: Plan, prog: ir.Program) -> str:
    """Each pipeline as a row of stage boxes, coloured by target."""
    box_w, box_h, gap = 150, 40, 30
    width = 40 + max(len(p.stages) for p in prog.pipelines) * (box_w + gap) if prog.pipelines else 200
    height = 60 + len(prog.pipelines) * 90
    where = {s.name: "server" if s.on_server else "switch" for s in plan.stages}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             'font-size="12">', f'<text x="10" y="20" font-size="14">{_esc(plan.source)}: '
             '<tspan fill="#4e79a7">switch</tspan> / <tspan fill="#f28e2b">server</tspan></text>']
    for row, p in enumerate(prog.pipelines):
        y = 50 + row * 90
        parts.append(f'<text x="10" y="{y - 6}">{_esc(p.name)}</text>')
        for i, s in enumerate(p.stages):
            x = 10 + i * (box_w + gap)
            parts.append(f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="6" '
                         f'fill="{COLOURS[where[s]]}"/>')
            parts.append(f'<text x="{x + 8}" y="{y + 25}" fill="white">{_esc(s)}</text>')
            if i:
                parts.append(f'<line x1="{x - gap}" y1="{y + 20}" x2="{x}" y2="{y + 20}" stroke="black"/>')
    return "\n".join([*parts, "</svg>"]) + "\n"


def resources_svg(plan: Plan) -> str:
    """SRAM and TCAM blocks used per MAU stage, as bars against the per-stage budget."""
    sw = plan.switch_resources
    if not sw or not plan.switch:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="200" height="30"><text y="20">no switch</text></svg>\n'
    spec = plan.switch.resources
    n = len(sw.per_stage)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{60 + n * 50}" height="260" font-family="sans-serif" '
             'font-size="11">',
             '<text x="10" y="15">MAU stage use: SRAM (blue), TCAM (green), % of per-stage budget</text>']
    for s in sw.per_stage:
        x = 40 + s.stage * 50
        bars = ((s.sram_blocks, spec["sram_blocks"], "#4e79a7"), (s.tcam_blocks, spec["tcam_blocks"], "#59a14f"))
        for j, (used, per, colour) in enumerate(bars):
            h = round(200 * used / per) if per else 0
            parts.append(f'<rect x="{x + j * 18}" y="{230 - h}" width="16" height="{h}" fill="{colour}"/>')
        parts.append(f'<text x="{x + 8}" y="250">{s.stage}</text>')
    parts.append('<line x1="35" y1="30" x2="35" y2="230" stroke="black"/>')
    return "\n".join([*parts, "</svg>"]) + "\n"
