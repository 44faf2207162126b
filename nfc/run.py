"""``nfc run OUT --entries FILE --inject PORT=in.pcap ... --capture DIR``: the switch model
and the compiled DPDK server program, connected as in a real PE (batch mode)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lang import SourceMap
from nfc._build_dir import open_build, parse_injects
from runtime.entries import EntriesError, load_entries
from runtime.errors import RuntimeApiError
from runtime.p4runtime import SwitchClient
from runtime.run import RunError, run_hybrid
from targets.switchmodel.server import P4RuntimeServer, serve

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = sub.add_parser("run", help="run the built data plane here: switch model + the real DPDK server program")
    s.add_argument("out", help="the output folder of nfc build")
    s.add_argument("--entries", metavar="FILE", help="table entries (YAML or JSON, .nfp names)")
    s.add_argument("--inject", action="append", default=[], metavar="PORT=PCAP", required=True)
    s.add_argument("--capture", metavar="DIR", default="capture")
    s.set_defaults(func=run)


def run(args: argparse.Namespace, sources: SourceMap) -> int:
    """The switch model serves P4Runtime on loopback; the runtime API writes the entries
    through it (as to a real switch) and through the server program's control channel."""
    out = Path(args.out)
    plan, _c, model = open_build(out, sources)
    names = json.loads((out / plan["generated"]["name_map"]).read_text())
    grpc_server, port = serve(P4RuntimeServer(model, names, "tna"))
    client = None
    try:
        entries = load_entries(args.entries) if args.entries else []
        client = SwitchClient(f"127.0.0.1:{port}", names, "tna")
        counters = run_hybrid(out, plan, model, client, entries, parse_injects(args.inject), Path(args.capture))
    except (RunError, EntriesError, RuntimeApiError) as e:
        print(f"nfc run: {e}", file=sys.stderr)
        return 1
    finally:
        if client is not None:
            client.close()
        grpc_server.stop(0)
    print(json.dumps(counters, sort_keys=True))
    return 0
