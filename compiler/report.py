"""The human-readable placement report: a text table, a pipeline picture coloured by
target and a per-MAU-stage resource chart (both SVG, written directly: no tool needed)."""

from __future__ import annotations

from typing import Any

from compiler import ir
from compiler.analysis import stage_units
from compiler.explain import max_entries
from compiler.passes.capabilities import needs, supports
from compiler.resources import table_blocks
from compiler.targets import TargetSpec

__all__ = ["pipeline_svg", "resources_svg", "text_report", "why_server"]

COLOURS = {"switch": "#4e79a7", "server": "#f28e2b"}
_ARTIFACT_PREFIX = {"switch": "switch_", "server": "server_"}


def why_server(prog: ir.Program, stage: ir.Stage, sw: TargetSpec | None) -> str:
    """One sentence: why a stage is not on the switch."""
    if sw is None:
        return "no switch in this build"
    lacking = sorted({u.what for u in needs(prog, stage) if not supports(sw, u)})
    if lacking:
        return f"{sw.name} cannot do {', '.join(lacking)}"
    cap = int(sw.res("stages") * sw.res("sram_blocks")), int(sw.res("stages") * sw.res("tcam_blocks"))
    for u in stage_units(prog, stage):
        for name in u.tables:
            t = prog.tables[name]
            b = table_blocks(t, t.size, sw)
            if b.sram > cap[0] or b.tcam > cap[1]:
                return (f"table '{name}' ({t.size:,} entries) needs {b.sram:,} SRAM / {b.tcam:,} TCAM blocks; "
                        f"{sw.name} has {cap[0]} / {cap[1]} (fits up to {max_entries(t, sw):,} entries)")
    return "the switch's remaining resources do not fit it next to the other stages"


def _row(cols: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return [_row(header, widths), _row(["-" * w for w in widths], widths), *(_row(r, widths) for r in rows)]


def text_report(plan: dict[str, Any], prog: ir.Program, sw: TargetSpec | None) -> str:
    t = plan["targets"]
    names = " + ".join(x for x in [t["switch"] and t["switch"]["name"],
                                    t["server"] and f"{t['servers']} x {t['server']['name']}"] if x)
    out = [f"nfc placement report: {plan['source']}", f"target: {plan['target']} ({names})", ""]
    for p in prog.pipelines:
        out.append(f"pipeline {p.name} ({p.traffic:.0%} of traffic)")
        rows = []
        for s in (x for x in plan["stages"] if x["pipeline"] == p.name):
            why = why_server(prog, prog.stages[s["name"]], sw) if s["placement"] == "server" else ""
            rows.append([s["name"], s["segment"], s["source"], str(s.get("server_ns", "")), why])
        out += ["  " + r for r in _table(["stage", "placement", "source", "server ns", "why not on the switch"], rows)]
        out.append("")
    out += [*_tables_section(plan), "", *_cache_section(plan), *_bridges_section(plan), "",
            *_resources_section(plan)]
    proof = "proved optimal" if plan["solver"]["optimal"] else "NOT proved optimal"
    out.append(f"solver: {plan['solver']['engine']}, {proof} for: {'; then '.join(plan['solver']['objectives'])}")
    if plan["generated"]:
        out.append("generated: " + ", ".join(f"{k} ({v})" for k, v in plan["generated"].items()))
    missing = [t["kind"] for t in (plan["targets"]["switch"], plan["targets"]["server"])
               if t and not any(k.startswith(_ARTIFACT_PREFIX[t["kind"]]) for k in plan["generated"])]
    if missing:
        out.append(f"code generation: no {' or '.join(missing)} code was generated (generator not implemented yet)")
    return "\n".join(out) + "\n"


def _tables_section(plan: dict[str, Any]) -> list[str]:
    rows = []
    for t in plan["tables"]:
        sw = t.get("switch") or {}
        srv = t.get("server") or {}
        mau = sw.get("mau_stages")
        rows.append([t["name"], t["match"], f"{t['size']:,}", t["placement"], f"{sw.get('entries', 0):,}" if sw else "",
                     str(sw.get("sram_blocks", "")), str(sw.get("tcam_blocks", "")),
                     f"{mau[0]}..{mau[1]}" if mau else "", _bytes(srv["memory_bytes"]) if srv else ""])
    return ["tables", *("  " + r for r in _table(
        ["table", "match", "size", "placement", "switch entries", "SRAM", "TCAM", "MAU", "server memory"], rows))]


def _cache_section(plan: dict[str, Any]) -> list[str]:
    out = []
    for x in plan["cache_miss_paths"]:
        out.append(f"switch cache of '{x['table']}': {x['cached_entries']:,} entries on the switch; expected hit rate "
                   f"{x['hit_rate']:.1%}; a miss goes to the server, which runs stage '{x['stage']}' on the full "
                   f"table ({x['server_ns']} ns per missed packet) and returns the packet to the switch")
    return [*out, ""] if out else []


def _bridges_section(plan: dict[str, Any]) -> list[str]:
    out = ["bridge headers"]
    if not plan["bridges"]:
        return [*out, "  (none: no stage runs on a server)"]
    for b in plan["bridges"]:
        fields = ", ".join(f"{f['name']}:{f['width']}" for f in b["fields"]) or "no fields"
        out.append(f"  #{b['cut_id']} {b['pipeline']} {b['path']} {b['direction']} ({b['bytes']} bytes): cut_id:8, "
                   f"valid[{', '.join(b['valid_bits'])}], {fields}")
    return out


def _resources_section(plan: dict[str, Any]) -> list[str]:
    out: list[str] = []
    sw, srv = plan["resources"]["switch"], plan["resources"]["server"]
    if sw:
        spec = plan["targets"]["switch"]
        per_s, per_t = int(spec["resources"]["sram_blocks"]), int(spec["resources"]["tcam_blocks"])
        out.append(f"switch {spec['name']}: {sw['mau_stages_used']} of {len(sw['per_stage'])} MAU stages used; "
                   f"SRAM {sw['sram_blocks']}/{sw['sram_capacity']} blocks, "
                   f"TCAM {sw['tcam_blocks']}/{sw['tcam_capacity']}")
        rows = [[str(s["stage"]), f"{s['sram_blocks']}/{per_s}", f"{s['tcam_blocks']}/{per_t}",
                 "#" * round(20 * s["sram_blocks"] / per_s) + "|" + "*" * round(20 * s["tcam_blocks"] / per_t)]
                for s in sw["per_stage"]]
        out += ["  " + r for r in _table(["MAU", "SRAM", "TCAM", "SRAM # | TCAM *"], rows)]
    if srv:
        spec = plan["targets"]["server"]
        ns = ", ".join(f"{k} {v} ns ({srv['cycles_per_packet'][k]} cycles)" for k, v in srv["ns_per_packet"].items())
        out.append(f"server {spec['name']}: per packet {ns}")
        out.append(f"  {srv['weighted_ns_per_offered_packet']} ns per offered packet (traffic shares and cache misses "
                   "included)")
        out.append(f"  at {srv['offered_rate_pps'] / 1e6:g} Mpps offered: {srv['cores_needed']} cores needed of "
                   f"{srv['cores_available']}; memory {_bytes(srv['memory_bytes'])} of "
                   f"{_bytes(srv['memory_available_bytes'])}; switch-server links "
                   f"{srv['link_gbps_needed']} of {srv['link_gbps_available']:g} Gbit/s "
                   f"({srv['crossing_share']:.1%} of packets cross)")
    return out


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def pipeline_svg(plan: dict[str, Any], prog: ir.Program) -> str:
    """Each pipeline as a row of stage boxes, coloured by target."""
    box_w, box_h, gap = 150, 40, 30
    width = 40 + max(len(p.stages) for p in prog.pipelines) * (box_w + gap) if prog.pipelines else 200
    height = 60 + len(prog.pipelines) * 90
    where = {s["name"]: s["placement"] for s in plan["stages"]}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             'font-size="12">', f'<text x="10" y="20" font-size="14">{_esc(plan["source"])}: '
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


def resources_svg(plan: dict[str, Any]) -> str:
    """SRAM and TCAM blocks used per MAU stage, as bars against the per-stage budget."""
    sw = plan["resources"]["switch"]
    if not sw:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="200" height="30"><text y="20">no switch</text></svg>\n'
    spec = plan["targets"]["switch"]["resources"]
    per = {"sram": spec["sram_blocks"], "tcam": spec["tcam_blocks"]}
    n = len(sw["per_stage"])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{60 + n * 50}" height="260" font-family="sans-serif" '
             'font-size="11">',
             '<text x="10" y="15">MAU stage use: SRAM (blue), TCAM (green), % of per-stage budget</text>']
    for s in sw["per_stage"]:
        x = 40 + s["stage"] * 50
        for j, (kind, colour) in enumerate((("sram", "#4e79a7"), ("tcam", "#59a14f"))):
            frac = s[f"{kind}_blocks"] / per[kind] if per[kind] else 0
            h = round(200 * frac)
            parts.append(f'<rect x="{x + j * 18}" y="{230 - h}" width="16" height="{h}" fill="{colour}"/>')
        parts.append(f'<text x="{x + 8}" y="250">{s["stage"]}</text>')
    parts.append('<line x1="35" y1="30" x2="35" y2="230" stroke="black"/>')
    return "\n".join([*parts, "</svg>"]) + "\n"
