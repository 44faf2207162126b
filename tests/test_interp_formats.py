"""The interpreter on every stdlib header format: parse, rewrite, push and pop, with the
expected packets built by scapy (the independent oracle for every format)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.ipsec import ESP
from scapy.layers.l2 import GRE, Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw

from compiler.interp import Interpreter
from tests.support import compile_ir

HEAD = 'import "std/headers.nfp";\n'


def run(tmp_path: Path, body: str, pkt: bytes, port: int = 1):
    path = tmp_path / "f.nfp"
    path.write_text(HEAD + body)
    return Interpreter(compile_ir(str(path))).process(pkt, port)


L3 = """
packet { eth: ethernet; s: vlan; c: vlan; ip: ipv4; ip6: ipv6; icmp: icmp; tcp: tcp; udp: udp; }
parser p {
  state start { extract eth; transition select(eth.ethertype) {
      ETH_QINQ: stag; ETH_VLAN: ctag; ETH_IPV4: v4; ETH_IPV6: v6; default: drop(other); } }
  state stag { extract s; transition select(s.ethertype) { ETH_VLAN: ctag; default: drop(other); } }
  state ctag { extract c; transition select(c.ethertype) { ETH_IPV4: v4; ETH_IPV6: v6; default: drop(other); } }
  state v4 { extract ip; transition select(ip.protocol) { IP_TCP: l4t; IP_UDP: l4u; IP_ICMP: l4i; default: accept; } }
  state v6 { extract ip6; transition select(ip6.next_header) { IP_TCP: l4t; IP_UDP: l4u; default: accept; } }
  state l4t { extract tcp; transition accept; }
  state l4u { extract udp; transition accept; }
  state l4i { extract icmp; transition accept; }
}
STAGE
pipeline main { ports = [0..65535]; parser = p; stages = [s1]; }  // forward() reports values
"""


def prog(stage: str) -> str:
    return L3.replace("STAGE", stage)


def test_ipv4_ttl_decrement_recomputes_header_checksum(tmp_path):
    pkt = Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2", ttl=9) / b"p"
    out = run(tmp_path, prog("stage s1 { ip.ttl = ip.ttl - 1; forward(2); }"), bytes(pkt))
    want = pkt.copy()
    want[IP].ttl = 8
    del want[IP].chksum  # scapy recomputes it: the oracle for the RFC 1071 checksum
    assert (out.kind, out.port, out.data) == ("forward", 2, bytes(want))
    assert IP(bytes(want[IP]))[IP].chksum == Ether(out.data)[IP].chksum


def test_ipv6_hop_limit_and_addresses(tmp_path):
    pkt = Ether() / IPv6(src="2001:db8::1", dst="2001:db8::2", hlim=5) / UDP(sport=1, dport=2) / b"x"
    stage = "stage s1 { ip6.hop_limit = ip6.hop_limit - 1; ip6.dst = ip6.src; forward(3); }"
    out = run(tmp_path, prog(stage), bytes(pkt))
    got = Ether(out.data)
    assert got[IPv6].hlim == 4 and got[IPv6].dst == "2001:db8::1" and got[UDP].dport == 2


def test_tcp_port_rewrite_with_incremental_checksum(tmp_path):
    pkt = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1234, dport=80, flags="S") / b"data"
    pkt = Ether(bytes(pkt))  # checksums filled in
    stage = ("stage s1 { tcp.checksum = csum_update(tcp.checksum, tcp.sport, 4321); tcp.sport = 4321;"
             " tcp.checksum = csum_update(tcp.checksum, ip.src, 192.0.2.9); ip.src = 192.0.2.9; forward(1); }")
    out = run(tmp_path, prog(stage), bytes(pkt))
    want = pkt.copy()
    want[IP].src, want[TCP].sport = "192.0.2.9", 4321
    del want[IP].chksum, want[TCP].chksum  # scapy computes both from scratch
    assert out.data == bytes(Ether(bytes(want)))


def test_udp_zero_checksum_and_icmp_type(tmp_path):
    pkt = Ether() / IP() / ICMP(type=8, code=0, id=7, seq=1) / b"ping"
    stage = "stage s1 { icmp.type = 0; icmp.checksum = csum_update(icmp.checksum, bit<16>(0x0800), 0); forward(1); }"
    out = run(tmp_path, prog(stage), bytes(Ether(bytes(pkt))))
    got = Ether(out.data)
    want = Ether(bytes(pkt))
    want[ICMP].type = 0
    del want[ICMP].chksum
    assert got[ICMP].type == 0 and got[ICMP].chksum == Ether(bytes(want))[ICMP].chksum


def test_qinq_tags_read_and_popped(tmp_path):
    pkt = Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / Dot1AD(vlan=100, prio=5) / Dot1Q(vlan=200) \
        / IP(dst="1.2.3.4") / b"x"
    stage = "stage s1 { eth.ethertype = c.ethertype; pop s; pop c; forward(bit<16>(s.vid[7:0])); }"
    out = run(tmp_path, prog(stage), bytes(pkt))
    want = Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / pkt[IP]
    # popped headers read as 0 afterwards: the port is 0, not 100
    assert (out.port, out.data) == (0, bytes(want))


def test_single_vlan_push(tmp_path):
    pkt = Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / IP(dst="1.2.3.4") / b"x"
    stage = ("stage s1 { push c { vid = 42; pcp = 3; ethertype = eth.ethertype; } eth.ethertype = ETH_VLAN;"
             " forward(1); }")
    out = run(tmp_path, prog(stage), bytes(pkt))
    want = Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / Dot1Q(vlan=42, prio=3) / pkt[IP]
    assert out.data == bytes(want)


TUN = """
packet { oeth: ethernet; oip: ipv4; oudp: udp; vx: vxlan; gre: gre; key: nvgre; esp: esp; eth: ethernet; ip: ipv4; }
parser p {
  state start { extract oeth; extract oip; transition select(oip.protocol) {
      IP_UDP: u; IP_GRE: g; IP_ESP: e; default: drop(other); } }
  state u { extract oudp; transition select(oudp.dport) { UDP_VXLAN: vx; default: drop(other); } }
  state vx { extract vx; extract eth; extract ip; transition accept; }
  state g { extract gre; transition select(gre.key_present, gre.protocol) { 1, ETH_TEB: k; default: drop(other); } }
  state k { extract key; extract eth; extract ip; transition accept; }
  state e { extract esp; transition accept; }
}
STAGE
pipeline main { ports = [0..65535]; parser = p; stages = [s1]; }  // forward() reports values
"""


def test_vxlan_fields_and_decap(tmp_path):
    inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(dst="192.168.0.1") / b"in"
    pkt = Ether() / IP(dst="10.0.0.1") / UDP(sport=999, dport=4789) / VXLAN(vni=0xABCDE) / inner
    stage = "stage s1 { pop oeth; pop oip; pop oudp; pop vx; forward(bit<16>(vx.vni[15:0])); }"
    out = run(tmp_path, TUN.replace("STAGE", stage), bytes(pkt))
    # after pop, vx.vni reads 0 (the field of an invalid header)
    assert (out.port, out.data) == (0, bytes(inner))


def test_nvgre_key_and_encap(tmp_path):
    inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(dst="192.168.0.1") / b"in"
    pkt = Ether() / IP(dst="10.0.0.1", proto=47) / GRE(key_present=1, key=(0x123456 << 8) | 0x7, proto=0x6558) / inner
    stage = "stage s1 { key.vsid = key.vsid + 1; forward(bit<16>(key.flow_id)); }"
    out = run(tmp_path, TUN.replace("STAGE", stage), bytes(pkt))
    got = Ether(out.data)
    assert out.port == 7 and got[GRE].key == (0x123457 << 8) | 0x7 and got[GRE].proto == 0x6558
    assert bytes(got[GRE].payload) == bytes(inner)


def test_esp_header_fields(tmp_path):
    pkt = Ether() / IP(dst="10.0.0.1") / ESP(spi=0xDEADBEEF, seq=77) / Raw(b"\x01" * 40)
    stage = "stage s1 { forward(bit<16>(esp.seq)); }"
    out = run(tmp_path, TUN.replace("STAGE", stage), bytes(pkt))
    assert out.port == 77 and out.data == bytes(pkt)


@pytest.mark.parametrize("cut", range(0, 14 + 20 + 8 + 8 + 14))
def test_vxlan_truncated_anywhere_is_dropped(tmp_path, cut):
    inner = Ether() / IP()
    pkt = bytes(Ether() / IP() / UDP(dport=4789) / VXLAN(vni=1) / inner)[:cut]
    out = run(tmp_path, TUN.replace("STAGE", "stage s1 { forward(1); }"), pkt)
    assert (out.kind, out.reason) == ("drop", "truncated")
