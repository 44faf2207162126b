"""``nfc run OUT --entries FILE --inject PORT=in.pcap ... --capture DIR``: the switch model
and the compiled DPDK server program, connected as in a real PE (batch mode); a build for a
switch alone runs in the switch model, one for a server alone runs the DPDK program on its
logical ports.  ``--live`` with ``--p4rt-cert/--p4rt-key [--p4rt-client-ca]`` serves the
switch's P4Runtime endpoint over TLS (mutual TLS) to other controllers.

While it runs, progress lines go to stderr (runtime/run.py's ``progress``); at the end a
summary table goes to stdout: packets in and out per port, drops by reason, punts, the server
tables' and cache managers' counters, where the capture is.  ``--json`` prints the counters
as one JSON line instead (what ``counters.json`` in the capture folder holds), for scripts."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scapy.utils import RawPcapReader

from compiler.manifest import Plan
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


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


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
        return _run_server(args, out, plan)
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
                _progress(f"switch model P4Runtime{security(tls)} on 127.0.0.1:{port}")
                counters = run_live(out, plan, p4rt, model.server_ports, client, entries, parse_injects(args.inject),
                                    Path(args.capture), args.pps, args.serve_seconds, _progress, args.goal,
                                    args.manage_caches / 1000)
            else:
                counters = run_hybrid(out, plan, model, client, entries, parse_injects(args.inject),
                                      Path(args.capture), args.goal, _progress)
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
    _print(args, counters, plan)
    return 0


def _endpoint(p4rt: P4RuntimeServer, tls: ServerTls | None, private: Path) -> tuple[Any, int, str]:
    """Serve ``p4rt`` on a loopback port (TLS with ``tls``); the gRPC server, its port and
    the address nfc run's own client uses.  Under TLS that client, which holds no client
    certificate, talks plaintext on a unix socket in ``private`` (a folder only this user
    can enter), so the TCP port serves only clients that pass TLS."""
    local = private / "p4runtime.sock" if tls is not None else None
    grpc_server, port = serve(p4rt, tls=tls, local=local)
    return grpc_server, port, f"unix:{local}" if local is not None else f"127.0.0.1:{port}"


def _run_server(args: argparse.Namespace, out: Path, plan: Plan) -> int:
    """A build without a switch: the DPDK program alone, on the injected logical ports."""
    if args.live:
        raise BuildError(f"{out} has no switch program: --live runs a switch model in front of the server; "
                         "run it without --live, or rebuild with a switch target")
    try:
        counters = run_server(out, load_entries(args.entries) if args.entries else [], parse_injects(args.inject),
                              Path(args.capture), args.goal, _progress)
    except KeyboardInterrupt:
        print("nfc run: interrupted", file=sys.stderr)
        return 130
    except (RunError, EntriesError, RuntimeApiError) as e:
        print(f"nfc run: {e}", file=sys.stderr)
        return 1
    _print(args, counters, plan)
    return 0


# ---- the summary ------------------------------------------------------------------------------


def _print(args: argparse.Namespace, counters: dict[str, Any], plan: Plan) -> None:
    """The run's counters on stdout: one JSON line with ``--json``, else the summary table."""
    if args.json:
        print(json.dumps(counters, sort_keys=True))
    else:
        print(summary(counters, _injected(parse_injects(args.inject)), plan, Path(args.capture)))


def _injected(injects: list[tuple[int, Path]]) -> Counter[int]:
    """Packets per input port, as the pcaps hold them."""
    return Counter(port for port, path in injects for _ in RawPcapReader(str(path)))


def summary(counters: dict[str, Any], injected: Counter[int], plan: Plan, capture: Path) -> str:
    """``counters`` (runtime/run.py's) as aligned text tables: packets in (``injected``) and
    out per port, drops and punts by reason, the server tables, the servers and cache
    managers when there are several or any, and where the capture is."""
    out = {int(p): n for p, n in counters["egress_packets"].items()}
    ports = sorted(set(injected) | set(out))
    blocks = [_table(("port", "in (injected)", "out (captured)"),
                     [*((p, injected.get(p, 0), out.get(p, 0)) for p in ports),
                      ("all", sum(injected.values()), sum(out.values()))])]
    drops = {k: v for k, v in counters["drops"].items() if not k.startswith("punt:")}
    punts = {k: v for k, v in counters["drops"].items() if k.startswith("punt:")}
    blocks.append(_table(("dropped", "packets"), sorted(drops.items())) if drops else ["dropped: none"])
    if punts:
        blocks.append(_table(("punted", "packets"), sorted(punts.items())))
    server = counters.get("server", {})
    if server.get("tables"):
        rows = [(name, t.get("entries"), t.get("hits"), t.get("misses"), _cache(plan, name))
                for name, t in sorted(server["tables"].items())]
        cached = any(r[-1] is not None for r in rows)  # the column only when a table has a switch cache
        blocks.append(_table(("server table", "entries", "hits", "misses", "switch cache")[:5 if cached else 4],
                             [r[:5 if cached else 4] for r in rows]))
    if counters.get("servers"):  # several server programs (shard by): what each carried
        heads = list(counters["servers"][0])
        blocks.append(_table(["server port" if h == "port" else h for h in heads],
                             [[s.get(h) for h in heads] for s in counters["servers"]]))
    if counters.get("cache_managers"):
        blocks.append(_table(("cache manager", "promoted", "evicted", "failed steps"),
                             [(name, m["promoted"], m["evicted"], m["failed_steps"])
                              for name, m in sorted(counters["cache_managers"].items())]))
    files = [*(f"port-{p}.pcap" for p in sorted(out)), "counters.json"]
    programs = "the server program" + (f"s ({plan.server_count})" if plan.server_count > 1 else "")
    forwarded = server.get("forwarded", 0)
    tail = [f"{programs} forwarded {forwarded:,} packet{'' if forwarded == 1 else 's'}"] if plan.server else []
    tail.append(f"capture: {capture} ({', '.join(files)})")
    return "\n\n".join("\n".join(b) for b in [*blocks, tail])


def _cache(plan: Plan, table: str) -> str | None:
    """The switch cache in front of a server table: its entries ("1,024 entries"); None if none."""
    info = next((t for t in plan.tables if t.name == table), None)
    return f"{info.switch_entries:,} entries" if info is not None and info.cached else None


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Rows under ``head``, each column as wide as its widest cell: the first left-aligned,
    the others right-aligned (numbers with thousands separators, None as "-")."""
    cells = [[_cell(x) for x in row] for row in [head, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
            .rstrip() for row in cells]


def _cell(x: object) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)
