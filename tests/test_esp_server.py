"""ESP on the server (issue 15 item 2): the IPsec gateway built for tofino+dpdk runs through
``nfc run`` (the switch model steers by SPI and traffic selector and meters, the DPDK
program does ESP with DPDK's crypto device and keeps the sequence numbers and anti-replay
windows), and built for a server alone (dpdk: the same program steers and meters too),
against implementations nobody here wrote:

* what the server encrypts decrypts with scapy's ``SecurityAssociation`` and with
  ``cryptography``'s AES-GCM directly (RFC 4106: nonce = salt . IV, AAD = SPI . sequence);
* what scapy encrypts decrypts through the gateway to the tenant's packet, byte for byte;
* replayed, too-old and tampered packets are dropped by reason and counted (RFC 4303 §3.4.3).
"""

from __future__ import annotations

import struct
from collections import Counter

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from scapy.layers.inet import IP, UDP
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.l2 import Ether

from tests.conftest import HAVE_DPDK, build_with_server, nfc_run
from tests.oracles import ip2int, mac2int

pytestmark = pytest.mark.skipif(not HAVE_DPDK, reason="DPDK (libdpdk-dev) missing: python3 build.py setup installs it")

GATEWAY_VIP, GATEWAY_MAC = "203.0.113.1", "02:00:cb:00:71:01"  # the example's constants
PEER, NH_MAC, VNET_MAC = "198.51.100.7", "02:00:00:00:00:99", "02:00:00:00:0a:01"
INTERNET_PORT, VNET_PORT = 3, 18
# (SPI in, SPI out, tunnel, key, salt): two tunnels with keys of their own
SAS = [(0x1001, 0x2001, 9, bytes(range(16)), bytes.fromhex("cafebabe")),
       (0x1002, 0x2002, 11, bytes(range(100, 116)), bytes.fromhex("0badf00d"))]


@pytest.fixture(scope="module", params=["tofino+dpdk", "dpdk"])
def built(tmp_path_factory, request):
    """The gateway split (steering and meters on the switch model) and on a server alone (its
    traffic selectors classified by rte_acl, its meters rte_meter's)."""
    out = tmp_path_factory.mktemp("ipsec") / "out"
    return build_with_server("examples/ipsec_gateway.nfp", out, "--target", request.param)


def _entries() -> dict[str, list[dict[str, object]]]:
    def e(match: dict[str, object], priority: int = 0, **values: int) -> dict[str, object]:
        return {"match": match, "values": values, "priority": priority}

    out: dict[str, list[dict[str, object]]] = {"spi_steering": [], "inbound_sa": [], "traffic_selectors": [],
                                               "outbound_sa": []}
    for spi_in, spi_out, tunnel, key, salt in SAS:
        k, s = int.from_bytes(key, "big"), int.from_bytes(salt, "big")
        out["spi_steering"].append(e({"esp_spi": spi_in}, tunnel=tunnel))
        out["inbound_sa"].append(e({"esp_spi": spi_in}, key=k, salt=s, sa_index=tunnel, vnet_port=VNET_PORT,
                                   vnet_mac=mac2int(VNET_MAC)))
        # the tenant's traffic to 192.168.<tunnel>.0/24 goes through tunnel <tunnel>
        out["traffic_selectors"].append(e({"std_ingress_port": VNET_PORT, "ipv4_src": [0, 0],
                                           "ipv4_dst": [ip2int(f"192.168.{tunnel}.0"), 0xFFFFFF00],
                                           "ipv4_protocol": "0..255"}, priority=10, tunnel=tunnel))
        out["outbound_sa"].append(e({"meta_tunnel": tunnel}, spi=spi_out, key=k, salt=s, peer=ip2int(PEER),
                                    seq_index=tunnel))
    out["internet_routes"] = [e({"outer_dst": "0/0"}, port=INTERNET_PORT, next_hop_mac=mac2int(NH_MAC))]
    return out


def _scapy_sa(spi: int, key: bytes, salt: bytes, src: str, dst: str) -> SecurityAssociation:
    return SecurityAssociation(ESP, spi=spi, crypt_algo="AES-GCM", crypt_key=key + salt,  # type: ignore[no-untyped-call]
                               tunnel_header=IP(src=src, dst=dst))


def _tenant(tunnel: int, i: int) -> bytes:
    return bytes(Ether(src="02:00:00:00:0b:01", dst=GATEWAY_MAC) /
                 IP(src="10.8.0.1", dst=f"192.168.{tunnel}.{i}", id=i) / UDP(sport=7, dport=8) / (b"secret%d" % i))


def _inbound(sa: int, seq: int, inner: bytes, tamper: bool = False) -> bytes:
    """scapy's ESP of an inner IPv4 packet from the peer, sequence number ``seq``."""
    spi_in, _spi_out, _tunnel, key, salt = SAS[sa]
    enc = _scapy_sa(spi_in, key, salt, PEER, GATEWAY_VIP).encrypt(IP(inner), seq_num=seq)
    frame = bytearray(bytes(Ether(dst=GATEWAY_MAC) / enc))
    if tamper:
        frame[-20] ^= 1  # a ciphertext byte
    return bytes(frame)


def test_what_the_server_encrypts_decrypts_with_scapy_and_with_cryptography(built, tmp_path):
    # 3 packets of SA 0, then the two SAs alternating (a burst's encryptions run together at its
    # end, one call per run of one SA: runs of one and of three), 20 packets per SA
    n = 20
    sent = {sa: [_tenant(SAS[sa][2], i) for i in range(1, n + 1)] for sa in range(2)}
    order = sent[0][:3] + [p for pair in zip(sent[0][3:], sent[1][:-3], strict=True) for p in pair] + sent[1][-3:]
    got, drops = nfc_run(built, _entries(), {VNET_PORT: order}, tmp_path)
    assert sum(drops.values()) == 0, drops
    frames = [Ether(f) for f in got[INTERNET_PORT].elements()]
    assert len(frames) == 2 * n and set(got) == {INTERNET_PORT}
    for sa, (_spi_in, spi_out, _tunnel, key, salt) in enumerate(SAS):
        mine = sorted((f for f in frames if f[ESP].spi == spi_out), key=lambda f: f[ESP].seq)
        assert [f[ESP].seq for f in mine] == list(range(1, n + 1))  # RFC 4303 §3.3.3: an SA counts from 1
        for f, tenant in zip(mine, sent[sa], strict=True):
            assert (f[IP].src, f[IP].dst, f[IP].proto, f.dst, f.src) == (GATEWAY_VIP, PEER, 50, NH_MAC, GATEWAY_MAC)
            inner = tenant[14:]
            assert bytes(_scapy_sa(spi_out, key, salt, GATEWAY_VIP, PEER).decrypt(f[IP].copy())) == inner
            body = bytes(f[IP].payload)  # ESP header, IV, ciphertext, ICV
            nonce, aad = salt + body[8:16], body[:8]
            plain = AESGCM(key).decrypt(nonce, body[16:], aad)
            pad = plain[-2]
            assert plain[-1] == 4 and plain[:-2 - pad] == inner and plain[-2 - pad:-2] == bytes(range(1, pad + 1))
            assert struct.unpack("!I", body[4:8])[0] == f[ESP].seq and body[8:12] == b"\0\0\0\0"


def test_what_scapy_encrypts_reaches_the_tenant_and_replays_are_dropped(built, tmp_path):
    """Two SAs; in SA 0: 1, 2, 2 again (replayed), 100, 30 (left of the 64-packet window:
    replayed), 99 (inside it: accepted), a tampered 101 (bad_icv: the window does not move,
    so 101 untampered is then accepted).  SA 1 keeps its own window: its 2 is new."""
    inner = {n: bytes(IP(src="192.168.9.9", dst="10.8.0.1", id=n) / UDP(sport=9, dport=7) / (b"in%d" % n))
             for n in (1, 2, 30, 99, 100, 101)}
    frames = [_inbound(0, 1, inner[1]), _inbound(0, 2, inner[2]), _inbound(0, 2, inner[2]),
              _inbound(0, 100, inner[100]), _inbound(0, 30, inner[30]), _inbound(0, 99, inner[99]),
              _inbound(0, 101, inner[101], tamper=True), _inbound(0, 101, inner[101]), _inbound(1, 2, inner[2])]
    got, drops = nfc_run(built, _entries(), {INTERNET_PORT: frames}, tmp_path)
    assert drops == Counter({"replayed": 2, "bad_icv": 1})
    out = [Ether(f) for f in got[VNET_PORT].elements()]
    assert sorted(bytes(f.payload) for f in out) == sorted(inner[n] for n in (1, 2, 100, 99, 101, 2))
    assert {(f.dst, f.src, f.type) for f in out} == {(VNET_MAC, GATEWAY_MAC, 0x0800)}


def test_a_program_that_writes_registers_refuses_more_than_one_lcore(built):
    """The outbound sequence number is read, incremented and written back: on two lcores two
    packets of one SA could take the same number, and AES-GCM the same nonce.  The program
    refuses to start on more than one forwarding lcore."""
    import subprocess

    r = subprocess.run([str(built / "server/nf"), "-l", "0,1", "--no-huge", "-m", "512", "--no-pci", "--no-shconf",
                        "--no-telemetry", "--log-level=error", "--vdev=net_null0", "--"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "writes registers" in r.stderr, r.stderr
