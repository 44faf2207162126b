"""A server table of millions of entries behind a switch cache, loaded through the runtime API
(issue 14, item 4: "10M server routes load without the runtime holding per-entry Python
objects it does not need").

    .venv/bin/python bench/bench_runtime_scale.py                 # 1M and 10M exact entries
    .venv/bin/python bench/bench_runtime_scale.py --quick         # 100,000 entries
    .venv/bin/python bench/bench_runtime_scale.py --table vrf_fib # 1M and 10M DSR routes (LPM)

The program is tests/corpus/host_cache.nfp with its ``hosts`` table declared 16M (an exact
/32 host table, ``cache = true``), built with ``nfc build`` into a temporary folder; the
generated server program runs (``--no-huge``, memory sized for the table) with the switch
model behind P4Runtime on loopback, and ``Runtime.table("hosts").add_many`` loads N entries in
batches of 100,000: each batch to the server over the control channel, then the first entries
into the switch cache (1 % of N) as the cache policy admits them.  Per size: the load's
seconds and entries/s, the Python objects this process keeps once the load is done (the growth
of ``gc.get_objects()``, after a collection: containers the collector tracks, not ints or
tuples of ints; the switch model runs in this process and holds the cached entries) and its
resident memory growth (after a collection and ``malloc_trim``), per entry; then a check that
the server holds N entries and the switch the cache.

``--table vrf_fib`` loads the DSR router's LPM table instead (examples/dsr_router.nfp, a
switch cache in front of the server's trie): the routes of ``bench/bench_cache_policy.py``
(1,000 VRFs, /16-/24 nested inside one /8 per VRF), in batches of 100,000; the cache is 1 %
or the switch table's 49,152 entries, whichever is fewer; the policy admits a prefix only
with every server prefix inside it, so the switch holds what it admitted, and the check is
that the switch holds exactly the policy's cached keys.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_cache_policy import resident, routes  # noqa: E402
from emulator.switchmodel import SwitchModel  # noqa: E402
from emulator.switchmodel.server import P4RuntimeServer, serve  # noqa: E402
from runtime.api import Runtime  # noqa: E402
from runtime.p4runtime import SwitchClient  # noqa: E402
from runtime.server_proc import ServerProcess, eal_args  # noqa: E402

PROGRAM = ROOT / "tests/corpus/host_cache.nfp"
DSR = ROOT / "examples/dsr_router.nfp"
BATCH = 100_000
BASE = 0x0A000000


def log(msg: str) -> None:
    print(f"[bench_runtime_scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Result:
    entries: int
    cache: int
    load_s: float
    entries_per_s: float
    objects_per_entry: float  # Python objects (gc-tracked) this process keeps after the load, per entry
    rss_growth_bytes_per_entry: float
    server_entries: int
    switch_entries: int


@dataclass(frozen=True)
class Table:
    name: str
    program: Path
    source: Callable[[int], Sequence[Any]]  # what n entries are made from (held until measured)
    row: Callable[[Any], dict[str, Any]]  # an entry as Runtime.table(name) takes it
    bytes_per_entry: int  # the server's memory for one, with room (EAL -m)


TABLES = {
    "hosts": Table("hosts", PROGRAM, range, lambda i: {"ipv4_dst": BASE + i, "port": 1 + i % 7}, 320),
    "vrf_fib": Table("vrf_fib", DSR, lambda n: routes(n, 1000),
                     lambda r: {"meta_vrf": r[0], "ipv4_dst": (r[1], r[2]), "tunnel_dst": r[1] | 1, "tunnel_key": r[0]},
                     400),
}


def build(folder: Path, table: Table) -> Path:
    src = folder / table.program.name
    src.write_text(table.program.read_text().replace("size = 8M;", "size = 16M;").replace("size = 10M;", "size = 16M;"))
    out = folder / "build"
    r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", str(src), "-o", str(out), "--no-verify"],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    r = subprocess.run(["make", "-C", str(out / "server")], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-2000:])
    return out


def run(out: Path, n: int, table: Table) -> Result:
    model = SwitchModel.from_build(out)
    names = json.loads((out / "switch/name_map.json").read_text())
    grpc, port = serve(P4RuntimeServer(model, names, "tna"))
    switch = SwitchClient(f"127.0.0.1:{port}", names, "tna")
    memory_mb = 512 + n * table.bytes_per_entry // (1 << 20)  # the table's hash and records, with room
    server = ServerProcess(out / "server/nf", ["net_null0"], eal=eal_args(memory_mb=memory_mb))
    try:
        rt = Runtime(out, switch=switch, server=server.control)
        cache = max(1, n // 100)
        policy = rt.caches[table.name]
        cache = policy.capacity = min(cache, policy.capacity)  # at most what the switch's table holds
        source = table.source(n)  # made before the measurement, and held until it is taken; each row as it goes
        rows = map(table.row, source)
        rss0 = resident()
        objects0 = len(gc.get_objects())
        t0 = time.monotonic()
        api = rt.table(table.name)
        for start in range(0, n, BATCH):
            api.add_many(itertools.islice(rows, BATCH))
            if start // BATCH % 10 == 9:
                log(f"  {start + BATCH:,} loaded")
        load_s = time.monotonic() - t0
        rss = resident() - rss0
        objects = len(gc.get_objects()) - objects0
        del source
        held = server.control.counters()["tables"][table.name]["entries"]
        on_switch = sum(1 for _ in switch.read(table.name))
        if on_switch != len(policy.cached):
            raise SystemExit(f"the switch holds {on_switch:,} entries, the policy cached {len(policy.cached):,}")
        cache = len(policy.cached) if policy.lpm is not None else cache
        return Result(n, cache, round(load_s, 1), round(n / load_s), round(objects / n, 3), round(rss / n, 1),
                      held, on_switch)
    finally:
        server.control.close()
        server.stop()
        switch.close()
        grpc.stop(0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--quick", action="store_true", help="100,000 entries only")
    ap.add_argument("--table", choices=sorted(TABLES), default="hosts")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.sizes = "100000"
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        table = TABLES[args.table]
        out = build(Path(tmp), table)
        for n in (int(x) for x in args.sizes.split(",")):
            log(f"{n:,} entries of {table.name}")
            results.append(run(out, n, table))
    print(f"\n{'entries':>11} {'cache':>8} {'load s':>7} {'entries/s':>10} {'objects/entry':>13} "
          f"{'RSS B/entry':>11} {'server':>11} {'switch':>8}")
    for r in results:
        print(f"{r.entries:>11,} {r.cache:>8,} {r.load_s:>7.1f} {r.entries_per_s:>10,} "
              f"{r.objects_per_entry:>13.3f} {r.rss_growth_bytes_per_entry:>11.1f} {r.server_entries:>11,} "
              f"{r.switch_entries:>8,}")
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB")
    if args.json:
        print(json.dumps([asdict(r) for r in results]))
    return 0 if all(r.server_entries == r.entries and r.switch_entries == r.cache for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
