"""The switch model runs the switch part of the VPN gateway as the generated P4 does.

Expected packets are built with scapy; bridge headers are written bit by bit here from
the plan's layout description, not by the codec under test."""

from __future__ import annotations

import ipaddress
import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN

from compiler.interp import Entry, Interpreter, Match
from emulator.switchmodel import SwitchModel
from tests.oracles import crc16_arc, ip2int, mac2int
from tests.support import build_example, compile_ir, nfc_cli

NH_MAC, GW_MAC, GW_IP = "02:00:00:00:00:99", "02:00:0a:ff:00:01", "10.255.0.1"


@pytest.fixture(scope="module", params=["tna", "v1model"])
def model(request, tmp_path_factory):
    out = build_example("examples/vpn_gateway.nfp", "tofino+dpdk", "--no-verify")
    m = SwitchModel.from_build(out, request.param)
    m.tables["vni_to_qinq"].insert(Entry((Match(5000),), {"s_tag": 7, "c_tag": 42, "port": 3}))
    m.tables["underlay_routes"].insert(Entry((Match(ip2int("172.16.0.0"), 16),),
                                             {"port": 21, "next_hop_mac": mac2int(NH_MAC)}))
    assert "overlay_routes" not in m.tables or not m.tables["overlay_routes"].entries  # it lives on the server
    return m


def bits(*fields: tuple[int, int]) -> bytes:
    """Concatenate (value, width) fields MSB first and pad to bytes."""
    s = "".join(format(v, f"0{w}b") for v, w in fields)
    s += "0" * (-len(s) % 8)
    return int(s, 2).to_bytes(len(s) // 8, "big")


def test_cloud_vxlan_becomes_qinq_on_the_switch(model):
    inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(src="192.168.1.10", dst="8.8.8.8") / b"x"
    pkt = Ether() / IP(src="172.16.5.5", dst=GW_IP) / UDP(sport=5555, dport=4789) / VXLAN(vni=5000) / inner
    out = model.process(bytes(pkt), 17)
    want = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / Dot1AD(vlan=7) / Dot1Q(vlan=42) / inner[IP]
    assert (out.kind, out.port, out.data) == ("forward", 3, bytes(want))


def test_customer_qinq_goes_to_the_server_with_the_bridge_header(model):
    pkt = (Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / Dot1AD(vlan=7) / Dot1Q(vlan=42)
           / IP(src="192.168.1.1", dst="192.168.1.10") / UDP() / b"hello")
    out = model.process(bytes(pkt), 1)
    # bridge #1: cut id 1, valid(eth)=1, valid(ipv4)=1, 6 pad bits, then customer=7 and overlay=42,
    # each 12 bits right-aligned in two bytes of its own
    bridge = bits((1, 8), (1, 1), (1, 1), (0, 6), (0, 4), (7, 12), (0, 4), (42, 12))
    rest = Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02", type=0x0800) / pkt[IP]
    assert (out.kind, out.port) == ("forward", 32)
    assert out.data == bridge + bytes(rest)


def test_packet_back_from_the_server_is_encapsulated_and_routed(model):
    inner = Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / IP(src="192.168.1.1", dst="192.168.1.10") / b"p"
    # bridge #2: cut id 2, both headers valid, 6 pad bits, host_ip, vni (each field in bytes of its own)
    bridge = bits((2, 8), (1, 1), (1, 1), (0, 6), (ip2int("172.16.5.5"), 32), (5000, 24))
    out = model.process(bridge + bytes(inner), 32)
    sport = 0xC000 | (crc16_arc(bytes(inner[IP])[12:20] + bytes([inner[IP].proto])) & 0x3FFF)
    want = (Ether(src=GW_MAC, dst=NH_MAC) / IP(src=GW_IP, dst="172.16.5.5", ttl=64, id=0, flags=0)
            / UDP(sport=sport, dport=4789, chksum=0) / VXLAN(vni=5000, flags=0x08) / inner)
    assert (out.kind, out.port, out.data) == ("forward", 21, bytes(want))


@pytest.mark.parametrize(("data", "port", "reason"), [
    (bytes(Ether() / Dot1Q(vlan=1) / IP()), 1, "not_qinq"),
    (bytes(Ether() / IP() / UDP(dport=4789) / VXLAN(vni=99) / Ether() / IP()), 17, "unknown_vni"),
    (bits((9, 8)) + bytes(Ether() / IP()), 32, "bad_bridge"),
    (bits((2, 8)), 32, "bad_bridge"),
    (bits((2, 8), (1, 1), (1, 1), (1, 32), (1, 24)) + bytes(Ether())[:10], 32, "truncated"),
    (b"", 32, "bad_bridge"),
    # every packet has ipv4 at this cut, so a bridge saying it has none is not believed
    (bits((2, 8), (1, 1), (0, 1), (1, 32), (1, 24)) + bytes(Ether() / IP()), 32, "bad_bridge"),
    (bytes(Ether()), 40, "no_pipeline"),
], ids=["single-tag", "unknown-vni", "unknown-cut", "short-bridge", "truncated-after-bridge", "empty",
        "required-bit-clear", "no-pipe"])
def test_bad_packets_are_dropped_by_reason(model, data, port, reason):
    before = model.drops.get(reason, 0)
    out = model.process(data, port)
    assert (out.kind, out.reason) == ("drop", reason)
    assert model.drops[reason] == before + 1


def test_truncated_at_every_boundary_on_the_switch(model):
    data = bytes(Ether() / IP() / UDP(dport=4789) / VXLAN(vni=5000) / Ether() / IP())
    for n in range(14 + 20 + 8 + 8 + 14):
        out = model.process(data[:n], 17)
        assert (out.kind, out.reason) == ("drop", "truncated"), n


# ---- a key with an lpm and a ternary field ranks entries by priority -----------------------

MIXED = """import "std/headers.nfp";
packet { eth: ethernet; ipv4: ipv4; }
parser p {
  state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: ip; default: drop(not_ipv4); } }
  state ip { extract ipv4; transition accept; }
}
table routes { key { ipv4.dst: lpm; ipv4.src: ternary; } value { port: bit<16>; } size = 64; }
stage route { lookup routes { hit(r) { forward(r.port); } miss { drop(no_route); } } }
pipeline main { ports = [0..31]; parser = p; stages = [route]; }
"""


def _winner(entries: list[tuple[ipaddress.IPv4Network, int, int, int, int]], dst: str, src: str) -> int | None:
    """P4Runtime §9.1 by first principles: a table whose key has a ternary field gives every
    entry a priority, and the matching entry with the highest one wins — however long its
    prefix.  Entries are (dst network, src value, src mask, priority, port); the port, or
    None for a miss."""
    s = ip2int(src)
    hits = [(prio, port) for net, value, mask, prio, port in entries
            if ipaddress.IPv4Address(dst) in net and s & mask == value]
    return max(hits)[1] if hits else None


def test_lpm_and_ternary_key_ranks_by_priority_in_model_and_interpreter(tmp_path):
    """A longer prefix with a lower priority loses; the switch model (both architectures)
    and the reference interpreter agree with the priority rule on random entries."""
    (tmp_path / "mixed.nfp").write_text(MIXED)
    out = tmp_path / "out"
    r = nfc_cli("build", str(tmp_path / "mixed.nfp"), "--target", "tofino",
                        "-o", str(out), "--no-verify")
    assert r.returncode == 0, r.stderr
    rng = random.Random(7)
    entries = [(ipaddress.IPv4Network("10.0.0.0/8"), 0, 0, 20, 1),  # short prefix, high priority
               (ipaddress.IPv4Network("10.1.0.0/16"), 0, 0, 10, 2)]  # longer prefix, lower priority
    for prio in rng.sample(range(30, 1000), 20):
        net = ipaddress.IPv4Network((rng.choice([0x0A000000, 0x0A010000, 0x0A010200]), rng.choice([8, 16, 24])),
                                    strict=False)
        mask = rng.choice([0, 0xFF000000, 0xFFFF0000])
        value = rng.choice([0xC0A80000, 0x01010101]) & mask
        entries.append((net, value, mask, prio, len(entries) + 1))
    entries = list({(e[0], e[1], e[2], e[3]): e for e in entries}.values())
    targets = [SwitchModel.from_build(out, "tna"), SwitchModel.from_build(out, "v1model"),
               Interpreter(compile_ir(str(tmp_path / "mixed.nfp")))]
    for t in targets:
        for net, value, mask, prio, port in entries:
            t.tables["routes"].insert(Entry((Match(int(net.network_address), net.prefixlen), Match(value, mask)),
                                            {"port": port}, prio))
    probes = [("10.1.2.3", "1.1.1.1")] + [
        (str(ipaddress.IPv4Address(rng.choice([0x0A010203, 0x0A01FF01, 0x0AFF0001, 0x0B000001]))),
         str(ipaddress.IPv4Address(rng.choice([0xC0A80505, 0x01010101, 0xC0A90101])))) for _ in range(40)]
    assert _winner(entries, "10.1.2.3", "1.1.1.1") is not None
    for dst, src in probes:
        want = _winner(entries, dst, src)
        pkt = bytes(Ether() / IP(src=src, dst=dst) / b"x")
        for t in targets:
            o = t.process(pkt, 0)
            assert (o.kind, o.port) == (("forward", want) if want is not None else ("drop", None)), (type(t), dst, src)
