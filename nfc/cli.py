"""``nfc check | build`` — the command line (see DESIGN.md for the contract)."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nfc._p4rt_tls import add_tls_flags

if TYPE_CHECKING:  # the front end is imported once the command line is parsed (``nfc --help`` needs none of it)
    from lang import Diagnostics, SourceMap

__all__ = ["main"]

DEFAULT_P4RUNTIME = "127.0.0.1:9559"  # P4Runtime's IANA port, on loopback

Command = Callable[[argparse.Namespace, "SourceMap"], int]


def _lazy(module: str, name: str) -> Command:
    """The command ``module.name``, imported when it runs: ``nfc --help`` and ``nfc check`` do
    not load the generators, Z3, gRPC, the switch model or the runtime."""

    def command(args: argparse.Namespace, sources: SourceMap) -> int:
        run: Command = getattr(importlib.import_module(module), name)
        return run(args, sources)
    return command


def _check(args: argparse.Namespace, sources: SourceMap) -> int:
    """Front end plus the target-independent semantic passes (header validity)."""
    from compiler.lower import lower
    from compiler.passes.validity import check_validity
    from lang import Diagnostics, load

    diags = Diagnostics()
    checked = load(args.file, diags, sources)
    diags.raise_if_errors()
    check_validity(lower(checked), diags)
    diags.raise_if_errors()
    _warn(diags, sources)
    print(f"{args.file}: ok")
    return 0


def _fmt(args: argparse.Namespace, sources: SourceMap) -> int:
    from lang import Diagnostics, load
    from lang.parser import parse_text
    from lang.printer import print_module

    diags = Diagnostics()
    load(args.file, diags, sources)  # full check first: never reformat a broken program
    diags.raise_if_errors()
    text = Path(args.file).read_text()
    print(print_module(parse_text(text, args.file, diags)), end="")
    return 0


def _warn(diags: Diagnostics, sources: SourceMap) -> None:
    for d in diags.items:
        print(sources.render(d), file=sys.stderr)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not '{text}'")
    return value


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="nfc", description="Compile network functions for switch + server data planes.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("check", help="parse and type-check a .nfp file")
    p.add_argument("file")
    p.set_defaults(func=_check)
    f = sub.add_parser("fmt", help="print a .nfp file in canonical form (comments are dropped)")
    f.add_argument("file")
    f.set_defaults(func=_fmt)
    b = sub.add_parser("build", help="place the stages and generate everything a deployment needs")
    b.add_argument("file")
    b.add_argument("--target", default="tofino+dpdk",
                   help="tofino+dpdk (default), tofino, dpdk, or profile/target names joined by '+'")
    b.add_argument("-o", "--out", help="output folder (default build/<name>)")
    b.add_argument("--dump-after", metavar="PASS", help="print what PASS produced (see --list-passes)")
    b.add_argument("--list-passes", action="store_true", help="list the passes in order and exit")
    b.add_argument("--no-verify", action="store_true", help="skip the Z3 proof that the placement equals the spec")
    b.add_argument("--allow-overcommit", action="store_true",
                   help="build even when the servers lack the memory, cores or link bandwidth the deployment's rate "
                        "needs (error E081 becomes warning W081)")
    b.add_argument("--place-timeout", type=_seconds, metavar="SECONDS",
                   help="stop the partitioner after SECONDS (default 60) and keep the best placement found, with its "
                        "optimality gap (warning W080)")
    b.add_argument("--no-cache", action="store_true",
                   help="solve the placement even if the cache holds one for this program (the cache: $NFC_CACHE_DIR, "
                        "default build/cache in nfc's folder; NFC_CACHE_DIR=off turns it off)")
    b.set_defaults(func=_lazy("nfc.build", "build"))
    _add_switch_model(sub)
    _add_run(sub)
    _add_verify(sub)
    return ap


def _add_switch_model(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = sub.add_parser("switch-model", help="run the switch part of a build in software (pcaps or P4Runtime)")
    s.add_argument("out", help="the output folder of nfc build")
    s.add_argument("--inject", action="append", default=[], metavar="PORT=PCAP")
    s.add_argument("--capture", metavar="DIR")
    s.add_argument("--entries", metavar="FILE", help="table entries (YAML or JSON, .nfp names)")
    s.add_argument("--p4runtime", metavar="ADDR", nargs="?", const=DEFAULT_P4RUNTIME,
                   help=f"serve P4Runtime on ADDR (HOST:PORT, or PORT on loopback; default {DEFAULT_P4RUNTIME})")
    s.add_argument("--serve-seconds", type=float, default=0.0, help="with --p4runtime: stop after this long")
    add_tls_flags(s, "--p4runtime")
    s.add_argument("--arch", default="tna", choices=("tna", "v1model"),
                   help="which generated program runs (and whose P4Info names are served)")
    s.set_defaults(func=_lazy("nfc.switch_model", "switch_model"))


def _add_run(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = sub.add_parser("run", help="run the built data plane here: switch model + the real DPDK server program")
    s.add_argument("out", help="the output folder of nfc build")
    s.add_argument("--entries", metavar="FILE", help="table entries (YAML or JSON, .nfp names)")
    s.add_argument("--inject", action="append", default=[], metavar="PORT=PCAP", required=True)
    s.add_argument("--capture", metavar="DIR", default="capture")
    s.add_argument("--json", action="store_true",
                   help="print the counters as one JSON line (as DIR/counters.json holds them), not the summary table")
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
    s.set_defaults(func=_lazy("nfc.run", "run"))


def _add_verify(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = sub.add_parser("verify", help="prove with Z3 that the placed program forwards as the spec")
    s.add_argument("out", help="the output folder of nfc build")
    s.add_argument("--timeout", type=float, default=60.0, help="seconds per pipeline (default 60)")
    s.set_defaults(func=_lazy("nfc.verify", "verify"))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from lang import CompileError, InternalError, SourceMap
    from nfc._build_dir import BuildError

    sources = SourceMap()
    func: Command = args.func
    try:
        return func(args, sources)
    except CompileError as e:
        for d in e.diagnostics:
            print(sources.render(d), file=sys.stderr)
        n = sum(1 for d in e.diagnostics if d.severity.value == "error")
        print(f"{n} error{'s' if n != 1 else ''}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"nfc: {e.strerror or e}: {e.filename or ''}", file=sys.stderr)
        return 1
    except BuildError as e:
        print(f"nfc: {e}", file=sys.stderr)
        return 1
    except InternalError as e:
        print(f"nfc: {e}", file=sys.stderr)
        if os.environ.get("NFC_DEBUG"):
            traceback.print_exc()
        return 3
    except Exception as e:
        print(f"nfc: internal error: {type(e).__name__}: {e} (this is a bug in nfc, please report it; "
              "set NFC_DEBUG=1 for the traceback)", file=sys.stderr)
        if os.environ.get("NFC_DEBUG"):
            traceback.print_exc()
        return 3


if __name__ == "__main__":
    sys.exit(main())
