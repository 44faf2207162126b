"""The benchmarks' common contract, which ``build.py bench [--quick] [NAME...]`` relies on:
every bench/bench_*.py takes --quick (one short round), and build.py names the unknown
benchmark instead of running anything."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ROOT, needs_dpdk

SCRIPTS = sorted((ROOT / "bench").glob("bench_*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_benchmark_takes_quick(script):
    r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and "--quick" in r.stdout, r.stdout + r.stderr


def test_build_py_bench_names_an_unknown_benchmark():
    r = subprocess.run([sys.executable, "build.py", "bench", "--quick", "no_such"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "no benchmark no_such" in r.stderr and "l3fwd" in r.stderr


@needs_dpdk
def test_the_hand_specialised_l3fwd_burst_forwards_as_the_generated_one():
    """bench/bench_specialised.py's variants (the burst and the loop of bench/l3fwd.nfp's server
    replaced by hand) must forward the flows byte for byte as the generated program, with the
    same counters, or their figures say nothing; and the runtime markers they replace must
    still be there."""
    r = subprocess.run([sys.executable, "bench/bench_specialised.py", "--check-only"], capture_output=True,
                       text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0 and "byte for byte" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
