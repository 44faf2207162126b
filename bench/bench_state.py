"""The CGN on one and on two forwarding lcores (issue 13, item 4: data-plane state on every core,
targets/dpdk/runtime/nfc_state.c): examples/cgnat.nfp built with ``--target dpdk`` translates
outbound UDP flows (64-byte frames) replayed from memory by net_pcap (``infinite_rx=1``), one
pcap per lcore's queue; translated packets leave by net_null1.

    .venv/bin/python bench/bench_state.py               # 3 rounds
    .venv/bin/python bench/bench_state.py --rounds 1 --json out.json

Two traffic mixes, each with 1 and 2 lcores:

* ``own flows``: each queue has flows of its own, as RSS would keep them (after the first pass
  every packet hits its mapping in ``nat_out`` and restarts its idle timer);
* ``shared flows``: both queues carry the same flows, so both lcores look up, and write the
  expiry of, the same records (a cache line bouncing between the cores: the cost of sharing).

The figures: translated packets per second of wall clock, and per CPU-second of the forwarding
threads together (``/proc/PID/task/TID/schedstat``; the machine is shared, so wall-clock
scaling depends on what else runs).  Each configuration is started for each round, warmed up
for a second and measured over a window, read through the control channel's COUNTERS; rounds
are interleaved and the table shows medians.  Packets not translated (dropped) are reported;
over 1 % is an error (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._dpdk_proc import thread_run_ns  # noqa: E402
from bench._l3fwd_work import FRAME_BYTES, write_pcap  # noqa: E402
from bench.bench_l3fwd import build_nfc  # noqa: E402
from runtime.server_proc import COMMON, ServerProcess  # noqa: E402

FLOWS = 4096  # per queue
INSIDE, OUTSIDE = 0, 24  # logical ports: DPDK port 0 is inside, port 1 (net_null1) outside
MAX_DROPPED = 0.01


def frames(first: int, n: int) -> list[bytes]:
    """n outbound UDP frames of FRAME_BYTES, one per subscriber flow (10.0.0.0/8, distinct ports)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    out = []
    for i in range(first, first + n):
        pkt = (Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:01")
               / IP(src=f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", dst="93.184.216.34")
               / UDP(sport=20000 + i % 30000, dport=53) / bytes(FRAME_BYTES - 14 - 20 - 8))
        out.append(bytes(pkt))
    return out


# the control-plane tables: 10/8 to one external address; every destination upstream.
# (table, (prefix, length), values): each an LPM of one field.
ENTRIES = [("subnet_to_external", (0x0A000000, 8), (0xC6336401,)),
           ("upstream_routes", (0, 0), (OUTSIDE, 0x020000000002)),
           ("subscriber_routes", (0x0A000000, 8), (INSIDE, 0x020000000003))]


def entries(path: Path) -> Path:
    """ENTRIES as an --entries file (docs/server.md)."""
    path.write_text("".join(f"{t} {net:#x}/{plen} : {' '.join(f'{v:#x}' for v in vals)}\n"
                            for t, (net, plen), vals in ENTRIES))
    return path


def build(tmp: Path) -> Path:
    return build_nfc(ROOT / "examples" / "cgnat.nfp", tmp / "cgnat", "--allow-overcommit", "--no-verify")


@dataclass(frozen=True, slots=True)
class Config:
    mix: str  # "own" or "shared"
    lcores: int
    processes: int = 1  # 2: two programs of one lcore each, sharing nothing (the machine's own scaling)

    @property
    def label(self) -> str:
        if self.processes > 1:
            return f"{self.mix} flows, {self.processes} programs of 1 lcore"
        return f"{self.mix} flows, {self.lcores} lcore{'s' if self.lcores > 1 else ''}"


@dataclass(frozen=True, slots=True)
class Window:
    translated: int
    dropped: int
    wall_s: float
    cpu_s: float  # the forwarding threads together

    @property
    def mpps_wall(self) -> float:
        return self.translated / self.wall_s / 1e6

    @property
    def mpps_cpu(self) -> float:
        return self.translated / self.cpu_s / 1e6 if self.cpu_s > 0 else 0.0


def pcaps(tmp: Path) -> dict[str, list[Path]]:
    """Each mix's pcap per queue."""
    own = [tmp / "own0.pcap", tmp / "own1.pcap"]
    write_pcap(own[0], frames(0, FLOWS))
    write_pcap(own[1], frames(FLOWS, FLOWS))
    return {"own": own, "shared": [own[0], own[0]]}


def totals(c: dict[str, Any]) -> tuple[int, int]:
    return c["forwarded"], sum(c["drops"].values())  # the server's own drops (server_no_port...) among them


def measure(binary: Path, cfg: Config, files: list[Path], table: Path, cores: list[int], window_s: float) -> Window:
    """One window of cfg: its program (or programs, each on a core and a pcap of its own) warmed up
    for a second, then the translated and dropped packets and the forwarding threads' CPU time."""
    per = cfg.lcores if cfg.processes == 1 else 1
    with ExitStack() as stack:
        procs = []
        for i in range(cfg.processes):
            mine, on = files[i * per:(i + 1) * per], cores[i * per:(i + 1) * per]
            eal = ["--no-huge", "-m", "1024", *COMMON, "-l", ",".join(map(str, on)), f"--file-prefix=nfc-state-{i}"]
            rx = ",".join(f"rx_pcap={f}" for f in mine)
            procs.append(stack.enter_context(ServerProcess(
                binary, [f"net_pcap0,{rx},infinite_rx=1", "net_null1,no-rx=1"], eal=eal,
                extra=["--entries", str(table), "--ports", f"{INSIDE},{OUTSIDE}"])))
        time.sleep(1.0)  # warm up: every flow has its mapping
        before = [(p.control.counters(), thread_run_ns(p.proc.pid)) for p in procs]
        t0 = time.monotonic()
        time.sleep(window_s)
        after = [(p.control.counters(), thread_run_ns(p.proc.pid)) for p in procs]
        t1 = time.monotonic()
    translated = dropped = 0
    cpu_ns = 0
    for (c0, r0), (c1, r1) in zip(before, after, strict=True):
        ran = sorted((ns - r0.get(tid, ns) for tid, ns in r1.items()), reverse=True)
        (f0, d0), (f1, d1) = totals(c0), totals(c1)
        translated, dropped, cpu_ns = translated + f1 - f0, dropped + d1 - d0, cpu_ns + sum(ran[:per])
    return Window(translated, dropped, t1 - t0, cpu_ns / 1e9)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=3.0, help="seconds measured per configuration and round")
    ap.add_argument("--json", type=Path, help="write the results here too")
    ap.add_argument("--quick", action="store_true", help="one round of 1 s (build.py bench --quick)")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.window = 1, 1.0
    cores = sorted(os.sched_getaffinity(0))
    configs = [Config("own", 1), Config("own", 1, 2), Config("own", 2), Config("shared", 1), Config("shared", 2)]
    if len(cores) < 2:
        configs = [c for c in configs if c.lcores * c.processes == 1]
    windows: dict[Config, list[Window]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory(prefix="nfc-bench-state-") as tmp:
        work = Path(tmp)
        binary, files, table = build(work), pcaps(work), entries(work / "entries.txt")
        for r in range(args.rounds):
            for cfg in configs:
                w = measure(binary, cfg, files[cfg.mix], table, cores, args.window)
                windows[cfg].append(w)
                print(f"round {r + 1} {cfg.label}: {w.mpps_wall:.2f} Mpps, {w.mpps_cpu:.2f} Mpps per CPU-second "
                      f"({w.cpu_s / w.wall_s:.2f} CPUs)", flush=True)
    print(f"\nCGN (examples/cgnat.nfp, --target dpdk), {FLOWS:,} flows per queue, 64 B, no hugepages; "
          f"medians of {args.rounds} rounds\n")
    print("| traffic, lcores | Mpps | Mpps per CPU-second | CPUs used | dropped |\n|---|---|---|---|---|")
    rows, bad = [], False
    for cfg, ws in windows.items():
        dropped = sum(w.dropped for w in ws) / max(1, sum(w.dropped + w.translated for w in ws))
        bad |= dropped > MAX_DROPPED
        row = {"mix": cfg.mix, "lcores": cfg.lcores, "processes": cfg.processes,
               "mpps_wall": statistics.median(w.mpps_wall for w in ws),
               "mpps_cpu": statistics.median(w.mpps_cpu for w in ws),
               "cpus": statistics.median(w.cpu_s / w.wall_s for w in ws), "dropped": dropped}
        rows.append(row)
        print(f"| {cfg.label} | {row['mpps_wall']:.2f} | {row['mpps_cpu']:.2f} | {row['cpus']:.2f} | "
              f"{100 * dropped:.2f} % |")
    if args.json is not None:
        args.json.write_text(json.dumps({"flows_per_queue": FLOWS, "rounds": args.rounds, "rows": rows}, indent=1))
    if bad:
        print(f"bench_state: more than {MAX_DROPPED:.0%} of the packets were not translated", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
