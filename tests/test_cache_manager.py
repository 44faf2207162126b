"""The cache manager (issue 14 item 2): idle entries leave the switch cache and the entries the
server sees hit most take their room.  The whole stack runs: the generated server program
counting hits of real packets (HITS), the switch model keeping idle time over P4Runtime, the
runtime API writing both; the switch's table is read back as the oracle of what moved."""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator.switchmodel import SwitchModel, SwitchReference
from emulator.switchmodel.server import P4RuntimeServer, serve
from runtime.api import Runtime
from runtime.cache import CachePolicy
from runtime.cache_manager import BLUEBIRD, CacheManager, IdleLimits, Managers, StepReport
from runtime.p4runtime import SwitchClient
from runtime.server_proc import ServerProcess
from tests.packet_fuzz import write_pcap
from tests.support import ROOT, compile_file, needs_dpdk, nfc_cli, run_make

PROGRAM = ROOT / "tests/corpus/host_cache.nfp"
HOSTS = [0x0A000000 + i for i in range(20)]


def _frame(dst: int) -> bytes:
    return bytes(Ether(dst="02:00:00:00:00:01") / IP(src="192.0.2.1", dst=str(ipaddress.IPv4Address(dst)))
                 / UDP() / b"x")




@contextmanager
def _running(tmp_path: Path, hot: dict[int, int]) -> Iterator[tuple[SwitchModel, SwitchClient, ServerProcess, Runtime]]:
    """host_cache.nfp built and running: the switch model behind P4Runtime, the generated server
    program with the packets of ``hot`` (host: how many) queued as the switch sends them (its
    cache empty: all miss), and a runtime API that added every host, the first 6 cached."""
    out = tmp_path / "out"
    r = nfc_cli("build", str(PROGRAM.relative_to(ROOT)), "-o", str(out), "--no-verify")
    assert r.returncode == 0, r.stderr
    assert run_make(out / "server").returncode == 0
    c = compile_file(str(PROGRAM))
    ref = SwitchReference(c.program, c.placement, c.bridges, c.targets.server_ports)
    write_pcap(tmp_path / "in.pcap", [ref.process(_frame(d), 1).data for d, n in hot.items() for _ in range(n)])
    model = SwitchModel.from_build(out)
    names = json.loads((out / "switch/name_map.json").read_text())
    grpc_server, port = serve(P4RuntimeServer(model, names, "tna"))
    switch = SwitchClient(f"127.0.0.1:{port}", names, "tna")
    dev = f"net_pcap0,rx_pcap={tmp_path / 'in.pcap'},tx_pcap={tmp_path / 'out.pcap'}"
    try:
        with ServerProcess(out / "server/nf", attach=[dev]) as srv:
            rt = Runtime(out, switch=switch, server=srv.control)
            rt.caches["hosts"].capacity = 6  # a small cache: the first 6 added fill it
            rt.table("hosts").add_many([{"ipv4_dst": h, "port": 1 + i} for i, h in enumerate(HOSTS)])
            yield model, switch, srv, rt
    finally:
        switch.close()
        grpc_server.stop(0)


def _forwarded_by_server(srv: ServerProcess, packets: int) -> None:
    """START, then wait until the server has looked up all ``packets``."""
    srv.control.start()
    deadline = time.monotonic() + 30
    while srv.control.counters()["tables"]["hosts"]["hits"] < packets:
        assert time.monotonic() < deadline
        time.sleep(0.05)


@needs_dpdk
@pytest.mark.parametrize("notify", [False, True], ids=["idle-read", "idle-notified"])
def test_idle_entries_leave_and_the_hottest_misses_take_their_room(tmp_path, notify):
    """The manager finds the idle entries by reading every cached entry's idle time, or
    (``notify``) from the switch's idle-timeout notifications, reading only those."""
    hot = {HOSTS[10]: 40, HOSTS[11]: 30, HOSTS[12]: 20, HOSTS[13]: 10, HOSTS[14]: 1}
    with _running(tmp_path, hot) as (model, switch, srv, rt):
        assert {m["ipv4_dst"][0] for m, _v, _p in switch.read("hosts")} == set(HOSTS[:6])
        _forwarded_by_server(srv, sum(hot.values()))
        time.sleep(0.5)
        for h in HOSTS[:2]:  # traffic the switch serves itself keeps these two
            assert model.process(_frame(h), 1).port == 1 + HOSTS.index(h)
        manager = CacheManager(rt, "hosts", IdleLimits(((0.95, 0.3),)), notify=notify)  # full: idle > 0.3 s goes
        if notify:
            time.sleep(0.1)  # the switch's next scans report the four idle ones
        first = manager.step()
        candidates = dict(manager.candidates or {})
        cached = {m["ipv4_dst"][0]: v["port"] for m, v, _p in switch.read("hosts")}
        second = CacheManager(rt, "hosts", IdleLimits(())).step()  # evicts nothing
    assert (first.evicted, first.promoted, first.server_hits) == (4, 4, sum(hot.values()))
    # the two kept, then the four hottest misses by count (not the fifth, hit once), with the
    # values the server holds
    assert cached == {h: 1 + HOSTS.index(h) for h in [*HOSTS[:2], *HOSTS[10:14]]}
    assert (second.evicted, second.promoted, second.server_hits) == (0, 0, 0)  # the hits were taken
    assert candidates == {}  # notified: the four evicted left the candidates


@needs_dpdk
def test_a_promotion_does_not_wait_for_a_read_of_the_whole_cache(tmp_path):
    """Managers promote in a thread of their own: while an eviction step's read of every cached
    entry's idle time is held up (here until the test lets it go; a read of 100,000 entries
    takes a second), the hottest misses still reach the room there is."""
    hot = {HOSTS[10]: 20, HOSTS[11]: 10}
    with _running(tmp_path, hot) as (_model, switch, srv, rt):
        rt.caches["hosts"].capacity = 8  # 6 cached: room for the two
        _forwarded_by_server(srv, sum(hot.values()))
        entered, release = threading.Event(), threading.Event()
        read = switch.idle

        def held(*args: Any, **kw: Any) -> Any:
            entered.set()
            release.wait(30)
            return read(*args, **kw)

        switch.idle = held  # type: ignore[method-assign]
        manager = CacheManager(rt, "hosts", IdleLimits(((0.5, 100.0),)))  # 75 % full: every entry's idle time read
        try:
            with Managers({"hosts": manager}, step_s=0.001, evict_s=0.01):
                try:
                    assert entered.wait(10)
                    deadline = time.monotonic() + 10
                    while not set(hot) <= {m["ipv4_dst"][0] for m, _v, _p in switch.read("hosts")}:
                        assert time.monotonic() < deadline, "nothing promoted while the idle read was held up"
                        time.sleep(0.01)
                    assert not release.is_set()
                finally:
                    release.set()  # before the managers' threads are joined
        finally:
            release.set()
        on_switch = {m["ipv4_dst"][0]: v["port"] for m, v, _p in switch.read("hosts")}
    assert {h: on_switch[h] for h in hot} == {h: 1 + HOSTS.index(h) for h in hot}  # the server's values


def test_bluebird_limits_follow_its_table_2():
    assert [BLUEBIRD.limit(x) for x in (0.5, 0.85, 0.9, 0.94, 0.95, 1.0)] == [None, 1100, 300, 300, 100, 100]


def test_the_manager_takes_the_idle_limits_the_nfp_states(tmp_path):
    """``idle_limits`` on a cached table reaches plan.json and the manager's policy: the
    .nfp's limits, fullest first; without them, Bluebird's."""
    src = tmp_path / "limits.nfp"
    src.write_text(PROGRAM.read_text().replace("cache = true;", "cache = true; idle_limits = [50%: 20s, 99%: 1.5s];"))
    out = tmp_path / "out"
    r = nfc_cli("build", str(src), "-o", str(out), "--no-verify")
    assert r.returncode == 0, r.stderr
    m = CacheManager(Runtime(out), "hosts")
    assert m.limits.steps == ((0.99, 1.5), (0.5, 20.0))
    assert [m.limits.limit(x) for x in (0.4, 0.5, 0.98, 0.99)] == [None, 20.0, 20.0, 1.5]
    assert CacheManager(Runtime(out), "hosts", limits=BLUEBIRD).limits is BLUEBIRD
    plain = tmp_path / "plain"
    r = nfc_cli("build", str(PROGRAM.relative_to(ROOT)), "-o", str(plain), "--no-verify")
    assert r.returncode == 0, r.stderr
    assert CacheManager(Runtime(plain), "hosts").limits is BLUEBIRD


def _p(a: str) -> tuple[int, int]:
    net = ipaddress.IPv4Network(a)
    return int(net.network_address), net.prefixlen


def test_an_lpm_prefix_is_promoted_only_once_what_is_inside_it_is_cached():
    """Promoting 10.0.0.0/8 while 10.1.0.0/16 stays on the server would send 10.1/16's traffic
    by the /8 on the switch: the /16 goes first."""
    policy = CachePolicy(capacity=0, lpm=0, width=32)  # no room while the routes go in: none cached
    wide, narrow = _p("10.0.0.0/8"), _p("10.1.0.0/16")
    policy.on_add(wide)
    policy.on_add(narrow)
    policy.capacity = 4
    assert policy.cached == set()
    assert policy.match((int(ipaddress.IPv4Address("10.1.2.3")),)) == narrow
    assert policy.match((int(ipaddress.IPv4Address("10.2.0.1")),)) == wide
    assert policy.match((int(ipaddress.IPv4Address("11.0.0.1")),)) is None
    assert policy.promote(wide) is None  # its /16 is on the server only
    assert policy.promote(narrow) is not None and policy.promote(wide) is not None
    d = policy.demote(narrow)  # the /8 covering it must leave with it
    assert sorted(d.evict) == sorted([wide, narrow]) and policy.cached == set()


@needs_dpdk
def test_server_entries_much_hotter_than_the_coldest_cached_ones_take_their_place(tmp_path):
    """A full cache whose entries are none of them idle long enough to go (no idle limit at
    all here) still follows the traffic: the cached entries the switch saw no hit of between
    two reads of their idle times make room for the server's hottest misses; the two the
    switch keeps hitting stay, and a server entry hit once is not worth a swap."""
    hot = {HOSTS[10]: 40, HOSTS[11]: 30, HOSTS[12]: 20, HOSTS[13]: 10, HOSTS[14]: 1}
    with _running(tmp_path, hot) as (model, switch, srv, rt):
        manager = CacheManager(rt, "hosts", IdleLimits(()), half_life=30.0)  # nothing is ever idle enough
        first = manager.step()  # the first read of the cached entries' idle times: nothing to compare yet
        _forwarded_by_server(srv, sum(hot.values()))
        for h in HOSTS[:2]:  # the switch serves these two itself between the reads
            assert model.process(_frame(h), 1).port == 1 + HOSTS.index(h)
        steps: list[StepReport] = []  # until the manager has seen every server hit (HITS may lag)
        deadline = time.monotonic() + 30
        while sum(r.server_hits for r in steps) < sum(hot.values()):
            assert time.monotonic() < deadline
            time.sleep(0.1)
            steps.append(manager.step())
        cached = {m["ipv4_dst"][0]: v["port"] for m, v, _p in switch.read("hosts")}
    assert (first.evicted, first.promoted, first.replaced) == (0, 0, 0)
    assert [sum(getattr(r, f) for r in steps) for f in ("replaced", "evicted", "promoted")] == [4, 4, 4]
    assert cached == {h: 1 + HOSTS.index(h) for h in [*HOSTS[:2], *HOSTS[10:14]]}
    assert manager.heat.keys() == {(HOSTS[14],)}  # hit once: still a candidate, not cached
