"""The switch caches of the example NFs under their own traffic (issue 14, "Done when"): the
Bluebird ToR's CA-to-PA mappings at five times its switch cache with a fifth of them active,
the DSR router's VRF routes under Zipf traffic, the CGN's mappings pushed to the switch.

    .venv/bin/python bench/bench_cache_nf.py bluebird   # 1,105,700 mappings, a 221,140-entry cache, 22 % active
    .venv/bin/python bench/bench_cache_nf.py bluebird --scale 0.05
    .venv/bin/python bench/bench_cache_nf.py dsr                 # 10,000 /24 routes, a 1,000-entry cache, Zipf 1.0
    .venv/bin/python bench/bench_cache_nf.py cgn                 # 5,000 flows, a 500-entry nat_out cache, Zipf 1.0
    .venv/bin/python bench/bench_cache_nf.py all --quick         # each at a small scale

Each example is built with ``nfc build --target tofino+dpdk`` and runs as ``nfc run --live``
runs it (``runtime.live.LiveDataPlane``): the switch model executes the generated TNA program
for every packet, a cache miss goes over a veth pair to the generated server program, which
counts it (HITS) and sends it back.  The runtime API loads the tables with the switch cache
held empty (capacity 0 while loading), so every cached entry is one the manager chose, and a
``CacheManager`` per cached table steps every ``--step-ms`` (promotion) and reads the whole
cache every ``--evict-ms`` in a thread of its own while the packets flow.

Per example: a warm-up trace, then a measured one; reported:

* **hit rate**: the share of the measured packets the switch answered itself (1 - the cached
  table's lookups on the server / packets sent), per fifth of the measured trace (the last
  fifths show where the cache converged);
* **optimum**: the best any cache of that size could do on the trace's distribution (the
  top-k share; Bluebird: cache / active mappings, capped at 1);
* **identical**: the measured packets' outputs (port, bytes) against the reference
  interpreter running the uncached spec with the full tables (Bluebird: the mappings the
  trace uses, which for an exact table is the same answer; DSR: the default route and the
  routes the trace uses, which for disjoint /24s is the same longest match; CGN: the RFC 4787
  properties instead — one external port per flow for the whole run, no two flows on one
  port — since the interpreter's ports depend on its own allocation order);
* the managers' promotions, evictions and step time.

Prints a table; ``--json`` one JSON line.  docs/runtime.md has a run.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._live_stack import LiveStack, build  # noqa: E402
from compiler.interp import Entry, Interpreter, Match  # noqa: E402
from compiler.lower import lower  # noqa: E402
from lang import Diagnostics, SourceMap, load  # noqa: E402
from runtime.api import Runtime  # noqa: E402
from runtime.cache_manager import CacheManager, IdleLimits  # noqa: E402


def log(msg: str) -> None:
    print(f"[bench_cache_nf {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass
class Result:
    nf: str
    entries: int  # in the cached table (CGN: flows)
    cache: int
    active: int  # keys the traffic uses
    warm: int
    packets: int
    hit_rate: float
    by_fifth: list[float]
    optimum: float
    identical: int  # measured packets checked
    different: int
    promoted: int = 0
    evicted: int = 0
    steps: int = 0
    step_ms: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)


def zipf_weights(n: int, s: float) -> list[float]:
    w = [1.0 / (i ** s) for i in range(1, n + 1)]
    total = sum(w)
    return [x / total for x in w]


def zipf_trace(n: int, skew: float, k: int, rnd: random.Random) -> tuple[list[float], list[int]]:
    """The Zipf weights of ranks 1..n, and k keys drawn by them, rank r being key order[r] of a
    shuffled order (the hot keys are not the first loaded)."""
    weights = zipf_weights(n, skew)
    order = list(range(n))
    rnd.shuffle(order)
    return weights, [order[r] for r in rnd.choices(range(n), weights, k=k)]


def ip(v: int) -> str:
    return str(ipaddress.IPv4Address(v))


def build_example(example: str, folder: Path) -> Path:
    return build(ROOT / example, folder / Path(example).stem)


def sized(example: str, folder: Path, keys: float, seed: int) -> tuple[Path, int, int, random.Random]:
    """The example built; its keys (at least 10), a cache of a tenth of them, the trace's random source."""
    n = max(10, round(keys))
    return build_example(example, folder), n, max(1, n // 10), random.Random(seed)


def reference(example: str) -> Interpreter:
    diags, sources = Diagnostics(), SourceMap()
    checked = load(str(ROOT / example), diags, sources)
    if diags.has_errors:
        sys.exit("\n".join(sources.render(d) for d in diags.items))
    return Interpreter(lower(checked))


class Stack(LiveStack):
    """A build running live with its tables loaded, its switch caches filled by managers only."""

    def __init__(self, out: Path, caches: dict[str, int], load: Callable[[Runtime], None],
                 args: argparse.Namespace) -> None:
        super().__init__(out, args.step_ms, args.evict_ms)
        for name in caches:
            self.rt.caches[name].capacity = 0  # loaded with the cache empty: the manager fills it
        t0 = time.monotonic()
        load(self.rt)
        log(f"  tables loaded in {time.monotonic() - t0:.1f} s")
        for name, cap in caches.items():
            self.rt.caches[name].capacity = cap
        self.start({name: CacheManager(self.rt, name, IdleLimits(()), half_life=args.half_life) for name in caches})

    def send(self, port: int, frames: list[bytes], table: str) -> tuple[list[int], list[tuple[int, bytes]]]:
        """The frames, in fifths: per fifth the lookups that crossed; and what came out."""
        fifths = []
        n = len(frames)
        for i in range(5):
            part = frames[i * n // 5:(i + 1) * n // 5]
            before = self.crossed(table)
            for f in part:
                self.live.inject(port, f)
            self.live.settle()
            fifths.append(self.crossed(table) - before)
        out = [(p, d) for p in list(self.live.outputs) for d in self.live.take(p)]
        return fifths, out


@contextmanager
def running(out: Path, caches: dict[str, int], load: Callable[[Runtime], None],
            args: argparse.Namespace) -> Iterator[Stack]:
    stack = Stack(out, caches, load, args)
    try:
        yield stack
    finally:
        stack.close()


def measure(nf: str, stack: Stack, table: str, port: int, warm: list[bytes], measured: list[bytes],
            entries: int, active: int, optimum: float) -> tuple[Result, list[tuple[int, bytes]]]:
    log(f"  warm-up: {len(warm):,} packets")
    t0 = time.monotonic()
    stack.send(port, warm, table)  # (its outputs taken and dropped)
    log(f"  warm-up took {time.monotonic() - t0:.0f} s; measuring {len(measured):,} packets")
    fifths, out = stack.send(port, measured, table)
    n = len(measured)
    by_fifth = [1 - c / max(1, len(measured[i * n // 5:(i + 1) * n // 5])) for i, c in enumerate(fifths)]
    cache = stack.rt.caches[table].capacity
    steps, seconds = stack.steps()
    r = Result(nf, entries, cache, active, len(warm), n, 1 - sum(fifths) / n, by_fifth, optimum, 0, 0,
               stack.total("promoted"), stack.total("evicted"), steps, 1000 * seconds / max(1, steps))
    return r, out


def compare(got: list[tuple[int, bytes]], want: Counter[tuple[int, bytes]], r: Result) -> Result:
    have = Counter(got)
    r.identical = sum((have & want).values())
    r.different = sum((have - want).values()) + sum((want - have).values())
    return r


# ---- Bluebird ToR: CA-to-PA mappings (seed 003 §4.4, §5.3) ------------------------------------

BLUEBIRD = "examples/bluebird_tor.nfp"


def bluebird(args: argparse.Namespace, folder: Path) -> Result:
    out = build_example(BLUEBIRD, folder)
    full = Runtime(out).schemas["ca_to_pa"].switch_entries
    cache = max(1, round(full * args.scale))
    n = 5 * cache
    rnd = random.Random(3)
    active = rnd.sample(range(n), round(0.22 * n))
    log(f"bluebird: {n:,} mappings, cache {cache:,} (the plan's {full:,} x {args.scale:g}), {len(active):,} active")

    def mapping(i: int) -> dict[str, int]:
        return {"meta_vrf": 1, "ca": 0x0A000000 + i, "vtep": 0xAC100000 + i % 4096, "vni": 5000 + i % 100,
                "vm_mac": 0x020000000000 + i}

    def load(rt: Runtime) -> None:
        rt.table("port_vrf").add(std_ingress_port=1, vrf=1)
        rt.table("vrf_routes_v4").add(meta_vrf=1, ipv4_dst="10.0.0.0/8", to_vnet=1, port=0, next_hop_mac=0)
        rt.table("pa_routes").add(vtep="172.16.0.0/12", port=48, next_hop_mac=0x020000000048)
        rt.table("ca_to_pa").add_many(mapping(i) for i in range(n))

    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    def frame(i: int) -> bytes:
        return bytes(Ether(dst="00:12:23:54:a2:9f", src="02:00:00:00:00:07")
                     / IP(src="192.168.7.7", dst=ip(0x0A000000 + i), ttl=64) / UDP(sport=7, dport=7) / b"vm")

    warm_keys = list(active)
    rnd.shuffle(warm_keys)
    measured_keys = [rnd.choice(active) for _ in range(args.packets)]
    with running(out, {"ca_to_pa": cache}, load, args) as stack:
        r, got = measure("bluebird", stack, "ca_to_pa", 1, [frame(i) for i in warm_keys],
                         [frame(i) for i in measured_keys], n, len(active), min(1.0, cache / len(active)))
        r.notes["cached"] = len(stack.rt.caches["ca_to_pa"].cached)
    log("  the reference interpreter: the uncached spec")
    it = reference(BLUEBIRD)
    it.tables["port_vrf"].insert(Entry((Match(1),), {"vrf": 1}))
    it.tables["vrf_routes_v4"].insert(Entry((Match(1), Match(0x0A000000, 8)),
                                            {"to_vnet": 1, "port": 0, "next_hop_mac": 0}))
    it.tables["pa_routes"].insert(Entry((Match(0xAC100000, 12),), {"port": 48, "next_hop_mac": 0x020000000048}))
    for i in set(measured_keys):  # exact match: the other mappings cannot change these packets' answers
        m = mapping(i)
        it.tables["ca_to_pa"].insert(Entry((Match(1), Match(m["ca"])),
                                           {"vtep": m["vtep"], "vni": m["vni"], "vm_mac": m["vm_mac"]}))
    want = Counter[tuple[int, bytes]]()
    for i in measured_keys:
        o = it.process(frame(i), 1)
        if o.kind == "forward" and o.port is not None:
            want[(o.port, o.data)] += 1
    return compare(got, want, r)


# ---- DSR router: VRF routes (seed 004 §4.1) ----------------------------------------------------

DSR = "examples/dsr_router.nfp"
DSR_IP, ACCESS, FABRIC = "10.200.0.1", 2, 30


def dsr(args: argparse.Namespace, folder: Path) -> Result:
    out, n, cache, rnd = sized(DSR, folder, 10_000 * args.scale, 4)
    log(f"dsr: {n:,} /24 routes and a default in VRF 3, cache {cache:,}, Zipf {args.skew:g}")

    def route(i: int) -> tuple[int, int]:  # (address, length): 10.x.y.0/24, disjoint
        return 0x0A000000 + (i << 8), 24

    def value(i: int) -> dict[str, int]:
        return {"tunnel_dst": 0xAC140000 + i % 65536, "tunnel_key": 1000 + i}

    def load(rt: Runtime) -> None:
        rt.table("vni_to_vrf").add(vxlan_vni=100, vrf=3)
        rt.table("fabric_routes").add(outer_ipv4_dst="0.0.0.0/0", port=FABRIC, next_hop_mac=0x020000000030)
        rt.table("vrf_fib").add(meta_vrf=3, ipv4_dst="0.0.0.0/0", tunnel_dst=0xAC1400FF, tunnel_key=999)
        rt.table("vrf_fib").add_many({"meta_vrf": 3, "ipv4_dst": f"{ip(route(i)[0])}/24", **value(i)}
                                     for i in range(n))

    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.layers.vxlan import VXLAN

    def frame(i: int, seq: int) -> bytes:
        inner = IP(src="192.168.0.5", dst=ip(route(i)[0] + 9), ttl=20, id=seq & 0xFFFF) / UDP(sport=1, dport=2) / b"t"
        return bytes(Ether() / IP(src="192.0.2.50", dst=DSR_IP) / UDP(sport=49999, dport=4789) / VXLAN(vni=100)
                     / Ether() / inner)

    weights, trace = zipf_trace(n, args.skew, args.warm + args.packets, rnd)
    frames = [frame(i, s) for s, i in enumerate(trace)]
    with running(out, {"vrf_fib": cache}, load, args) as stack:
        r, got = measure("dsr", stack, "vrf_fib", ACCESS, frames[:args.warm], frames[args.warm:], n,
                         len(set(trace)), sum(weights[:cache]))
    it = reference(DSR)
    it.tables["vni_to_vrf"].insert(Entry((Match(100),), {"vrf": 3}))
    it.tables["fabric_routes"].insert(Entry((Match(0, 0),), {"port": FABRIC, "next_hop_mac": 0x020000000030}))
    it.tables["vrf_fib"].insert(Entry((Match(3), Match(0, 0)), {"tunnel_dst": 0xAC1400FF, "tunnel_key": 999}))
    # the routes are disjoint /24s: only a packet's own /24 and the default can match it, so the
    # measured packets' routes give the same longest matches as all of them (the interpreter's
    # LPM is a scan: 10K routes x 10K packets would take minutes)
    for i in set(trace[args.warm:]):
        it.tables["vrf_fib"].insert(Entry((Match(3), Match(*route(i))), value(i)))
    want = Counter[tuple[int, bytes]]()
    for f in frames[args.warm:]:
        o = it.process(f, ACCESS)
        if o.kind == "forward" and o.port is not None:
            want[(o.port, o.data)] += 1
    return compare(got, want, r)


# ---- CGN: mappings pushed to the switch (seed 002 §2) -------------------------------------------

CGN = "examples/cgnat.nfp"
EXT_IP = 0xC6336401  # 198.51.100.1


def cgn(args: argparse.Namespace, folder: Path) -> Result:
    out, n, cache, rnd = sized(CGN, folder, 5_000 * args.scale, 5)
    log(f"cgn: {n:,} flows (UDP), nat_out cache {cache:,}, Zipf {args.skew:g}")

    def load(rt: Runtime) -> None:
        rt.table("subnet_to_external").add(ipv4_src="10.0.0.0/8", ext_ip=EXT_IP)
        rt.table("upstream_routes").add(ipv4_dst="0.0.0.0/0", port=24, next_hop_mac=0x020000000024)
        rt.table("subscriber_routes").add(ipv4_dst="10.0.0.0/8", port=1, next_hop_mac=0x020000000001)

    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    def flow(i: int) -> tuple[str, int]:
        return ip(0x0A000000 + 2 + i // 8), 1024 + i % 8

    def frame(i: int, seq: int) -> bytes:
        src, sport = flow(i)
        return bytes(Ether(dst="02:00:00:4e:41:54") / IP(src=src, dst="203.0.113.9", ttl=64, id=seq & 0xFFFF)
                     / UDP(sport=sport, dport=53) / b"q")

    weights, trace = zipf_trace(n, args.skew, args.warm + args.packets, rnd)
    frames = [frame(i, s) for s, i in enumerate(trace)]
    with running(out, {"nat_out": cache}, load, args) as stack:
        r, got = measure("cgn", stack, "nat_out", 0, frames[:args.warm], frames[args.warm:], n,
                         len(set(trace)), sum(weights[:cache]))
    # RFC 4787 REQ-1 (endpoint-independent mapping): one external (address, port) per flow for
    # the whole run, whichever side translated it; no two flows on one
    seen: dict[tuple[str, int], set[tuple[str, int]]] = {}
    by_id = {s & 0xFFFF: trace[s] for s in range(args.warm, len(trace))}  # a packet's flow, from its IP id
    for _p, d in got:
        pkt = Ether(d)
        i = by_id.get(pkt[IP].id)
        if i is None:
            continue
        seen.setdefault(flow(i), set()).add((pkt[IP].src, pkt[UDP].sport))
    ports = Counter(a for v in seen.values() for a in v)
    r.identical = sum(1 for v in seen.values() if len(v) == 1)
    r.different = sum(1 for v in seen.values() if len(v) != 1) + sum(1 for c in ports.values() if c > 1)
    r.notes["flows_checked"] = len(seen)
    return r


NFS = {"bluebird": bluebird, "dsr": dsr, "cgn": cgn}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("nf", choices=[*NFS, "all"], nargs="?", default="all")
    ap.add_argument("--scale", type=float, default=1.0, help="of the example's default sizes")
    ap.add_argument("--quick", action="store_true", help="scale 0.02 (bluebird) / 0.2, fewer packets")
    ap.add_argument("--skew", type=float, default=1.0, help="Zipf exponent (dsr, cgn)")
    ap.add_argument("--warm", type=int, default=20_000,
                    help="warm-up packets (dsr, cgn; bluebird: one per active mapping)")
    ap.add_argument("--packets", type=int, default=10_000)
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--evict-ms", type=float, default=200.0)
    ap.add_argument("--half-life", type=float, default=5.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.warm, args.packets = 2_000, 1_000
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-cache-nf-") as tmp:
        for name in (NFS if args.nf == "all" else [args.nf]):
            scale = args.scale
            if args.quick:
                args.scale = 0.02 if name == "bluebird" else 0.2
            results.append(NFS[name](args, Path(tmp)))
            args.scale = scale
    print(f"\n{'nf':>8} {'entries':>9} {'cache':>7} {'active':>8} {'warm':>7} {'packets':>7} {'hit rate':>8} "
          f"{'optimum':>7} {'last fifth':>10} {'identical':>9} {'different':>9} {'promoted':>8} {'evicted':>7} "
          f"{'step ms':>7}")
    for r in results:
        print(f"{r.nf:>8} {r.entries:>9,} {r.cache:>7,} {r.active:>8,} {r.warm:>7,} {r.packets:>7,} "
              f"{r.hit_rate:>8.3f} {r.optimum:>7.3f} {r.by_fifth[-1]:>10.3f} {r.identical:>9,} {r.different:>9,} "
              f"{r.promoted:>8,} {r.evicted:>7,} {r.step_ms:>7.1f}")
    if args.json:
        print(json.dumps({"results": [asdict(r) for r in results]}))
    return 0 if all(r.different == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
