"""Ternary / range tables on the server (issue 15, docs/server.md "Ternary and range tables"):
tests/corpus/acl_ternary.nfp built with ``--target dpdk`` (rte_acl over source, destination
and destination port, then an exact table), the same generated program compiled twice into
nf-bench: classified once per burst (one ``rte_acl_classify`` for the burst's keys, what the
program does) and packet by packet (``-DNFC_ACL_PER_PACKET=1``, the baseline), in interleaved
rounds in one run.

    .venv/bin/python bench/bench_acl.py            # 1K and 16K rules, 5 rounds
    .venv/bin/python bench/bench_acl.py --quick    # 1K rules, one round

Rules: /24 sources, /16 destinations and 1,000-port ranges at random priorities; 64 template
packets (64 B), each matching a rule, every one forwarded (the script checks nf-bench's
counters: a packet that missed would measure a shorter path).  The figure is nf-bench's
``nfc`` loop (rx from net_null, the template copied in, the generated processing, tx) in Mpps
over the TSC time of its lcore, pinned alone; the machine is shared, so the ratio of the two
builds in the same rounds is the figure to read, not the Mpps.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.utils import wrpcap  # noqa: E402

EAL = ["--no-huge", "-m", "1024", "--no-pci", "--no-shconf", "--no-telemetry", "--log-level=warning"]


def _ip(a: int) -> str:
    return ".".join(str(a >> s & 255) for s in (24, 16, 8, 0))


def workload(folder: Path, rules: int, seed: int = 15) -> tuple[Path, Path]:
    """The entries file (rules, and the exact table the class leads to) and 64 packets that each
    match a rule."""
    rnd = random.Random(seed)
    lines, made = [], []
    for _ in range(rules):
        src, dst, lo = rnd.getrandbits(32) & 0xFFFFFF00, rnd.getrandbits(32) & 0xFFFF0000, rnd.randrange(60000)
        lines.append(f"acl {src:#x}&&&0xFFFFFF00 {dst:#x}&&&0xFFFF0000 {lo}..{lo + 1000} @{rnd.randrange(1, 1000)} : 2")
        made.append((src, dst, lo))
    packets = []
    for _ in range(64):
        src, dst, lo = made[rnd.randrange(rules)]
        d = dst | rnd.getrandbits(16)
        lines.append(f"class_ports 2 {d:#x} : 0")  # port 0: back out of the bench's one port
        packets.append(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src=_ip(src | 7), dst=_ip(d))
                       / UDP(sport=1, dport=lo + rnd.randrange(1001)) / (b"x" * 10))
    entries, pcap = folder / f"rules{rules}.entries", folder / "packets.pcap"
    entries.write_text("\n".join(lines) + "\n")
    wrpcap(str(pcap), packets)
    return entries, pcap


def build(folder: Path) -> dict[str, Path]:
    r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", "tests/corpus/acl_ternary.nfp", "--target", "dpdk",
                        "-o", str(folder), "--no-verify"], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(r.stderr)
    server, out = folder / "server", {}
    for name, flags in (("per_burst", ""), ("per_packet", " -DNFC_ACL_PER_PACKET=1")):
        r = subprocess.run(["make", "-B", "-C", str(server), "nf-bench", f"CFLAGS=-O2 -march=native{flags}"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(r.stderr[-2000:])
        out[name] = server / f"nf-bench-{name}"
        (server / "nf-bench").rename(out[name])
    return out


def run(binary: Path, entries: Path, pcap: Path, lcore: int, ms: int) -> float:
    cmd = [str(binary), *EAL, "-l", str(lcore), "--vdev=net_null0,size=64", "--", "--entries", str(entries),
           "--packets", str(pcap), "--table", "class_ports", "--ms", str(ms), "--reps", "1", "--iters", "0"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        sys.exit(f"{binary.name} failed: {r.stderr[-1000:]}")
    res = json.loads(lines[-1])
    if res["nfc_forwarded"] != res["nfc_processed"] or res["nfc_processed"] == 0:
        sys.exit(f"{binary.name}: packets were not all forwarded (the figure would not be the classifier's): "
                 f"{lines[-1]}")
    return float(res["mpps"]["nfc"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1K rules, one round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ms", type=int, default=300)
    ap.add_argument("--lcore", type=int, default=1)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    sizes, rounds = ([1000], 1) if args.quick else ([1000, 16000], args.rounds)
    results = {}
    with tempfile.TemporaryDirectory(prefix="nfc-bench-acl-") as tmp:
        binaries = build(Path(tmp) / "out")
        for n in sizes:
            entries, pcap = workload(Path(tmp), n)
            got: dict[str, list[float]] = {k: [] for k in binaries}
            for _ in range(rounds):
                for name, binary in binaries.items():
                    got[name].append(run(binary, entries, pcap, args.lcore, args.ms))
            med = {k: statistics.median(v) for k, v in got.items()}
            ratio = med["per_burst"] / med["per_packet"]
            results[n] = {"median_mpps": med, "runs": got, "per_burst_over_per_packet": ratio}
            print(f"{n:>6} rules: per burst {med['per_burst']:.2f} Mpps, per packet {med['per_packet']:.2f} Mpps, "
                  f"ratio {ratio:.2f}x  (runs {got})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
