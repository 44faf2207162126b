"""``nfc switch-model OUT``: run the switch part of a build in software.

Batch: ``--inject PORT=in.pcap ... --capture DIR [--entries FILE]`` writes one pcap per
egress port and ``counters.json``.  Live: ``--p4runtime 127.0.0.1:9559`` serves P4Runtime
(for ``--serve-seconds`` seconds, or until interrupted).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from emulator.switchmodel.batch import load_into, run_batch
from emulator.switchmodel.server import P4RuntimeServer, serve
from lang import SourceMap
from nfc._build_dir import open_build, parse_injects
from runtime.entries import load_entries

__all__ = ["add_parser", "switch_model"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = sub.add_parser("switch-model", help="run the switch part of a build in software (pcaps or P4Runtime)")
    s.add_argument("out", help="the output folder of nfc build")
    s.add_argument("--inject", action="append", default=[], metavar="PORT=PCAP")
    s.add_argument("--capture", metavar="DIR")
    s.add_argument("--entries", metavar="FILE", help="table entries (YAML or JSON, .nfp names)")
    s.add_argument("--p4runtime", metavar="ADDR", help="serve P4Runtime on ADDR (loopback), e.g. 127.0.0.1:9559")
    s.add_argument("--serve-seconds", type=float, default=0.0, help="with --p4runtime: stop after this long")
    s.add_argument("--arch", default="tna", choices=("tna", "v1model"),
                   help="which generated program runs (and whose P4Info names are served)")
    s.set_defaults(func=switch_model)


def switch_model(args: argparse.Namespace, sources: SourceMap) -> int:
    out = Path(args.out)
    plan, _placed, model = open_build(out, args.arch)
    if args.entries:
        load_into(model, load_entries(args.entries))
    if args.inject:
        counters = run_batch(model, parse_injects(args.inject), Path(args.capture or "capture"))
        print(json.dumps(counters, sort_keys=True))
    if args.p4runtime:
        names = json.loads(plan.path(out, "name_map").read_text())
        grpc_server, port = serve(P4RuntimeServer(model, names, args.arch), args.p4runtime)
        host = args.p4runtime.rsplit(":", 1)[0]
        print(f"P4Runtime on {host}:{port}", file=sys.stderr, flush=True)
        try:
            deadline = time.monotonic() + args.serve_seconds if args.serve_seconds else None
            while deadline is None or time.monotonic() < deadline:
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        grpc_server.stop(0)
    return 0
