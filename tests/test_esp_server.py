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
from scapy.layers.ipsec import ESP
from scapy.layers.l2 import Ether

from tests.support import DPDK, build_with_server, nfc_run
from tests.support.ipsec import (
    GATEWAY_MAC,
    GATEWAY_VIP,
    INTERNET_PORT,
    NH_MAC,
    PEER,
    SAS,
    VNET_MAC,
    VNET_PORT,
    entries,
    inbound,
    scapy_sa,
    tenant,
)

pytestmark = DPDK

@pytest.fixture(scope="module", params=["tofino+dpdk", "dpdk"])
def built(tmp_path_factory, request):
    """The gateway split (steering and meters on the switch model) and on a server alone (its
    traffic selectors classified by rte_acl, its meters rte_meter's)."""
    out = tmp_path_factory.mktemp("ipsec") / "out"
    return build_with_server("examples/ipsec_gateway.nfp", out, "--target", request.param)


def test_what_the_server_encrypts_decrypts_with_scapy_and_with_cryptography(built, tmp_path):
    # 3 packets of SA 0, then the two SAs alternating (a burst's encryptions run together at its
    # end, one call per run of one SA: runs of one and of three), 20 packets per SA
    n = 20
    sent = {sa: [tenant(SAS[sa][2], i) for i in range(1, n + 1)] for sa in range(2)}
    order = sent[0][:3] + [p for pair in zip(sent[0][3:], sent[1][:-3], strict=True) for p in pair] + sent[1][-3:]
    got, drops = nfc_run(built, entries(), {VNET_PORT: order}, tmp_path)
    assert sum(drops.values()) == 0, drops
    frames = [Ether(f) for f in got[INTERNET_PORT].elements()]
    assert len(frames) == 2 * n and set(got) == {INTERNET_PORT}
    for sa, (_spi_in, spi_out, _tunnel, key, salt) in enumerate(SAS):
        mine = sorted((f for f in frames if f[ESP].spi == spi_out), key=lambda f: f[ESP].seq)
        assert [f[ESP].seq for f in mine] == list(range(1, n + 1))  # RFC 4303 §3.3.3: an SA counts from 1
        for f, plain_frame in zip(mine, sent[sa], strict=True):
            assert (f[IP].src, f[IP].dst, f[IP].proto, f.dst, f.src) == (GATEWAY_VIP, PEER, 50, NH_MAC, GATEWAY_MAC)
            inner = plain_frame[14:]
            assert bytes(scapy_sa(spi_out, key, salt, GATEWAY_VIP, PEER).decrypt(f[IP].copy())) == inner
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
    frames = [inbound(0, 1, inner[1]), inbound(0, 2, inner[2]), inbound(0, 2, inner[2]),
              inbound(0, 100, inner[100]), inbound(0, 30, inner[30]), inbound(0, 99, inner[99]),
              inbound(0, 101, inner[101], tamper=True), inbound(0, 101, inner[101]), inbound(1, 2, inner[2])]
    got, drops = nfc_run(built, entries(), {INTERNET_PORT: frames}, tmp_path)
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
