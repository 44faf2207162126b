"""nfc's predicted switch resources beside what p4c's Tofino back end allocated (issue 48).

Usage (after ``source "$NFC_REAL_P4/env.sh"``, which puts ``p4c-barefoot`` and ``bfas`` on PATH
and sets ``TNA_P4INCLUDE``)::

    .venv/bin/python tools/real-p4/resources.py examples/vpn_gateway.nfp examples/dsr_router.nfp
    .venv/bin/python tools/real-p4/resources.py --chip 2 --tables --work /tmp/res PROGRAM.nfp
    .venv/bin/python tools/real-p4/resources.py --reuse ...   # use the outputs already under --work

For each program it runs ``nfc build PROGRAM --target tofino+dpdk`` (``tofino2+dpdk`` for
``--chip 2``) ``--no-verify --allow-overcommit -o WORK/<name>-tofino<chip>/nfc``, then
``nice -n 10 p4c-barefoot --target tofino --arch tna -g`` (``tofino2`` / ``t2na``) on the
generated ``switch/tna.p4`` into ``WORK/<name>-tofino<chip>/bf``, one compile at a time, and then
``bfas --no-bin`` on the ``tna.bfa`` the back end wrote, as p4c's own driver does (bf-p4c alone
leaves a ``context.json`` with no tables; the assembler writes the full one in a second or so).
It prints one markdown row per program; a cell is ``nfc / p4c (×nfc÷p4c)``, ``—`` where a side
reports nothing.  A program the back end refuses gets ``refused`` and the first error line.
``--tables`` adds two tables per program: each switch table and object of nfc's plan beside the
compiler's allocation for it, then what the compiler allocated that the plan does not name (the
drop counter ``nfc_drops``, shard steering, hash and keyless tables nfc generates); and each MAU
stage, nfc's blocks beside the compiler's with its logical tables (16 a stage), gateways and
action-data bus bytes.

What the columns count.  nfc's side is ``plan.json`` (``predicted_resources``); the compiler's is
``BF/pipe/logs/resources.json`` (written with ``-g``; ``compiled_resources``), else the
assembler's ``BF/pipe/context.json`` (both give the same RAM and TCAM counts per table; the
fallback has no map RAMs, and its PHV lists only stages up to the chip's last).  PHV from
``logs/phv.json``, else ``context.json``.

* MAU stages: nfc: ``resources.switch.mau_stages_with_control``, the stages its placement gives
  the table units with the generated control code around them (drop checks, the branches after
  lookups, hashes, the final drop-if-unforwarded test) estimated (``compiler/stage_estimate.py``;
  ``mau_stages_used``, the table units' alone, in plans from before it).  p4c: the last stage
  holding any logical table (match tables, gateways, the keyless tables the back end makes of a
  program's plain assignments, in either gress), plus one.
  bf-p4c's table placement goes on past the chip's last stage and exits 0; the assembler is what
  refuses such a program (bf-asm/stage.cpp: "tofino supports up to 12 stages"), so the count can
  exceed 12 and the row's note says so.
* SRAM blocks: one block is one 1K x 128-bit unit RAM (80 per stage: 8 rows x 10 columns on
  both chips).  nfc (compiler/resources.py): an exact table's entries of ``key + value + 4``
  bits packed into 128-bit words at 90 % cuckoo load (the action data in the entry, no separate
  action RAM); an lpm / ternary / range table's action data, ``value + 4`` bits per entry packed
  into words; registers ``size x width`` bits, counters 64 and meters 128 bits per index, each
  counted once.  p4c: every unit RAM of the stage's RAM array that ``resources.json`` names a
  user of: exact match RAMs of all cuckoo ways (their width comes from the match format: the
  key less the bits the hash address implies, version bits, action bits and immediate action
  data), algorithmic TCAM RAMs, ternary-indirection (TIND) RAMs, action-data RAMs, and the RAMs of
  counters, meters, registers and selectors including the synthetic-two-port spare bank of each.
  Neither side counts here map RAMs, gateways, stash entries or the hash-action / keyless tables
  (they take no RAM unless their action has data that is not immediate: then an action RAM).
* TCAM blocks: one 512 x 44-bit TCAM (24 per stage: 12 rows x 2 columns).  nfc: ``ceil(key bits
  / 44)`` wide (range fields twice) x ``ceil(entries / 512)`` deep.  p4c: every TCAM
  ``resources.json`` names a user of (ternary and lpm match; Tofino-1 has no other TCAM user).
* map RAMs: p4c only: the 6 x 8 per stage that counters, meters and registers use beside each of
  their RAMs, and idle-time tracking (a table with idle timeouts) uses alone; nfc does not model
  them.
* PHV: p4c only: the containers that hold a field slice (normal and tagalong, both gresses) and
  their bits.  nfc's profile gives only the chip's ``phv_bits`` (normal containers: 4,096 on
  Tofino-1) and predicts no use.
* action-data bus: p4c only: the bytes of a stage's action-data bus (128 on Tofino-1) that tables
  use, in the busiest stage.  nfc does not model the bus.

In ``--tables`` a compiler user is matched to an nfc table or object by its P4 name less the
control (``Ingress.``) and the back end's suffix (``$action``, ``$stats...``).  nfc's blocks of a
register, counter or meter are not in plan.json per object: this script prices them with
compiler/resources.py's ``register_blocks`` (the formula above, from the plan's profile figures).
p4c entries are the capacity of the table's stage tables (``context.json``: ways x RAM lines x
entries per line for exact, TCAM rows for ternary), nfc's the entries it placed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CHIPS", "Outcome", "compiled_resources", "first_error", "predicted_resources", "resource_row",
           "stage_rows", "table_rows"]

REPO = Path(__file__).resolve().parents[2]
NFC = REPO / ".venv" / "bin" / "nfc"
DASH = "—"

# chip -> (nfc --target, p4c-barefoot --target, --arch)
CHIPS: dict[int, tuple[str, str, str]] = {1: ("tofino+dpdk", "tofino", "tna"), 2: ("tofino2+dpdk", "tofino2", "t2na")}

# resources.json's used_for of a unit RAM -> the short name the tables print
_RAM_USE = {"match_entry_ram": "match", "algorithmic_tcam": "atcam", "ternary_indirection_ram": "tind",
            "action_ram": "action", "statistics_ram": "stats", "meter_ram": "meter", "meter_lpf": "meter",
            "meter_wred": "meter", "stateful_ram": "stateful", "select_ram": "select", "idletime": "idle"}
# context.json's stage_table_type of an SRAM allocation -> the same names
_CTX_USE = {"hash_way": "match", "hash_match": "match", "algorithmic_tcam_match": "atcam",
            "ternary_indirection": "tind", "action_data": "action", "statistics": "stats", "meter": "meter",
            "stateful": "stateful", "selection": "select", "idletime": "idle"}


def base_name(p4_name: str) -> str:
    """The program's name of a compiler resource user: ``Ingress.vni_to_qinq$action`` -> ``vni_to_qinq``."""
    return p4_name.split("$", 1)[0].rsplit(".", 1)[-1]


def _pipe_dir(bf_dir: Path) -> Path:
    """The folder of one pipe's outputs: ``bf_dir`` itself or its ``pipe`` (or only) subfolder."""
    for d in (bf_dir, bf_dir / "pipe", *sorted(p for p in bf_dir.glob("*") if p.is_dir())):
        if (d / "logs" / "resources.json").is_file() or (d / "context.json").is_file():
            return d
    raise FileNotFoundError(f"{bf_dir}: no pipe folder with logs/resources.json or context.json")


def _load(path: Path) -> Any:
    with path.open() as f:
        return json.load(f)


@dataclass
class _Use:
    """What one table (by base name) holds in the compiler's allocation."""

    stages: set[int]
    sram: Counter[str]
    tcam: int = 0
    map_rams: int = 0
    entries: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"stages": sorted(self.stages), "sram": dict(self.sram), "sram_blocks": sum(self.sram.values()),
                "tcam_blocks": self.tcam, "map_rams": self.map_rams, "entries": self.entries}


def _use(tables: dict[str, _Use], name: str) -> _Use:
    return tables.setdefault(base_name(name), _Use(set(), Counter()))


def _from_resources_json(doc: dict[str, Any], tables: dict[str, _Use]) -> dict[str, Any]:
    mau = doc["resources"]["mau"]
    per_stage: list[dict[str, Any]] = []
    sram_by_use: Counter[str] = Counter()
    for st in mau["mau_stages"]:
        k = int(st["stage_number"])
        rams: dict[tuple[int, int], dict[str, Any]] = {}
        for r in st["rams"]["srams"]:
            rams.setdefault((r["row"], r["column"]), r)  # a unit RAM once, to its first user
        for r in rams.values():
            u = r["usages"][0]
            kind = _RAM_USE.get(u["used_for"], u["used_for"])
            sram_by_use[kind] += 1
            t = _use(tables, u["used_by"])
            t.sram[kind] += 1
            t.stages.add(k)
        tcams = {(r["row"], r["column"]): r for r in st["tcams"]["tcams"]}
        for r in tcams.values():
            t = _use(tables, r["usages"][0]["used_by"])
            t.tcam += 1
            t.stages.add(k)
        maps = {(r["row"], r["unit_id"]): r for r in st["map_rams"]["maprams"]}
        for r in maps.values():
            _use(tables, r["usages"][0]["used_by"]).map_rams += 1
        logical = [x["table_name"] for x in st["logical_tables"]["ids"]]
        for name in logical:
            _use(tables, name).stages.add(k)
        adb = st.get("action_bus_bytes") or {}
        per_stage.append({"stage": k, "sram_blocks": len(rams), "tcam_blocks": len(tcams), "map_rams": len(maps),
                          "logical_tables": len(logical), "gateways": len(st["gateways"]["gateways"]),
                          "action_bus_bytes": len({b["byte_number"] for b in adb.get("bytes", [])}),
                          "action_bus_size": adb.get("size")})
    return {"n_stages": int(mau.get("nStages", len(per_stage))), "per_stage": per_stage,
            "sram_by_use": dict(sram_by_use)}


def _walk_alloc(node: Any, stage: int | None, kind: str | None) -> Iterator[tuple[int, str, str, int]]:
    """(stage, memory type, use, unit) of every unit RAM and TCAM under a context.json table (its map
    RAMs, gateways and phase-0 buffer are not counted)."""
    if isinstance(node, list):
        for x in node:
            yield from _walk_alloc(x, stage, kind)
        return
    if not isinstance(node, dict):
        return
    stage = node.get("stage_number", stage)
    kind = node.get("stage_table_type", kind)
    alloc = node.get("memory_resource_allocation")
    mtype = str(alloc.get("memory_type")) if isinstance(alloc, dict) else ""
    if isinstance(alloc, dict) and mtype in ("sram", "tcam") and stage is not None and stage >= 0:
        units = [u for mv in alloc.get("memory_units_and_vpns") or [] for u in mv.get("memory_units", [])]
        spare = alloc.get("spare_bank_memory_unit")
        if mtype == "sram" and isinstance(spare, int) and spare not in units:
            units.append(spare)
        use = "tcam" if mtype == "tcam" else _CTX_USE.get(str(kind), str(kind))
        for u in units:
            yield stage, mtype, use, int(u)
    for v in node.values():
        if isinstance(v, dict | list):
            yield from _walk_alloc(v, stage, kind)


def _from_context(ctx: dict[str, Any], tables: dict[str, _Use], memories: bool) -> dict[str, Any]:
    """Entries per table (and, when ``memories``, the memories: no resources.json) from context.json."""
    seen: set[tuple[int, str, int]] = set()
    per: dict[int, Counter[str]] = {}
    sram_by_use: Counter[str] = Counter()
    for t in ctx.get("tables", []):
        name = str(t.get("name", ""))
        if not name:
            continue
        stage_tables = (t.get("match_attributes") or {}).get("stage_tables") or t.get("stage_tables") or []
        stages = [int(s["stage_number"]) for s in stage_tables if int(s.get("stage_number", -1)) >= 0]
        if t.get("table_type") == "match" and stages:
            u = _use(tables, name)
            u.stages.update(stages)
            u.entries = (u.entries or 0) + sum(int(s.get("size", 0)) for s in stage_tables
                                               if int(s.get("stage_number", -1)) >= 0)
        if not memories:
            continue
        for stage, mtype, use, unit in _walk_alloc(t, None, None):
            if (stage, mtype, unit) in seen:
                continue
            seen.add((stage, mtype, unit))
            u = _use(tables, name)
            u.stages.add(stage)
            c = per.setdefault(stage, Counter())
            if mtype == "tcam":
                u.tcam += 1
                c["tcam"] += 1
            else:
                u.sram[use] += 1
                sram_by_use[use] += 1
                c["sram"] += 1
    if not memories:
        return {}
    chars = {int(s["stage"]) for s in ctx.get("mau_stage_characteristics") or [] if "stage" in s}
    n = max(len(chars), max(per, default=-1) + 1)
    return {"n_stages": n, "sram_by_use": dict(sram_by_use),
            "per_stage": [{"stage": k, "sram_blocks": per.get(k, Counter())["sram"],
                           "tcam_blocks": per.get(k, Counter())["tcam"], "map_rams": None,
                           "logical_tables": None, "action_bus_bytes": None} for k in range(n)]}


def _phv(pipe: Path, ctx: dict[str, Any] | None) -> dict[str, Any] | None:
    """Containers holding a field slice, and their bits, by container type."""
    used: dict[tuple[str, int], tuple[str, int]] = {}  # (gress, number) -> (type, bits)
    path = pipe / "logs" / "phv.json"
    if path.is_file():
        for c in _load(path).get("containers", []):
            if c.get("slices"):
                used[(str(c.get("gress")), int(c["phv_number"]))] = (str(c["container_type"]), int(c["bit_width"]))
        source = "phv.json"
    elif ctx and ctx.get("phv_allocation"):
        for per_stage in ctx["phv_allocation"]:
            for gress in ("ingress", "egress", "ghost"):
                for c in per_stage.get(gress, []):
                    used[(gress, int(c["phv_number"]))] = (str(c.get("container_type", "normal")),
                                                           int(c["word_bit_width"]))
        source = "context.json"
    else:
        return None
    by_type: dict[str, list[int]] = {}
    for kind, bits in used.values():
        n_bits = by_type.setdefault(kind, [0, 0])
        n_bits[0] += 1
        n_bits[1] += bits
    return {"containers": len(used), "bits": sum(b for _, b in used.values()), "by_type": by_type, "source": source}


def compiled_resources(bf_dir: Path) -> dict[str, Any]:
    """What p4c's Tofino back end allocated, from its output folder (``-o`` of p4c-barefoot, or its
    ``pipe`` folder): ``logs/resources.json`` (``-g``) for stages and memories, ``context.json``
    (after bfas) for the entries of each stage table, or for the memories when there is no
    resources.json; ``logs/phv.json`` or ``context.json`` for PHV.  See the module docstring for
    what each figure counts."""
    pipe = _pipe_dir(bf_dir)
    tables: dict[str, _Use] = {}
    ctx_path = pipe / "context.json"
    ctx = _load(ctx_path) if ctx_path.is_file() else None
    if ctx is not None and not ctx.get("tables"):
        ctx = None  # bf-p4c's skeleton: the assembler did not run
    res_path = pipe / "logs" / "resources.json"
    if res_path.is_file():
        out = _from_resources_json(_load(res_path), tables) | {"source": "resources.json"}
        if ctx is not None:
            _from_context(ctx, tables, memories=False)
    elif ctx is not None:
        out = _from_context(ctx, tables, memories=True) | {"source": "context.json"}
    else:
        raise FileNotFoundError(f"{pipe}: neither logs/resources.json (p4c-barefoot -g) nor a context.json "
                                "with tables (bfas)")
    per_stage = out["per_stage"]
    busy = [s["stage"] for s in per_stage if s["sram_blocks"] or s["tcam_blocks"] or s.get("logical_tables")]
    busy += [k for t in tables.values() for k in t.stages]
    adb = [s["action_bus_bytes"] for s in per_stage if s.get("action_bus_bytes") is not None]
    maps = [s.get("map_rams") for s in per_stage]
    return out | {
        "target": (ctx or {}).get("target"),
        "stages_used": max(busy, default=-1) + 1,
        "stages_with_tables": len(set(busy)),
        "sram_blocks": sum(s["sram_blocks"] for s in per_stage),
        "tcam_blocks": sum(s["tcam_blocks"] for s in per_stage),
        "map_rams": None if None in maps else sum(m for m in maps if m is not None),
        "action_bus_bytes": {"peak": max(adb), "total": sum(adb), "size": per_stage[0].get("action_bus_size")}
        if adb else None,
        "phv": _phv(pipe, ctx),
        "tables": {k: v.to_json() for k, v in sorted(tables.items())},
    }


def _object_blocks(width: int, size: int, res: dict[str, float]) -> int:
    """compiler/resources.py ``register_blocks``: ``size`` cells of ``width`` bits in 128-bit words."""
    bits, words = int(res.get("sram_bits", 128)), int(res.get("sram_words", 1024))
    if size <= 0 or width <= 0:
        return 0
    per_word, wide = (max(1, bits // width), 1) if width <= bits else (1, math.ceil(width / bits))
    return math.ceil(size / (words * per_word)) * wide


def predicted_resources(plan_json: Path | dict[str, Any]) -> dict[str, Any]:
    """nfc's prediction, from a build's ``plan.json`` (a path or the loaded document)."""
    plan = plan_json if isinstance(plan_json, dict) else _load(Path(plan_json))
    sw = (plan.get("resources") or {}).get("switch")
    if not sw:
        raise ValueError("plan.json has no switch resources (no switch target)")
    spec = (plan.get("targets") or {}).get("switch") or {}
    res: dict[str, float] = spec.get("resources") or {}
    tables: dict[str, dict[str, Any]] = {}
    for t in plan.get("tables", []):
        s = t.get("switch")
        if not s:
            continue
        mau = s.get("mau_stages")
        tables[t["name"]] = {"kind": "table", "match": t.get("match"), "placement": t.get("placement"),
                             "stages": list(range(mau[0], mau[1] + 1)) if mau else [],
                             "sram_blocks": s["sram_blocks"], "tcam_blocks": s["tcam_blocks"],
                             "entries": s.get("entries")}
    for o in plan.get("objects", []):
        if "switch" not in str(o.get("placement", "")):
            continue
        width = {"counter": 64, "meter": 128}.get(o["kind"], int(o.get("width") or 0))
        tables[o["name"]] = {"kind": o["kind"], "match": None, "placement": o["placement"], "stages": [],
                             "sram_blocks": _object_blocks(width, int(o["size"]), res), "tcam_blocks": 0,
                             "entries": int(o["size"])}
    return {"switch": spec.get("name"), "chip": int(res.get("chip", 0)) or None,
            "n_stages": len(sw["per_stage"]),
            # with the generated control code (compiler/stage_estimate.py); older plans: the tables'
            "stages_used": int(sw.get("mau_stages_with_control") or sw["mau_stages_used"]),
            "table_stages": int(sw["mau_stages_used"]),
            "sram_blocks": int(sw["sram_blocks"]), "tcam_blocks": int(sw["tcam_blocks"]),
            "sram_capacity": sw.get("sram_capacity"), "tcam_capacity": sw.get("tcam_capacity"),
            "per_stage": sw["per_stage"], "tables": tables,
            "map_rams": None, "phv": None, "action_bus_bytes": None}


# --- the tables -----------------------------------------------------------------------------------------

def _pair(nfc: int | None, p4c: int | str | None, ratio: bool = True) -> str:
    """``nfc / p4c``, and ``(×nfc÷p4c)`` when both are counts above zero."""
    a = DASH if nfc is None else f"{nfc:,}"
    b = DASH if p4c is None else (p4c if isinstance(p4c, str) else f"{p4c:,}")
    if ratio and isinstance(nfc, int) and isinstance(p4c, int) and nfc > 0 and p4c > 0:
        return f"{a} / {b} (×{nfc / p4c:.2f})"
    return f"{a} / {b}"


def _stages(stages: Iterable[int]) -> str:
    """[0, 8, 9, 10, 11] -> ``0,8..11``."""
    s = sorted(set(stages))
    runs: list[str] = []
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        runs.append(str(s[i]) if i == j else f"{s[i]}..{s[j]}")
        i = j + 1
    return ",".join(runs) or DASH


def _by_use(sram: dict[str, int]) -> str:
    return " + ".join(f"{n} {k}" for k, n in sorted(sram.items(), key=lambda kv: (-kv[1], kv[0]))) or DASH


HEADER = ("| program | chip | MAU stages nfc / p4c | SRAM blocks nfc / p4c | TCAM blocks nfc / p4c | map RAMs | "
          "PHV containers (bits) | action-data bus bytes, busiest stage | note |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def resource_row(program: str, chip: int, nfc: dict[str, Any] | None, p4c: dict[str, Any] | None,
                 note: str = "") -> str:
    """One markdown row; ``p4c`` None: the compiler refused (``note`` says why)."""
    n = nfc or {}
    if p4c is None:
        cells = [_pair(n.get("stages_used"), "refused"), _pair(n.get("sram_blocks"), None),
                 _pair(n.get("tcam_blocks"), None), _pair(None, None), _pair(None, None), _pair(None, None)]
    else:
        phv, adb = p4c.get("phv"), p4c.get("action_bus_bytes")
        cells = [_pair(n.get("stages_used"), p4c["stages_used"]), _pair(n.get("sram_blocks"), p4c["sram_blocks"]),
                 _pair(n.get("tcam_blocks"), p4c["tcam_blocks"]), _pair(None, p4c.get("map_rams")),
                 _pair(None, f"{phv['containers']} ({phv['bits']:,} b)" if phv else None),
                 _pair(None, f"{adb['peak']} of {adb['size']}" if adb else None)]
    note = note.replace("|", "\\|")
    return f"| {program} | {chip} | " + " | ".join(cells) + f" | {note} |"


TABLE_HEADER = ("| table | kind | MAU stages nfc / p4c | SRAM nfc / p4c | p4c SRAM by use | TCAM nfc / p4c | "
                "map RAMs | entries nfc / p4c |\n| --- | --- | --- | --- | --- | --- | --- | --- |")


def table_rows(nfc: dict[str, Any], p4c: dict[str, Any]) -> list[str]:
    """``--tables``: each table and object of the plan beside the compiler's allocation for it, then
    the compiler's other users of memory, then the memory-less logical tables, then the totals."""
    rows: list[str] = []
    theirs: dict[str, dict[str, Any]] = p4c["tables"]
    for name, t in nfc["tables"].items():
        c = theirs.get(name)
        if c is None:
            rows.append(f"| {name} | {t['kind']} | {_stages(t['stages'])} / {DASH} | {_pair(t['sram_blocks'], None)} | "
                        f"{DASH} | {_pair(t['tcam_blocks'], None)} | {DASH} | {_pair(t['entries'], None)} |")
            continue
        rows.append(f"| {name} | {t['match'] or t['kind']} | {_stages(t['stages'])} / {_stages(c['stages'])} | "
                    f"{_pair(t['sram_blocks'], c['sram_blocks'])} | {_by_use(c['sram'])} | "
                    f"{_pair(t['tcam_blocks'], c['tcam_blocks'])} | {c['map_rams'] or DASH} | "
                    f"{_pair(t['entries'], c['entries'])} |")
    quiet: list[tuple[str, list[int]]] = []
    for name, c in theirs.items():
        if name in nfc["tables"]:
            continue
        if not (c["sram_blocks"] or c["tcam_blocks"] or c["map_rams"]):
            quiet.append((name, c["stages"]))
            continue
        rows.append(f"| {name} | not in plan | {DASH} / {_stages(c['stages'])} | {_pair(None, c['sram_blocks'])} | "
                    f"{_by_use(c['sram'])} | {_pair(None, c['tcam_blocks'])} | {c['map_rams'] or DASH} | "
                    f"{_pair(None, c['entries'])} |")
    if quiet:
        stages = [k for _, s in quiet for k in s]
        rows.append(f"| {len(quiet)} gateways / keyless tables | no memory | {DASH} / {_stages(stages)} | | | | | |")
    rows.append(f"| **total** | | {nfc['stages_used']} / {p4c['stages_used']} | "
                f"{_pair(nfc['sram_blocks'], p4c['sram_blocks'])} | {_by_use(p4c['sram_by_use'])} | "
                f"{_pair(nfc['tcam_blocks'], p4c['tcam_blocks'])} | {p4c.get('map_rams') or DASH} | |")
    return rows


STAGE_HEADER = ("| MAU stage | SRAM nfc / p4c | TCAM nfc / p4c | p4c logical tables | p4c gateways | "
                "p4c action-data bus bytes | p4c tables with memory |\n| --- | --- | --- | --- | --- | --- | --- |")


def stage_rows(nfc: dict[str, Any], p4c: dict[str, Any]) -> list[str]:
    """``--tables``: per MAU stage, nfc's blocks beside the compiler's, and what else fills the stage."""
    ours = {int(s["stage"]): s for s in nfc["per_stage"]}
    theirs = {int(s["stage"]): s for s in p4c["per_stage"]}
    users: dict[int, list[str]] = {}
    for name, c in p4c["tables"].items():
        if c["sram_blocks"] or c["tcam_blocks"]:
            for k in c["stages"]:
                users.setdefault(k, []).append(name)
    rows = []
    for k in range(max([*ours, *theirs], default=-1) + 1):
        o, t = ours.get(k, {}), theirs.get(k, {})
        lt = t.get("logical_tables")
        rows.append(f"| {k} | {_pair(o.get('sram_blocks'), t.get('sram_blocks'), False)} | "
                    f"{_pair(o.get('tcam_blocks'), t.get('tcam_blocks'), False)} | {DASH if lt is None else lt} | "
                    f"{t.get('gateways', DASH)} | {t.get('action_bus_bytes', DASH)} | "
                    f"{', '.join(sorted(users.get(k, []))) or DASH} |")
    return rows


# --- running nfc and the back end -------------------------------------------------------------------------

_ERROR = re.compile(r"\berror\b:|Compiler Bug|Internal compiler error", re.I)
_CRASH = re.compile(r"terminate called|Segmentation fault|Aborted|timed out after", re.I)
_SUMMARY = re.compile(r"^\d+ errors?, \d+ warnings? generated")


def first_error(log: str, limit: int = 160) -> str:
    """The first line of a compiler log that reports an error, less its file path; else its last line."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    line = next((ln for ln in lines if _ERROR.search(ln) and not _SUMMARY.match(ln)), None)
    line = line or next((ln for ln in lines if _CRASH.search(ln)), lines[-1] if lines else "")
    line = re.sub(r"^/\S*/(?=[^/\s]+[(:]\d+)", "", line)  # /tmp/.../tna.p4(840): -> tna.p4(840):
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass
class Outcome:
    program: str
    chip: int
    nfc: dict[str, Any] | None
    p4c: dict[str, Any] | None
    note: str = ""


def _run(cmd: list[str], log: Path, timeout: float, cwd: Path = REPO) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, check=False)
        text, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        text, rc = out + f"\ntimed out after {timeout:g} s\n", -1
    log.write_text(text)
    return rc, text


def measure(program: Path, chip: int, work: Path, reuse: bool, timeout: float) -> Outcome:
    """Build ``program`` with nfc and compile its switch program with p4c-barefoot -g (then bfas)."""
    name = program.stem
    target, p4c_target, arch = CHIPS[chip]
    here = work / f"{name}-tofino{chip}"
    nfc_out, bf_out = here / "nfc", here / "bf"
    here.mkdir(parents=True, exist_ok=True)
    plan = nfc_out / "plan.json"
    if not (reuse and plan.is_file()):
        shutil.rmtree(nfc_out, ignore_errors=True)
        rc, text = _run([str(NFC), "build", str(program.resolve()), "--target", target, "--no-verify",
                         "--allow-overcommit", "-o", str(nfc_out)], here / "nfc.log", timeout)
        if rc != 0 or not plan.is_file():
            return Outcome(name, chip, None, None, "nfc build failed: " + first_error(text))
    try:
        nfc = predicted_resources(plan)
    except ValueError as e:
        return Outcome(name, chip, None, None, str(e))
    tna = nfc_out / "switch" / "tna.p4"
    if not tna.is_file():
        return Outcome(name, chip, nfc, None, "no switch/tna.p4")
    rc_file, p4c_log = here / "p4c.rc", here / "p4c.log"
    if reuse and rc_file.is_file() and p4c_log.is_file():
        rc, text = int(rc_file.read_text()), p4c_log.read_text()
    else:
        p4c, include = shutil.which("p4c-barefoot"), os.environ.get("TNA_P4INCLUDE")
        if p4c is None or include is None:
            sys.exit("p4c-barefoot not on PATH or TNA_P4INCLUDE unset: source \"$NFC_REAL_P4/env.sh\"")
        shutil.rmtree(bf_out, ignore_errors=True)
        rc, text = _run(["nice", "-n", "10", p4c, "--target", p4c_target, "--arch", arch, "-g", "-I", include,
                         "-o", str(bf_out), str(tna)], p4c_log, timeout)
        rc_file.write_text(f"{rc}\n")
    if rc != 0:
        return Outcome(name, chip, nfc, None, "refused: " + first_error(text))
    note = _assemble(bf_out, p4c_target, here / "bfas.log", timeout)
    try:
        return Outcome(name, chip, nfc, compiled_resources(bf_out), note)
    except (FileNotFoundError, KeyError) as e:
        return Outcome(name, chip, nfc, None, f"compiled, but no report: {e}")


def _assemble(bf_out: Path, target: str, log: Path, timeout: float) -> str:
    """Run bfas on the back end's ``.bfa`` as p4c's driver does (a second or two): it writes the full
    context.json, and it is where a program placed in more MAU stages than the chip has is refused
    (bf-p4c's table placement goes on past the last stage; bf-asm/stage.cpp reports it)."""
    try:
        pipe = _pipe_dir(bf_out)
    except FileNotFoundError:
        return ""
    bfa = next(iter(sorted(pipe.glob("*.bfa"))), None)
    bfas = shutil.which("bfas")
    if bfa is None or bfas is None:
        return "" if bfa is None else "bfas not on PATH: not assembled"
    (pipe / "logs").mkdir(exist_ok=True)
    rc, text = _run(["nice", "-n", "10", bfas, "--target", target, "--no-bin", "-o", str(pipe), str(bfa)], log,
                    timeout)
    return "" if rc == 0 else "assembler (bfas) refused: " + first_error(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("programs", nargs="+", type=Path, metavar="PROGRAM.nfp")
    ap.add_argument("--chip", type=int, choices=sorted(CHIPS), default=1, help="Tofino-1 (default) or Tofino-2")
    ap.add_argument("--work", type=Path, default=REPO / "build" / "real-p4-resources",
                    help="where the builds and compiles go (default build/real-p4-resources)")
    ap.add_argument("--tables", action="store_true", help="also a per-table breakdown for each program")
    ap.add_argument("--reuse", action="store_true", help="use the nfc build and compile already under --work")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per nfc build or compile (default 1800)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON instead of markdown")
    args = ap.parse_args(argv)
    outcomes: list[Outcome] = []
    for prog in args.programs:
        o = measure(prog, args.chip, args.work.resolve(), args.reuse, args.timeout)
        outcomes.append(o)
        print(f"{prog}: {'compiled' if o.p4c else o.note or 'refused'}", file=sys.stderr)
    if args.json:
        print(json.dumps([o.__dict__ for o in outcomes], indent=1))
        return 0
    print(HEADER)
    for o in outcomes:
        print(resource_row(o.program, o.chip, o.nfc, o.p4c, o.note))
    if args.tables:
        for o in outcomes:
            if o.nfc and o.p4c:
                print(f"\n{o.program}, Tofino-{o.chip}\n\n{TABLE_HEADER}")
                print("\n".join(table_rows(o.nfc, o.p4c)))
                print(f"\n{STAGE_HEADER}")
                print("\n".join(stage_rows(o.nfc, o.p4c)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
