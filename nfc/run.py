"""``nfc run OUT --entries FILE --inject PORT=in.pcap ... --capture DIR``: the switch model
and the compiled DPDK server program, connected as in a real PE (batch mode)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lang import SourceMap
from nfc._build_dir import open_build, parse_injects
from runtime.entries import load_entries
from runtime.run import RunError, run_hybrid
from targets.switchmodel.batch import load_into

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = sub.add_parser("run", help="run the built data plane here: switch model + the real DPDK server program")
    s.add_argument("out", help="the output folder of nfc build")
    s.add_argument("--entries", metavar="FILE", help="table entries (YAML or JSON, .nfp names)")
    s.add_argument("--inject", action="append", default=[], metavar="PORT=PCAP", required=True)
    s.add_argument("--capture", metavar="DIR", default="capture")
    s.set_defaults(func=run)


def run(args: argparse.Namespace, sources: SourceMap) -> int:
    out = Path(args.out)
    plan, _c, model = open_build(out, sources)
    entries = load_entries(args.entries) if args.entries else []
    on_switch = {t["name"] for t in plan["tables"] if t["placement"].startswith("switch")}
    load_into(model, [e for e in entries if e.table in on_switch])
    try:
        counters = run_hybrid(out, plan, model, entries, parse_injects(args.inject), Path(args.capture))
    except RunError as e:
        print(f"nfc run: {e}", file=sys.stderr)
        return 1
    print(json.dumps(counters, sort_keys=True))
    return 0
