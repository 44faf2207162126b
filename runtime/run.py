"""``nfc run`` in batch mode: the whole data plane on this machine.

The switch part runs in the switch model; the server part is the compiled DPDK program,
started as a real DPDK process (``--no-huge``, a net_pcap vdev hot-plugged once its input
exists).  Entries (in ``.nfp`` names) are loaded through the runtime API, where ``plan.json``
places their table: P4Runtime writes to the switch model, the control channel to the
server program.  Packets from the input pcaps go through the switch; those the switch sends
to its server port are handed to the DPDK process (as the server NIC would receive them);
what it sends back re-enters the switch on the server port; every egress port gets a pcap.
A build without a server runs in the switch model alone (``run_hybrid`` starts no process);
one without a switch runs the DPDK program alone on its logical ports (``run_server``).

Each takes ``progress``, a callable that hears one line at each step a person waits on (the
switch model's pass over each input, a server program started, the entries loaded, what went
to the servers and came back; ``nfc run`` prints them on stderr); None, the default, is silent.
"""
from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from scapy.utils import RawPcapReader, RawPcapWriter

from compiler.content_cache import cache_root
from compiler.manifest import Plan
from runtime.api import Runtime
from runtime.cache_manager import Managers
from runtime.entries import EntrySpec
from runtime.errors import RuntimeApiError
from runtime.fleet import ServerFleet, merge_counters, replicated_tables
from runtime.goal import GoalError, open_goal
from runtime.live import LiveDataPlane, LiveError, Switch, pace
from runtime.made import make_program
from runtime.p4runtime import SwitchClient
from runtime.server_proc import ServerProcess, eal_args

__all__ = ["EAL_ARGS", "Progress", "RunError", "run_hybrid", "run_live", "run_server"]

EAL_ARGS = eal_args()
EVERY_S = 5.0  # a long step reports how far it got this often

Progress = Callable[[str], None]


class RunError(RuntimeError):
    """The server program could not be built or run; the message says why."""


class SwitchLike(Protocol):
    server_ports: tuple[int, ...]

    def process(self, data: bytes, port: int, now: float = 0.0) -> Any: ...


def _quiet(line: str) -> None:
    """The default ``progress``: nobody listens."""


class _Every:
    """True once every ``seconds`` (a long loop's "so far" line)."""

    def __init__(self, seconds: float = EVERY_S) -> None:
        self.seconds = seconds
        self.next = time.monotonic() + seconds

    def __call__(self) -> bool:
        now = time.monotonic()
        if now < self.next:
            return False
        self.next = now + self.seconds
        return True


def _loaded(out: Path, switch: SwitchClient | None, server: Any, entries: list[EntrySpec],
            goal: str | Path | None, say: Progress) -> Runtime:
    """``program``, with a line before and after when there is something to load."""
    if entries or goal is not None:
        what = f"{len(entries):,} entr{'y' if len(entries) == 1 else 'ies'}"
        say(f"entries: loading {what}" + (f" into the goal state {goal}, then the data planes from it"
                                          if goal is not None else "") + " ...")
    started = time.monotonic()
    rt = program(out, switch, server, entries, goal)
    if entries or goal is not None:
        say(f"entries: loaded in {time.monotonic() - started:.1f} s")
    return rt


def _packets(n: int) -> str:
    return f"{n:,} packet{'' if n == 1 else 's'}"


def _fates(fate: Counter[str], servers: bool) -> str:
    """What became of packets: "3 to the server, 1 out, 0 dropped" (with ``servers``: the
    share sent to a server; punts only when there are)."""
    where = [f"{fate['server']:,} to the server"] if servers else []
    where += [f"{fate['out']:,} out", f"{fate['dropped']:,} dropped"]
    return ", ".join(where + ([f"{fate['punted']:,} punted"] if fate["punted"] else []))


def _write(path: Path, packets: list[bytes]) -> None:
    with RawPcapWriter(str(path), linktype=1) as w:
        for p in packets:
            w.write(p)


def _fresh(capture: Path) -> None:
    """The capture folder, emptied of an earlier run's pcaps and counters."""
    capture.mkdir(parents=True, exist_ok=True)
    for old in [*capture.glob("port-*.pcap"), capture / "counters.json"]:
        old.unlink(missing_ok=True)


def _save(capture: Path, outputs: dict[int, list[bytes]], counters: dict[str, Any]) -> None:
    for port, packets in sorted(outputs.items()):
        _write(capture / f"port-{port}.pcap", packets)
    (capture / "counters.json").write_text(json.dumps(counters, indent=2, sort_keys=True) + "\n")


def _counters(drops: Counter[str], outputs: dict[int, list[bytes]], server: dict[str, Any]) -> dict[str, Any]:
    server_drops = Counter({f"server:{k}": v for k, v in server.get("drops", {}).items()})
    server_drops += Counter({f"punt:{k}": v for k, v in server.get("punts", {}).items()})
    return {"drops": dict(sorted((drops + server_drops).items())),
            "egress_packets": {str(p): len(v) for p, v in sorted(outputs.items())},
            "server": {"forwarded": server.get("forwarded", 0), "tables": server.get("tables", {})}}


def program(out: Path, switch: SwitchClient | None, server: Any, entries: list[EntrySpec],
            goal: str | Path | None) -> Runtime:
    """Put ``entries`` where the plan says, through the runtime API.  With ``goal`` (a SQLite
    file, runtime/goal.py, or a Redis URL, runtime/goal_redis.py), the entries are first
    recorded in the goal state an earlier run may have left there (each replacing the goal's
    entry of its key), then the data planes, which start empty, are brought to it
    (``Runtime.reconcile``): a run restarted with the same goal forwards as the last one did,
    with or without its entries given again.  The runtime is returned (its goal state closed),
    its switch caches' policies as the writes left them."""
    try:
        rt = Runtime(out, switch=switch, server=server)
        rt.goal = open_goal(goal, Path(rt.plan.source).stem) if goal is not None else None
        try:
            if goal is not None:
                rt.intend(entries)
                rt.reconcile()
            else:
                rt.load(entries)
        finally:
            if rt.goal is not None:
                rt.goal.close()
                rt.goal = None
        return rt
    except (sqlite3.Error, GoalError) as e:  # not a SQLite file or not this program's, unreadable, disk full
        raise RunError(f"the goal state {goal}: {e}") from e


def build_server(out: Path) -> Path:
    """The build's server program, made from the sources in ``out/server`` now (or taken from the
    cache, where a program made from the same sources is kept: runtime/made.py), never a binary
    left there by an earlier build."""
    r = make_program(out / "server", "nf", cache_root(), progress=lambda m: print(m, file=sys.stderr, flush=True))
    if r.returncode != 0:
        raise RunError(f"building the server program failed:\n{r.stderr[-2000:]}")
    return out / "server" / "nf"


def run_hybrid(out: Path, plan: Plan, switch: SwitchLike, switch_client: SwitchClient | None,
               entries: list[EntrySpec], injects: list[tuple[int, Path]], capture: Path,
               goal: str | Path | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """One server process per server port that carries traffic (``plan.server_count``: every
    share of ``shard by``, else the first port), programmed as one (runtime/fleet.py)."""
    say = progress or _quiet
    _fresh(capture)
    outputs: dict[int, list[bytes]] = {}
    drops: Counter[str] = Counter()
    ports = switch.server_ports[:plan.server_count] if plan.server is not None else ()
    to_server: dict[int, list[bytes]] = {port: [] for port in ports}
    fate: Counter[str] = Counter()  # of the packets through the switch model: server, out, dropped, punted

    def deliver(o: Any) -> None:
        if o.kind == "forward" and o.port in to_server:
            to_server[o.port].append(o.data)
            fate["server"] += 1
        elif o.kind == "forward":
            outputs.setdefault(o.port, []).append(o.data)
            fate["out"] += 1
        elif o.kind == "drop":
            drops[f"switch:{o.reason}"] += 1
            fate["dropped"] += 1
        else:
            drops[f"punt:{o.reason}"] += 1
            fate["punted"] += 1

    def through_switch(packets: Iterable[bytes], port: int, what: str, servers: bool) -> None:
        """Each of ``packets`` into the switch model on ``port``; a line at the end (and every
        few seconds of a long input) saying what became of them (``servers``: how many went
        to a server too)."""
        fate.clear()
        n, every = 0, _Every()
        for data in packets:
            deliver(switch.process(bytes(data), port))
            n += 1
            if every():
                say(f"switch model: {_packets(n)} {what} so far ...")
        say(f"switch model: {_packets(n)} {what}: {_fates(fate, servers)}")

    per_server: list[dict[str, Any]] = []
    back: dict[int, list[bytes]] = {}
    with tempfile.TemporaryDirectory(prefix="nfc-run-") as tmp:
        work = Path(tmp)
        srvs: list[ServerProcess] = []
        try:
            binary = build_server(out) if ports else None
            for port in ports:
                srvs.append(ServerProcess(binary, eal=EAL_ARGS, live=False,  # type: ignore[arg-type]
                                          attach=[f"net_pcap0,rx_pcap={work / f'to_server{port}.pcap'},"
                                                  f"tx_pcap={work / f'from_server{port}.pcap'}"]))
                say(f"server program started for server port {port} (pid {srvs[-1].proc.pid}, DPDK on net_pcap)")
            fleet = (None if not srvs else srvs[0].control if len(srvs) == 1
                     else ServerFleet([s.control for s in srvs], plan))
            _loaded(out, switch_client, fleet, entries, goal, say)
            for port, path in injects:
                through_switch((d for d, _ in RawPcapReader(str(path))), port, f"from port {port} ({path.name})",
                               bool(ports))
            for port, srv in zip(ports, srvs, strict=True):
                _write(work / f"to_server{port}.pcap", to_server[port])
                srv.control.start()
            if ports:
                say(f"server program{'s' if len(ports) > 1 else ''}: running on "
                    f"{_packets(sum(len(to_server[p]) for p in ports))} ...")
            per_server = [srv.wait() for srv in srvs]
        except (RuntimeApiError, OSError) as e:
            raise RunError(str(e)) from e
        finally:
            for srv in srvs:
                srv.stop()
        for port in ports:
            back[port] = ([bytes(d) for d, _ in RawPcapReader(str(work / f"from_server{port}.pcap"))]
                          if to_server[port] else [])
    sent = {port: len(to_server[port]) for port in ports}
    for port in ports:
        say(f"sent {_packets(sent[port])} to the server on port {port}, {len(back[port]):,} came back")
        to_server[port] = []
    for port in ports:
        if back[port]:
            through_switch(back[port], port, f"back from the server on port {port}", False)
    if any(to_server.values()):
        raise RunError("a packet went back to the server twice; nfc run handles one round trip")
    counters = _counters(drops, outputs, merge_counters(per_server, replicated_tables(plan)))
    if len(ports) > 1:  # which server carried what (shard by)
        counters["servers"] = [{"port": port, "received": sent[port], "forwarded": c.get("forwarded", 0)}
                               for port, c in zip(ports, per_server, strict=True)]
    _save(capture, outputs, counters)
    return counters


_TAG = struct.Struct(">I")  # nf --tagged: the logical port before each frame


def run_server(out: Path, entries: list[EntrySpec], injects: list[tuple[int, Path]],
               capture: Path, goal: str | Path | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """A build without a switch: the DPDK program alone, every logical port carried by one
    tagged net_pcap device (``nf --tagged``) so that packets keep their injection order."""
    say = progress or _quiet
    _fresh(capture)
    packets = [_TAG.pack(port) + bytes(d) for port, path in injects for d, _ in RawPcapReader(str(path))]
    outputs: dict[int, list[bytes]] = {}
    with tempfile.TemporaryDirectory(prefix="nfc-run-") as tmp:
        work = Path(tmp)
        srv = ServerProcess(build_server(out), eal=EAL_ARGS, live=False, extra=["--tagged"],
                            attach=[f"net_pcap0,rx_pcap={work / 'in.pcap'},tx_pcap={work / 'out.pcap'}"])
        say(f"server program started (pid {srv.proc.pid}, DPDK on net_pcap; no switch: the packets enter on "
            "their logical ports)")
        try:
            _loaded(out, None, srv.control, entries, goal, say)
            _write(work / "in.pcap", packets)
            srv.control.start()
            say(f"server program: running on {_packets(len(packets))} ...")
            server_counters = srv.wait()
        except (RuntimeApiError, OSError) as e:
            raise RunError(str(e)) from e
        finally:
            srv.stop()
        for data, _ in RawPcapReader(str(work / "out.pcap")) if packets else []:
            outputs.setdefault(_TAG.unpack_from(data)[0], []).append(bytes(data[_TAG.size:]))
    per_port = Counter(_TAG.unpack_from(p)[0] for p in packets)
    say(f"sent {_packets(len(packets))} to the server program ("
        + ", ".join(f"port {p}: {n:,}" for p, n in sorted(per_port.items()))
        + f"), {sum(len(v) for v in outputs.values()):,} came out")
    counters = _counters(Counter(), outputs, server_counters)
    _save(capture, outputs, counters)
    return counters


def run_live(out: Path, plan: Plan, switch: Switch, server_ports: Sequence[int], switch_client: SwitchClient | None,
             entries: list[EntrySpec], injects: list[tuple[int, Path]], capture: Path, pps: float = 1000.0,
             serve_seconds: float = 0.0, progress: Progress | None = None, goal: str | Path | None = None,
             manage_s: float = 0.0) -> dict[str, Any]:
    """The live data plane: one server program per server port that carries traffic (as in
    batch mode, programmed as one fleet), entries through the runtime, the pcaps sent at
    ``pps``, then ``serve_seconds`` more with the P4Runtime endpoint and the control sockets
    open to other controllers (their addresses go to ``progress``, once the entries are in,
    with the packets sent and what came back); captures and counters as in batch mode.
    ``manage_s`` > 0: a cache manager for every switch cache steps that often while the
    packets flow (the counters then say what each promoted and evicted)."""
    say = progress or _quiet
    _fresh(capture)
    ports = server_ports[:plan.server_count]
    try:
        with LiveDataPlane(build_server(out), switch, ports, replicated=replicated_tables(plan)) as live, \
                contextlib.ExitStack() as managing:
            controls = [s.control for s in live.servers]
            server = controls[0] if len(controls) == 1 else ServerFleet(controls, plan)
            rt = _loaded(out, switch_client, server, entries, goal, say)
            for port, srv in zip(ports, live.servers, strict=True):
                say(f"server control socket (port {port}): {srv.socket} (network namespace {live.links[port].netns})")
            loop = managing.enter_context(Managers.every_cache(
                rt, manage_s, on_error=lambda table, e: say(f"cache manager of {table}: {e}"))) \
                if manage_s > 0 else None
            for port, path in injects:
                _paced(path, functools.partial(live.inject, port), pps, f"port {port}", say)
            if serve_seconds > 0:
                say(f"serving {serve_seconds:g} s more (P4Runtime and the control sockets stay open) ...")
            time.sleep(serve_seconds)
            if not live.settle():
                raise RunError(f"packets still in flight after 30 s: {live.counters()}")
            managing.close()  # the managers stop before the counters are read
            for port, link in sorted(live.links.items()):
                say(f"sent {_packets(link.sent)} to the server on port {port}, {link.back:,} came back")
            counters = live.counters()
            if loop is not None:
                counters["cache_managers"] = {name: {"promoted": loop.total("promoted", name),
                                                     "evicted": loop.total("evicted", name),
                                                     "failed_steps": loop.errors[name]}
                                              for name in loop.managers}
            outputs = {p: live.take(p) for p in list(live.outputs)}
    except (RuntimeApiError, LiveError, OSError) as e:
        raise RunError(str(e)) from e
    _save(capture, outputs, counters)
    return counters


def _paced(path: Path, send: Callable[[bytes], None], pps: float, where: str, say: Progress) -> None:
    """The packets of ``path`` sent at ``pps`` (runtime/live.py ``pace``), a line every
    ``EVERY_S`` seconds' worth of them."""
    packets = [bytes(d) for d, _ in RawPcapReader(str(path))]
    say(f"{where}: sending {_packets(len(packets))} from {path.name} at {pps:g} packets/s ...")
    started, chunk = time.monotonic(), max(1, int(pps * EVERY_S))
    for i in range(0, len(packets), chunk):
        if i:
            say(f"{where}: sent {i:,} of {len(packets):,} packets")
        pace(packets[i:i + chunk], send, pps)
    say(f"{where}: sent {_packets(len(packets))} in {time.monotonic() - started:.1f} s")
