"""``nfc switch-model OUT``: run the switch part of a build in software.

Batch: ``--inject PORT=in.pcap ... --capture DIR [--entries FILE]`` writes one pcap per
egress port and ``counters.json``.  Live: ``--p4runtime [ADDR]`` serves P4Runtime (for
``--serve-seconds`` seconds, or until interrupted) on ADDR, on loopback when ADDR is only a
port or not given; ``--p4rt-cert/--p4rt-key [--p4rt-client-ca]`` make it TLS (mutual TLS).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from compiler.interp import TableError
from emulator.switchmodel.batch import load_into, run_batch
from emulator.switchmodel.server import P4RuntimeServer, ServeError, ServerTls, serve
from lang import SourceMap
from nfc._build_dir import open_build, parse_injects
from nfc._p4rt_tls import FlagError, security, server_tls
from runtime.entries import EntriesError, load_entries
from runtime.errors import RuntimeApiError

__all__ = ["switch_model"]

def bind_address(arg: str) -> str:
    """``--p4runtime``'s address: a bare port is a port on loopback, so only this machine
    can drive the switch unless another host is named."""
    return f"127.0.0.1:{arg}" if arg.isdigit() else arg


def switch_model(args: argparse.Namespace, sources: SourceMap) -> int:
    try:
        tls = server_tls(args, args.p4runtime is not None, "--p4runtime")
    except FlagError as e:
        print(f"nfc switch-model: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    plan, _placed, model = open_build(out, args.arch)
    try:
        if args.entries:
            load_into(model, {t.name: t for t in plan.tables}, load_entries(args.entries))
        if args.inject:
            counters = run_batch(model, parse_injects(args.inject), Path(args.capture or "capture"))
            print(json.dumps(counters, sort_keys=True))
        if args.p4runtime is not None:
            _serve(P4RuntimeServer(model, json.loads(plan.path(out, "name_map").read_text()), args.arch),
                   bind_address(args.p4runtime), tls, args.serve_seconds)
    except (EntriesError, RuntimeApiError, TableError, ServeError) as e:
        print(f"nfc switch-model: {e}", file=sys.stderr)
        return 1
    return 0


def _serve(server: P4RuntimeServer, address: str, tls: ServerTls | None, seconds: float) -> None:
    """Serve until ``seconds`` have passed (0: until interrupted); the bound address on stderr."""
    grpc_server, port = serve(server, address, tls)
    print(f"P4Runtime{security(tls)} on {address.rsplit(':', 1)[0]}:{port}", file=sys.stderr, flush=True)
    try:
        deadline = time.monotonic() + seconds if seconds else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    grpc_server.stop(0)
