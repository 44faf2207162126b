"""The split program (switch model → server part → switch model, bridge headers on the
wire) forwards every packet exactly as the unsplit reference semantics: same port, same
bytes, same drop reason.  Random packets and table contents (Hypothesis); the server part
is the reference interpreter behind the bridge codec (ServerReference), which the DPDK
program will replace.  Switch caches hold a random subset of their table."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN

from compiler.interp import Entry, Interpreter, Match
from emulator.switchmodel.reference import SwitchReference
from emulator.switchmodel.server_ref import ServerReference
from tests.support import ROOT, compile_file, run_split

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                           HealthCheck.too_slow])


def split(c, entries: dict[str, list[Entry]], cached: dict[str, set[int]]):
    spec = Interpreter(c.program)
    switch = SwitchReference(c.program, c.placement, c.bridges, c.targets.server_ports)
    server = ServerReference(c.program, c.placement, c.bridges, c.targets.server_ports[0])
    for name, rows in entries.items():
        for i, e in enumerate(rows):
            spec.tables[name].insert(e)
            if name in switch.tables and (not c.program.tables[name].hints.cache or i in cached.get(name, set())):
                switch.tables[name].insert(e)
            if (name in server.tables and c.placement.where(_stage_of(c, name)) == "server") or \
                    c.program.tables[name].hints.cache:
                server.tables[name].insert(e)
    return spec, switch, server


def _stage_of(c, table):
    from compiler.analysis import stage_units

    return next(s for s in c.program.stages.values() for u in stage_units(c.program, s) if table in u.tables).name


@pytest.fixture(scope="module")
def vpn():
    return compile_file(str(ROOT / "examples/vpn_gateway.nfp"))


ips = st.integers(0, 2**32 - 1)


@SETTINGS
@given(routes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(0, 7), ips,
                                 st.integers(1, 2**24 - 1)), max_size=8, unique_by=lambda r: r[:3]),
       vnis=st.lists(st.tuples(st.integers(1, 2**24 - 1), st.integers(0, 4095), st.integers(0, 4095),
                               st.integers(0, 15)), max_size=4, unique_by=lambda v: v[0]),
       packets=st.lists(st.tuples(st.booleans(), st.integers(1, 4), st.integers(1, 4), st.integers(0, 9),
                                  st.integers(0, 80), st.integers(1, 2**24 - 1)), min_size=1, max_size=6))
def test_vpn_split_equals_spec(vpn, routes, vnis, packets):
    entries = {
        "overlay_routes": [Entry((Match(cu), Match(ov), Match(0xC0A80100 + vm)), {"host_ip": h, "vni": n})
                           for cu, ov, vm, h, n in routes],
        "underlay_routes": [Entry((Match(0, 0),), {"port": 20, "next_hop_mac": 0x99}),
                            Entry((Match(0xAC100000, 16),), {"port": 21, "next_hop_mac": 0x98})],
        "vni_to_qinq": [Entry((Match(v),), {"s_tag": s, "c_tag": ct, "port": p}) for v, s, ct, p in vnis],
    }
    spec, switch, server = split(vpn, entries, {})
    for customer, cu, ov, vm, cut, vni in packets:
        if customer:
            pkt = bytes(Ether() / Dot1AD(vlan=cu) / Dot1Q(vlan=ov) / IP(dst=f"192.168.1.{vm}") / UDP() / b"data")
            port = 2
        else:
            vni = vnis[0][0] if vnis and vni % 2 else vni
            pkt = bytes(Ether() / IP(dst="10.255.0.1") / UDP(dport=4789) / VXLAN(vni=vni)
                        / Ether(src="00:00:00:00:00:01") / IP(dst="10.9.9.9") / b"back")
            port = 18
        if cut < 60:
            pkt = pkt[:cut]
        want = spec.process(pkt, port)
        got = run_split(switch, server, pkt, port)
        assert (got.kind, got.port, got.data, got.reason) == (want.kind, want.port, want.data, want.reason)


@pytest.fixture(scope="module")
def bluebird():
    return compile_file(str(ROOT / "examples/bluebird_tor.nfp"))


@SETTINGS
@given(maps=st.lists(st.tuples(st.integers(0, 15), ips, st.integers(1, 2**24 - 1)), min_size=1, max_size=10,
                     unique_by=lambda m: m[0]),
       cached=st.sets(st.integers(0, 9)),
       packets=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 47)), min_size=1, max_size=6))
def test_bluebird_route_cache_split_equals_spec(bluebird, maps, cached, packets):
    """Any subset of the CA→PA mappings in the switch cache: misses go to the server."""
    entries = {
        "port_vrf": [Entry((Match(p),), {"vrf": 1}) for p in range(48)],
        "vrf_routes_v4": [Entry((Match(1), Match(0xC0A80000, 16)), {"to_vnet": 1, "port": 5, "next_hop_mac": 1}),
                          Entry((Match(1), Match(0, 0)), {"to_vnet": 0, "port": 6, "next_hop_mac": 2})],
        "ca_to_pa": [Entry((Match(1), Match(0xC0A80000 + host)), {"vtep": vtep, "vni": vni, "vm_mac": 0x0A0B})
                     for host, vtep, vni in maps],
        "pa_routes": [Entry((Match(0, 0),), {"port": 50, "next_hop_mac": 3})],
    }
    spec, switch, server = split(bluebird, entries, {"ca_to_pa": cached})
    for host, port in packets:
        pkt = bytes(Ether() / IP(src="10.0.0.1", dst=f"192.168.0.{host}", ttl=9) / UDP() / b"bm")
        want = spec.process(pkt, port)
        got = run_split(switch, server, pkt, port)
        assert (got.kind, got.port, got.data, got.reason) == (want.kind, want.port, want.data, want.reason)


def test_the_comparison_catches_a_bridge_that_loses_a_field(vpn):
    """The check above can fail: drop meta.vni from the server→switch bridge and the split
    program encapsulates with the wrong VNI."""
    import dataclasses

    back = vpn.bridges[1]
    broken = dataclasses.replace(vpn, bridges=(vpn.bridges[0], dataclasses.replace(back, fields=back.fields[:1])))
    entries = {"overlay_routes": [Entry((Match(1), Match(1), Match(0xC0A80101)), {"host_ip": 5, "vni": 77})],
               "underlay_routes": [Entry((Match(0, 0),), {"port": 20, "next_hop_mac": 0x99})], "vni_to_qinq": []}
    pkt = bytes(Ether() / Dot1AD(vlan=1) / Dot1Q(vlan=1) / IP(dst="192.168.1.1") / UDP() / b"d")
    spec, switch, server = split(vpn, entries, {})
    assert run_split(switch, server, pkt, 2).data == spec.process(pkt, 2).data
    spec, switch, server = split(broken, entries, {})
    got, want = run_split(switch, server, pkt, 2), spec.process(pkt, 2)
    assert got.data != want.data and Ether(got.data)[VXLAN].vni == 0 and Ether(want.data)[VXLAN].vni == 77
