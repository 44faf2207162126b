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
from nfc._p4rt_tls import FlagError, add_tls_flags, security, server_tls
from runtime.entries import EntriesError, load_entries
from runtime.errors import RuntimeApiError
from runtime.p4runtime import SwitchClient
from runtime.run import RunError, run_hybrid, run_live, run_server

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = sub.add_parser("run", help="run the built data plane here: switch model + the real DPDK server program")
    s.add_argument("out", help="the output folder of nfc build")
    s.add_argument("--entries", metavar="FILE", help="table entries (YAML or JSON, .nfp names)")
    s.add_argument("--inject", action="append", default=[], metavar="PORT=PCAP", required=True)
    s.add_argument("--capture", metavar="DIR", default="capture")
    s.add_argument("--goal", metavar="FILE|URL",
                   help="keep the goal state (every entry the runtime wrote) in this SQLite file, or in the Redis "
                        "of a redis:// or unix:// URL (shared by gateways): the data planes first get what an "
                        "earlier run left there, then --entries")
    s.add_argument("--live", action="store_true",
                   help="run live: the server program on a veth pair (net_af_packet) in a network namespace of its "
                        "own, entries changeable while packets flow (needs root)")
    s.add_argument("--pps", type=float, default=1000.0, help="--live: injection rate, packets per second")
    s.add_argument("--serve-seconds", type=float, default=0.0,
                   help="--live: keep running this long after injecting, P4Runtime and control socket open")
    s.add_argument("--manage-caches", nargs="?", type=float, const=5.0, default=0.0, metavar="MS",
                   help="--live: a cache manager for every switch cache (promoting what the server sees hit, "
                        "evicting the idle; data-plane state pushed to the switch) stepping every MS ms (5)")
    add_tls_flags(s, "--live")
    s.set_defaults(func=run)


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
