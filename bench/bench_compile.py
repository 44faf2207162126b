"""Compile-time benchmark: the front end and the whole build per example, and ``nfc build``
(with its Z3 verify) against the length of a pipeline (issue 47, item 0).

Machines are noisy, so every figure is reported next to a baseline measured in the same
run: the partitioner's time as a multiple of the front end's (parse + check + lower) on
the same file.  Median of ``--repeat`` runs.

Then what a user waits for: ``nfc build --target tofino+dpdk --no-cache`` (``--target`` to
change it) run in this process (``nfc.cli.main``: passes, generators with the P4 lint, then
verify), in CPU seconds of the process (``time.process_time``: Z3's threads included) and wall
seconds, for every example and for ``tests/bigprog.py``'s ``long_pipeline`` of 10, 37 and 100
stages, and the growth exponents: the least-squares slope of log(time) against log(stages)
(1: linear).  The goal: every example under 10 s of CPU, 100 stages under 60 s.  The
partitioner's search and Z3 stop at time limits and their time varies from run to run, so
the exponent of a whole build says little below 1; what would show is a pass that grows
faster than the program.

    python3 build.py bench compile --quick
    .venv/bin/python bench/bench_compile.py --repeat 5
    .venv/bin/python bench/bench_compile.py --stages 10 20 37 100 --repeat 1
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler.lower import lower  # noqa: E402
from compiler.pipeline import compile_program  # noqa: E402
from lang import Diagnostics, SourceMap, load  # noqa: E402
from nfc.cli import main as nfc_main  # noqa: E402
from tests.bigprog import long_pipeline  # noqa: E402

TARGET = "tofino+dpdk"
STAGES = (10, 37, 100)
EXAMPLE_GOAL_S, LONG_GOAL_S, LONG_GOAL_STAGES = 10.0, 60.0, 100  # CPU seconds (issue 47)


def front(path: str) -> float:
    t = time.perf_counter()
    d = Diagnostics()
    lower(load(path, d, SourceMap()))
    return time.perf_counter() - t


def full(path: str, target: str = TARGET) -> float:
    t = time.perf_counter()
    d = Diagnostics()
    compile_program(load(str(path), d, SourceMap()), target, d)
    return time.perf_counter() - t


def build_verify(path: Path, out: Path, target: str = TARGET) -> tuple[float, float]:
    """CPU and wall seconds of ``nfc build`` of ``path`` into ``out``, verify included; a
    failed build stops the benchmark with nfc's messages."""
    argv = ["build", str(path), "--target", target, "-o", str(out), "--no-cache"]
    err = io.StringIO()
    cpu, wall = time.process_time(), time.perf_counter()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = nfc_main(argv)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if rc != 0:
        raise SystemExit(f"nfc build {path} failed (exit {rc}):\n{err.getvalue()}")
    return cpu, wall


def median_build(path: Path, out: Path, repeat: int, target: str = TARGET) -> tuple[float, float]:
    runs = [build_verify(path, out, target) for _ in range(repeat)]
    return statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs)


def growth_exponent(sizes: list[int], seconds: list[float]) -> float:
    """The least-squares slope of log(seconds) against log(sizes)."""
    xs, ys = [math.log(s) for s in sizes], [math.log(max(t, 1e-9)) for t in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def examples(repeat: int, folder: Path, target: str = TARGET) -> list[float]:
    """Print the per-example table; the CPU seconds of each example's build + verify."""
    print(f"{'example':16} {'front end ms':>12} {'whole build ms':>14} {'ratio':>8} "
          f"{'build+verify cpu s':>18} {'wall s':>8}")
    cpus = []
    files = sorted((ROOT / "examples").glob("*.nfp"))
    front(str(files[0]))  # not timed: the first load builds the grammar's parser
    for ex in files:
        f = statistics.median(front(str(ex)) for _ in range(repeat))
        w = statistics.median(full(str(ex), target) for _ in range(repeat))
        cpu, wall = median_build(ex, folder / ex.stem, repeat, target)
        cpus.append(cpu)
        print(f"{ex.stem:16} {f * 1e3:12.1f} {w * 1e3:14.1f} {w / f:7.1f}x {cpu:18.2f} {wall:8.2f}", flush=True)
    return cpus


def long_pipelines(stages: list[int], repeat: int, folder: Path, target: str = TARGET,
                   program: Callable[[int], str] = long_pipeline) -> dict[int, tuple[float, float]]:
    """Print the long-pipeline table and the growth exponents; (CPU, wall) seconds per length."""
    print(f"\n{'long pipeline':16} {'build+verify cpu s':>18} {'wall s':>8}   (tests/bigprog.py long_pipeline)")
    found: dict[int, tuple[float, float]] = {}
    for n in stages:
        path = folder / f"long{n}.nfp"
        path.write_text(program(n))
        found[n] = median_build(path, folder / f"long{n}", repeat, target)
        print(f"{f'{n} stages':16} {found[n][0]:18.2f} {found[n][1]:8.2f}", flush=True)
    if len(found) > 1:
        sizes = list(found)
        print(f"growth exponent (slope of log time against log stages): "
              f"cpu {growth_exponent(sizes, [c for c, _ in found.values()]):.2f}, "
              f"wall {growth_exponent(sizes, [w for _, w in found.values()]):.2f}")
    return found


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one run each (build.py bench --quick)")
    ap.add_argument("--stages", type=int, nargs="+", default=list(STAGES),
                    help=f"lengths of the long pipelines (default {' '.join(map(str, STAGES))})")
    ap.add_argument("--target", default=TARGET, help=f"the build's --target (default {TARGET})")
    args = ap.parse_args()
    if args.quick:
        args.repeat = 1
    print(f"nfc build --target {args.target} --no-cache, verify included")
    with tempfile.TemporaryDirectory(prefix="bench_compile_") as tmp:
        cpus = examples(args.repeat, Path(tmp), args.target)
        found = long_pipelines(args.stages, args.repeat, Path(tmp), args.target)
    slow = max(cpus)
    print(f"\ngoal: every example under {EXAMPLE_GOAL_S:.0f} s of CPU: {'met' if slow < EXAMPLE_GOAL_S else 'MISSED'} "
          f"(slowest {slow:.2f} s)")
    if LONG_GOAL_STAGES in found:
        cpu = found[LONG_GOAL_STAGES][0]
        print(f"goal: {LONG_GOAL_STAGES} stages under {LONG_GOAL_S:.0f} s of CPU: "
              f"{'met' if cpu < LONG_GOAL_S else 'MISSED'} ({cpu:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
