"""bench/bench_updates.py (issue 13, item 5): its thread counters against the kernel's own
account of the calling thread, and, where DPDK is installed and two CPUs are free to use, its
quickest run: the report has every scenario and mode, the packets reached the churned table
and were forwarded (none dropped), the churn ran at the rates asked and left the table as
loaded, and the forwarding thread had its CPU to itself.  No timing is asserted."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bench._dpdk_proc import parse_switches, thread_usage
from tests.support import needs_dpdk

ROOT = Path(__file__).resolve().parent.parent
MODES = ("idle", "neighbour", "64K/s", "100K/s", "max")


def test_thread_usage_counts_what_the_kernel_counts_for_the_thread() -> None:
    """Involuntary switches against getrusage(RUSAGE_THREAD) (a different kernel interface to
    the same counter), read before and after: a busy machine may preempt the thread between
    two reads, so the count lies between them; run time against the thread's CPU clock, which
    bounds it from above once read after it."""
    deadline = time.thread_time() + 0.05
    while time.thread_time() < deadline:  # run a little, so the run time is not ~0
        pass
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
    run_ns, switches = thread_usage(os.getpid(), threading.get_native_id())
    after = time.thread_time_ns()
    assert before <= switches <= resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
    assert 50_000_000 <= run_ns <= after


def test_parse_switches_reads_the_involuntary_line_only() -> None:
    status = "Name:\tnf\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t345\n"
    assert parse_switches(status) == 345
    with pytest.raises(ValueError):
        parse_switches("voluntary_ctxt_switches:\t12\n")


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The JSON report of one ``--quick`` run (~15 s), shared by the tests below."""
    out = tmp_path_factory.mktemp("updates") / "updates.json"
    r = subprocess.run([sys.executable, "bench/bench_updates.py", "--quick", "--json", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    data: dict[str, Any] = json.loads(out.read_text())
    return data


@needs_dpdk
@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
def test_update_benchmark_packets_reach_the_churned_table_and_are_forwarded(quick: dict[str, Any]) -> None:
    data = quick
    assert set(data["scenarios"]) == {"dsr", "vpn"}
    for key, sc in data["scenarios"].items():
        assert tuple(sc["modes"]) == MODES, key
        # every packet looked the churned table up and found an entry (DSR: a default route
        # catches what a deleted route would miss), and none was dropped
        assert sc["lookups"]["hits"] > 0 and sc["lookups"]["misses"] == 0, (key, sc["lookups"])
        for mode, m in sc["modes"].items():
            assert len(m["windows"]) == data["rounds"] == 1
            w = m["windows"][0]
            assert w["forwarded"] > 0 and w["dropped"] == 0 and m["not_forwarded"] == 0, (key, mode, w)
            assert w["cpu_s"] > 0 and set(m) >= {"mpps_cpu", "mpps_wall", "cpu_share", "updates_s", "loss_pct"}
            assert (m["loss_pct"] is None) == (mode == "idle")
        assert sc["modes"]["idle"]["windows"][0]["updates"] == 0
        assert sc["modes"]["neighbour"]["windows"][0]["updates"] == 0
        for mode in ("64K/s", "100K/s", "max"):
            assert sc["modes"][mode]["windows"][0]["updates"] > 0, (key, mode)


@needs_dpdk
@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
def test_update_benchmark_gives_the_forwarding_thread_a_cpu_of_its_own(quick: dict[str, Any]) -> None:
    """The writer (control thread) and the client run on the other core, so that the loss per
    CPU-second is contention, not the writer taking the reader's CPU."""
    data = quick
    for key, sc in data["scenarios"].items():
        threads = sc["threads"]
        assert threads["nf (forwarding)"] == [data["core"]], (key, threads)
        assert threads["nfc-control"] == [data["other_core"]], (key, threads)
        assert all(cpus == [data["other_core"]] for name, cpus in threads.items() if name != "nf (forwarding)")
