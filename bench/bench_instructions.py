"""Instructions a packet in the server's burst (issue 13), counted by valgrind's callgrind: every
instruction the forwarding loop's ``nfc_burst`` (targets/dpdk/runtime/nfc_burst.h: bridge decode,
parse, lookups, the stage, output) executes, its own and with the calls it makes (the bulk
lookups), per packet processed, in one of two programs:

* ``--program vpn`` (the default): the VPN gateway's server part run by nf-bench (1 entry: the
  bench_dpdk.py workload);
* ``--program l3fwd``: bench/l3fwd.nfp built ``--target dpdk`` and run by ``nf`` itself on the
  1K-route workload of bench_l3fwd.py (4,096 flows, each frame 25 times, from a ``net_pcap``
  file to ``net_null``), so the count also takes in what only a server alone does (the
  checksum rewrite, the egress port's DPDK port: ``out_port``, inlined into the burst).  The
  output queues of nfc_main.c's ``process`` are not counted: GCC inlines it into the forwarding
  loop, whose idle polling at the end (how nf knows a pcap has ended) depends on time.

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
    .venv/bin/python bench/bench_instructions.py --program l3fwd --base TREE
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _l3fwd_work as l3work  # noqa: E402
from bench.bench_dpdk import COMMON, Workload, run_bench  # noqa: E402
from bench.bench_l3fwd import Workload as L3Workload  # noqa: E402
from bench.bench_l3fwd import build_nfc  # noqa: E402

VPN = "examples/vpn_gateway.nfp"
L3FWD = "bench/l3fwd.nfp"
L3FWD_ROUTES = 1000
L3FWD_REPEATS = 25  # each of the 4,096 flows' frames: ~100K packets, a few seconds under valgrind
# -g: nothing else changes in the code (callgrind reads its line tables); not -march=native:
# valgrind 3.19 cannot run AVX-512, which a native build uses where the CPU has it
CFLAGS = "-O2 -march=x86-64-v3 -g"


def build(program: str, tree: Path, out: Path) -> Path:
    """``nfc build`` of this tree's ``program`` (the VPN gateway, for nf-bench, or bench/l3fwd.nfp
    ``--target dpdk``, for nf) by ``tree``'s nfc (the packets are this tree's) and its ``make -B``
    with CFLAGS."""
    nfp, target, binary = (VPN, "tofino+dpdk", "nf-bench") if program == "vpn" else (L3FWD, "dpdk", "nf")
    try:
        return build_nfc(ROOT / nfp, out, "--no-verify", tree=tree, target=target,
                         make=("-B", f"CFLAGS={CFLAGS}", binary))
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


def count_vpn(binary: Path, work: Workload, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    out = tmp / f"cg.{binary.parent.parent.name}.out"
    res = run_bench(binary, work, args.entries, args.size, False, "null",
                    argparse.Namespace(lcore=1, ms=args.ms, reps=1, iters=1000),
                    wrap=("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"))
    if isinstance(res, str):
        raise SystemExit(f"nf-bench under valgrind: {res}")
    return tally(out, int(res["nfc_processed"]))


def l3fwd_files(tmp: Path) -> tuple[Path, Path]:
    """bench_l3fwd.py's 1K routes (nf's entries file) and its flows' frames, each L3FWD_REPEATS times."""
    w = L3Workload(L3FWD_ROUTES, tmp)
    pcap = tmp / "l3fwd_flows.pcap"
    l3work.nfc_entries(w.routes, w.files.nfc_entries)
    l3work.write_pcap(pcap, w.frames * L3FWD_REPEATS)
    return w.files.nfc_entries, pcap


def count_l3fwd(binary: Path, files: tuple[Path, Path], tmp: Path) -> dict[str, float]:
    """nf on a net_pcap port read once (its frames in, then idle: nf stops) and net_null out."""
    out = tmp / f"cg.{binary.parent.parent.name}.out"
    entries, pcap = files
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(binary), "--no-huge", "-m", "512",
           *COMMON, "-l", "1", f"--vdev=net_pcap0,rx_pcap={pcap}", f"--vdev=net_null{l3work.OUT_PORT},no-rx=1", "--",
           "--entries", str(entries), "--idle-ms", "500"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise SystemExit(f"nf under valgrind failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    counters = json.loads(lines[-1])
    if counters["drops"]:
        raise SystemExit(f"nf dropped packets the count would include: {counters['drops']}")
    return tally(out, int(counters["forwarded"]))


def tally(out: Path, packets: int) -> dict[str, float]:
    """nfc_burst's instructions a packet in callgrind's ``out``: its own and with its calls."""
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
    ap.add_argument("--program", choices=("vpn", "l3fwd"), default="vpn",
                    help="the VPN gateway's server part in nf-bench (default), or bench/l3fwd.nfp in nf")
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
        trees = [("this", ROOT)] + ([("base", args.base.resolve())] if args.base else [])
        if args.program == "vpn":
            work = Workload(tmp, 65536)
            got = {name: count_vpn(build("vpn", tree, tmp / name), work, args, tmp) for name, tree in trees}
            print(f"VPN gateway server part, {args.entries} entries, {args.size} B frames: instructions a packet in "
                  "nfc_burst (own; with the calls it makes), callgrind")
        else:
            files = l3fwd_files(tmp)
            got = {name: count_l3fwd(build("l3fwd", tree, tmp / name), files, tmp) for name, tree in trees}
            print(f"bench/l3fwd.nfp --target dpdk in nf, {L3FWD_ROUTES} routes, 4,096 flows: instructions a packet in "
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
