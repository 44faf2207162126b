"""The switch model runs the switch part of the VPN gateway as the generated P4 does.

Expected packets are built with scapy; bridge headers are written bit by bit here from
the plan's layout description, not by the codec under test."""

from __future__ import annotations

import subprocess
import sys

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN

from compiler.interp import Entry, Match
from emulator.switchmodel import SwitchModel
from tests.conftest import ROOT
from tests.oracles import crc16_arc, ip2int, mac2int

NH_MAC, GW_MAC, GW_IP = "02:00:00:00:00:99", "02:00:0a:ff:00:01", "10.255.0.1"


@pytest.fixture(scope="module", params=["tna", "v1model"])
def model(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("vpn")
    r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", "examples/vpn_gateway.nfp", "-o", str(out),
                        "--no-verify"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
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
    # bridge #1: cut id 1, valid(eth)=1, valid(ipv4)=1, customer=7 (12 bits), overlay=42 (12 bits), 6 pad bits
    bridge = bits((1, 8), (1, 1), (1, 1), (7, 12), (42, 12))
    rest = Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02", type=0x0800) / pkt[IP]
    assert (out.kind, out.port) == ("forward", 32)
    assert out.data == bridge + bytes(rest)


def test_packet_back_from_the_server_is_encapsulated_and_routed(model):
    inner = Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / IP(src="192.168.1.1", dst="192.168.1.10") / b"p"
    # bridge #2: cut id 2, both headers valid, host_ip, vni, 6 pad bits
    bridge = bits((2, 8), (1, 1), (1, 1), (ip2int("172.16.5.5"), 32), (5000, 24))
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
