"""Restart reconciliation (issue 14, item 5): the runtime records every write in its goal
state (a SQLite file, runtime/goal.py); after the server program, the switch or the runtime
itself restarts, ``Runtime.reconcile`` reads what each side holds and repairs the difference,
losing no entry and never caching a prefix whose traffic another server prefix inside it
should take.

The DSR router (examples/dsr_router.nfp): ``vrf_fib`` is a switch cache in front of the
server's full table, three tables are on the switch alone.  The switch is the switch model
behind its P4Runtime server, the server the generated program; both are restarted as
processes / objects, empty.  Expected contents come from the entries the tests write, and the
forwarding check from a longest-prefix match written here."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from runtime.api import Runtime
from runtime.goal import GoalStore
from runtime.p4runtime import SwitchUpdate
from runtime.server_proc import ServerProcess
from tests.support import DPDK, P4RuntimeSwitch, build_with_server

pytestmark = DPDK

# (vrf, prefix) -> (tunnel_dst, tunnel_key): nested prefixes in two VRFs
ROUTES = {(1, "10.0.0.0/8"): (0xAC100001, 1), (1, "10.1.0.0/16"): (0xAC100002, 2),
          (1, "10.1.2.0/24"): (0xAC100003, 3), (1, "10.1.2.128/25"): (0xAC100004, 4),
          (1, "192.168.0.0/16"): (0xAC100005, 5), (2, "10.0.0.0/8"): (0xAC100006, 6),
          (2, "10.2.0.0/16"): (0xAC100007, 7), (1, "0.0.0.0/0"): (0xAC100008, 8)}
VNIS = {5000 + i: i % 3 + 1 for i in range(6)}
FABRIC = {"172.16.0.0/16": (3, 0x020000000003), "172.17.0.0/16": (4, 0x020000000004)}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_with_server("examples/dsr_router.nfp", tmp_path_factory.mktemp("reconcile") / "dsr")


class Sides:
    """A switch model behind P4Runtime and a server program, each restartable empty."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.start_switch()
        self.start_server()

    def start_switch(self) -> None:
        self.sw = P4RuntimeSwitch(self.out)  # a new model: empty
        self.switch = self.sw.client

    def stop_switch(self) -> None:
        self.sw.close()

    def start_server(self) -> None:
        self.server = ServerProcess(self.out / "server/nf", ["net_null0"])

    def stop_server(self) -> None:
        self.server.control.close()
        self.server.stop()

    def runtime(self, goal: Path) -> Runtime:
        return Runtime(self.out, switch=self.switch, server=self.server.control, goal=GoalStore(goal))

    def close(self) -> None:
        self.stop_switch()
        self.stop_server()


def _load(rt: Runtime) -> None:
    rt.table("vrf_fib").add_many([{"meta_vrf": v, "ipv4_dst": p, "tunnel_dst": d, "tunnel_key": k}
                                  for (v, p), (d, k) in ROUTES.items()])
    rt.table("vni_to_vrf").add_many([{"vxlan_vni": n, "vrf": v} for n, v in VNIS.items()])
    rt.table("fabric_routes").add_many([{"outer_ipv4_dst": p, "port": port, "next_hop_mac": mac}
                                        for p, (port, mac) in FABRIC.items()])


def _server_routes(sides: Sides) -> dict[tuple[int, str], tuple[int, int]]:
    out = {}
    for vrf, addr, plen, dst, key in sides.server.control.dump("vrf_fib"):
        out[(vrf, str(ipaddress.IPv4Network((addr, plen))))] = (dst, key)
    return out


def _switch_cache(sides: Sides) -> dict[tuple[int, str], tuple[int, int]]:
    out = {}
    for m, v, _p in sides.switch.read("vrf_fib"):
        (vrf, _), (addr, plen) = m["meta_vrf"], m["ipv4_dst"]
        out[(vrf, str(ipaddress.IPv4Network((addr, plen if plen is not None else 32))))] = (v["tunnel_dst"],
                                                                                           v["tunnel_key"])
    return out


def _lpm(table: dict[tuple[int, str], tuple[int, int]], vrf: int, addr: str) -> tuple[int, int] | None:
    a = ipaddress.IPv4Address(addr)
    best = max((ipaddress.IPv4Network(p) for v, p in table if v == vrf and a in ipaddress.IPv4Network(p)),
               key=lambda n: n.prefixlen, default=None)
    return table[(vrf, str(best))] if best is not None else None


def _forwards_as_the_table(cache: dict[tuple[int, str], tuple[int, int]]) -> None:
    """Cache first, else the full table: as the full table, for addresses in every prefix."""
    for vrf in (1, 2):
        for addr in ("10.1.2.200", "10.1.2.5", "10.1.9.9", "10.9.9.9", "10.2.3.4", "192.168.1.1", "8.8.8.8"):
            hit = _lpm(cache, vrf, addr)
            assert (hit if hit is not None else _lpm(ROUTES_BY_NET, vrf, addr)) == _lpm(ROUTES_BY_NET, vrf, addr), \
                (vrf, addr, sorted(cache))


ROUTES_BY_NET = {(v, str(ipaddress.IPv4Network(p))): x for (v, p), x in ROUTES.items()}


def test_a_restarted_server_program_gets_its_whole_table_back(built, tmp_path):
    sides = Sides(built)
    try:
        rt = sides.runtime(tmp_path / "goal.sqlite")
        _load(rt)
        assert _server_routes(sides) == ROUTES_BY_NET and rt.goal is not None and rt.goal.count("vrf_fib") == 8
        sides.stop_server()
        sides.start_server()  # empty
        assert _server_routes(sides) == {}
        rt.server = sides.server.control
        report = rt.reconcile()
        assert _server_routes(sides) == ROUTES_BY_NET
        assert (report["vrf_fib"]["server"].added, bool(report["vrf_fib"]["switch"])) == (8, False)
        assert not report["vni_to_vrf"]["switch"] and not report["fabric_routes"]["switch"]
        assert not any(side for sides_ in rt.reconcile().values() for side in sides_.values())  # nothing left to do
    finally:
        sides.close()


def test_a_restarted_switch_gets_its_tables_and_its_cache_back(built, tmp_path):
    sides = Sides(built)
    try:
        rt = sides.runtime(tmp_path / "goal.sqlite")
        _load(rt)
        rt.table("vni_to_vrf").delete(vxlan_vni=5000)
        cache_before = _switch_cache(sides)
        assert cache_before and len(cache_before) == len(rt.caches["vrf_fib"].cached)
        sides.stop_switch()
        sides.start_switch()  # an empty switch
        rt.switch = sides.switch
        report = rt.reconcile()
        assert report["vni_to_vrf"]["switch"].added == len(VNIS) - 1
        assert {m["vxlan_vni"][0]: v["vrf"] for m, v, _p in sides.switch.read("vni_to_vrf")} == \
            {n: v for n, v in VNIS.items() if n != 5000}
        assert {str(ipaddress.IPv4Network((m["outer_ipv4_dst"][0], m["outer_ipv4_dst"][1]))): (v["port"],
                                                                                               v["next_hop_mac"])
                for m, v, _p in sides.switch.read("fabric_routes")} == FABRIC
        assert _switch_cache(sides) == cache_before
        assert report["vrf_fib"]["switch"].added == len(cache_before) and not report["vrf_fib"]["server"]
    finally:
        sides.close()


def test_a_restarted_runtime_adopts_the_cache_and_drops_what_would_hijack(built, tmp_path):
    """The switch cache holds, besides a correct subset: 10.1.0.0/16 of VRF 1 without the /24
    and /25 inside it (it would take their traffic), a prefix the table does not have, and a
    stale value.  A new runtime on the same goal keeps what is safe and repairs the rest."""
    sides = Sides(built)
    try:
        rt = sides.runtime(tmp_path / "goal.sqlite")
        _load(rt)
        sides.switch.write([SwitchUpdate("delete", "vrf_fib", m, {}, p) for m, _v, p in sides.switch.read("vrf_fib")])
        ups = [SwitchUpdate("add", "vrf_fib", {"meta_vrf": (1, None), "ipv4_dst": (a, n)},
                            {"tunnel_dst": d, "tunnel_key": k}, 0)
               for a, n, d, k in [(0x0A010000, 16, 0xAC100002, 2),  # hijacks 10.1.2.0/24 and /25
                                  (0x0B000000, 8, 0xAC1000FF, 99),  # not in the table
                                  (0xC0A80000, 16, 0xAC100005, 55),  # the table says key 5
                                  (0x0A010280, 25, 0xAC100004, 4)]]  # safe: nothing inside it
        assert all(e is None for e in sides.switch.write(ups))
        assert rt.goal is not None
        rt.goal.close()  # the runtime goes away; the data planes stay
        rt2 = sides.runtime(tmp_path / "goal.sqlite")  # a new runtime: its cache policy is empty
        report = rt2.reconcile()["vrf_fib"]["switch"]
        cache = _switch_cache(sides)
        assert (1, "10.1.2.128/25") in cache and (1, "10.1.0.0/16") not in cache and (1, "11.0.0.0/8") not in cache
        assert cache[(1, "192.168.0.0/16")] == (0xAC100005, 5)
        assert report.deleted == 2 and report.modified == 1
        assert set(cache) == {(v, str(ipaddress.IPv4Network((k[1], k[2])))) for k in rt2.caches["vrf_fib"].cached
                              for v in [k[0]]}
        _forwards_as_the_table(cache)
    finally:
        sides.close()
