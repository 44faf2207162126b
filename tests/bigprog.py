"""Large ``.nfp`` programs for the scale tests and benchmarks (issue 13, item 6; issue 47, item 0).

Families of valid programs that ``nfc build`` accepts:

* ``bluebird(copies)``: ``examples/bluebird_tor.nfp`` with its fabric → bare-metal pipeline
  (``vnet_to_bare_metal``: stages ``vxlan_decap`` and ``deliver``, tables ``vni_to_vrf`` and
  ``bare_metal_hosts``) replicated ``copies`` times under renamed tables, stages and pipelines,
  one fabric port each: 5 + 2 x copies stages (x16: 37, x32: 69, the figures of the issue).
* ``synthetic(stages)``: pipelines of dependent lookups with exactly ``stages`` stages in all,
  mixing exact, LPM and ternary tables, switch caches of large tables, tables too big for the
  switch, and statement-only stages, so every part of the partitioner's model is exercised.
* ``knapsack(pad)``: three one-stage pipelines whose tables cannot all fit the switch, where the
  cheapest relief is not the one with the most memory per nanosecond (a greedy's trap), plus
  ``pad`` small pipelines.
* ``long_pipeline(stages)``: one pipeline of exactly ``stages`` stages, Bluebird's seven
  (bare metal → VNET, then VNET → bare metal) over and over under renamed stages and tables,
  parsed by ``from_bare_metal`` (issue 47: compile time against the length of a pipeline).

Imported by ``tests/test_partition_scale.py``, ``tests/test_compile_scale.py``,
``bench/bench_place.py`` and ``bench/bench_compile.py``; no test imports another test module.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["bluebird", "bluebird_stages", "knapsack", "long_pipeline", "synthetic"]

ROOT = Path(__file__).resolve().parent.parent
BLUEBIRD = ROOT / "examples/bluebird_tor.nfp"
_FABRIC = ("table vni_to_vrf", "table bare_metal_hosts", "stage vxlan_decap", "stage deliver",
           "pipeline vnet_to_bare_metal")
_RENAMED = ("vni_to_vrf", "bare_metal_hosts", "vxlan_decap", "deliver", "vnet_to_bare_metal")
_FIRST_FABRIC_PORT = 66  # after bluebird's bare-metal ports 0..47 and its server ports 64..65
_CPU_PORT = 192  # tofino1's cpu_port: no pipeline may take it


def _block(text: str, head: str) -> tuple[int, int]:
    """Start and end (exclusive) of the brace-balanced declaration that starts with ``head``."""
    start = text.index(head + " {")
    depth = 0
    for i in range(text.index("{", start), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return start, i + 1
    raise ValueError(f"unbalanced braces after {head!r}")


def _fabric_ports(copies: int) -> list[int]:
    ports = [p for p in range(_FIRST_FABRIC_PORT, 512) if p != _CPU_PORT]
    if copies > len(ports):
        raise ValueError(f"at most {len(ports)} copies fit tofino1's 9-bit port numbers")
    return ports[:copies]


def bluebird(copies: int) -> str:
    """Bluebird with ``copies`` renamed copies of its fabric → bare-metal pipeline (see module docstring)."""
    text = BLUEBIRD.read_text()
    blocks: list[str] = []
    for start, end in sorted((_block(text, head) for head in _FABRIC), reverse=True):  # last first: offsets hold
        blocks.insert(0, text[start:end])
        text = text[:start] + text[end:]
    template = "\n\n".join(blocks)
    names = re.compile(r"\b(" + "|".join(_RENAMED) + r")\b")
    copies_text = []
    for k, port in enumerate(_fabric_ports(copies)):
        copy = names.sub(lambda m, k=k: f"{m.group(1)}_{k}", template)
        copy = copy.replace("ports = fabric_ports;", f"ports = [{port}..{port}];")
        copy = copy.replace("traffic = 50%;", f"traffic = {50 / copies:.4g}%;")  # the copies share the fabric's half
        copies_text.append(copy)
    anchor = text.index("// §4.2/§4.4: the SFE")
    return text[:anchor] + "\n\n".join(copies_text) + "\n\n" + text[anchor:]


def bluebird_stages(copies: int) -> int:
    """How many stages ``bluebird(copies)`` has."""
    return 5 + 2 * copies


_DEPLOYMENT = "deployment d { switch = tofino1; servers = [dpdk_server]; server_ports = [500..501]; rate = 1Mpps; }"
_HEAD = """import "std/headers.nfp";
packet { eth: ethernet; ip: ipv4; }
parser p { state start { extract eth; extract ip; transition accept; } }
"""

# (match kind, entries, value bits, cache): a cycle of table shapes.  Exact 64K and LPM 4K
# fit the switch; ternary 2K takes 4 TCAM blocks; 2M exact entries fit only as a cache; 40M
# LPM entries do not fit the switch at all (a server stage).
_SHAPES = (("exact", 65_536, 32, False), ("lpm", 4_096, 16, False), ("exact", 2_000_000, 32, True),
           ("ternary", 2_048, 16, False), ("exact", 16_384, 32, False), ("lpm", 40_000_000, 16, False))


def _stage(i: int, key: str, out: str) -> tuple[str, str]:
    """Table ``t{i}`` keyed on ``key`` and stage ``s{i}`` that looks it up, writing ``out``."""
    kind, size, vbits, cache = _SHAPES[i % len(_SHAPES)]
    if i % 7 == 6:  # a stage without lookups: one switch unit that needs no memory
        return "", f"stage s{i} {{ {out} = {key} + {i}; }}"
    hints = " active = 10%; cache = true;" if cache else ""
    table = f"table t{i} {{ key {{ {key}: {kind}; }} value {{ v: bit<{vbits}>; }} size = {size};{hints} }}"
    stage = f"stage s{i} {{ lookup t{i} {{ hit(r) {{ {out} = bit<32>(r.v); }} miss {{ drop(miss{i}); }} }} }}"
    return table, stage


def synthetic(stages: int, per_pipeline: int = 5) -> str:
    """A program of exactly ``stages`` stages in pipelines of ``per_pipeline`` stages (the last
    one may be shorter), each stage's key being what the stage before it in its pipeline wrote
    (a dependency chain); the last stage forwards.  Pipelines share their metadata fields
    (``meta.m<position>``): a packet takes one pipeline."""
    if stages < 1 or per_pipeline < 2:
        raise ValueError("need at least one stage and pipelines of at least two stages")
    out = [_HEAD, "metadata { " + " ".join(f"m{j}: bit<32>;" for j in range(per_pipeline)) + " }"]
    pipes: list[list[str]] = []
    for i in range(stages):
        j = i % per_pipeline  # position in its pipeline
        if j == 0:
            pipes.append([])
        key = "ip.dst" if j == 0 else f"meta.m{j - 1}"
        if i == stages - 1:  # the last stage forwards, so every pipeline ends by choosing a port
            out.append(f"stage s{i} {{ forward(bit<16>({key}[3:0])); }}")
        else:
            out += [x for x in _stage(i, key, f"meta.m{j}") if x]
        pipes[-1].append(f"s{i}")
    share = f"{100 / len(pipes):.4g}%"
    for k, names in enumerate(pipes):
        out.append(f"pipeline main{k} {{ ports = [{k}..{k}]; parser = p; stages = [{', '.join(names)}]; "
                   f"traffic = {share}; }}")
    out.append(_DEPLOYMENT)
    return "\n".join(out) + "\n"


# name -> (entries, traffic %): 32-bit key + 32-bit value + 4 bits = 68 bits, one entry per 128-bit
# word, 1024 words a block at 90 % load: 921.6 entries a block, so a: 600 blocks, b and c: 400 each.
_KNAPSACK = {"a": (552_960, 35), "b": (368_640, 20), "c": (368_640, 20)}


def knapsack(pad: int = 0) -> str:
    """Three pipelines, one lookup each, 1400 SRAM blocks against Tofino-1's 12 x 80 = 960: one
    of them must go to the server (a alone, or b and c).  Their stages cost the same per packet,
    so a pipeline's server cost is its traffic share: a alone (35 %) is cheapest, but b and c
    each free more blocks per share (400 / 20 > 600 / 35).  ``pad`` one-lookup pipelines of
    1024 entries (2 blocks each, 1 % of the traffic) make the program larger without changing that."""
    rows = [_HEAD, "metadata { x: bit<32>; }"]
    tables = _KNAPSACK | {f"pad{i}": (1024, 1) for i in range(pad)}
    for k, (name, (size, traffic)) in enumerate(tables.items()):
        rows += [f"table t_{name} {{ key {{ ip.dst: exact; }} value {{ v: bit<32>; }} size = {size}; }}",
                 f"stage s_{name} {{ lookup t_{name} {{ hit(r) {{ meta.x = r.v; forward(1); }} "
                 "miss { drop(miss); } } }",
                 f"pipeline p_{name} {{ ports = [{k}..{k}]; parser = p; stages = [s_{name}]; traffic = {traffic}%; }}"]
    rows.append(_DEPLOYMENT)
    return "\n".join(rows) + "\n"


# Bluebird's stages in pipeline order, and the tables each one looks up
_BLUEBIRD_STAGES = {"select_vrf": ("port_vrf",), "route": ("vrf_routes_v4", "vrf_routes_v6"),
                    "map_ca_to_pa": ("ca_to_pa",), "vxlan_encap": (), "underlay": ("pa_routes",),
                    "vxlan_decap": ("vni_to_vrf",), "deliver": ("bare_metal_hosts",)}
_LONG_REMOVED = ("pipeline bare_metal_to_vnet", "pipeline vnet_to_bare_metal", "parser from_fabric")
# what the DPDK server holds (targets/dpdk/lower.py): 64 tables, 64 words of lookup result fields
_LONG_WORDS = 64


def _value_words(table: str) -> int:
    """64-bit words of the value fields of a table declaration."""
    value = table[table.index("value {"):]
    value = value[:value.index("}")]
    return sum((int(w) + 63) // 64 for w in re.findall(r"bit<(\d+)>", value))


def long_pipeline(stages: int) -> str:
    """Bluebird's stages repeated in one pipeline of exactly ``stages`` stages: stage ``i`` is a
    copy of Bluebird's stage ``i mod 7`` named ``<stage>_<i>``, looking up its own tables
    ``<table>_<i>``.  Once the tables' values would take more than 64 words (after 30 stages,
    31 tables), every further stage is a copy of ``vxlan_encap``, which looks nothing up: what
    the DPDK server holds bounds the lookups, and any table may end up there.  Bluebird's two
    pipelines and its fabric parser give way to pipeline ``long`` on ports 0..63, parsed by
    ``from_bare_metal``."""
    if stages < 1:
        raise ValueError("need at least one stage")
    text = BLUEBIRD.read_text()
    tables = [t for ts in _BLUEBIRD_STAGES.values() for t in ts]
    spans = {head: _block(text, head) for head in [f"stage {s}" for s in _BLUEBIRD_STAGES]
             + [f"table {t}" for t in tables] + list(_LONG_REMOVED)}
    decls = {head: text[start:end] for head, (start, end) in spans.items()}
    for start, end in sorted(spans.values(), reverse=True):  # last first: offsets hold
        text = text[:start] + text[end:]
    names = re.compile(r"\b(" + "|".join([*_BLUEBIRD_STAGES, *tables]) + r")\b")
    cycle = list(_BLUEBIRD_STAGES.items())
    body: list[str] = []
    order: list[str] = []
    words, full = 0, False
    for i in range(stages):
        stage, looked_up = cycle[i % len(cycle)]
        cost = sum(_value_words(decls[f"table {t}"]) for t in looked_up)
        full = full or words + cost > _LONG_WORDS
        if full:
            stage, looked_up, cost = "vxlan_encap", (), 0
        words += cost
        for decl in [f"table {t}" for t in looked_up] + [f"stage {stage}"]:
            body.append(names.sub(lambda m, i=i: f"{m.group(1)}_{i}", decls[decl]))
        order.append(f"{stage}_{i}")
    body.append(f"pipeline long {{\n  ports = [0..63];\n  parser = from_bare_metal;\n  stages = [{', '.join(order)}];\n"
                "  traffic = 100%;\n}")
    anchor = text.index("// §4.2/§4.4: the SFE")
    return text[:anchor] + "\n\n".join(body) + "\n\n" + text[anchor:]
