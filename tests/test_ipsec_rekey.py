"""Rekeying the IPsec gateway under traffic, make before break (seed 001 §3.2; docs/examples.md),
through the runtime API as a controller does it, on the live data plane (the switch model and
the DPDK program over a veth pair).  The ESP is scapy's and ``cryptography``'s:

* inbound, the new SA and its SPI's steering are added beside the old ones: packets of both
  SAs are accepted, each checked against a window of its own; once the old ones are deleted a
  late packet of the old SA is ``unknown_spi``;
* outbound, while the tenant sends 300 packets at 1,000/s, the new SA's sequence slot is
  zeroed and then the tunnel's entry points at the new SPI, key and slot in one write: every
  packet leaves under one SA or the other, each SA's numbers are 1, 2, ... with none twice,
  each packet decrypts with its SA's key, and the old SA's are the first of the flow."""

from __future__ import annotations

import threading
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.l2 import Ether

from runtime.api import Runtime
from runtime.live import LiveDataPlane, pace
from runtime.steering import steer_all
from tests.oracles import ip2int, mac2int
from tests.support import LIVE, P4RuntimeSwitch, build_example

pytestmark = LIVE

GATEWAY_VIP, GATEWAY_MAC = "203.0.113.1", "02:00:cb:00:71:01"
PEER, NH_MAC, VNET_MAC = "198.51.100.7", "02:00:00:00:00:99", "02:00:00:00:0a:01"
INTERNET_PORT, VNET_PORT, TUNNEL = 3, 18, 9
FLOW = 300  # tenant packets sent at 1,000/s while the outbound SA is switched
OLD = {"in": 0x1001, "out": 0x2001, "key": bytes(range(16)), "salt": bytes.fromhex("cafebabe"), "window": 9,
       "slot": 1}
NEW = {"in": 0x1002, "out": 0x2002, "key": bytes(range(50, 66)), "salt": bytes.fromhex("0badf00d"), "window": 10,
       "slot": 2}


def _sa(spi: int, sa: dict, src: str, dst: str) -> SecurityAssociation:
    return SecurityAssociation(ESP, spi=spi, crypt_algo="AES-GCM",  # type: ignore[no-untyped-call]
                               crypt_key=sa["key"] + sa["salt"], tunnel_header=IP(src=src, dst=dst))


def _int(b: bytes) -> int:
    return int.from_bytes(b, "big")


def _inbound_sa(sa: dict) -> dict:
    return {"esp_spi": sa["in"], "key": _int(sa["key"]), "salt": _int(sa["salt"]), "sa_index": sa["window"],
            "vnet_port": VNET_PORT, "vnet_mac": mac2int(VNET_MAC)}


def _outbound_sa(sa: dict) -> dict:
    return {"meta_tunnel": TUNNEL, "spi": sa["out"], "key": _int(sa["key"]), "salt": _int(sa["salt"]),
            "peer": ip2int(PEER), "seq_index": sa["slot"]}


def _from_peer(sa: dict, seq: int) -> tuple[bytes, bytes]:
    inner = bytes(IP(src="192.168.9.9", dst="10.8.0.1", id=seq) / UDP(sport=9, dport=7)
                  / (b"in%x-%d" % (sa["in"], seq)))
    enc = _sa(sa["in"], sa, PEER, GATEWAY_VIP).encrypt(IP(inner), seq_num=seq)
    return bytes(Ether(dst=GATEWAY_MAC) / enc), inner


def _tenant(i: int) -> bytes:
    ip = IP(src="10.8.0.1", dst=f"192.168.{TUNNEL}.{i % 250 + 1}", id=i)
    return bytes(Ether(src="02:00:00:00:0b:01", dst=GATEWAY_MAC) / ip / UDP(sport=7, dport=8) / (b"out%d" % i))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = build_example("examples/ipsec_gateway.nfp", "tofino+dpdk", "--no-verify", server=True)
    return out


def _settled(live: LiveDataPlane) -> None:
    time.sleep(0.3)
    assert live.settle(), live.counters()


def test_a_rekey_under_traffic_loses_nothing_and_reuses_no_sequence_number(built):
    sw = P4RuntimeSwitch(built)
    try:
        with LiveDataPlane(built / "server/nf", sw.p4rt, sw.model.server_ports[0]) as live:
            assert live.server is not None
            rt = Runtime(built, switch=sw.client, server=live.server.control)
            steer_all(rt)  # one GPN of the two: it takes every tunnel
            rt.table("spi_steering").add(esp_spi=OLD["in"], tunnel=TUNNEL)
            rt.table("inbound_sa").add(**_inbound_sa(OLD))
            rt.table("traffic_selectors").add_many([{"std_ingress_port": VNET_PORT, "ipv4_src": (0, 0),
                                                     "ipv4_dst": (ip2int(f"192.168.{TUNNEL}.0"), 0xFFFFFF00),
                                                     "ipv4_protocol": (0, 255), "tunnel": TUNNEL}], [10])
            rt.table("outbound_sa").add(**_outbound_sa(OLD))
            rt.table("internet_routes").add(outer_dst="0.0.0.0/0", port=INTERNET_PORT, next_hop_mac=NH_MAC)
            rt.register("sa_seq").write(NEW["slot"], 777)  # the slot of an SA retired long ago
            inner: list[bytes] = []

            def peer(sa: dict, seq: int) -> None:
                frame, plain = _from_peer(sa, seq)
                inner.append(plain)
                live.inject(INTERNET_PORT, frame)

            for i in (1, 2, 3):  # before: the old SAs
                live.inject(VNET_PORT, _tenant(i))
            peer(OLD, 1)
            peer(OLD, 2)
            _settled(live)
            # make: the new inbound SA beside the old one; the new outbound SA, its slot zeroed first,
            # while the tenant keeps sending
            rt.table("inbound_sa").add(**_inbound_sa(NEW))
            rt.table("spi_steering").add(esp_spi=NEW["in"], tunnel=TUNNEL)
            sender = threading.Thread(target=pace, args=([_tenant(i) for i in range(4, 4 + FLOW)],
                                                         lambda d: live.inject(VNET_PORT, d), 1000.0))
            sender.start()
            time.sleep(0.1)
            rt.register("sa_seq").write(NEW["slot"], 0)
            rt.table("outbound_sa").modify(**_outbound_sa(NEW))
            sender.join()
            peer(OLD, 3)  # the peer has not switched yet
            peer(NEW, 1)
            peer(OLD, 4)
            _settled(live)
            # break: the old inbound SA goes once the peer has switched
            rt.table("inbound_sa").delete(esp_spi=OLD["in"])
            rt.table("spi_steering").delete(esp_spi=OLD["in"])
            late, _ = _from_peer(OLD, 5)
            live.inject(INTERNET_PORT, late)
            peer(NEW, 2)
            _settled(live)
            sent = (rt.register("sa_seq").read(OLD["slot"]), rt.register("sa_seq").read(NEW["slot"]))
            out = [Ether(f) for f in live.take(INTERNET_PORT)]
            tenant = [bytes(Ether(f).payload) for f in live.take(VNET_PORT)]
            counters = live.counters()
    finally:
        sw.close()
    assert counters["drops"] == {"switch:unknown_spi": 1}, counters
    assert sorted(tenant) == sorted(inner)  # every packet of both SAs, byte for byte
    sent_plain = [_tenant(i)[14:] for i in range(1, 4 + FLOW)]
    by_spi = {spi: sorted((f for f in out if f[ESP].spi == spi), key=lambda f: f[ESP].seq)
              for spi in (OLD["out"], NEW["out"])}
    old_n, new_n = len(by_spi[OLD["out"]]), len(by_spi[NEW["out"]])
    # every tenant packet left, under one SA or the other; each SA counted 1, 2, ... with no
    # number twice (the register read back agrees), and the switch came within the flow
    assert len(out) == old_n + new_n == 3 + FLOW and sent == (old_n, new_n), (old_n, new_n, sent)
    assert old_n > 3 and new_n > 0
    for sa in (OLD, NEW):
        frames = by_spi[sa["out"]]
        assert [f[ESP].seq for f in frames] == list(range(1, len(frames) + 1))
        for f in frames:  # each decrypts with its own SA's key, to a packet the tenant sent
            plain = bytes(_sa(sa["out"], sa, GATEWAY_VIP, PEER).decrypt(f[IP].copy()))
            assert plain in sent_plain
    # the packets sent before the switch were the old SA's, in order: the first ones of the flow
    firsts = [bytes(_sa(OLD["out"], OLD, GATEWAY_VIP, PEER).decrypt(f[IP].copy())) for f in by_spi[OLD["out"]]]
    assert firsts == sent_plain[:old_n]
