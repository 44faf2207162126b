"""The differential test with the cache manager active under changing traffic (issue 14,
item 3): the DSR router runs live (the switch model executing the generated TNA program, the
generated server program behind a veth pair, ``runtime.live``), its ``vrf_fib`` a small LPM
switch cache in front of the server's full table, while a cache manager promotes and evicts
every 20 ms (prefixes promoted with what is inside them, idle ones evicted after 50 ms) and the
hot prefixes change from phase to phase; between phases the operator adds and deletes routes.
Every packet must leave as the reference interpreter, running the whole spec with the full
tables, sends it: same bytes, same port, whichever side answered it."""

from __future__ import annotations

import ipaddress
import random
import threading
from collections import Counter

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN

from compiler.interp import Entry, Interpreter, Match
from runtime.api import Runtime
from runtime.cache_manager import CacheManager, IdleLimits
from runtime.live import LiveDataPlane, pace
from runtime.steering import steer_all
from tests.support import LIVE, ROOT, P4RuntimeSwitch, build_with_server, compile_ir

pytestmark = LIVE

DSR_IP, ACCESS_PORT, FABRIC_PORT = "10.200.0.1", 2, 30
VNIS = {100: 3, 101: 4}
ROUTES = {(3, "0.0.0.0/0"): 1, (3, "10.0.0.0/8"): 2, (3, "10.1.0.0/16"): 3, (3, "10.1.2.0/24"): 4,
          (3, "10.1.2.128/25"): 5, (3, "10.2.0.0/16"): 6, (3, "10.3.0.0/16"): 7, (3, "10.3.3.0/24"): 8,
          (4, "10.0.0.0/8"): 9, (4, "10.1.0.0/16"): 10, (4, "10.4.4.0/24"): 11}
# addresses in every part of the prefix tree, hot in turn
ADDRS = [(vni, f"10.{a}.{b}.{c}") for vni in VNIS for a, b, c in
         [(1, 2, 200), (1, 2, 5), (1, 9, 9), (2, 0, 1), (3, 3, 3), (3, 9, 9), (4, 4, 4), (9, 9, 9)]]
ADDED, DELETED = (3, "10.1.2.0/26"), (3, "10.3.0.0/16")  # between phases 2 and 3


def _route(vrf: int, net: str, n: int) -> dict[str, object]:
    return {"meta_vrf": vrf, "ipv4_dst": net, "tunnel_dst": f"172.20.0.{n}", "tunnel_key": 1000 + n}


def _packet(vni: int, dst: str, seq: int) -> bytes:
    inner = IP(src="192.168.0.5", dst=dst, ttl=20, id=seq) / UDP(sport=1, dport=2) / b"tenant"
    return bytes(Ether() / IP(src="192.0.2.50", dst=DSR_IP) / UDP(sport=49999, dport=4789) / VXLAN(vni=vni)
                 / Ether() / inner)


def _reference(routes: dict[tuple[int, str], int]) -> Interpreter:
    it = Interpreter(compile_ir(str(ROOT / "examples/dsr_router.nfp")))
    for vni, vrf in VNIS.items():
        it.tables["vni_to_vrf"].insert(Entry((Match(vni),), {"vrf": vrf}))
    for (vrf, net), n in routes.items():
        nw = ipaddress.IPv4Network(net)
        it.tables["vrf_fib"].insert(Entry((Match(vrf), Match(int(nw.network_address), nw.prefixlen)),
                                          {"tunnel_dst": int(ipaddress.IPv4Address(f"172.20.0.{n}")),
                                           "tunnel_key": 1000 + n}))
    it.tables["fabric_routes"].insert(Entry((Match(0, 0),), {"port": FABRIC_PORT, "next_hop_mac": 0x020000000030}))
    return it


def _phase(rnd: random.Random, hot: list[tuple[int, str]], first: int) -> list[bytes]:
    """300 packets, Zipf-like over ``hot`` (the first one hottest), the rest of ADDRS now and then."""
    weights = [1.0 / (i + 1) for i in range(len(hot))]
    out = []
    for i in range(300):
        vni, dst = rnd.choices(hot, weights)[0] if rnd.random() < 0.9 else rnd.choice(ADDRS)
        out.append(_packet(vni, dst, first + i))
    return out


def _manage(manager: CacheManager, stop: threading.Event, moved: Counter[str]) -> None:
    """Step every 20 ms until stopped, adding up what moved."""
    while not stop.wait(0.02):
        rep = manager.step()
        moved["promoted"] += rep.promoted
        moved["evicted"] += rep.evicted
        moved["replaced"] += rep.replaced


@pytest.mark.parametrize("moves", ["idle", "replace"])
def test_forwarding_stays_as_the_full_table_says_while_the_manager_moves_the_cache(tmp_path, moves):
    """``idle``: entries idle over 50 ms leave (mostly making room: few are replaced);
    ``replace``: no idle limit, so only replacing cold cached prefixes by hot server ones moves
    the full cache."""
    out = build_with_server("examples/dsr_router.nfp", tmp_path / "dsr")
    sw = P4RuntimeSwitch(out)
    switch = sw.client
    rnd = random.Random(14)
    routes = dict(ROUTES)
    moved = Counter[str]()
    try:
        with LiveDataPlane(out / "server/nf", sw.p4rt, sw.model.server_ports[0]) as live:
            assert live.server is not None
            rt = Runtime(out, switch=switch, server=live.server.control)
            steer_all(rt)  # the example shards over four forwarders: this one gets every tenant
            rt.caches["vrf_fib"].capacity = 4  # a small cache: the manager must choose
            rt.table("vni_to_vrf").add_many([{"vxlan_vni": n, "vrf": v} for n, v in VNIS.items()])
            rt.table("fabric_routes").add(outer_ipv4_dst="0.0.0.0/0", port=FABRIC_PORT, next_hop_mac=0x020000000030)
            rt.table("vrf_fib").add_many([_route(v, net, n) for (v, net), n in routes.items()])
            limits = IdleLimits(((0.0, 0.05),) if moves == "idle" else ())
            manager = CacheManager(rt, "vrf_fib", limits, half_life=0.2, unit=4)
            got: Counter[tuple[int, bytes]] = Counter()
            want: Counter[tuple[int, bytes]] = Counter()
            for phase in range(4):
                if phase == 2:  # the operator, between phases
                    rt.table("vrf_fib").add(**_route(*ADDED, 99))
                    rt.table("vrf_fib").delete(meta_vrf=DELETED[0], ipv4_dst=DELETED[1])
                    routes[ADDED] = 99
                    del routes[DELETED]
                hot = rnd.sample(ADDRS, 4)
                packets = _phase(rnd, hot, 1000 * phase)
                stop = threading.Event()
                t = threading.Thread(target=_manage, args=(manager, stop, moved))
                t.start()
                try:
                    pace(packets, lambda d: live.inject(ACCESS_PORT, d), 600.0)
                finally:
                    stop.set()
                    t.join()
                assert live.settle(), live.counters()
                ref = _reference(routes)
                for p in packets:
                    o = ref.process(p, ACCESS_PORT)
                    if o.kind == "forward":
                        want[(o.port, o.data)] += 1
                for port_ in list(live.outputs):
                    got.update((port_, d) for d in live.take(port_))
            counters = live.counters()
    finally:
        sw.close()
    assert got == want, (sorted(got - want)[:3], sorted(want - got)[:3])
    assert sum(want.values()) == 1200 and set(p for p, _ in want) == {FABRIC_PORT}
    assert moved["promoted"] > 0 and moved["evicted"] > 0, moved
    assert moves != "replace" or moved["replaced"] > 0, moved
    served_by_switch = 1200 - sum(link.sent for link in live.links.values())
    assert 0 < served_by_switch < 1200, counters  # both sides answered some
