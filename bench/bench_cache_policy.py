"""The runtime's LPM cache policy at DSR scale (issue 14, item 4: "10M server routes load
without the runtime holding per-entry Python objects it does not need"): the memory the
policy keeps per server route and its decisions per CPU-second, on the policy alone.

    .venv/bin/python bench/bench_cache_policy.py                          # 1M and 10M routes
    .venv/bin/python bench/bench_cache_policy.py --quick                  # 100,000 routes
    .venv/bin/python bench/bench_cache_policy.py --routes 200000 --base TREE   # against another tree

Routes: ``--vrfs`` VRFs of 14 bits (DSR's ``meta.vrf``), each with routes/VRFs distinct IPv4
prefixes, 60 % /24 and the rest /16-/23, inside one /8 per VRF (so they nest), shuffled;
the policy is ``runtime.cache.CachePolicy`` as ``Runtime`` makes it for ``vrf_fib`` (key
fields vrf, ipv4.dst; a cache of 1 % of the routes).  Each measurement runs in a process of
its own: the routes are made first, then timed (CPU time of the process) and its resident
memory growth taken (after a collection and ``malloc_trim``):

* **add**: ``on_add`` of every route (admission: the cached prefixes covering it, the counts
  of server and cached prefixes inside it);
* **match**: ``match`` of 100,000 addresses in the VRFs (the manager's per-hit question);
* **delete**: ``on_delete`` of 10 % of the routes.

With ``--base TREE`` (a checkout of another commit with its ``.venv`` linked) each size runs
in both trees, alternating, and the table shows both with the ratio.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import inspect
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def resident() -> int:
    """This process's resident memory after a collection, freed heap given back to the system."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def routes(n: int, vrfs: int, seed: int = 1) -> list[tuple[int, int, int]]:
    """n distinct (vrf, address, length) routes, n // vrfs per VRF, shuffled."""
    rng = random.Random(seed)
    out: list[tuple[int, int, int]] = []
    for v in range(vrfs):
        base, seen = (10 + v % 200) << 24, set()
        while len(seen) < n // vrfs + (v < n % vrfs):
            length = 24 if rng.random() < 0.6 else rng.randint(16, 23)
            seen.add(((base | rng.getrandbits(24)) >> (32 - length) << (32 - length), length))
        out += [(v, a, length) for a, length in seen]
    rng.shuffle(out)
    return out


def child(tree: Path, n: int, vrfs: int) -> dict[str, float]:
    """One measurement with the policy of ``tree``."""
    sys.path.insert(0, str(tree))
    from runtime.cache import CachePolicy

    keys = routes(n, vrfs)
    rng = random.Random(2)
    probes = [(v, a | rng.getrandbits(32 - length)) for v, a, length in rng.sample(keys, min(100_000, n))]
    widths = {"key_widths": (14, 32)} if "key_widths" in inspect.signature(CachePolicy).parameters else {}
    policy = CachePolicy(max(1, n // 100), 1, 32, **widths)
    rss0 = resident()
    t0 = time.process_time()
    for k in keys:
        policy.on_add(k)
    add_s = time.process_time() - t0
    rss = resident() - rss0
    t0 = time.process_time()
    hits = sum(policy.match(p) is not None for p in probes)
    match_s = time.process_time() - t0
    gone = keys[: n // 10]
    t0 = time.process_time()
    for k in gone:
        policy.on_delete(k)
    delete_s = time.process_time() - t0
    assert hits == len(probes) and len(policy.cached) <= policy.capacity
    return {"routes": n, "bytes_per_route": rss / n, "adds_per_s": n / add_s, "matches_per_s": len(probes) / match_s,
            "deletes_per_s": len(gone) / delete_s, "cached": len(policy.cached)}


def measure(tree: Path, n: int, vrfs: int) -> dict[str, float]:
    r = subprocess.run([str(tree / ".venv/bin/python"), __file__, "--child", str(tree), "--routes", str(n),
                        "--vrfs", str(vrfs)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{tree}, {n:,} routes:\n{r.stderr[-3000:]}")
    return dict(json.loads(r.stdout.splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--routes", default="1000000,10000000", help="comma-separated sizes")
    ap.add_argument("--quick", action="store_true", help="100,000 routes only")
    ap.add_argument("--vrfs", type=int, default=1000)
    ap.add_argument("--base", type=Path, help="another tree (with .venv) to run beside this one")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.routes = "100000"
    if args.child is not None:
        print(json.dumps(child(args.child, int(args.routes), args.vrfs)))
        return 0
    rows = []
    for n in (int(x) for x in args.routes.split(",")):
        for name, tree in [("this", ROOT), *([("base", args.base.resolve())] if args.base else [])]:
            print(f"[bench_cache_policy {time.strftime('%H:%M:%S')}] {name}: {n:,} routes", file=sys.stderr,
                  flush=True)
            rows.append({"tree": name, **measure(tree, n, args.vrfs)})
    print(f"\n{'tree':>5} {'routes':>11} {'B/route':>8} {'adds/s':>9} {'matches/s':>10} {'deletes/s':>10} "
          f"{'cached':>8}")
    for r in rows:
        print(f"{r['tree']:>5} {r['routes']:>11,} {r['bytes_per_route']:>8.0f} {r['adds_per_s']:>9,.0f} "
              f"{r['matches_per_s']:>10,.0f} {r['deletes_per_s']:>10,.0f} {r['cached']:>8,}")
    if args.base:
        for this, base in zip(rows[::2], rows[1::2], strict=True):
            ratios = {k: this[k] / base[k] for k in ("bytes_per_route", "adds_per_s", "matches_per_s", "deletes_per_s")}
            print(f"{this['routes']:>11,} routes, this / base: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()))
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
