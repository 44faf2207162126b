"""``nfc check | build`` — the command line (see DESIGN.md for the contract)."""

from __future__ import annotations

import argparse
import math
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from compiler.lower import lower
from compiler.passes.validity import check_validity
from lang import CompileError, Diagnostics, InternalError, SourceMap, load
from lang.parser import parse_text
from lang.printer import print_module
from nfc._build_dir import BuildError
from nfc.build import build
from nfc.run import add_parser as add_run
from nfc.switch_model import add_parser as add_switch_model
from nfc.verify import add_parser as add_verify

__all__ = ["main"]


def _check(args: argparse.Namespace, sources: SourceMap) -> int:
    """Front end plus the target-independent semantic passes (header validity)."""
    diags = Diagnostics()
    checked = load(args.file, diags, sources)
    diags.raise_if_errors()
    check_validity(lower(checked), diags)
    diags.raise_if_errors()
    _warn(diags, sources)
    print(f"{args.file}: ok")
    return 0


def _fmt(args: argparse.Namespace, sources: SourceMap) -> int:
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
    b.set_defaults(func=build)
    add_switch_model(sub)
    add_run(sub)
    add_verify(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    sources = SourceMap()
    func: Callable[[argparse.Namespace, SourceMap], int] = args.func
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
