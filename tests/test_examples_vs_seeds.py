"""The five examples against the seeds they generalise and the RFCs they implement
(docs/examples.md lists every behaviour and its source).  The reference interpreter runs
each example; scapy builds the packets and the expected outputs; every expectation comes
from the cited seed section or RFC, never from the examples' own outputs.  A test marked
``xfail(strict=True)`` pins a known difference that the language cannot express yet (its
reason names what is missing): it fails loudly the day the difference goes away."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_Router_Alert
from scapy.layers.inet6 import IPv6
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.l2 import GRE, Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw

from compiler.interp import Entry, Interpreter, Match
from tests.oracles import ip2int, mac2int
from tests.support import GW_IP, GW_MAC, NH_MAC, ROOT, compile_ir, expected_vxlan


@cache
def _program(example: str) -> Any:
    return compile_ir(str(ROOT / f"examples/{example}.nfp"))


def _interp(example: str, entries: dict[str, list[Entry]]) -> Interpreter:
    """A fresh interpreter of ``example`` (no state left by another test) holding ``entries``."""
    it = Interpreter(_program(example))
    for table, rows in entries.items():
        for e in rows:
            it.tables[table].insert(e)
    return it


def _e(*key: Match, **values: int) -> Entry:
    return Entry(key, values)


def _drop(it: Interpreter, pkt: Any, port: int, now: float = 0.0) -> str:
    out = it.process(bytes(pkt), port, now)
    assert out.kind == "drop", (out.kind, out.port, out.data.hex())
    return out.reason


# ---- VPN gateway: seed 000 §2-§3, IEEE 802.1Q/802.1ad, RFC 791, RFC 7348 -------------------------

HOST_IP, VNI, S_TAG, C_TAG, CE_PORT = "172.16.5.5", 5000, 7, 42, 3
CUSTOMER_PORT, CLOUD_PORT = 1, 17


@pytest.fixture
def vpn() -> Interpreter:
    return _interp("vpn_gateway", {
        "overlay_routes": [_e(Match(S_TAG), Match(C_TAG), Match(ip2int("192.168.1.10")),
                              host_ip=ip2int(HOST_IP), vni=VNI)],
        "underlay_routes": [_e(Match(ip2int("172.16.0.0"), 16), port=21, next_hop_mac=mac2int(NH_MAC))],
        "vni_to_qinq": [_e(Match(VNI), s_tag=S_TAG, c_tag=C_TAG, port=CE_PORT)],
    })


def _inner_ip(**kw: Any) -> Any:
    return IP(src="192.168.1.1", dst="192.168.1.10", ttl=33, **kw) / UDP(sport=1234, dport=80) / b"hello"


def _qinq(outer_tpid: int, ip: Any) -> Any:
    """A customer frame with an outer tag of TPID ``outer_tpid`` (customer) and a C-tag (overlay)."""
    return (Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02", type=outer_tpid)
            / Dot1Q(vlan=S_TAG, type=0x8100) / Dot1Q(vlan=C_TAG) / ip)


@pytest.mark.parametrize("tpid", [0x88A8, 0x8100, 0x9100], ids=["802.1ad", "802.1Q", "legacy-9100"])
def test_vpn_accepts_every_outer_tag_tpid_a_qinq_edge_sends(vpn: Interpreter, tpid: int) -> None:
    """Seed 000 §3: "Q-in-Q packets have two 802.1Q headers" (0x8100 outside too); 802.1ad
    names the S-tag 0x88a8; 0x9100 is the older vendor TPID. Each is terminated alike."""
    pkt = _qinq(tpid, _inner_ip())
    out = vpn.process(bytes(pkt), CUSTOMER_PORT)
    assert (out.kind, out.port) == ("forward", 21)
    assert out.data == expected_vxlan(pkt, HOST_IP, VNI)


def test_vpn_carries_customer_ipv4_options_and_their_checksum_through(vpn: Interpreter) -> None:
    """Seed 000 does not drop options and RFC 7348 §4 carries the inner frame: the options
    and the header checksum that covers them arrive unchanged inside the VXLAN packet."""
    ip = IP(bytes(_inner_ip(options=[IPOption_Router_Alert()])))
    assert ip.ihl == 6
    pkt = _qinq(0x88A8, ip)
    out = vpn.process(bytes(pkt), CUSTOMER_PORT)
    assert out.kind == "forward" and out.data == expected_vxlan(pkt, HOST_IP, VNI)
    assert bytes(Ether(out.data)[VXLAN].payload)[14:] == bytes(ip)


def test_vpn_sends_vxlan_with_only_the_i_flag_and_zero_reserved_fields(vpn: Interpreter) -> None:
    """RFC 7348 §5: I set, R bits and both reserved fields zero on transmission."""
    out = vpn.process(bytes(_qinq(0x88A8, _inner_ip())), CUSTOMER_PORT)
    vx = bytes(Ether(out.data)[VXLAN])[:8]
    assert vx[0] == 0x08 and vx[1:4] == b"\0\0\0" and vx[7] == 0


def _vxlan(flags: int, vni: int, reserved1: int = 0, reserved2: int = 0) -> Any:
    """A VXLAN header as RFC 7348 §5 draws it (scapy reads some flag bits as VXLAN-GBP/GPE
    and moves fields, so the eight bytes are written out here)."""
    return Raw(bytes([flags]) + reserved1.to_bytes(3, "big") + vni.to_bytes(3, "big") + bytes([reserved2]))


def _from_cloud(inner: Any, vxlan: Any | None = None, **ip: Any) -> Any:
    return (Ether(dst=GW_MAC) / IP(src=HOST_IP, dst=GW_IP, **ip) / UDP(sport=49200, dport=4789)
            / (vxlan if vxlan is not None else _vxlan(0x08, VNI)) / inner)


CLOUD_FRAME = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(src="192.168.1.10", dst="10.9.9.9") / b"x"


def test_vpn_ignores_vxlan_reserved_bits_on_receipt(vpn: Interpreter) -> None:
    """RFC 7348 §5: the R bits and reserved fields are "ignored on receipt"."""
    clean = vpn.process(bytes(_from_cloud(CLOUD_FRAME)), CLOUD_PORT)
    noisy = vpn.process(bytes(_from_cloud(CLOUD_FRAME, _vxlan(0xFF, VNI, 0xABCDEF, 0x5A))), CLOUD_PORT)
    assert clean.kind == "forward" and clean.port == CE_PORT
    assert (noisy.kind, noisy.port, noisy.data) == (clean.kind, clean.port, clean.data)
    want = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / Dot1AD(vlan=S_TAG) / Dot1Q(vlan=C_TAG)
    assert clean.data == bytes(want / CLOUD_FRAME[IP])


@pytest.mark.parametrize(
    ("pkt", "reason"),
    [
        (_from_cloud(CLOUD_FRAME, _vxlan(0x00, VNI)), "vxlan_no_vni"),                # RFC 7348 §5
        (_from_cloud(CLOUD_FRAME, _vxlan(0xF7, VNI)), "vxlan_no_vni"),                # R bits alone
        (_from_cloud(Ether() / Dot1Q(vlan=9) / IP()), "inner_vlan_tag"),              # RFC 7348 §6.1
        (_from_cloud(Ether() / Dot1AD(vlan=9) / Dot1Q(vlan=1) / IP()), "inner_vlan_tag"),
        (_from_cloud(CLOUD_FRAME, flags="MF"), "fragment"),                           # RFC 7348 §4.3
        (_from_cloud(CLOUD_FRAME, frag=100), "fragment"),
        (_from_cloud(CLOUD_FRAME, options=[IPOption_Router_Alert()]), "ipv4_options"),
        (_from_cloud(CLOUD_FRAME, ihl=4), "bad_ipv4_header"),                         # RFC 791: IHL >= 5
    ],
    ids=["i-flag-clear", "only-r-bits", "inner-c-tag", "inner-s-tag", "first-fragment", "later-fragment",
         "outer-options", "ihl-4"],
)
def test_vpn_decapsulates_only_whole_vxlan_packets_with_a_valid_vni(vpn: Interpreter, pkt: Any, reason: str) -> None:
    assert _drop(vpn, pkt, CLOUD_PORT) == reason


def test_vpn_never_decapsulates_a_later_fragment_that_looks_like_vxlan(vpn: Interpreter) -> None:
    """A later fragment's bytes are the middle of some datagram: here they mimic UDP to 4789
    with a valid VNI, which must not inject a frame into that customer's network."""
    ip = IP(src=HOST_IP, dst=GW_IP, proto=17, frag=185)
    forged = Ether(dst=GW_MAC) / ip / UDP(sport=1, dport=4789) / VXLAN(vni=VNI) / CLOUD_FRAME
    assert _drop(vpn, forged, CLOUD_PORT) == "fragment"


@pytest.mark.parametrize("keep", [14 + 8 + 20, 14 + 8 + 20 + 79], ids=["header-only", "one-byte-short"])
def test_vpn_never_sends_vxlan_whose_lengths_promise_missing_bytes(vpn: Interpreter, keep: int) -> None:
    """RFC 1812 §5.2.2: a customer frame cut short after ``keep`` bytes of its 100-byte datagram
    is dropped; encapsulated, its VXLAN packet's IP and UDP lengths (total_len + 50, + 30) would
    promise bytes that are not there."""
    pkt = Ether(bytes(_qinq(0x88A8, _inner_ip() / (b"z" * 67))))
    assert pkt[IP].len == 100
    assert _drop(vpn, bytes(pkt)[:keep], CUSTOMER_PORT) == "bad_ipv4_length"


def test_vpn_encapsulates_a_padded_minimum_frame(vpn: Interpreter) -> None:
    """A 33-byte datagram arrives in a 64-byte Ethernet frame (IEEE 802.3 padding): the frame
    holds more than the datagram promises, which RFC 1812 §5.2.2 allows. (The padding travels
    inside the VXLAN packet: docs/examples.md, "Known differences".)"""
    pkt = _qinq(0x88A8, _inner_ip())
    padded = bytes(pkt) + bytes(60 - len(bytes(pkt)))
    out = vpn.process(padded, CUSTOMER_PORT)
    assert out.kind == "forward"
    outer = Ether(out.data)
    assert outer[IP].len <= len(out.data) - 14 and outer[UDP].len <= len(out.data) - 34


# ---- Bluebird ToR: seed 003 §3-§4.3, RFC 1812, RFC 8200, RFC 7348 --------------------------------

TOR_IP, TOR_MAC, BM_PORT, FABRIC_PORT = "10.100.0.1", "00:12:23:54:a2:9f", 5, 48


@pytest.fixture
def tor() -> Interpreter:
    return _interp("bluebird_tor", {
        "port_vrf": [_e(Match(BM_PORT), vrf=20500)],
        "vrf_routes_v4": [_e(Match(20500), Match(ip2int("192.168.10.0"), 24), to_vnet=1, port=0, next_hop_mac=0),
                          _e(Match(20500), Match(ip2int("192.168.11.0"), 24), to_vnet=0, port=6,
                             next_hop_mac=mac2int("02:00:00:00:00:66"))],
        "vrf_routes_v6": [_e(Match(20500), Match(0, 0), port=7, next_hop_mac=mac2int("02:00:00:00:00:77"))],
        "ca_to_pa": [_e(Match(20500), Match(ip2int("192.168.10.2")), vtep=ip2int("10.100.2.4"), vni=20500,
                        vm_mac=mac2int("00:12:23:45:a2:9f"))],
        "pa_routes": [_e(Match(0, 0), port=50, next_hop_mac=mac2int(NH_MAC))],
        "vni_to_vrf": [_e(Match(20500), vrf=20500)],
        "bare_metal_hosts": [_e(Match(20500), Match(ip2int("192.168.11.1")), port=BM_PORT,
                                mac=mac2int("02:00:00:00:0b:01"))],
    })


def _vm_to_bm(ttl: int = 9, **inner: Any) -> Any:
    """Figure 2's blue flow: a VM's frame (bogus inner DMAC, §4.3) in VXLAN to the ToR."""
    frame = Ether(dst="ff:ee:dd:00:00:00") / IP(src="192.168.10.2", dst="192.168.11.1", ttl=ttl, **inner) / b"vm"
    return Ether() / IP(src="100.64.90.90", dst=TOR_IP) / UDP(sport=50000, dport=4789) / VXLAN(vni=20500) / frame


def test_bluebird_routes_vnet_traffic_to_bare_metal_with_the_ttl_decremented(tor: Interpreter) -> None:
    """Seed 003 §4.1: after decapsulation "the packet is routed to the bare-metal server";
    RFC 1812 §5.3.1: a router decrements the TTL (and the checksum follows)."""
    out = tor.process(bytes(_vm_to_bm(ttl=9)), FABRIC_PORT)
    want = Ether(src=TOR_MAC, dst="02:00:00:00:0b:01") / IP(src="192.168.10.2", dst="192.168.11.1", ttl=8) / b"vm"
    assert (out.kind, out.port) == ("forward", BM_PORT) and out.data == bytes(want)


@pytest.mark.parametrize(
    ("pkt", "port"),
    [
        (Ether() / IP(src="192.168.11.1", dst="192.168.11.9", ttl=1) / b"local", BM_PORT),
        (Ether() / IP(src="192.168.11.1", dst="192.168.10.2", ttl=1) / b"to-vnet", BM_PORT),
        (Ether() / IP(src="192.168.11.1", dst="192.168.11.9", ttl=0) / b"zero", BM_PORT),
        (Ether() / IPv6(dst="2001:db8::1", hlim=1) / b"v6", BM_PORT),
        (_vm_to_bm(ttl=1), FABRIC_PORT),
    ],
    ids=["v4-routed", "v4-to-vnet", "v4-ttl-0", "v6-hop-limit-1", "vnet-to-bm"],
)
def test_bluebird_never_forwards_a_packet_whose_ttl_would_reach_zero(tor: Interpreter, pkt: Any, port: int) -> None:
    """RFC 1812 §5.3.1 (IPv4) and RFC 8200 §3 (IPv6 hop limit)."""
    assert _drop(tor, pkt, port) == "ttl_exceeded"


@pytest.mark.parametrize(
    ("pkt", "reason"),
    [
        (_vm_to_bm(chksum=0x1234), "bad_ipv4_checksum"),                              # RFC 1812 §5.2.2
        (_vm_to_bm(options=[IPOption_Router_Alert()]), "ipv4_options"),
        (Ether() / IP(src="100.64.90.90", dst=TOR_IP, flags="MF") / UDP(dport=4789) / VXLAN(vni=20500)
         / Ether() / IP(), "fragment"),                                               # RFC 7348 §4.3
        (Ether() / IP(src="100.64.90.90", dst=TOR_IP, options=[IPOption_Router_Alert()]) / UDP(dport=4789)
         / VXLAN(vni=20500) / Ether() / IP(), "ipv4_options"),
        (Ether() / IP(src="100.64.90.90", dst=TOR_IP, version=5) / UDP(dport=4789), "bad_ipv4_header"),
        (Ether() / IP(src="100.64.90.90", dst=TOR_IP) / UDP(dport=4789) / VXLAN(flags=0, vni=20500)
         / Ether() / IP(), "vxlan_no_vni"),                                           # RFC 7348 §5
    ],
    ids=["inner-checksum", "inner-options", "outer-fragment", "outer-options", "outer-version", "i-flag-clear"],
)
def test_bluebird_checks_what_it_decapsulates_and_routes(tor: Interpreter, pkt: Any, reason: str) -> None:
    assert _drop(tor, pkt, FABRIC_PORT) == reason


@pytest.mark.parametrize(
    ("pkt", "reason"),
    [
        (Ether() / IP(dst="192.168.11.9", options=[IPOption_Router_Alert()]), "ipv4_options"),
        (Ether(type=0x86DD) / IP(dst="192.168.11.9") / (b"x" * 40), "bad_ipv6_header"),
    ],
    ids=["options", "v6-ethertype-v4-header"],
)
def test_bluebird_checks_what_it_routes_from_bare_metal(tor: Interpreter, pkt: Any, reason: str) -> None:
    assert _drop(tor, pkt, BM_PORT) == reason


# ---- DSR: seed 004 §3.2.2, §4.1.2, §4.2, RFC 1812, RFC 2784 / 2890, RFC 7348 -------------------

DSR_IP, ACCESS_PORT, VPC_PORT = "10.200.0.1", 2, 20


@pytest.fixture
def dsr() -> Interpreter:
    return _interp("dsr_router", {
        "vni_to_vrf": [_e(Match(100), vrf=3)],
        "vrf_fib": [_e(Match(3), Match(ip2int("10.1.0.0"), 16), tunnel_dst=ip2int("172.20.0.9"), tunnel_key=77)],
        "fabric_routes": [_e(Match(0, 0), port=30, next_hop_mac=mac2int(NH_MAC))],
        "key_to_access": [_e(Match(77), vni=100, vtep=ip2int("192.0.2.50"), port=ACCESS_PORT,
                             next_hop_mac=mac2int("02:00:00:00:00:50"))],
    })


def _access(vxlan: Any | None = None, outer: dict[str, Any] | None = None, **inner: Any) -> Any:
    ip = IP(src="192.168.0.5", dst="10.1.2.3", **{"ttl": 20, **inner}) / UDP(sport=1, dport=2) / b"tenant"
    return (Ether() / IP(src="192.0.2.50", dst=DSR_IP, **(outer or {})) / UDP(sport=49999, dport=4789)
            / (vxlan if vxlan is not None else VXLAN(vni=100)) / Ether() / ip)


def _vpc(gre: Any, **inner: Any) -> Any:
    return Ether() / IP(src="172.20.0.9", dst=DSR_IP) / gre / IP(src="10.1.2.3", dst="192.168.0.5", **inner) / b"r"


def test_dsr_routes_a_tenant_packet_into_its_gre_tunnel(dsr: Interpreter) -> None:
    """§4.1.2: one LPM lookup gives the GRE encapsulation and the port; RFC 2890: key = the
    VPC id; RFC 1812 §5.3.1: the tenant's TTL is decremented."""
    out = dsr.process(bytes(_access()), ACCESS_PORT)
    inner = IP(src="192.168.0.5", dst="10.1.2.3", ttl=19) / UDP(sport=1, dport=2) / b"tenant"
    got = Ether(out.data)
    assert (out.kind, out.port) == ("forward", 30)
    assert got[GRE].key_present == 1 and got[GRE].key == 77 << 8 and got[GRE].chksum_present == 0
    assert bytes(got[GRE].payload) == bytes(inner) and got[IP].dst == "172.20.0.9"


@pytest.mark.parametrize(
    ("pkt", "reason"),
    [
        (_access(ttl=1), "ttl_exceeded"),                                            # RFC 1812 §5.3.1
        (_access(chksum=0x1234), "bad_ipv4_checksum"),                               # RFC 1812 §5.2.2
        (_access(options=[IPOption_Router_Alert()]), "ipv4_options"),
        (_access(vxlan=VXLAN(flags=0, vni=100)), "vxlan_no_vni"),                    # RFC 7348 §5
        (_access(outer={"frag": 3}), "fragment"),                                    # RFC 7348 §4.3
        (_access(outer={"options": [IPOption_Router_Alert()]}), "ipv4_options"),
    ],
    ids=["ttl-1", "inner-checksum", "inner-options", "i-flag-clear", "outer-fragment", "outer-options"],
)
def test_dsr_checks_the_tenant_packets_it_routes(dsr: Interpreter, pkt: Any, reason: str) -> None:
    assert _drop(dsr, pkt, ACCESS_PORT) == reason


def test_dsr_accepts_gre_reserved_bits_6_to_12(dsr: Interpreter) -> None:
    """RFC 2784 §2.3: bits 6-12 "MUST be ignored on receipt"."""
    gre = GRE(key_present=1, key=77 << 8, proto=0x0800, flags=0b11111)
    out = dsr.process(bytes(_vpc(gre)), VPC_PORT)
    assert (out.kind, out.port) == ("forward", ACCESS_PORT)
    assert bytes(Ether(out.data)[VXLAN].payload)[14:] == bytes(IP(src="10.1.2.3", dst="192.168.0.5") / b"r")


@pytest.mark.parametrize(
    "gre",
    [
        GRE(chksum_present=1, key_present=1, key=77 << 8, proto=0x0800),   # RFC 2784 §2.2: would need verifying
        GRE(key_present=1, seqnum_present=1, key=77 << 8, sequence_number=5, proto=0x0800),
        GRE(routing_present=1, key_present=1, key=77 << 8, proto=0x0800),  # RFC 2784 §2.3: MUST discard bit 1
        GRE(key_present=1, strict_route_source=1, key=77 << 8, proto=0x0800),  # bit 4
        GRE(key_present=1, recursion_control=4, key=77 << 8, proto=0x0800),    # bit 5
        GRE(key_present=1, version=1, key=77 << 8, proto=0x0800),              # RFC 2784 §2.3.1: version 0
    ],
    ids=["checksum", "sequence", "routing", "strict-route", "recursion", "version-1"],
)
def test_dsr_drops_gre_it_would_misparse_instead_of_reading_another_field_as_the_key(
        dsr: Interpreter, gre: Any) -> None:
    """With C or S set, other words sit where the key or the payload is read: the packet is
    dropped by name, never forwarded to whichever tunnel those bytes name."""
    assert _drop(dsr, _vpc(gre), VPC_PORT) == "gre_unsupported"


def test_dsr_never_repairs_a_damaged_header_it_carries_from_a_vpc(dsr: Interpreter) -> None:
    gre = GRE(key_present=1, key=77 << 8, proto=0x0800)
    assert _drop(dsr, _vpc(gre, chksum=0x1234), VPC_PORT) == "bad_ipv4_checksum"


# ---- Protego IPsec gateway: seed 001 §4.3-§4.4, RFC 4303 -----------------------------------------

KEY, SALT, SPI_OUT, SPI_IN, TUNNEL = bytes(range(16)), bytes.fromhex("cafebabe"), 0x2001, 0x1001, 9
PEER, VIP, INTERNET_PORT, VNET_PORT = "198.51.100.7", "203.0.113.1", 3, 18


@pytest.fixture
def ipsec() -> Interpreter:
    key, salt = int.from_bytes(KEY, "big"), int.from_bytes(SALT, "big")
    return _interp("ipsec_gateway", {
        "spi_steering": [_e(Match(SPI_IN), tunnel=TUNNEL)],
        "inbound_sa": [_e(Match(SPI_IN), key=key, salt=salt, sa_index=TUNNEL, vnet_port=VNET_PORT, vnet_mac=1)],
        "traffic_selectors": [Entry((Match(VNET_PORT), Match(0, 0), Match(0, 0), Match(0, 255)), {"tunnel": TUNNEL},
                                    10)],
        "outbound_sa": [_e(Match(TUNNEL), spi=SPI_OUT, key=key, salt=salt, peer=ip2int(PEER), seq_index=TUNNEL)],
        "internet_routes": [_e(Match(0, 0), port=INTERNET_PORT, next_hop_mac=mac2int(NH_MAC))],
    })


def _scapy_sa(spi: int, src: str, dst: str) -> Any:
    """scapy's ESP tunnel-mode SA with the example's key (AES-GCM-128, 4-byte salt)."""
    return SecurityAssociation(ESP, spi=spi, crypt_algo="AES-GCM", crypt_key=KEY + SALT,  # type: ignore[no-untyped-call]
                               tunnel_header=IP(src=src, dst=dst))


def _tenant_packet(**ip: Any) -> bytes:
    return bytes(Ether() / IP(src="10.8.0.1", dst="192.168.50.1", **ip) / UDP(sport=7, dport=8) / b"secret")


def test_ipsec_numbers_an_sa_from_one_and_encrypts_for_the_peer(ipsec: Interpreter) -> None:
    """RFC 4303 §3.3.3: the first packet sent on an SA carries sequence number 1; scapy's ESP
    (an independent AES-GCM implementation) decrypts the tenant packet back."""
    out = ipsec.process(_tenant_packet(), VNET_PORT)
    got = Ether(out.data)
    assert (out.kind, out.port) == ("forward", INTERNET_PORT) and got[ESP].spi == SPI_OUT and got[ESP].seq == 1
    assert bytes(_scapy_sa(SPI_OUT, VIP, PEER).decrypt(got[IP].copy())) == _tenant_packet()[14:]


def test_ipsec_never_lets_the_sequence_number_cycle(ipsec: Interpreter) -> None:
    """RFC 4303 §3.3.3: the counter MUST NOT cycle; after 2^32 - 1 the SA is used up."""
    ipsec.state.registers["sa_seq"] = {TUNNEL: 0xFFFFFFFF}
    assert _drop(ipsec, _tenant_packet(), VNET_PORT) == "sa_seq_exhausted"


def test_ipsec_drops_tenant_ipv4_options_by_name(ipsec: Interpreter) -> None:
    """The inner header would be written with its checksum recomputed over 20 bytes."""
    assert _drop(ipsec, _tenant_packet(options=[IPOption_Router_Alert()]), VNET_PORT) == "ipv4_options"


@pytest.mark.parametrize("frag", [{"flags": "MF"}, {"frag": 64}], ids=["first", "later"])
def test_ipsec_discards_esp_that_is_an_ip_fragment(ipsec: Interpreter, frag: dict[str, Any]) -> None:
    """RFC 4303 §3.4.1: "If a packet offered to ESP for processing appears to be an IP
    fragment ... the receiver MUST discard the packet"."""
    enc = _scapy_sa(SPI_IN, PEER, VIP).encrypt(IP(src="192.168.50.1", dst="10.8.0.1") / UDP() / b"in")
    enc.flags, enc.frag = frag.get("flags", 0), frag.get("frag", 0)
    del enc.chksum
    assert _drop(ipsec, Ether() / enc, INTERNET_PORT) == "fragment"


# ---- CGNAT: seed 002 §2-§3, RFC 4787, RFC 5382, RFC 768, RFC 1812 -------------------------------

EXT_IP, INSIDE, OUTSIDE = "198.51.100.1", 1, 25
SERVER, HOST = "93.184.216.34", "10.0.0.5"


@pytest.fixture
def nat() -> Interpreter:
    return _interp("cgnat", {
        "subnet_to_external": [_e(Match(ip2int("10.0.0.0"), 8), ext_ip=ip2int(EXT_IP))],
        "upstream_routes": [_e(Match(0, 0), port=24, next_hop_mac=mac2int(NH_MAC))],
        "subscriber_routes": [_e(Match(ip2int("10.0.0.0"), 8), port=2, next_hop_mac=mac2int("02:00:00:00:00:02"))],
    })


def _out(nat: Interpreter, l4: Any, now: float, src: str = HOST) -> Any:
    """An inside packet at ``now`` seconds; the translated packet scapy reads back."""
    o = nat.process(bytes(Ether() / IP(src=src, dst=SERVER) / l4), INSIDE, now)
    assert (o.kind, o.port) == ("forward", 24), (o.kind, o.reason, now)
    return Ether(o.data)


def _in(nat: Interpreter, l4: Any, now: float) -> Any:
    return nat.process(bytes(Ether() / IP(src=SERVER, dst=EXT_IP) / l4), OUTSIDE, now)


def test_cgnat_keeps_an_established_tcp_mapping_through_ten_idle_minutes(nat: Interpreter) -> None:
    """RFC 5382 REQ-5: "established connection idle-timeout" MUST NOT be less than 2 h 4 min,
    so after 10 idle minutes the connection keeps its external port both ways."""
    port = _out(nat, TCP(sport=40000, dport=443, flags="S"), 0)[TCP].sport
    assert _in(nat, TCP(sport=443, dport=port, flags="SA"), 1).kind == "forward"
    _out(nat, TCP(sport=40000, dport=443, flags="A"), 2)
    assert _out(nat, TCP(sport=40000, dport=443, flags="PA") / b"late", 602)[TCP].sport == port
    back = _in(nat, TCP(sport=443, dport=port, flags="PA") / b"reply", 603)
    assert back.kind == "forward" and Ether(back.data)[TCP].dport == 40000


def test_cgnat_keeps_a_tcp_connection_busy_both_ways_for_three_hours(nat: Interpreter) -> None:
    """RFC 5382 REQ-5 bounds idle time, not age: packets every hour in each direction keep the
    mapping alive past 2 h 4 min."""
    port = _out(nat, TCP(sport=40001, dport=443, flags="S"), 0)[TCP].sport
    for t in (3600, 7200, 10800):
        assert _out(nat, TCP(sport=40001, dport=443, flags="A"), t)[TCP].sport == port
        back = _in(nat, TCP(sport=443, dport=port, flags="A"), t + 1)
        assert back.kind == "forward", (t, back.reason)


def test_cgnat_mapping_used_both_ways_outlives_its_udp_timeout(nat: Interpreter) -> None:
    """RFC 4787 REQ-5/REQ-6: a UDP mapping lives 300 s past the traffic that refreshes it;
    with packets every 200 s in each direction it is still there at 650 s."""
    port = _out(nat, UDP(sport=5060, dport=5060), 0)[UDP].sport
    for t in (200, 400, 600):
        assert _out(nat, UDP(sport=5060, dport=5060), t)[UDP].sport == port
        back = _in(nat, UDP(sport=5060, dport=port), t + 50)
        assert back.kind == "forward" and Ether(back.data)[UDP].dport == 5060, (t, back.reason)


def test_cgnat_outbound_traffic_alone_keeps_the_inbound_mapping(nat: Interpreter) -> None:
    """RFC 4787 REQ-6: "NAT Outbound refresh behavior" MUST be True (seed 002 §3: only
    outbound packets refresh a UDP mapping)."""
    port = _out(nat, UDP(sport=5061, dport=5061), 0)[UDP].sport
    _out(nat, UDP(sport=5061, dport=5061), 250)
    assert _in(nat, UDP(sport=5061, dport=port), 400).kind == "forward"


def test_cgnat_inbound_traffic_does_not_keep_a_mapping(nat: Interpreter) -> None:
    """Seed 002 §3: "Inbound packets do not refresh this timer for security reasons": replies
    every 200 s do not keep a mapping past 300 s after the last outbound packet."""
    port = _out(nat, UDP(sport=5062, dport=5062), 0)[UDP].sport
    assert _in(nat, UDP(sport=5062, dport=port), 200).kind == "forward"
    back = _in(nat, UDP(sport=5062, dport=port), 301)
    assert (back.kind, back.reason) == ("drop", "no_mapping")


def test_cgnat_frees_the_external_port_of_an_expired_mapping(nat: Interpreter) -> None:
    """Seed 002 §3: "the mapping is deleted and the external port is freed up"."""
    first = _out(nat, UDP(sport=1000, dport=53), 0)[UDP].sport
    assert _out(nat, UDP(sport=1001, dport=53), 1000, src="10.0.0.6")[UDP].sport == first


def test_cgnat_keeps_the_port_of_a_live_mapping_and_sends_its_replies_to_its_owner(nat: Interpreter) -> None:
    """A port is given out again only when its mapping has expired in both directions: a
    second subscriber gets another port while the first mapping lives (RFC 4787 REQ-1), and
    after the port moved to the second one, inbound packets to it reach the second, and the
    first subscriber's next packet gets a new mapping (its old one went with the port)."""
    first = _out(nat, UDP(sport=1000, dport=53), 0)[UDP].sport
    assert _out(nat, UDP(sport=1001, dport=53), 299, src="10.0.0.6")[UDP].sport != first
    assert _out(nat, UDP(sport=1000, dport=53), 299)[UDP].sport == first  # refreshed to 599 s
    moved = _out(nat, UDP(sport=1002, dport=53), 600, src="10.0.0.7")[UDP].sport
    assert moved == first
    back = _in(nat, UDP(sport=53, dport=first), 601)
    assert back.kind == "forward" and Ether(back.data)[IP].dst == "10.0.0.7"
    assert _out(nat, UDP(sport=1000, dport=53), 602)[UDP].sport != first


def test_cgnat_forwards_no_packet_whose_ttl_would_reach_zero_and_maps_nothing_for_it(nat: Interpreter) -> None:
    """RFC 1812 §5.3.1; a packet that is not forwarded does not take a port."""
    assert _drop(nat, Ether() / IP(src=HOST, dst=SERVER, ttl=1) / UDP(sport=9, dport=9), INSIDE) == "ttl_exceeded"
    assert _out(nat, UDP(sport=10, dport=9), 1)[UDP].sport == 1024
    assert _out(nat, UDP(sport=10, dport=9), 2)[IP].ttl == 63


@pytest.mark.parametrize("frag", [{"flags": "MF"}, {"frag": 8}], ids=["first", "later"])
def test_cgnat_drops_fragments_without_making_a_mapping(nat: Interpreter, frag: dict[str, Any]) -> None:
    """A later fragment has no ports and a first one alone is never reassembled (RFC 4787
    REQ-14's fragment support is a known difference): neither takes a port."""
    pkt = Ether() / IP(src=HOST, dst=SERVER, **frag) / UDP(sport=9, dport=9)
    assert _drop(nat, pkt, INSIDE) == "fragment"
    assert _out(nat, UDP(sport=11, dport=9), 1)[UDP].sport == 1024


def test_cgnat_drops_ipv4_options_by_name(nat: Interpreter) -> None:
    pkt = Ether() / IP(src=HOST, dst=SERVER, options=[IPOption_Router_Alert()]) / UDP(sport=9, dport=9)
    assert _drop(nat, pkt, INSIDE) == "ipv4_options"


def _payload_for_zero_sum(src: str, sport: int, dst: str, dport: int) -> bytes:
    """Two payload bytes that make the one's complement sum of a UDP datagram (pseudo-header
    included) all ones, so its computed checksum is 0: with the word w = scapy's checksum
    of the datagram with a zero payload word, the sum becomes S + ~S = 0xffff."""
    probe = IP(src=src, dst=dst) / UDP(sport=sport, dport=dport) / b"\0\0"
    return int(IP(bytes(probe))[UDP].chksum).to_bytes(2, "big")


@pytest.mark.parametrize("direction", ["outbound", "inbound"])
def test_cgnat_sends_a_udp_checksum_that_computes_to_zero_as_all_ones(nat: Interpreter, direction: str) -> None:
    """RFC 768: "If the computed checksum is zero, it is transmitted as all ones"; scapy
    computes the translated datagram's checksum the same way."""
    if direction == "outbound":
        word = _payload_for_zero_sum(EXT_IP, 1024, SERVER, 53)
        got = _out(nat, UDP(sport=3333, dport=53) / word, 0)
        want = IP(src=EXT_IP, dst=SERVER) / UDP(sport=1024, dport=53) / word
    else:
        port = _out(nat, UDP(sport=3333, dport=53), 0)[UDP].sport
        word = _payload_for_zero_sum(SERVER, 53, HOST, 3333)
        o = _in(nat, UDP(sport=53, dport=port) / word, 1)
        assert o.kind == "forward"
        got = Ether(o.data)
        want = IP(src=SERVER, dst=HOST) / UDP(sport=53, dport=3333) / word
    assert IP(bytes(want))[UDP].chksum == 0xFFFF
    assert got[UDP].chksum == 0xFFFF and bytes(got[UDP]) == bytes(IP(bytes(want))[UDP])


def test_cgnat_translates_an_icmp_echo_by_its_identifier_both_ways(nat: Interpreter) -> None:
    """Seed 002 §3 ("ICMP Query mappings"), RFC 5508 REQ-1: a query from inside and its reply
    pass, the identifier taking the port's part; scapy recomputes the ICMP checksum (RFC 792)."""
    got = _out(nat, ICMP(type=8, id=0x1234, seq=7) / b"ping", 0)
    want = IP(src=EXT_IP, dst=SERVER, ttl=63) / ICMP(type=8, id=1024, seq=7) / b"ping"
    assert bytes(got[IP]) == bytes(IP(bytes(want)))
    back = _in(nat, ICMP(type=0, id=1024, seq=7) / b"ping", 30)
    assert back.kind == "forward" and back.port == 2
    want = IP(src=SERVER, dst=HOST, ttl=63) / ICMP(type=0, id=0x1234, seq=7) / b"ping"
    assert bytes(Ether(back.data)[IP]) == bytes(IP(bytes(want)))


@pytest.mark.parametrize(
    ("pkt", "port", "reason"),
    [
        (Ether() / IP(src=SERVER, dst=EXT_IP) / ICMP(type=8, id=1024), OUTSIDE, "icmp_unsupported"),
        (Ether() / IP(src=HOST, dst=SERVER) / ICMP(type=3, code=1) / IP() / UDP(), INSIDE, "icmp_unsupported"),
    ],
    ids=["query-from-outside", "error-message"],
)
def test_cgnat_passes_no_other_icmp(nat: Interpreter, pkt: Any, port: int, reason: str) -> None:
    """RFC 5508 REQ-1 permits queries initiated from inside; an outside echo request that
    names a mapped identifier must not reach the inside host. ICMP errors (REQ-3/4: the
    embedded header would need translating) are a known difference, dropped by name."""
    _out(nat, ICMP(type=8, id=0x1234), 0)
    assert _drop(nat, pkt, port, 1) == reason


def test_cgnat_icmp_query_mapping_lasts_at_least_sixty_seconds(nat: Interpreter) -> None:
    """RFC 5508 REQ-2: "An ICMP Query session timer MUST NOT expire in less than 60 seconds"."""
    _out(nat, ICMP(type=8, id=0x2222), 0)
    assert _in(nat, ICMP(type=0, id=1024), 59).kind == "forward"
