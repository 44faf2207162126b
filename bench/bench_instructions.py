"""Instructions a packet in the server's burst (issue 13): the VPN gateway's server part run by
nf-bench under valgrind's callgrind, which counts every instruction the forwarding loop's
``nfc_burst`` (targets/dpdk/runtime/nfc_burst.h: bridge decode, parse, lookups, the stage,
output) executes, its own and with the calls it makes (the bulk lookups), per packet processed.

A count is exact and the same run after run, where a timing on a shared machine swings by tens
of percent: ``--base TREE`` builds the same program with another checkout's nfc and runtime (a
``git worktree`` of another commit) and prints the two counts and their ratio, so a change to
the generated code or the runtime is measured by what it removes.  Instructions are not time
(a cache miss costs many cycles in one instruction), so the timed benchmarks
(bench_dpdk.py, bench_l3fwd.py) still decide: on 2026-11-29, 11 % fewer instructions
(271.8 -> 242.3) gave no change in Mpps the slow machine could resolve (docs/server.md,
"Fewer instructions, no time resolved").

    .venv/bin/python bench/bench_instructions.py                 # this tree (~1 minute)
    .venv/bin/python bench/bench_instructions.py --base TREE     # and TREE, with the ratio
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_dpdk import Workload, run_bench  # noqa: E402
from bench.bench_l3fwd import build_nfc  # noqa: E402

VPN = "examples/vpn_gateway.nfp"
# -g: nothing else changes in the code (callgrind reads its line tables); not -march=native:
# valgrind 3.19 cannot run AVX-512, which a native build uses where the CPU has it
CFLAGS = "-O2 -march=x86-64-v3 -g"


def build(tree: Path, out: Path) -> Path:
    """``nfc build`` of this tree's VPN gateway by ``tree``'s nfc (the packets are this tree's)
    and its ``make -B nf-bench`` with CFLAGS."""
    try:
        return build_nfc(ROOT / VPN, out, "--no-verify", tree=tree, target="tofino+dpdk",
                         make=("-B", f"CFLAGS={CFLAGS}", "nf-bench"))
    except RuntimeError as e:
        raise SystemExit(f"{tree}: {e}") from None


def burst_rows(annotated: str) -> dict[str, int]:
    """The instruction counts of the rows of functions named nfc_burst* in callgrind_annotate's
    listing (``N  file:function [object]``; a function GCC cloned, as ``nfc_burst.constprop.0``,
    counts under its clone).  With -g's line tables a function is a row per source file its code
    came from (nfc_burst.h, nfc_rt.h, nf.c, ...): its own count is their sum.  In the inclusive
    listing the row its callers name (file and function of the call's target) is given the
    whole cost of every call to it, the other rows only their own: the largest row is the
    function with what it called (their sum would count it twice)."""
    row = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S*?):nfc_burst\S*", re.M)  # N (P%) file:function
    rows = {Path(m[2]).name: int(m[1].replace(",", "")) for m in row.finditer(annotated)}
    if not rows:
        raise SystemExit("no nfc_burst function in the profile: the compiler inlined it into its caller")
    return rows


def count(binary: Path, work: Workload, entries: int, size: int, ms: int, tmp: Path) -> dict[str, float]:
    out = tmp / f"cg.{binary.parent.parent.name}.out"
    res = run_bench(binary, work, entries, size, False, "null", argparse.Namespace(lcore=1, ms=ms, reps=1, iters=1000),
                    wrap=("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"))
    if isinstance(res, str):
        raise SystemExit(f"nf-bench under valgrind: {res}")
    packets = int(res["nfc_processed"])
    listing = {}
    for incl in ("no", "yes"):
        a = subprocess.run(["callgrind_annotate", f"--inclusive={incl}", "--threshold=100", "--auto=no", str(out)],
                           capture_output=True, text=True)
        if a.returncode != 0:
            raise SystemExit(f"callgrind_annotate failed ({a.returncode}): {a.stderr[-1500:]}")
        listing[incl] = a.stdout
    files = burst_rows(listing["no"])
    return {"packets": packets, "own": sum(files.values()) / packets,
            "with_calls": max(burst_rows(listing["yes"]).values()) / packets,
            **{f"in {name}": n / packets for name, n in files.items() if n >= packets}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, help="another checkout (e.g. a git worktree of another commit)")
    ap.add_argument("--entries", type=int, default=1, help="overlay_routes entries (default 1)")
    ap.add_argument("--size", type=int, default=64, help="customer frame bytes (default 64)")
    ap.add_argument("--ms", type=int, default=300, help="milliseconds of each nf-bench mode (under valgrind)")
    ap.add_argument("--quick", action="store_true", help="100 ms a mode (build.py bench --quick): the count is "
                    "the same, over fewer packets")
    args = ap.parse_args()
    if args.quick:
        args.ms = 100
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing measured")
        return 0
    with tempfile.TemporaryDirectory(prefix="nfc-instr-") as tmpdir:
        tmp = Path(tmpdir)
        work = Workload(tmp, 65536)
        trees = [("this", ROOT)] + ([("base", args.base.resolve())] if args.base else [])
        got = {name: count(build(tree, tmp / name), work, args.entries, args.size, args.ms, tmp)
               for name, tree in trees}
    print(f"VPN gateway server part, {args.entries} entries, {args.size} B frames: instructions a packet in "
          "nfc_burst (own; with the calls it makes), callgrind")
    for name, c in got.items():
        where = ", ".join(f"{k.removeprefix('in ')} {v:.1f}" for k, v in c.items() if k.startswith("in "))
        print(f"  {name:<5} {c['own']:8.1f}  {c['with_calls']:8.1f}   ({c['packets']:,.0f} packets; own: {where})")
    if "base" in got:
        print(f"  this / base: {got['this']['own'] / got['base']['own']:.3f} own, "
              f"{got['this']['with_calls'] / got['base']['with_calls']:.3f} with calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
