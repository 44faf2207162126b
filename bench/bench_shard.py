"""One switch, several servers (issue 16): aggregate throughput with 1, 2 and 4 server programs,
and the time to move a million split-table entries between servers.

    .venv/bin/python bench/bench_shard.py                 # 4,096 flows; 1M entries to move
    .venv/bin/python bench/bench_shard.py --quick         # one round; 100,000 entries
    .venv/bin/python bench/bench_shard.py --json out.json

The program is bench/shard.nfp: the switch copies the IPv4 destination into ``meta.flow`` and
sends the packet to the server owning its bucket (``shard by hash(meta.flow)``, four servers
declared); each server looks the flow up in its share of ``flows`` (a split table) and forwards
it back to the switch.

**Throughput.**  With S of the four servers running, the 256 buckets are spread over those S
(``runtime.steering.balance``, as ``Runtime.rebalance`` does), each server program gets the
entries of its buckets' flows (``--entries``) and, replayed from memory (net_pcap
``infinite_rx``), exactly the frames the switch model sends it for those flows: the switch
model runs on the 4,096 flows' packets, and its output for each is the bridged frame the
server receives.  All 1 + 2 + 4 programs are started once, loaded and paused (SIGSTOP); a round
resumes the S programs of one row together for a measured window, then pauses them (rows
interleaved, ``--rounds`` rounds, medians).  The figures: the sum of the packets the S programs
sent per second of wall time (aggregate Mpps), and per CPU-second of their forwarding threads
(the per-core rate); ``forwarded_share`` is sent / received within the windows (it may exceed 1
by the packets in flight at a window's edges).  Server program ``k`` runs on core ``k mod C``
(C = this machine's cores): on a 2-core machine four programs share two cores, so the aggregate
is bounded by the cores, not by the sharding; the per-core figure is what scales with real
servers.

**Moving entries.**  Four server programs (net_null ports), the switch model behind P4Runtime,
one ``ServerFleet``; ``flows`` is loaded with N entries (a quarter on each server).  Then server
3 is removed (``Runtime.remove_server``: its 64 buckets' entries copied to the other three from
its dump, the buckets steered, its copies deleted) and a fresh server program joins on its port
(``Runtime.add_server``: 64 buckets back); each move's seconds, entries moved and entries/s, and a
check that every server holds exactly the entries its buckets own.  With ``--goal`` the moves
read the entries from a SQLite goal store instead of the old owner's dump.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.utils import RawPcapWriter  # noqa: E402

from bench._dpdk_proc import Program, Running, Window, stop_all, window_between  # noqa: E402
from compiler.manifest import load_plan  # noqa: E402
from emulator.switchmodel.server import P4RuntimeServer, serve  # noqa: E402
from nfc._build_dir import open_build  # noqa: E402
from runtime.api import Runtime  # noqa: E402
from runtime.fleet import ServerFleet  # noqa: E402
from runtime.goal import GoalStore  # noqa: E402
from runtime.p4runtime import SwitchClient  # noqa: E402
from runtime.server_proc import ServerProcess, eal_args  # noqa: E402
from runtime.steering import balance  # noqa: E402

PROGRAM = ROOT / "bench/shard.nfp"
FLOWS = 4096
FRONT_PORT, OUT_PORT, NH_MAC = 1, 7, 0x020000000099
SERVERS = (1, 2, 4)
BATCH = 100_000


def log(msg: str) -> None:
    print(f"[bench_shard {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build(out: Path) -> Path:
    import subprocess

    r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", str(PROGRAM), "-o", str(out), "--target",
                        "tofino+dpdk", "--no-verify"], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"nfc build failed:\n{r.stderr}")
    m = subprocess.run(["make", "-C", str(out / "server")], capture_output=True, text=True)
    if m.returncode != 0:
        raise SystemExit(f"make failed:\n{m.stderr[-2000:]}")
    return out


def flow_ip(i: int) -> int:
    return 0x0A000000 | (i * 2654435761 % (1 << 24))  # spread over 10/8


def _ip(v: int) -> str:
    return ".".join(str(v >> s & 255) for s in (24, 16, 8, 0))


# ---- throughput -------------------------------------------------------------------------------------


@dataclass
class Row:
    servers: int
    windows: list[list[Window]] = field(default_factory=list)  # per round, one window per program

    def aggregate_mpps_wall(self, w: list[Window]) -> float:
        return sum(x.forwarded for x in w) / max(x.wall_s for x in w) / 1e6

    def aggregate_mpps_cpu(self, w: list[Window]) -> float:
        return sum(x.forwarded for x in w) / sum(x.cpu_s for x in w) / 1e6

    def summary(self) -> dict[str, float]:
        wall = [self.aggregate_mpps_wall(w) for w in self.windows]
        cpu = [self.aggregate_mpps_cpu(w) for w in self.windows]
        offered = sum(x.offered for w in self.windows for x in w)
        sent = sum(x.forwarded for w in self.windows for x in w)
        return {"servers": self.servers, "aggregate_mpps_wall": round(statistics.median(wall), 3),
                "mpps_per_cpu_second": round(statistics.median(cpu), 3),
                "forwarded_share": round(sent / offered, 4) if offered else 0.0}


def frames(out: Path) -> dict[int, bytes]:
    """Each flow's frame as the switch sends it to its server (bridge header and all)."""
    _plan, _placed, model = open_build(out, "tna")
    got = {}
    for i in range(FLOWS):
        pkt = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") /
                    IP(src="192.0.2.1", dst=_ip(flow_ip(i)), ttl=64) / UDP(sport=1000 + i % 50000, dport=53) /
                    bytes(18))
        o = model.process(pkt, FRONT_PORT)
        if o.kind != "forward":
            raise SystemExit(f"the switch model did not send flow {i} to a server: {o}")
        got[i] = o.data
    return got


def owners(plan_path: Path, servers: int) -> dict[int, int]:
    """Flow -> the server (of the first ``servers``) that owns its bucket once the buckets are
    spread over them as the runtime does."""
    shard = load_plan(plan_path).shard
    assert shard is not None
    route = [shard.home(b) for b in range(shard.buckets)]
    for b, s in balance(route, list(range(servers))).items():
        route[b] = s
    return {i: route[shard.bucket_of([(flow_ip(i), 32)])] for i in range(FLOWS)}


def throughput(out: Path, work: Path, rounds: int, window_s: float) -> list[dict[str, float]]:
    data = frames(out)
    cores = os.cpu_count() or 1
    programs: dict[int, list[Program]] = {}
    for s in SERVERS:
        own = owners(out, s)
        programs[s] = []
        for k in range(s):
            mine = [i for i in range(FLOWS) if own[i] == k]
            pcap, entries = work / f"s{s}-{k}.pcap", work / f"s{s}-{k}.entries"
            with RawPcapWriter(str(pcap), linktype=1) as w:
                for _ in range(max(1, 4096 // max(1, len(mine)))):
                    for i in mine:
                        w.write(data[i])
            entries.write_text("".join(f"flows {flow_ip(i):#x} : {OUT_PORT} {NH_MAC:#x}\n" for i in mine))
            prefix = f"shard-{os.getpid()}-{s}-{k}"
            argv = (str(out / "server/nf"), "-l", str(k % cores), "--no-huge", "-m", "256", "--no-pci",
                    f"--file-prefix={prefix}", "--log-level=warning", f"--vdev=net_pcap0,rx_pcap={pcap},infinite_rx=1",
                    "--", "--live", "--entries", str(entries))
            programs[s].append(Program(f"nf{s}.{k}", argv, prefix, rx_port=0, tx_port=0))
    runs = {p.prefix: Running(p, work / f"{p.prefix}.log") for ps in programs.values() for p in ps}
    try:
        deadline = time.monotonic() + 60
        for r in runs.values():
            while not r.forwarding():
                if r.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{r.program.name} did not forward:\n{r.log_tail()}")
                time.sleep(0.05)
            r.pause()
        rows = {s: Row(s) for s in SERVERS}
        for n in range(rounds):
            for s in SERVERS:
                group = [runs[p.prefix] for p in programs[s]]
                for r in group:
                    r.resume()
                time.sleep(0.5)
                before = [r.sample() for r in group]
                time.sleep(window_s)
                after = [r.sample() for r in group]
                for r in group:
                    r.pause()
                rows[s].windows.append([window_between(a, b) for a, b in zip(before, after, strict=True)])
                log(f"round {n + 1}, {s} server(s): {rows[s].aggregate_mpps_wall(rows[s].windows[-1]):.2f} Mpps, "
                    f"{rows[s].aggregate_mpps_cpu(rows[s].windows[-1]):.2f} per CPU-second")
        return [rows[s].summary() for s in SERVERS]
    finally:
        stop_all(runs.values())


# ---- moving entries ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MoveResult:
    step: str
    seconds: float
    entries: int
    entries_per_s: float
    buckets: int


def moving(out: Path, work: Path, entries: int, goal: bool) -> dict[str, object]:
    plan = load_plan(out)
    _plan, _placed, model = open_build(out, "tna")
    names = json.loads(plan.path(out, "name_map").read_text())
    p4rt = P4RuntimeServer(model, names, "tna")
    grpc, port = serve(p4rt)
    client = SwitchClient(f"127.0.0.1:{port}", names, "tna")
    eal = eal_args(memory_mb=max(512, entries // 1000))
    procs = [ServerProcess(out / "server/nf", ["net_null0"], eal=eal) for _ in range(4)]
    try:
        fleet = ServerFleet([p.control for p in procs], plan)
        rt = Runtime(out, switch=client, server=fleet,
                     goal=GoalStore(work / "goal.sqlite") if goal else None)
        t0 = time.monotonic()
        flows = rt.table("flows")
        for start in range(0, entries, BATCH):
            flows.add_many([{"meta_flow": 0x0A000000 + i, "port": OUT_PORT, "next_hop_mac": NH_MAC}
                            for i in range(start, min(entries, start + BATCH))])
        load_s = time.monotonic() - t0
        log(f"loaded {entries:,} entries over 4 servers in {load_s:.1f} s")
        results = []
        m = rt.remove_server(3)
        results.append(MoveResult("remove server 3 (4 -> 3)", m.seconds, m.copied.get("flows", 0),
                                  m.copied.get("flows", 0) / m.seconds, sum(m.buckets.values())))
        log(f"{results[-1]}")
        procs.append(ServerProcess(out / "server/nf", ["net_null0"], eal=eal))
        m = rt.add_server(procs[-1].control, plan.shard.shares[3].port if plan.shard else 35)
        results.append(MoveResult("add a server on its port (3 -> 4)", m.seconds, m.copied.get("flows", 0),
                                  m.copied.get("flows", 0) / m.seconds, sum(m.buckets.values())))
        log(f"{results[-1]}")
        held = {k: len(fleet.channels[k].dump("flows")) for k in range(len(fleet.channels)) if k not in fleet.down}
        owned = {k: 0 for k in held}
        for i in range(entries):
            owned[fleet.route[fleet.bucket("flows", [0x0A000000 + i])]] += 1
        if held != owned or sum(held.values()) != entries:
            raise SystemExit(f"after the moves the servers hold {held}, their buckets own {owned}")
        if rt.goal is not None:
            rt.goal.close()
        return {"entries": entries, "goal": goal, "load_s": round(load_s, 2), "held": held,
                "moves": [asdict(r) for r in results]}
    finally:
        for p in procs:
            p.control.close()
            p.stop()
        client.close()
        grpc.stop(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one round; 100,000 entries to move")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=1.0, help="seconds per measured window")
    ap.add_argument("--entries", type=int, default=None, help="entries to move (default 1M; --quick 100,000)")
    ap.add_argument("--goal", action="store_true", help="the moves read a SQLite goal store")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rounds = 1 if args.quick else args.rounds
    entries = args.entries or (100_000 if args.quick else 1_000_000)
    with tempfile.TemporaryDirectory(prefix="bench-shard-") as tmp:
        work = Path(tmp)
        out = build(work / "out")
        report: dict[str, object] = {"cpus": os.cpu_count(), "flows": FLOWS}
        if not args.skip_throughput:
            rows = report["throughput"] = throughput(out, work, rounds, args.window)
            short = [r for r in rows if r["forwarded_share"] < 0.99]  # a miss is dropped: the lookup was not hit
            if short:
                raise SystemExit(f"the servers forwarded too few of the packets they got: {short}")
        report["moving"] = moving(out, work, entries, args.goal)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
