"""Memory per route of the server's LPM table (issue 13, item 1: "with VRFs (the DSR router's 10K
VRFs and 10M routes ...), and measure memory per route").

    .venv/bin/python bench/bench_lpm_memory.py           # the shapes below at their full sizes
    .venv/bin/python bench/bench_lpm_memory.py --quick   # 1/100 of the routes, 1/10 of the VRFs (~20 s)

The DSR router (examples/dsr_router.nfp, ``vrf_fib``: a 14-bit VRF and an IPv4 LPM, 56 bits of
values inline in the trie word) is built with ``nfc build --target dpdk``, its server twice: with
the trie's level 1 of 16 bits (``NFC_LPM_STRIDE1=16``: DIR-24-8's first stage cut in two, what a
table of big VRFs or none gets) and of 8 (what the generator gives ``vrf_fib``: 10M routes over
2^14 VRFs, small ones; nfc_lpm.h).  Each loads an
entries file and exits (one frame in, no ``--live``), printing its counters: the table's routes,
the trie's bytes (``trie_bytes``: the VRFs' array, the roots and the tables of nfc_lpm.c) and
its tables of 2^16 and 2^8 entries, and the DPDK heap's allocated bytes (``heap_bytes``: the
rules' ``rte_hash``, which holds every route for the control plane, and the rest). Per shape:
trie bytes per route, and the heap's growth per route over the same server loaded with no route.
Memory is not timed: the figures are exact for the shape, whatever the machine's load.

The shapes (deterministic, seeded):
  * ``bgp``: one VRF, ``bench/_l3fwd_work.py``'s BGP-like route set (60 % /24, the rest /8-/23
    over the unicast space): the l3fwd benchmark's table.
  * ``nested``: VRFs of /16-/24 routes nested inside one /8 each (``bench/bench_cache_policy.py``'s
    routes; ``bench/bench_runtime_scale.py --table vrf_fib`` loads the same through the runtime).
  * ``spread``: VRFs of BGP-like routes each (a tenant whose routes span the address space).
  * ``small``: 10 routes a VRF, nested inside one /8 each (as ``nested``).
  * ``vpc``: 100 routes a VRF inside one /16 each (a VPC's CIDR and its subnets): 60 % /24, the
    rest /17-/23 and /25-/28.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _l3fwd_work as work  # noqa: E402
from bench.bench_cache_policy import routes as nested_routes  # noqa: E402
from bench.bench_l3fwd import build_nfc  # noqa: E402
from runtime.server_proc import eal_args  # noqa: E402

DSR = ROOT / "examples" / "dsr_router.nfp"
# (name, VRFs, routes in all) at full size; --quick divides the routes by 100 and the VRFs by 10
# (each VRF with a route longer than /8 takes a table of 2^16 words, 512 KiB)
SHAPES = [("bgp", 1, 1_000_000), ("nested", 1_000, 1_000_000), ("nested", 10_000, 10_000_000),
          ("spread", 10, 10_000), ("small", 10_000, 100_000), ("vpc", 10_000, 1_000_000)]
STRIDES = (16, 8)


def shape_routes(name: str, vrfs: int, n: int) -> list[tuple[int, int, int]]:
    """(VRF, network, length) of a shape; VRFs are numbered from 1 (0 is the tenant's default)."""
    if name == "bgp":
        return [(1, r.network, r.length) for r in work.route_set(n)]
    if name in ("nested", "small"):
        return [(v + 1, a, length) for v, a, length in nested_routes(n, vrfs)]
    if name == "vpc":
        rng = random.Random(5)
        out = []
        for v in range(vrfs):
            base, seen = (10 << 24) | (v % 256) << 16, {((10 << 24) | (v % 256) << 16, 16)}
            while len(seen) < n // vrfs:
                length = 24 if rng.random() < 0.6 else rng.choice([17, 18, 19, 20, 21, 22, 23, 25, 26, 27, 28])
                seen.add(((base | rng.getrandbits(16)) >> (32 - length) << (32 - length), length))
            out += [(v + 1, a, length) for a, length in sorted(seen)]
        return out
    per = n // vrfs
    return [(v + 1, r.network, r.length) for v in range(vrfs) for r in work.route_set(per, seed=v)]


def write_entries(rows: list[tuple[int, int, int]], path: Path) -> None:
    with path.open("w") as f:
        for i, (vrf, net, length) in enumerate(rows):
            f.write(f"vrf_fib {vrf} {net:#x}/{length} : {work.DSR_TUNNEL_NET | (1 + i % 65534):#x} {i % (1 << 24)}\n")


def load(binary: Path, entries: Path, pcap: Path, memory_mb: int) -> dict[str, Any]:
    """The server's counters after loading ``entries`` and forwarding ``pcap``'s one frame, and its
    CPU seconds (user + system: the load, mostly)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([str(binary), *eal_args("1", memory_mb), "--vdev=net_pcap0,rx_pcap=" + str(pcap),
                        "--vdev=net_null1,no-rx=1", "--", "--entries", str(entries)],
                       capture_output=True, text=True, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        raise SystemExit(f"the server failed ({r.returncode}): {(r.stdout + r.stderr)[-1500:]}")
    out: dict[str, Any] = json.loads(lines[-1])
    out["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def memory_mb(n: int) -> int:
    """The DPDK memory (-m) the rules' rte_hash needs for n routes, with room."""
    return max(512, 256 + n * 200 // (1 << 20))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="each shape at 1/100 of its routes and 1/10 of its VRFs")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    scale = 100 if args.quick else 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="nfc-lpm-mem-") as tmp_name:
        tmp = Path(tmp_name)
        server = build_nfc(DSR, tmp / "dsr", "--no-verify").parent
        binaries = {}
        for stride in STRIDES:
            subprocess.run(["make", "-C", str(server), "-B", "-j2", "nf",
                            f"CFLAGS=-O2 -march=native -DNFC_LPM_STRIDE1={stride}"], check=True, capture_output=True)
            binaries[stride] = (server / "nf").rename(server / f"nf-{stride}")
        work.write_pcap(tmp / "one.pcap", [work.dsr_frame(work.frame(0x0B000001, 0), 0)])
        (tmp / "none.txt").write_text("")
        for name, vrfs, n in SHAPES:
            n //= scale
            vrfs = max(1, vrfs // 10) if args.quick else vrfs
            rs = shape_routes(name, vrfs, n)
            write_entries(rs, tmp / "routes.txt")
            for stride, binary in binaries.items():
                empty = load(binary, tmp / "none.txt", tmp / "one.pcap", memory_mb(n))
                full = load(binary, tmp / "routes.txt", tmp / "one.pcap", memory_mb(n))
                t = full["tables"]["vrf_fib"]
                if t["entries"] != len(rs):
                    raise SystemExit(f"{name}: the server holds {t['entries']} routes of {len(rs)}")
                row = {"shape": name, "vrfs": vrfs, "routes": len(rs), "stride1": stride, "trie_bytes": t["trie_bytes"],
                       "trie_tables_2^16": t["trie_tables"][0], "trie_tables_2^8": t["trie_tables"][1],
                       "trie_bytes_per_route": t["trie_bytes"] / len(rs),
                       "heap_bytes_per_route": (full["heap_bytes"] - empty["heap_bytes"]) / len(rs),
                       "load_cpu_s": round(full["cpu_s"], 2)}
                rows.append(row)
                print(f"{name:>7} {vrfs:>6} VRFs {len(rs):>10} routes, level 1 of {stride:>2} bits: trie "
                      f"{t['trie_bytes'] / 2**20:9.1f} MiB ({row['trie_bytes_per_route']:8.1f} B/route; "
                      f"{row['trie_tables_2^16']} tables of 2^16, {row['trie_tables_2^8']} of 2^8), heap "
                      f"+{row['heap_bytes_per_route']:6.1f} B/route, load {row['load_cpu_s']} CPU-s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
