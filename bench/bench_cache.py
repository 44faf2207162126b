"""The cache glue under skewed traffic (issue 14): how much of the traffic the switch cache
serves once the cache manager has followed it, against the best any cache of that size
could do, and how fast a newly hot entry reaches the switch.

    .venv/bin/python bench/bench_cache.py             # 1M entries, a 1 % cache, Zipf 0.9 / 1.0 / 1.2 and uniform
    .venv/bin/python bench/bench_cache.py --quick     # 100K entries, Zipf 1.0 only, fewer packets
    .venv/bin/python bench/bench_cache.py --entries 10000000   # 10M entries (each distribution loads them: ~5 min)

The program is ``tests/corpus/host_cache.nfp`` (an exact table of hosts, the switch caching
some, the server holding all), built with ``nfc build --target tofino+dpdk``.  The whole
data plane runs as ``nfc run --live`` runs it (``runtime.live.LiveDataPlane``): the switch
model executes the generated TNA program for every packet, a miss goes over a veth pair to
the generated server program (DPDK ``net_af_packet``), which counts it (HITS) and sends it
back.  The runtime API loads every entry (the server first, then the first ``cache`` entries
into the switch, first come), and a ``CacheManager`` steps every ``--step-ms`` in a thread
of its own while the packets flow.

Per distribution: ``--warm`` packets (the manager learns), then ``--packets`` measured:
* **hit rate**: the share of the measured packets the switch served itself (1 - those the
  server saw / those sent);
* **optimum**: the share of the distribution's ``cache`` most likely keys (the top-k share),
  the best hit rate any cache of that size can have;
* **server relief**: packets the server did not have to see, per packet, compared with a
  first-come cache (the share of the trace the first ``cache`` keys take);
* **manager**: its steps, entries promoted / evicted per second of its own wall time, and how
  many cached entries it replaced by much hotter server entries (``--replace 0,2`` runs each
  distribution with idle eviction alone and with replacement, the manager's default, 2×).

The idle limits are Bluebird's Table 2 divided by ``--idle-scale`` (100: 1 / 3 / 11 s at
95 / 90 / 85 % occupancy), so that a run of seconds shows eviction.  The manager promotes every
``--step-ms`` (HITS, then the writes) and evicts every ``--evict-ms`` (a read of every cached
entry's idle time).  Promotion latency: one packet of a key never sent before (``--probes``
keys, one at a time); the time from handing it to the switch model to the return of the switch
write that installs it, median and p99 (each key is then read back from the switch).

Prints one table; ``--json`` also one JSON line.  docs/runtime.md has a run.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._live_stack import LiveStack, build  # noqa: E402
from runtime.cache import CacheDecision  # noqa: E402
from runtime.cache_manager import CacheManager, IdleLimits  # noqa: E402

PROGRAM = ROOT / "tests/corpus/host_cache.nfp"
BASE = 0x0A000000  # host i is 10.0.0.0 + i
BLUEBIRD_STEPS = ((0.95, 100.0), (0.90, 300.0), (0.85, 1100.0))  # seed 003, Table 2


def log(msg: str) -> None:
    print(f"[bench_cache {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Result:
    skew: float  # 0: uniform
    entries: int
    cache: int
    packets: int
    hit_rate: float
    optimum: float
    first_come: float
    steps: int
    promoted_per_s: float
    evicted_per_s: float
    replace: float  # the manager's ``replace`` (0: idle eviction alone)
    replaced_per_s: float


def zipf_weights(n: int, s: float) -> list[float]:
    """P(rank i) for i = 1..n (s = 0: uniform)."""
    w = [1.0 / (i ** s) for i in range(1, n + 1)]
    total = sum(w)
    return [x / total for x in w]


def frame(host: int) -> bytes:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    dst = str(ipaddress.IPv4Address(BASE + host))
    return bytes(Ether(dst="02:00:00:00:00:01") / IP(src="192.0.2.1", dst=dst) / UDP() / b"x")


class Stack(LiveStack):
    """host_cache.nfp running live, its hosts loaded (the first ``cache`` into the switch,
    first come), and a manager stepping in a thread; each key's switch write timed."""

    def __init__(self, out: Path, entries: int, cache: int, step_ms: float, idle_scale: float,
                 evict_ms: float, replace: float = 2.0, half_life: float = 1.0) -> None:
        super().__init__(out, step_ms, evict_ms, memory_mb=512 + entries * 320 // (1 << 20))
        self.rt.caches["hosts"].capacity = cache
        t0 = time.monotonic()
        hosts = self.rt.table("hosts")
        for start in range(0, entries, 100_000):  # in batches: a write's entries are held until it is done
            rows = range(start, min(entries, start + 100_000))
            hosts.add_many({"ipv4_dst": BASE + i, "port": 1 + i % 7} for i in rows)
        log(f"  {entries:,} entries loaded ({cache:,} into the switch, first come) in {time.monotonic() - t0:.1f} s")
        limits = IdleLimits(tuple((at, seconds / idle_scale) for at, seconds in BLUEBIRD_STEPS))
        self.installed: dict[tuple[int, ...], float] = {}  # key -> when its switch write returned
        apply = self.rt.apply_cache

        def timed(name: str, decisions: Sequence[CacheDecision]) -> None:
            apply(name, decisions)
            now = time.monotonic()
            for d in decisions:
                for k in d.install:
                    self.installed.setdefault(k, now)

        self.rt.apply_cache = timed  # type: ignore[method-assign]
        self.start({"hosts": CacheManager(self.rt, "hosts", limits, half_life=half_life, replace=replace)})

    def server_saw(self) -> int:
        return self.crossed("hosts")

    def send(self, hosts: list[int]) -> None:
        for h in hosts:
            self.live.inject(1, frame(h))

    def on_switch(self, host: int) -> bool:
        return any(True for _ in self.client.read("hosts", [({"ipv4_dst": (BASE + host, None)}, 0)]))


def run_skew(out: Path, skew: float, replace: float, args: argparse.Namespace) -> Result:
    log(f"skew {skew or 'uniform'}, replace {replace:g}")
    stack = Stack(out, args.entries, args.cache, args.step_ms, args.idle_scale, args.evict_ms, replace,
                  args.half_life)
    try:
        rnd = random.Random(7)
        weights = zipf_weights(args.entries, skew)
        order = list(range(args.entries))
        rnd.shuffle(order)  # rank r is host order[r]: the hot ones are not the first added
        trace = [order[r] for r in rnd.choices(range(args.entries), weights, k=args.warm + args.packets)]
        stack.send(trace[:args.warm])
        stack.live.settle()
        before = stack.server_saw()
        stack.send(trace[args.warm:])
        stack.live.settle()
        seen = stack.server_saw() - before
        rank = {h: r for r, h in enumerate(order)}
        first_come = sum(weights[rank[h]] for h in range(args.cache))
        steps, wall = stack.steps()
        wall = wall or 1.0
        return Result(skew, args.entries, args.cache, args.packets, 1 - seen / args.packets,
                      sum(weights[:args.cache]), first_come, steps,
                      stack.total("promoted") / wall, stack.total("evicted") / wall,
                      replace, stack.total("replaced") / wall)
    finally:
        stack.close()


def promotion_latency(out: Path, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Seconds from a fresh key's first packet (handed to the switch model) to the return of
    the switch write that installs it (the manager's, timed as it returns), one key at a time;
    and from the moment the switch model had handed the packet on to the server (its
    ``inject`` returned: the server's first hit follows within its next poll) — Bluebird's
    "first server hit to switch entry" (seed 003 §4.4, < 2 ms).  Every key is then read back
    from the switch."""
    stack = Stack(out, args.entries, args.cache, args.step_ms, args.idle_scale, args.evict_ms)
    try:
        stack.rt.caches["hosts"].capacity = args.cache + args.probes  # room for each probe
        from_packet, from_server = [], []
        for k in range(args.probes):
            host = args.entries - 1 - k  # never sent before
            key = (BASE + host,)
            t0 = time.monotonic()
            stack.send([host])
            t1 = time.monotonic()
            while key not in stack.installed and time.monotonic() - t0 < 10:
                time.sleep(0.0002)
            done = stack.installed.get(key, time.monotonic())
            from_packet.append(done - t0)
            from_server.append(done - t1)
            assert stack.on_switch(host), host
            time.sleep(0.05)  # the next key alone
        return from_packet, from_server
    finally:
        stack.close()


def build_program(folder: Path, entries: int) -> Path:
    """host_cache.nfp, its hosts table declared 16M when more than its 8M are loaded."""
    src = PROGRAM
    if entries > 8_000_000:  # "8M" is decimal (lang/symbols.py)
        src = folder / PROGRAM.name
        src.write_text(PROGRAM.read_text().replace("size = 8M;", "size = 16M;"))
    return build(src, folder / "host_cache")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100K entries, Zipf 1.0 only, fewer packets")
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--cache", type=int, default=0, help="switch cache entries (default 1 %% of --entries)")
    ap.add_argument("--skews", default="0.9,1.0,1.2,0",
                    help="Zipf exponents; 0 is uniform; none: the promotion latency alone")
    ap.add_argument("--warm", type=int, default=20_000)
    ap.add_argument("--packets", type=int, default=20_000)
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--step-ms", type=float, default=1.0, help="promotion step (HITS, then writes)")
    ap.add_argument("--evict-ms", type=float, default=100.0, help="eviction step (reads every idle time)")
    ap.add_argument("--idle-scale", type=float, default=100.0,
                    help="Bluebird's idle limits divided by this (the run lasts seconds, not hours)")
    ap.add_argument("--replace", default="2",
                    help="the manager's replace factors, comma-separated, each run per skew (0: idle eviction alone)")
    ap.add_argument("--half-life", type=float, default=1.0, help="the manager's half_life (s) of a hit's weight")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.entries, args.skews, args.warm, args.packets, args.probes = 100_000, "1.0", 3_000, 3_000, 5
    args.cache = args.cache or max(1, args.entries // 100)
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        out = build_program(Path(tmp), args.entries)
        results = [run_skew(out, float(s), float(x), args) for s in args.skews.split(",") if s != "none"
                   for x in args.replace.split(",")]
        lat = promotion_latency(out, args)
    print(f"\n{'skew':>7} {'entries':>9} {'cache':>7} {'hit rate':>9} {'optimum':>8} {'first come':>10} "
          f"{'steps':>6} {'promoted/s':>10} {'evicted/s':>9} {'replace':>7} {'replaced/s':>10}")
    for r in results:
        print(f"{r.skew or 'uniform':>7} {r.entries:>9,} {r.cache:>7,} {r.hit_rate:>9.3f} {r.optimum:>8.3f} "
              f"{r.first_come:>10.3f} {r.steps:>6} {r.promoted_per_s:>10.0f} {r.evicted_per_s:>9.0f} "
              f"{r.replace:>7g} {r.replaced_per_s:>10.0f}")
    print(f"\npromotion latency (step every {args.step_ms:g} ms, evictions every {args.evict_ms:g} ms), "
          f"to the switch write of the key:")
    ms = {}
    for what, xs in zip(("from_packet", "from_server"), lat, strict=True):
        ms[what] = sorted(x * 1000 for x in xs)
        p99 = ms[what][min(len(xs) - 1, int(0.99 * len(xs)))]
        print(f"  {what.replace('_', ' ')}: median {statistics.median(ms[what]):.1f} ms, p99 {p99:.1f} ms "
              f"over {len(xs)} keys")
    if args.json:
        print(json.dumps({"results": [asdict(r) for r in results], "promotion_ms": ms}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
