"""Updates while forwarding (issue 13, item 5): how much a generated server's forwarding slows
while the control channel changes the table its packets look up.

    .venv/bin/python bench/bench_updates.py                 # DSR router + VPN gateway, 1M routes, 5 rounds
    .venv/bin/python bench/bench_updates.py --quick         # 10K routes, 1 round of short windows
    .venv/bin/python bench/bench_updates.py --scenario dsr --json out.json

Scenarios (SCENARIOS): the DSR router (``examples/dsr_router.nfp --target dpdk``: BGP-like
routes and a default route in VRF 1; the churn deletes ``--churn`` of the routes and adds them
back) and the VPN gateway's server part (``--target tofino+dpdk``: bridged frames from the
switch model; the churn modifies ``--churn`` overlay routes and modifies them back).  Half of
the 4,096 flows go to churned routes, half to the others, and every packet hits the table.
Each server forwards on one lcore (``--core``) from ``net_pcap0,infinite_rx=1`` to
``net_null1``; its other threads (the control thread: the writer), this script and its churn
thread run on ``--other-core``, so that the writer never takes the reader's CPU.

Per window: packets forwarded per CPU-second of the forwarding thread (its schedstat) beside
wall-clock Mpps, the thread's CPU share and involuntary context switches (scheduling made
visible), and the updates/s achieved.  The modes (MODES: idle; a memory-copying neighbour on
the other core, no update; 64K/s; 100K/s; as fast as the client can send) take turns in every
round; loss is 1 - mode / idle of the same round per CPU-second; the table shows medians.
docs/server.md, "Updates while forwarding", has a run and what it found.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _l3fwd_work as work  # noqa: E402
from bench import bench_dpdk as vpn  # noqa: E402
from bench._dpdk_proc import thread_usage  # noqa: E402
from bench.bench_l3fwd import build_nfc  # noqa: E402
from compiler.manifest import load_plan  # noqa: E402
from runtime.control import ControlChannel  # noqa: E402
from runtime.server_proc import ServerProcess, eal_args  # noqa: E402

UNDISTURBED = 0.95  # the least CPU share of the forwarding thread in a window counted as undisturbed
# updates/s of each mode (None: as fast as the client can); "neighbour" makes no update but copies
# 64 MiB buffers over and over on the other core (NEIGHBOUR): what any memory-heavy work there
# costs the forwarding thread (shared last-level cache, memory bandwidth), apart from the tables
MODES: dict[str, float | None] = {"idle": 0.0, "neighbour": 0.0, "64K/s": 64e3, "100K/s": 100e3, "max": None}
NEIGHBOUR = "b = bytearray(64 << 20)\nwhile True:\n    b[:] = bytes(64 << 20)\n"


def log(msg: str) -> None:
    print(f"[bench_updates {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- the workloads --------------------------------------------------------------------------------


Record = list[int]
Message = tuple[str, list[Record]]  # a control-channel write: add / delete / modify, records


@dataclass(frozen=True, slots=True)
class Scenario:
    """A server program, what it loads and replays, and the churn: messages that, sent in
    order, leave the table as it was (so that every mode starts from the same table)."""

    name: str
    binary: Path
    table: str
    entries: Path
    pcap: Path
    cycle: list[Message]
    size: int  # entries of ``table`` once loaded (and after every whole cycle)
    summary: str


def batches(records: list[Record], batch: int) -> list[list[Record]]:
    return [records[i:i + batch] for i in range(0, len(records), batch)]


def fib_record(route: work.Route, i: int) -> Record:
    """vrf_fib's control record of the i-th route: VRF, prefix, length, tunnel endpoint, GRE key
    (what work.dsr_entries writes for it)."""
    return [work.DSR_VRF, route.network, route.length, work.DSR_TUNNEL_NET | (1 + i % 65534), i % (1 << 24)]


def dsr_frames(routes: list[work.Route], churn: int, flows: int = work.FLOWS) -> list[bytes]:
    """VXLAN frames of ``flows`` flows: half to hosts of the first ``churn`` routes, half to the others."""
    rng = random.Random(f"bench-updates-{len(routes)}-{churn}")
    to_churned = [routes[i].network | rng.randrange(1 << (32 - routes[i].length))
                  for i in rng.choices(range(churn), k=flows // 2)]
    to_stable = work.flow_destinations(routes[churn:], flows - len(to_churned))
    return [work.dsr_frame(work.frame(d, i), i) for i, d in enumerate(to_churned + to_stable)]


def dsr_scenario(tmp: Path, args: argparse.Namespace) -> Scenario:
    """The DSR router: the route set and a default route in VRF 1 (a packet whose route is being
    deleted still leaves by a shorter one); the churn deletes ``--churn`` routes of the set (in
    random order: route_set shuffles) and adds them back."""
    binary = build_nfc(ROOT / "examples" / "dsr_router.nfp", tmp / "dsr")
    routes = work.route_set(args.routes)
    churn = min(args.churn, args.routes // 2)
    entries, pcap = tmp / "dsr.txt", tmp / "dsr.pcap"
    work.dsr_entries(routes, entries)
    with entries.open("a") as f:
        f.write(f"vrf_fib {work.DSR_VRF} 0x0/0 : {work.DSR_TUNNEL_NET | 0xFFFF:#x} 0\n")
    work.write_pcap(pcap, dsr_frames(routes, churn))
    adds = batches([fib_record(routes[i], i) for i in range(churn)], args.batch)
    cycle = [("delete", [r[:3] for r in part]) for part in adds] + [("add", part) for part in adds]
    return Scenario("DSR router", binary, "vrf_fib", entries, pcap, cycle, args.routes + 1,
                    f"{args.routes:,} BGP-like routes + a default route in VRF 1; {churn:,} deleted and added back")


def vpn_scenario(tmp: Path, args: argparse.Namespace) -> Scenario:
    """The VPN gateway's server part (tofino+dpdk): bridged frames as the switch model sends
    them to the server, half to the first ``--churn`` overlay routes; an exact table has no
    shorter route to fall back on, so the churn modifies those routes (new values, then the
    old ones back) instead of deleting them."""
    out = tmp / "vpn"
    r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", "examples/vpn_gateway.nfp", "--target",
                        "tofino+dpdk", "-o", str(out)], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"nfc build vpn_gateway failed: {r.stderr[-500:]}")
    server = load_plan(out).path(out, "server_makefile").parent
    subprocess.run(["make", "-C", str(server), "-j2", "nf"], check=True, capture_output=True)
    w = vpn.Workload(tmp, work.FLOWS)
    churn = min(args.churn, args.routes // 2)
    rng = random.Random(f"bench-updates-vpn-{args.routes}-{churn}")
    hit = rng.sample(range(churn), min(churn, work.FLOWS // 2)) + \
        rng.sample(range(churn, args.routes), min(args.routes - churn, work.FLOWS // 2))
    frames = []
    for i in hit:
        o = w.switch.process(vpn.customer_packet(i, 64), 1)
        if o.kind != "forward" or o.port not in w.switch.server_ports:
            raise RuntimeError(f"the switch model does not send route {i} to the server: {o}")
        frames.append(o.data)
    pcap = tmp / "vpn.pcap"
    work.write_pcap(pcap, frames)
    old = [vpn.route_record(i) for i in range(churn)]
    new = [[*rec[:3], rec[3] ^ 1, rec[4] ^ 1] for rec in old]
    cycle = [("modify", part) for part in batches(new, args.batch)] + \
        [("modify", part) for part in batches(old, args.batch)]
    return Scenario("VPN gateway, server part", server / "nf", vpn.TABLE, w.entries_file(args.routes), pcap, cycle,
                    args.routes, f"{args.routes:,} overlay routes; {churn:,} modified and modified back")


SCENARIOS = {"dsr": dsr_scenario, "vpn": vpn_scenario}


# ---- the writer -------------------------------------------------------------------------------------


class Churn(threading.Thread):
    """Sends the scenario's cycle of messages over and over at ``rate`` updates/s (None: as fast
    as it can; 0: not at all), on a control connection of its own.  A change of rate finishes
    the cycle first, so every mode starts from the loaded table."""

    def __init__(self, socket: Path, table: str, cycle: list[Message]) -> None:
        super().__init__(daemon=True)
        self.socket, self.table, self.cycle = socket, table, cycle
        self.done = 0  # updates acknowledged by the server
        self.error: BaseException | None = None
        self._rate: float | None = 0.0
        self._changed = threading.Event()
        self._halt = threading.Event()

    def set_rate(self, rate: float | None) -> None:
        self._rate = rate
        self._changed.set()

    def stop(self) -> None:
        self._halt.set()
        self._changed.set()
        self.join(timeout=60)

    def run(self) -> None:
        try:
            with ControlChannel(self.socket) as ch:
                self._loop(ch)
        except BaseException as e:  # reported by the measuring thread
            self.error = e

    def _loop(self, ch: ControlChannel) -> None:
        i = 0  # the next message of the cycle

        def send() -> None:
            nonlocal i
            op, part = self.cycle[i]
            ch.write(op, self.table, part, chunk=len(part))
            self.done += len(part)
            i = (i + 1) % len(self.cycle)

        while not self._halt.is_set():
            self._changed.clear()
            rate, t0, sent = self._rate, time.monotonic(), self.done
            while not self._changed.is_set():
                if rate == 0.0:
                    self._changed.wait()
                    break
                send()
                if rate is not None:
                    self._changed.wait(max(0.0, t0 + (self.done - sent) / rate - time.monotonic()))
            while i != 0:
                send()


# ---- measuring ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reading:
    t: float
    forwarded: int
    dropped: int
    run_ns: int
    switches: int
    updates: int


@dataclass(frozen=True, slots=True)
class Window:
    """One mode's window of one round."""

    forwarded: int
    dropped: int
    cpu_s: float
    wall_s: float
    switches: int
    updates: int

    @property
    def mpps_cpu(self) -> float:
        return self.forwarded / self.cpu_s / 1e6 if self.cpu_s > 0 else 0.0

    @property
    def mpps_wall(self) -> float:
        return self.forwarded / self.wall_s / 1e6

    @property
    def cpu_share(self) -> float:
        return self.cpu_s / self.wall_s

    @property
    def updates_s(self) -> float:
        return self.updates / self.wall_s

    def to_json(self) -> dict[str, Any]:
        return {"forwarded": self.forwarded, "dropped": self.dropped, "cpu_s": round(self.cpu_s, 6),
                "wall_s": round(self.wall_s, 6), "involuntary_switches": self.switches, "updates": self.updates,
                "mpps_cpu": self.mpps_cpu, "mpps_wall": self.mpps_wall, "cpu_share": self.cpu_share,
                "updates_s": self.updates_s}


def read(srv: ServerProcess, churn: Churn) -> Reading:
    """Counters of the server (over the measuring connection) and of its forwarding thread (the
    main thread: lcore ``-l`` is EAL's main lcore, which forwards)."""
    c = srv.control.counters()
    run_ns, switches = thread_usage(srv.proc.pid, srv.proc.pid)
    return Reading(time.monotonic(), int(c["forwarded"]), sum(int(v) for v in c["drops"].values()), run_ns,
                   switches, churn.done)


def between(a: Reading, b: Reading) -> Window:
    return Window(b.forwarded - a.forwarded, b.dropped - a.dropped, (b.run_ns - a.run_ns) / 1e9, b.t - a.t,
                  b.switches - a.switches, b.updates - a.updates)


@dataclass
class Results:
    windows: dict[str, list[Window]] = field(default_factory=lambda: {m: [] for m in MODES})
    placement: dict[str, Any] = field(default_factory=dict)
    lookups: dict[str, int] = field(default_factory=dict)  # the table's hits and misses since the start

    def median(self, mode: str, attr: str) -> float:
        return float(statistics.median(getattr(w, attr) for w in self.windows[mode]))

    def losses(self, mode: str, min_share: float = 0.0) -> list[float]:
        """Per round, 1 - (this mode's Mpps per CPU-s) / (the same round's idle), in %; only the
        rounds where the forwarding thread had at least ``min_share`` of its CPU in both windows
        (another program on its CPU also evicts its cache: not the tables' doing)."""
        return [100.0 * (1.0 - w.mpps_cpu / i.mpps_cpu)
                for w, i in zip(self.windows[mode], self.windows["idle"], strict=True)
                if min(w.cpu_share, i.cpu_share) >= min_share]

    def loss(self, mode: str, min_share: float = 0.0) -> float | None:
        """The median of ``losses``; None: no round qualifies."""
        xs = self.losses(mode, min_share)
        return float(statistics.median(xs)) if xs else None

    def not_forwarded(self, mode: str) -> float:
        """Share of the packets processed in this mode's windows that were dropped."""
        ws = self.windows[mode]
        return sum(w.dropped for w in ws) / max(1, sum(w.forwarded + w.dropped for w in ws))

    def to_json(self, mode: str) -> dict[str, Any]:
        return {"mpps_cpu": self.median(mode, "mpps_cpu"), "mpps_wall": self.median(mode, "mpps_wall"),
                "updates_s": self.median(mode, "updates_s"), "cpu_share": self.median(mode, "cpu_share"),
                "loss_pct": None if mode == "idle" else self.loss(mode),
                "loss_undisturbed_pct": None if mode == "idle" else self.loss(mode, UNDISTURBED),
                "undisturbed_rounds": len(self.losses(mode, UNDISTURBED)), "not_forwarded": self.not_forwarded(mode),
                "windows": [w.to_json() for w in self.windows[mode]]}


@contextmanager
def neighbour(run: bool) -> Iterator[None]:
    """NEIGHBOUR running in a process of its own (on this script's CPU) while in the block."""
    if not run:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def rounds(srv: ServerProcess, churn: Churn, args: argparse.Namespace) -> Results:
    res = Results()
    for r in range(args.rounds):
        for mode, rate in MODES.items():
            churn.set_rate(rate)
            with neighbour(mode == "neighbour"):
                time.sleep(args.warmup)
                a = read(srv, churn)
                time.sleep(args.window)
                b = read(srv, churn)
            if churn.error is not None:
                raise RuntimeError(f"the churn failed: {churn.error!r}")
            res.windows[mode].append(between(a, b))
        churn.set_rate(0.0)
        log(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{m} {res.windows[m][-1].mpps_cpu:.2f} Mpps/CPU-s at {res.windows[m][-1].updates_s / 1e3:.0f}K/s"
            for m in MODES))
    return res


def place(pid: int, core: int, other: int) -> dict[str, Any]:
    """The forwarding thread alone on ``core``: every other thread of the server and this script
    on ``other``; the placement, for the report."""
    os.sched_setaffinity(0, {other})
    out = {}
    for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
        tid = int(task.name)
        if tid != pid:
            os.sched_setaffinity(tid, {other})
        out[(task / "comm").read_text().strip() + ("" if tid != pid else " (forwarding)")] = \
            sorted(os.sched_getaffinity(tid))
    out["bench_updates.py"] = sorted(os.sched_getaffinity(0))
    return out


def measure(sc: Scenario, args: argparse.Namespace) -> Results:
    """Start the scenario's server (loading its entries), place the threads, run the rounds."""
    vdevs = [f"net_pcap0,rx_pcap={sc.pcap},infinite_rx=1", "net_null1,no-rx=1"]
    t = time.monotonic()
    with ServerProcess(sc.binary, vdevs, eal=eal_args(str(args.core), args.memory),
                       extra=["--entries", str(sc.entries)]) as srv:
        log(f"{sc.name}: started and loaded in {time.monotonic() - t:.1f} s")
        place(srv.proc.pid, args.core, args.other_core)
        churn = Churn(srv.socket, sc.table, sc.cycle)
        churn.start()
        try:
            res = rounds(srv, churn, args)
        finally:
            churn.stop()
        res.placement = place(srv.proc.pid, args.core, args.other_core)
        counts = srv.control.counters()["tables"][sc.table]
        res.lookups = {"hits": int(counts["hits"]), "misses": int(counts["misses"])}
        if counts["entries"] != sc.size:
            raise RuntimeError(f"{sc.table} holds {counts['entries']} entries after the churn, not {sc.size}")
    return res


# ---- reporting ----------------------------------------------------------------------------------------


def table(res: Results) -> str:
    lines = ["| updates | updates/s achieved | Mpps per CPU-s | loss per CPU-s | loss, undisturbed rounds "
             "| Mpps wall | CPU share | invol. switches/s | not forwarded |", "|---|---|---|---|---|---|---|---|---|"]
    for mode in MODES:
        ws = res.windows[mode]
        loss, calm = res.loss(mode), res.loss(mode, UNDISTURBED)
        n = len(res.losses(mode, UNDISTURBED))
        cells = ["—", "—"] if loss is None or mode == "idle" else \
            [f"{loss:.1f} %", "none" if calm is None else f"{calm:.1f} % ({n})"]
        lines.append(" | ".join([
            f"| {mode}", f"{res.median(mode, 'updates_s') / 1e3:.0f}K", f"{res.median(mode, 'mpps_cpu'):.2f}", *cells,
            f"{res.median(mode, 'mpps_wall'):.2f}", f"{res.median(mode, 'cpu_share'):.2f}",
            f"{statistics.median(w.switches / w.wall_s for w in ws):.0f}", f"{res.not_forwarded(mode):.2%} |"]))
    return "\n".join(lines)


def report(done: dict[str, tuple[Scenario, Results]], args: argparse.Namespace, seconds: float) -> None:
    for sc, res in done.values():
        print(f"\n{sc.name}: {sc.summary}, {args.batch} a message; forwarding on core {args.core}, control thread "
              f"and client on core {args.other_core}; median of {args.rounds} interleaved round(s) of "
              f"{args.window:g} s windows:")
        print(table(res))
        print(f"{sc.table}: {res.lookups['hits']:,} hits, {res.lookups['misses']:,} misses; "
              f"threads (allowed CPUs): {res.placement}")
    print(f"\ntotal {seconds:.0f} s; load average {os.getloadavg()[0]:.1f}", flush=True)
    if args.json:
        data = {"command": " ".join(sys.argv), "rounds": args.rounds, "window_s": args.window, "core": args.core,
                "other_core": args.other_core, "batch": args.batch,
                "scenarios": {key: {"name": sc.name, "summary": sc.summary, "table": sc.table, "threads": res.placement,
                                    "lookups": res.lookups,
                                    "modes": {m: res.to_json(m) for m in MODES}} for key, (sc, res) in done.items()}}
        Path(args.json).write_text(json.dumps(data, indent=1) + "\n")


def on_sigterm(*_: object) -> None:
    """SIGTERM unwinds like ^C, so that the server is stopped."""
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=1.0, help="seconds measured per mode per round")
    ap.add_argument("--warmup", type=float, default=0.3, help="seconds after a change of rate before the window")
    ap.add_argument("--routes", type=int, default=1_000_000)
    ap.add_argument("--churn", type=int, default=16384, help="routes deleted and added back")
    ap.add_argument("--batch", type=int, default=1024, help="updates per control message")
    ap.add_argument("--memory", type=int, default=1024, help="EAL -m, MB (no hugepages)")
    ap.add_argument("--core", type=int, default=1, help="the forwarding lcore's CPU")
    ap.add_argument("--other-core", type=int, default=0, help="the control thread's and this script's CPU")
    ap.add_argument("--scenario", action="append", choices=list(SCENARIOS),
                    help="dsr (the DSR router) and/or vpn (the VPN gateway's server part); default both")
    ap.add_argument("--quick", action="store_true", help="10K routes, 1 round of 0.3 s windows")
    ap.add_argument("--json", help="also write every window to this file")
    args = ap.parse_args()
    args.scenario = args.scenario or list(SCENARIOS)
    if args.quick:
        args.routes, args.churn, args.rounds, args.window, args.warmup = 10_000, 2048, 1, 0.3, 0.1
    if args.core == args.other_core or not {args.core, args.other_core} <= os.sched_getaffinity(0):
        print(f"bench_updates: needs two distinct CPUs of {sorted(os.sched_getaffinity(0))} (--core, --other-core)")
        return 1
    signal.signal(signal.SIGTERM, on_sigterm)
    started = time.monotonic()
    done: dict[str, tuple[Scenario, Results]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="nfc-updates-") as tmp:
            for key in args.scenario:
                log(f"{key}: building, writing {args.routes:,} entries and the packets")
                sc = SCENARIOS[key](Path(tmp), args)
                done[key] = (sc, measure(sc, args))
    except KeyboardInterrupt:
        print("bench_updates: interrupted; the server stopped", flush=True)
        return 130
    report(done, args, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
