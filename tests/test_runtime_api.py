"""The runtime API: the generated per-NF package, entries put where the plan says (P4Runtime
to the switch model, the control channel to the real server program), typed errors that
leave both sides as they were, and the switch-cache admission rule checked against an
independent longest-prefix-match reference."""

from __future__ import annotations

import importlib
import inspect
import ipaddress
import itertools
import json
import random
import sys
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from compiler.manifest import PLAN_VERSION
from emulator.switchmodel.server import P4RuntimeServer, ServerTls, serve
from nfc._build_dir import open_build
from runtime.api import Runtime
from runtime.cache import CachePolicy, switch_order
from runtime.entries import load_entries, parse_value
from runtime.errors import ChannelError, EntryExists, EntryNotFound, InvalidEntry
from runtime.p4runtime import ClientTls, SwitchClient
from runtime.server_proc import ServerProcess
from tests.p4rt_helpers import make_pki
from tests.support import HAVE_DPDK, build_example, needs_dpdk


def _build(tmp: Path, example: str) -> Path:
    out = build_example(f"examples/{example}.nfp", "tofino+dpdk", server=True)
    return out


class Deployment:
    """Switch model behind P4Runtime + the real server program; the generated package's class."""

    def __init__(self, out: Path) -> None:
        plan, _placed, self.model = open_build(out)
        names = json.loads(plan.path(out, "name_map").read_text())
        self.grpc, port = serve(P4RuntimeServer(self.model, names, "tna"))
        self.server = ServerProcess(out / "server/nf", ["net_null0"])
        self.switch = SwitchClient(f"127.0.0.1:{port}", names, "tna")
        sys.path.insert(0, str(out / "python"))
        stem = Path(plan.source).stem
        module = importlib.import_module(stem)
        self.nf = getattr(module, "".join(p.capitalize() for p in stem.split("_")))(
            out, switch=self.switch, server=self.server.control)

    def close(self) -> None:
        self.switch.close()
        self.grpc.stop(0)
        self.server.control.close()
        self.server.stop()


@pytest.fixture(scope="module")
def vpn(tmp_path_factory):
    if not HAVE_DPDK:
        pytest.skip("DPDK missing")
    d = Deployment(_build(tmp_path_factory.mktemp("api"), "vpn_gateway"))
    yield d
    d.close()


def test_generated_package_has_one_typed_method_per_table(vpn):
    plan = json.loads((vpn.nf.out / "plan.json").read_text())
    for t in plan["tables"]:
        table = getattr(vpn.nf, t["name"])
        params = inspect.signature(table.add).parameters
        assert list(params) == [k["name"] for k in t["keys"]] + [v["name"] for v in t["values"]]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
        assert list(inspect.signature(table.delete).parameters) == [k["name"] for k in t["keys"]]


@needs_dpdk
def test_entries_go_where_the_plan_says(vpn):
    nf = vpn.nf
    nf.overlay_routes.add(meta_customer=7, meta_overlay=42, vm_ip="192.168.1.10", host_ip="172.16.5.5", vni=5000)
    nf.underlay_routes.add(outer_ipv4_dst="172.16.0.0/16", port=21, next_hop_mac="02:00:00:00:00:99")
    nf.vni_to_qinq.add(vxlan_vni=5000, s_tag=7, c_tag=42, port=3)
    # the server program holds the overlay route; the switch model the two switch tables
    assert vpn.server.control.read("overlay_routes", [[7, 42, 0xC0A8010A]]) == [(0xAC100505, 5000)]
    assert [v for _m, v, _p in vpn.switch.read("underlay_routes")] == [{"port": 21, "next_hop_mac": 0x020000000099}]
    assert len(vpn.model.tables["vni_to_qinq"].entries) == 1
    assert nf.overlay_routes.get(meta_customer=7, meta_overlay=42, vm_ip="192.168.1.10") == (0xAC100505, 5000)
    nf.overlay_routes.modify(meta_customer=7, meta_overlay=42, vm_ip="192.168.1.10", host_ip=1, vni=2)
    assert nf.overlay_routes.get(meta_customer=7, meta_overlay=42, vm_ip="192.168.1.10").vni == 2
    nf.overlay_routes.delete(meta_customer=7, meta_overlay=42, vm_ip="192.168.1.10")
    nf.underlay_routes.delete(outer_ipv4_dst="172.16.0.0/16")
    nf.vni_to_qinq.delete(vxlan_vni=5000)
    with pytest.raises(EntryNotFound):
        nf.overlay_routes.get(meta_customer=7, meta_overlay=42, vm_ip="192.168.1.10")
    assert not list(vpn.switch.read("underlay_routes"))


@needs_dpdk
@pytest.mark.parametrize("call, error", [
    (lambda nf: nf.overlay_routes.add(meta_customer=4096, meta_overlay=1, vm_ip=1, host_ip=1, vni=1), InvalidEntry),
    (lambda nf: nf.overlay_routes.add(meta_customer=1, meta_overlay=1, vm_ip=1, host_ip=1, vni=1 << 24),
     InvalidEntry),
    (lambda nf: nf.overlay_routes.table_add(), AttributeError),
    (lambda nf: nf.table("overlay_routes").add(meta_customer=1, meta_overlay=1, vm_ip=1, host_ip=1), InvalidEntry),
    (lambda nf: nf.underlay_routes.add(outer_ipv4_dst="10.0.0.0/33", port=1, next_hop_mac=1), InvalidEntry),
    (lambda nf: nf.underlay_routes.add(outer_ipv4_dst="10.0.0.0/8", port=1, next_hop_mac="zz"), InvalidEntry),
    (lambda nf: nf.overlay_routes.delete(meta_customer=1, meta_overlay=1, vm_ip=99), EntryNotFound),
    (lambda nf: nf.vni_to_qinq.delete(vxlan_vni=77), EntryNotFound),
])
def test_bad_calls_raise_typed_errors_and_change_nothing(vpn, call, error):
    before = (vpn.server.control.dump("overlay_routes"), list(vpn.switch.read("underlay_routes")),
              list(vpn.switch.read("vni_to_qinq")))
    with pytest.raises(error):
        call(vpn.nf)
    after = (vpn.server.control.dump("overlay_routes"), list(vpn.switch.read("underlay_routes")),
             list(vpn.switch.read("vni_to_qinq")))
    assert after == before


@needs_dpdk
def test_bulk_switch_write_is_all_or_nothing(vpn):
    nf = vpn.nf
    nf.vni_to_qinq.add(vxlan_vni=9, s_tag=1, c_tag=1, port=1)
    rows = [{"vxlan_vni": v, "s_tag": 1, "c_tag": 2, "port": 3} for v in (10, 11, 12, 9, 13)]
    with pytest.raises(EntryExists) as e:
        nf.vni_to_qinq.add_many(rows)
    assert e.value.index == 3
    assert [m["vxlan_vni"][0] for m, _v, _p in vpn.switch.read("vni_to_qinq")] == [9]
    nf.vni_to_qinq.delete(vxlan_vni=9)


@needs_dpdk
def test_bulk_server_load_of_100k_entries(vpn):
    rows = [{"meta_customer": 1 + i % 4000, "meta_overlay": 1 + i // 4000, "vm_ip": 0x0A000000 + i,
             "host_ip": 0xAC100000 + i, "vni": i} for i in range(100_000)]
    assert vpn.nf.overlay_routes.add_many(rows) == 100_000
    assert vpn.server.control.counters()["tables"]["overlay_routes"]["entries"] == 100_000
    vpn.nf.overlay_routes.delete_many(rows)
    assert vpn.server.control.counters()["tables"]["overlay_routes"]["entries"] == 0


@needs_dpdk
def test_cached_table_fills_server_then_switch_and_undoes_on_switch_failure(tmp_path):
    d = Deployment(_build(tmp_path, "bluebird_tor"))
    try:
        ca = d.nf.ca_to_pa
        ca.add(meta_vrf=1, ca="10.0.0.1", vtep="172.16.0.1", vni=100, vm_mac="02:00:00:00:00:01")
        assert d.server.control.read("ca_to_pa", [[1, 0x0A000001]]) == [(0xAC100001, 100, 0x020000000001)]
        assert [m["ca"][0] for m, _v, _p in d.switch.read("ca_to_pa")] == [0x0A000001]
        assert ca.cached() == 1
        d.grpc.stop(0)  # the switch goes away: the server must not keep a half-installed entry
        with pytest.raises(ChannelError):
            ca.add(meta_vrf=1, ca="10.0.0.2", vtep="172.16.0.1", vni=100, vm_mac="02:00:00:00:00:02")
        assert sorted(d.server.control.dump("ca_to_pa")) == [(1, 0x0A000001, 0xAC100001, 100, 0x020000000001)]
    finally:
        d.switch.close()
        d.server.control.close()
        d.server.stop()


def _reference_lpm(prefixes: dict[ipaddress.IPv4Network, int], addr: ipaddress.IPv4Address) -> int | None:
    best = max((n for n in prefixes if addr in n), key=lambda n: n.prefixlen, default=None)
    return prefixes[best] if best is not None else None


@pytest.mark.parametrize("seed", range(20))
def test_lpm_cache_never_hijacks_traffic(seed):
    """Cache-then-server lookup equals the full table's LPM for every address, whatever order
    prefixes arrive and leave in (the cache is small, so admission and eviction both run)."""
    rnd = random.Random(seed)
    policy = CachePolicy(capacity=4, lpm=0, width=32)
    table: dict[ipaddress.IPv4Network, int] = {}
    cache: set[tuple[int, ...]] = set()
    for step in range(60):
        if table and rnd.random() < 0.3:
            net = rnd.choice(sorted(table))
            del table[net]
            d = policy.on_delete((int(net.network_address), net.prefixlen))
        else:
            plen = rnd.choice([8, 16, 20, 24, 28])
            net = ipaddress.IPv4Network((rnd.choice([0x0A000000, 0x0A010000, 0x0A010100]) + rnd.randrange(4) * 16,
                                         plen), strict=False)
            if net in table:
                continue
            table[net] = step
            d = policy.on_add((int(net.network_address), net.prefixlen))
        cache.difference_update(d.evict)
        cache.update(d.install)
        assert len(cache) <= 4 and cache == policy.cached
        cached = {ipaddress.IPv4Network(k): table[ipaddress.IPv4Network(k)] for k in cache}
        for _ in range(50):
            addr = ipaddress.IPv4Address(rnd.choice([0x0A000000, 0x0A010000, 0x0A010100]) + rnd.randrange(256))
            hit = _reference_lpm(cached, addr)
            full = _reference_lpm(table, addr)
            assert (hit if hit is not None else full) == full, (addr, sorted(cache), sorted(table))


def _forwarded_as_some_version(cache: set[tuple[int, ...]], old: dict[ipaddress.IPv4Network, int],
                               batch: dict[ipaddress.IPv4Network, int], probes: list[int]) -> None:
    """Every probe address is forwarded (the cache, else the server, which already has the whole
    batch) as the table is before the batch plus some of the batch's prefixes."""
    table = {**old, **batch}
    versions = [{**old, **{n: batch[n] for n in sub}} for r in range(len(batch) + 1)
                for sub in itertools.combinations(batch, r)]
    cached = {ipaddress.IPv4Network(k): table[ipaddress.IPv4Network(k)] for k in cache}
    for a in probes:
        addr = ipaddress.IPv4Address(a)
        hit = _reference_lpm(cached, addr)
        got = hit if hit is not None else _reference_lpm(table, addr)
        assert got in {_reference_lpm(v, addr) for v in versions}, (addr, sorted(cache))


@pytest.mark.parametrize("seed", range(20))
def test_a_batch_reaches_the_switch_in_an_order_that_never_hijacks(seed):
    """Batches of adds go to the server first, then their cache decisions to the switch as
    ``switch_order`` lays them out, one write after the other: after every write (a switch
    applies a write's updates in any order, so only between writes is the state known) each
    packet is forwarded as the table before the batch plus some of its prefixes (an eviction
    of a /24 before the /16 covering it would send the /24's traffic to the /16), and every
    delete names an entry the switch holds (it was: a /16 cached and then evicted for a /24 in
    one batch was deleted before it was added, "switch delete vrf_fib: no entry with this key")."""
    rnd = random.Random(seed)
    policy = CachePolicy(capacity=3, lpm=0, width=32)
    table: dict[ipaddress.IPv4Network, int] = {}
    switch: set[tuple[int, ...]] = set()
    probes = [0x0A000000 + (rnd.randrange(4) << 16) + (rnd.randrange(4) << 8) + rnd.randrange(256) for _ in range(64)]
    for step in range(12):
        batch: dict[ipaddress.IPv4Network, int] = {}
        for _ in range(rnd.randrange(1, 5)):
            net = ipaddress.IPv4Network((0x0A000000 + (rnd.randrange(4) << 16) + (rnd.randrange(4) << 8),
                                         rnd.choice([8, 14, 16, 22, 24])), strict=False)
            if net not in table and net not in batch:
                batch[net] = 100 * step + len(batch)
        deletes, adds = switch_order([policy.on_add((int(n.network_address), n.prefixlen)) for n in batch], lpm=True)
        for keys in [*deletes, *adds]:
            if keys in deletes:
                assert all(k in switch for k in keys)
                switch.difference_update(keys)
            else:
                assert not any(k in switch for k in keys)
                switch.update(keys)
            _forwarded_as_some_version(switch, table, batch, probes)
        table.update(batch)
        assert switch == policy.cached


def test_a_prefix_cached_and_evicted_within_one_batch_is_never_written():
    policy = CachePolicy(capacity=1, lpm=0, width=32)
    decisions = [policy.on_add((0x0A010000, 16)), policy.on_add((0x0A010100, 24))]
    assert decisions[0].install == [(0x0A010000, 16)] and decisions[1].evict == [(0x0A010000, 16)]
    assert switch_order(decisions, lpm=True) == ([], [])
    assert policy.cached == set()


def test_naive_lpm_cache_would_hijack():
    """The check above can fail: caching 10.0.0.0/8 alone while 10.1.0.0/16 stays on the
    server sends 10.1.x.x to the /8's action."""
    table = {ipaddress.IPv4Network("10.0.0.0/8"): 1, ipaddress.IPv4Network("10.1.0.0/16"): 2}
    cached = {ipaddress.IPv4Network("10.0.0.0/8"): 1}
    addr = ipaddress.IPv4Address("10.1.2.3")
    assert _reference_lpm(cached, addr) != _reference_lpm(table, addr)
    policy = CachePolicy(capacity=1, lpm=0, width=32)
    policy.on_add((0x0A010000, 16))  # cached (room)
    d = policy.on_add((0x0A000000, 8))  # the /16 inside it is cached, but no room: not admitted
    assert d.install == [] and policy.cached == {(0x0A010000, 16)}


def test_runtime_refuses_a_server_program_of_another_nf(tmp_path):
    """Runtime checks the server's HELLO against plan.json (tables and widths)."""
    plan = {"plan_version": PLAN_VERSION, "source": "x.nfp", "target": "dpdk", "targets": {}, "stages": [],
            "bridges": [], "drop_reasons": [], "artifacts": {}, "generated": {}, "objects": [],
            "tables": [{"name": "t", "source": "x.nfp:1", "keys": [{"name": "k", "width": 8, "match": "exact"}],
                        "values": [], "placement": "server", "kind": "table", "match": "exact", "size": 1}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))

    class FakeHello:  # what ControlChannel exposes after HELLO: a server with no table t
        def __init__(self) -> None:
            self.tables: dict[str, object] = {}

    with pytest.raises(ChannelError):
        Runtime(tmp_path, server=FakeHello())  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def acl_build(tmp_path_factory) -> Path:
    out = build_example("tests/corpus/acl_ternary.nfp", "tofino+dpdk", "--no-verify")
    return out


@pytest.fixture
def acl(acl_build):
    """A fresh switch model of tests/corpus/acl_ternary.nfp (table acl: ternary ipv4_src and
    ipv4_dst bit<32>, range udp_dport bit<16>; value class bit<8>) behind P4Runtime, and the
    generated package's object driving it."""
    plan, _placed, model = open_build(acl_build)
    names = json.loads(plan.path(acl_build, "name_map").read_text())
    grpc_server, port = serve(P4RuntimeServer(model, names, "tna"))
    switch = SwitchClient(f"127.0.0.1:{port}", names, "tna")
    sys.path.insert(0, str(acl_build / "python"))
    yield importlib.import_module("acl_ternary").AclTernary(acl_build, switch=switch), switch, model
    switch.close()
    grpc_server.stop(0)


def test_ternary_entries_keep_their_priority_through_the_generated_api(acl, acl_build):
    """A ternary/range table's typed methods take the entry's priority (P4Runtime §9.1: the
    higher wins, and it is part of the entry's identity); the switch gets it, so an entry
    added later with a lower priority does not win a packet both match."""
    nf, switch, model = acl
    assert "priority" in inspect.signature(nf.acl.add).parameters
    anything = (0, 0)
    nf.acl.add(ipv4_src=anything, ipv4_dst=anything, udp_dport=(0, 65535), priority=20, class_=7)
    nf.acl.add(ipv4_src=anything, ipv4_dst=anything, udp_dport=(0, 65535), priority=10, class_=9)
    assert sorted(p for _m, _v, p in switch.read("acl")) == [10, 20]
    pkt = bytes(Ether() / IP(src="1.2.3.4", dst="5.6.7.8") / UDP(sport=1, dport=2) / b"x")
    o = model.process(pkt, 3)
    bridge = next(b for b in json.loads((acl_build / "plan.json").read_text())["bridges"]
                  if b["direction"] == "switch->server")
    field = next(f for f in bridge["fields"] if f["name"] == "meta.class")
    bits = int.from_bytes(o.data[:bridge["bytes"]], "big")
    assert (bits >> (bridge["bytes"] * 8 - field["offset"] - field["width"])) & 0xFF == 7
    nf.acl.delete(ipv4_src=anything, ipv4_dst=anything, udp_dport=(0, 65535), priority=20)
    assert [p for _m, _v, p in switch.read("acl")] == [10]


@pytest.mark.parametrize("fields", [
    {"ipv4_src": ("::a00:1", "255.255.255.255")},  # an IPv6 address, small enough for 32 bits
    {"ipv4_src": ("00:00:0a:00:00:01", "255.255.255.255")},  # a MAC address, small enough too
    {"ipv4_src": ("10.0.0.1", "::ffff:ffff")},  # an IPv6 mask
    {"class_": "0.0.0.7"},  # an IPv4 address for a bit<8> value
])
def test_address_strings_fit_only_fields_of_their_width(acl, fields):
    """An address string is a value of its address's width — dotted IPv4 32 bits, colon MAC
    48, IPv6 128 — not any integer that happens to fit: for a field of another width it is
    InvalidEntry, and nothing is written."""
    nf, switch, _model = acl
    row = {"ipv4_src": ("10.0.0.1", "255.255.255.255"), "ipv4_dst": (0, 0), "udp_dport": (0, 65535), "class_": 1}
    with pytest.raises(InvalidEntry):
        nf.acl.add(**(row | fields), priority=5)
    assert list(switch.read("acl")) == []
    nf.acl.add(**row, priority=5)  # the same row with addresses of the right width
    assert [m["ipv4_src"] for m, _v, _p in switch.read("acl")] == [(0x0A000001, 0xFFFFFFFF)]


def test_address_strings_in_an_entries_file_fit_only_fields_of_their_width(acl, tmp_path):
    """The same rule for an ``--entries`` file: the IPv6 "::a00:1" for a bit<32> key is
    refused by the runtime, not loaded as 10.0.0.1."""
    nf, switch, _model = acl
    path = tmp_path / "e.yaml"
    for src in ("::a00:1", "10.0.0.1"):
        path.write_text(f'acl:\n  - match: {{ipv4_src: ["{src}", 255.255.255.255], ipv4_dst: [0, 0], '
                        'udp_dport: "0..65535"}\n    priority: 5\n    values: {class: 1}\n')
        if src == "::a00:1":
            with pytest.raises(InvalidEntry, match="IPv6"):
                nf.load(load_entries(path))
            assert list(switch.read("acl")) == []
        else:  # the same file with an IPv4 address loads
            assert nf.load(load_entries(path)) == 1


@pytest.mark.parametrize(("text", "width", "value"), [
    ("0.0.0.0", 32, 0), ("00:00:00:00:00:00", 48, 0), ("::", 128, 0), ("10.0.0.1", 32, 0x0A000001),
    ("2:0:0:0:0:99", 48, 0x020000000099)])
def test_all_zero_addresses_parse_as_addresses(text, width, value):
    """An all-zero address is a valid address of its width (it was a falsy value that fell
    through to int("0.0.0.0", 0) and failed)."""
    assert parse_value(text, width) == value


def test_generated_connect_reaches_a_switch_that_serves_mutual_tls(acl_build, tmp_path):
    """``connect(..., tls=ClientTls(...))`` of the generated package (Runtime.connect)
    drives a switch that serves mutual TLS; without ``tls`` the same endpoint refuses it
    (P4Runtime §3.1.1), and ``tls`` without a switch address is a mistake, not ignored."""
    pytest.importorskip("cryptography.x509", reason="the cryptography package makes the test certificates")
    pki = make_pki(tmp_path)
    plan, _placed, model = open_build(acl_build)
    names = json.loads(plan.path(acl_build, "name_map").read_text())
    grpc_server, port = serve(P4RuntimeServer(model, names, "tna"),
                              tls=ServerTls(pki / "switch.crt", pki / "switch.key", pki / "ca1.crt"))
    sys.path.insert(0, str(acl_build / "python"))
    generated = importlib.import_module("acl_ternary").AclTernary
    try:
        with pytest.raises(ChannelError):
            generated.connect(acl_build, p4runtime=f"127.0.0.1:{port}")
        with pytest.raises(ChannelError):
            generated.connect(acl_build, tls=ClientTls(pki / "ca1.crt"))
        nf = generated.connect(acl_build, p4runtime=f"127.0.0.1:{port}",
                               tls=ClientTls(pki / "ca1.crt", pki / "client.crt", pki / "client.key"))
        try:
            nf.acl.add(ipv4_src=("10.0.0.0", "255.0.0.0"), ipv4_dst=(0, 0), udp_dport=(0, 65535), priority=5,
                       class_=3)
        finally:
            nf.close()
        assert [(e.key[0].value, e.priority) for e in model.p4_tables["acl"].entries] == [(0x0A000000, 5)]
    finally:
        grpc_server.stop(0)


def test_an_address_of_the_wrong_width_is_named_as_written():
    """The message quotes the address as the user wrote it ("::a00:1"), not its integer."""
    with pytest.raises(ValueError, match=r"'::a00:1' is an IPv6 address \(128 bits\)"):
        parse_value(parse_value("::a00:1"), 32)
    assert str(parse_value("10.0.0.1")) == "167772161" and f"{parse_value('10.0.0.1')}" == "167772161"
