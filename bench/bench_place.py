"""Placement benchmark: the partitioner's wall time on large programs (issue 13, item 6).

Programs from tests/bigprog.py: synthetic chains of 10, 25, 50 and 100 stages, Bluebird with
its fabric pipeline copied 16 and 32 times (37 and 69 stages), and the knapsack trap.  For each,
the median wall time of ``partition`` (the passes before it are not timed), the method, whether
the answer is proved optimal and otherwise its gap.  With ``--exact`` it also times the exact
model alone (``compiler/partition_exact.py``, what every program got before the scalable search),
up to the time limit.

    .venv/bin/python bench/bench_place.py               # the table in docs/partitioner.md
    .venv/bin/python bench/bench_place.py --exact --repeat 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler.partition import gap_text, partition  # noqa: E402
from compiler.partition_exact import solve_exact  # noqa: E402
from compiler.pipeline import PASS_NAMES, PASSES, Compilation  # noqa: E402
from compiler.place_problem import problem_of  # noqa: E402
from compiler.placement import Placement  # noqa: E402
from lang import Diagnostics, SourceMap, load  # noqa: E402
from tests.bigprog import bluebird, knapsack, synthetic  # noqa: E402

PROGRAMS = [("synthetic 10", lambda: synthetic(10)), ("synthetic 25", lambda: synthetic(25)),
            ("synthetic 50", lambda: synthetic(50)), ("synthetic 100", lambda: synthetic(100)),
            ("bluebird x16", lambda: bluebird(16)), ("bluebird x32", lambda: bluebird(32)),
            ("knapsack", lambda: knapsack(0))]


def unplaced(text: str, folder: Path) -> Compilation:
    """The compilation of ``text`` up to (not including) the partitioner."""
    path = folder / "big.nfp"
    path.write_text(text)
    d = Diagnostics()
    c = Compilation(load(str(path), d, SourceMap()), "tofino+dpdk")
    for p in PASSES[:PASS_NAMES.index("partition")]:
        c = p.run(c, d)
    return c


def place(c: Compilation, limit_s: float) -> tuple[float, Placement | None]:
    started = time.perf_counter()
    pl = partition(c.need_program(), c.need_targets(), Diagnostics(), int(limit_s * 1000))
    return time.perf_counter() - started, pl


def quality(pl: Placement | None) -> str:
    q = pl.optimality if pl else None
    if q is None:
        return "no placement"
    if q.proved:
        return "proved optimal"
    i = q.open_objective
    assert i is not None
    gap = "unknown" if q.gap is None else gap_text(q.gap)
    return f"gap {gap} on {['server ns', 'cache hits', 'cached entries', 'MAU stages'][i]}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limit", type=float, default=60.0, help="--place-timeout of every run (s)")
    ap.add_argument("--exact", action="store_true", help="also time the exact model alone")
    ap.add_argument("--quick", action="store_true", help="one run each (build.py bench --quick)")
    args = ap.parse_args()
    if args.quick:
        args.repeat = 1
    head = f"{'program':14} {'stages':>6} {'units':>5} {'method':9} {'seconds':>8}  {'result':34}"
    print(head + (f" {'exact model alone':>18}" if args.exact else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in PROGRAMS:
            c = unplaced(make(), Path(tmp))
            runs = [place(c, args.limit) for _ in range(args.repeat)]
            seconds = statistics.median(t for t, _ in runs)
            pl = runs[-1][1]
            stages = sum(len(p.stages) for p in c.need_program().pipelines)
            units = len(problem_of(c.need_program(), c.need_targets()).units)
            method = pl.optimality.method if pl and pl.optimality else "-"
            row = f"{name:14} {stages:6} {units:5} {method:9} {seconds:8.2f}  {quality(pl):34}"
            if args.exact:
                started = time.perf_counter()
                r = solve_exact(problem_of(c.need_program(), c.need_targets()), int(args.limit * 1000))
                row += f" {time.perf_counter() - started:8.2f} s ({r.status})"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
