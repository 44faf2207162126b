"""Compile-time benchmark: front end and partitioner per example.

Machines are noisy, so every figure is reported next to a baseline measured in the same
run: the partitioner's time as a multiple of the front end's (parse + check + lower) on
the same file.  Median of ``--repeat`` runs.

    python3 build.py bench            # all benchmarks
    .venv/bin/python bench/bench_compile.py --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler.lower import lower  # noqa: E402
from compiler.pipeline import compile_program  # noqa: E402
from lang import Diagnostics, SourceMap, load  # noqa: E402


def front(path: str) -> float:
    t = time.perf_counter()
    d = Diagnostics()
    lower(load(path, d, SourceMap()))
    return time.perf_counter() - t


def full(path: str) -> float:
    t = time.perf_counter()
    d = Diagnostics()
    compile_program(load(path, d, SourceMap()), "tofino+dpdk", d)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one run each (build.py bench --quick)")
    args = ap.parse_args()
    if args.quick:
        args.repeat = 1
    print(f"{'example':16} {'front end ms':>12} {'whole build ms':>14} {'ratio':>8}")
    for ex in sorted((ROOT / "examples").glob("*.nfp")):
        f = statistics.median(front(str(ex)) for _ in range(args.repeat))
        w = statistics.median(full(str(ex)) for _ in range(args.repeat))
        print(f"{ex.stem:16} {f * 1e3:12.1f} {w * 1e3:14.1f} {w / f:7.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
