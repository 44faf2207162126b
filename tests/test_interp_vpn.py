"""The reference interpreter on the VPN gateway: expected packets are built with scapy."""

from __future__ import annotations

import zlib

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN

from compiler.interp import Entry, Interpreter, Match
from tests.oracles import crc16_arc, ip2int, mac2int
from tests.support import ROOT, compile_ir

GW_IP, GW_MAC = "10.255.0.1", "02:00:0a:ff:00:01"
NH_MAC = "02:00:00:00:00:99"




@pytest.fixture(scope="module")
def gw():
    prog = compile_ir(str(ROOT / "examples/vpn_gateway.nfp"))
    it = Interpreter(prog)
    it.tables["overlay_routes"].insert(Entry((Match(7), Match(42), Match(ip2int("192.168.1.10"))),
                                             {"host_ip": ip2int("172.16.5.5"), "vni": 5000}))
    it.tables["underlay_routes"].insert(Entry((Match(ip2int("172.16.0.0"), 16),),
                                              {"port": 20, "next_hop_mac": mac2int(NH_MAC)}))
    it.tables["underlay_routes"].insert(Entry((Match(ip2int("172.16.5.0"), 24),),
                                              {"port": 21, "next_hop_mac": mac2int(NH_MAC)}))
    it.tables["vni_to_qinq"].insert(Entry((Match(5000),), {"s_tag": 7, "c_tag": 42, "port": 3}))
    return it


def customer_pkt(dst="192.168.1.10"):
    return (Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / Dot1AD(vlan=7) / Dot1Q(vlan=42)
            / IP(src="192.168.1.1", dst=dst, ttl=33) / UDP(sport=1234, dport=80) / b"hello")


def test_crc16_arc_check_value():
    assert crc16_arc(b"123456789") == 0xBB3D  # the catalogue check value of CRC-16/ARC


def test_customer_to_cloud_qinq_to_vxlan(gw):
    pkt = customer_pkt()
    out = gw.process(bytes(pkt), 1)
    assert out.kind == "forward" and out.port == 21  # longest prefix 172.16.5.0/24 wins over /16
    inner = Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / pkt[IP]
    sport = 0xC000 | (crc16_arc(bytes(pkt[IP])[12:20] + bytes([17])) & 0x3FFF)
    expected = (Ether(src=GW_MAC, dst=NH_MAC) / IP(src=GW_IP, dst="172.16.5.5", ttl=64, id=0, flags=0)
                / UDP(sport=sport, dport=4789) / VXLAN(vni=5000, flags=0x08) / inner)
    expected[UDP].chksum = 0
    assert out.data == bytes(expected)
    got = Ether(out.data)
    assert got[VXLAN].vni == 5000 and got[IP].len == len(out.data) - 14


def test_cloud_to_customer_vxlan_to_qinq(gw):
    inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(src="192.168.1.10", dst="8.8.8.8") / b"x"
    pkt = (Ether() / IP(src="172.16.5.5", dst=GW_IP) / UDP(sport=5555, dport=4789) / VXLAN(vni=5000) / inner)
    out = gw.process(bytes(pkt), 17)
    expected = (Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / Dot1AD(vlan=7) / Dot1Q(vlan=42)
                / inner[IP])
    assert out.kind == "forward" and out.port == 3
    assert out.data == bytes(expected)


@pytest.mark.parametrize(
    ("pkt", "port", "reason"),
    [
        (customer_pkt("192.168.1.99"), 1, "no_overlay_route"),
        (Ether() / Dot1Q(vlan=1) / IP(), 1, "not_qinq"),
        (Ether() / IP() / UDP(dport=4789) / VXLAN(vni=1) / Ether() / IP(), 17, "unknown_vni"),
        (Ether() / IP() / UDP(dport=53), 17, "not_vxlan"),
        (Ether() / IP(chksum=0x1234) / UDP(dport=4789), 17, "bad_ipv4_checksum"),
        (Ether() / IP(ihl=6, options=b"\x01\x01\x01\x00"), 17, "ipv4_options"),
        (customer_pkt(), 40, "no_pipeline"),
    ],
    ids=["no-route", "single-tag", "unknown-vni", "not-vxlan", "bad-checksum", "ip-options", "no-pipeline"],
)
def test_drops_by_reason(gw, pkt, port, reason):
    out = gw.process(bytes(pkt), port)
    assert (out.kind, out.reason) == ("drop", reason)


def test_truncated_at_every_header_boundary(gw):
    """Cutting the packet anywhere inside a parsed header drops it as truncated, never reads past the end."""
    data = bytes(customer_pkt())
    for n in range(0, 14 + 4 + 4 + 20):
        out = gw.process(data[:n], 1)
        assert (out.kind, out.reason) == ("drop", "truncated"), n


def test_drop_counters(gw):
    before = gw.state.drops["not_qinq"]
    gw.process(bytes(Ether() / IP()), 2)
    assert gw.state.drops["not_qinq"] == before + 1


def test_hash_crc32_matches_zlib():
    from compiler.interp.bits import bit_string

    data = bit_string([(0x0A000001, 32), (0x0A000002, 32), (0x5, 4)])
    assert zlib.crc32(data) == zlib.crc32(bytes.fromhex("0a0000010a00000250"))
