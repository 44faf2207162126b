"""``nfc run OUT --entries FILE --inject PORT=in.pcap ... --capture DIR``: the switch model
and the compiled DPDK server program, connected as in a real PE (batch mode); a build for a
switch alone runs in the switch model, one for a server alone runs the DPDK program on its
logical ports.  ``--live`` with ``--p4rt-cert/--p4rt-key [--p4rt-client-ca]`` serves the
switch's P4Runtime endpoint over TLS (mutual TLS) to other controllers."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from emulator.switchmodel.server import P4RuntimeServer, ServeError, ServerTls, serve
from lang import SourceMap
from nfc._build_dir import BuildError, open_build, open_placed, parse_injects
from nfc._p4rt_tls import FlagError, security, server_tls
from runtime.entries import EntriesError, load_entries
from runtime.errors import RuntimeApiError
from runtime.p4runtime import SwitchClient
from runtime.run import RunError, run_hybrid, run_live, run_server

__all__ = []


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace, sources: SourceMap) -> int:
    """The switch model serves P4Runtime on loopback; the runtime API writes the entries
    through it (as to a real switch) and through the server program's control channel."""
    try:
        tls = server_tls(args, args.live, "--live")
    except FlagError as e:
        print(f"nfc run: {e}", file=sys.stderr)
        return 2
    if args.manage_caches < 0:
        print("nfc run: --manage-caches MS is a step period in ms (> 0)", file=sys.stderr)
        return 2
    if args.manage_caches and not args.live:
        print("nfc run: --manage-caches runs with --live (the caches change while packets flow)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)  # clean up on SIGTERM as on ^C
    out = Path(args.out)
    plan, _placed = open_placed(out)
    if plan.switch is None:
        return _run_server(args, out)
    plan, _placed, model = open_build(out)
    names = json.loads(plan.path(out, "name_map").read_text())
    p4rt = P4RuntimeServer(model, names, "tna")
    with tempfile.TemporaryDirectory(prefix="nfc-p4rt-") as private:
        try:
            grpc_server, port, own = _endpoint(p4rt, tls, Path(private))
        except ServeError as e:
            print(f"nfc run: {e}", file=sys.stderr)
            return 1
        client = None
        try:
            entries = load_entries(args.entries) if args.entries else []
            client = SwitchClient(own, names, "tna")
            if args.live:
                print(f"switch model P4Runtime{security(tls)} on 127.0.0.1:{port}", file=sys.stderr, flush=True)
                counters = run_live(out, plan, p4rt, model.server_ports, client, entries, parse_injects(args.inject),
                                    Path(args.capture), args.pps, args.serve_seconds,
                                    lambda m: print(m, file=sys.stderr, flush=True), args.goal,
                                    args.manage_caches / 1000)
            else:
                counters = run_hybrid(out, plan, model, client, entries, parse_injects(args.inject),
                                      Path(args.capture), args.goal)
        except KeyboardInterrupt:  # everything started has been cleaned up on the way out
            print("nfc run: interrupted", file=sys.stderr)
            return 130
        except (RunError, EntriesError, RuntimeApiError) as e:
            print(f"nfc run: {e}", file=sys.stderr)
            return 1
        finally:
            if client is not None:
                client.close()
            grpc_server.stop(0)
    print(json.dumps(counters, sort_keys=True))
    return 0


def _endpoint(p4rt: P4RuntimeServer, tls: ServerTls | None, private: Path) -> tuple[Any, int, str]:
    """Serve ``p4rt`` on a loopback port (TLS with ``tls``); the gRPC server, its port and
    the address nfc run's own client uses.  Under TLS that client, which holds no client
    certificate, talks plaintext on a unix socket in ``private`` (a folder only this user
    can enter), so the TCP port serves only clients that pass TLS."""
    local = private / "p4runtime.sock" if tls is not None else None
    grpc_server, port = serve(p4rt, tls=tls, local=local)
    return grpc_server, port, f"unix:{local}" if local is not None else f"127.0.0.1:{port}"


def _run_server(args: argparse.Namespace, out: Path) -> int:
    """A build without a switch: the DPDK program alone, on the injected logical ports."""
    if args.live:
        raise BuildError(f"{out} has no switch program: --live runs a switch model in front of the server; "
                         "run it without --live, or rebuild with a switch target")
    try:
        counters = run_server(out, load_entries(args.entries) if args.entries else [], parse_injects(args.inject),
                              Path(args.capture), args.goal)
    except KeyboardInterrupt:
        print("nfc run: interrupted", file=sys.stderr)
        return 130
    except (RunError, EntriesError, RuntimeApiError) as e:
        print(f"nfc run: {e}", file=sys.stderr)
        return 1
    print(json.dumps(counters, sort_keys=True))
    return 0
