"""The generated server's crc16 / crc32 (nfc_rt.h: eight bytes a step, then a byte a step)
against independent oracles: zlib's CRC-32 and the CRC catalogue's CRC-16/ARC
(tests/oracles.py), over field lists of 1, 8, 9, 13, 16 and 17 bytes (none, one and two eight-
byte steps, with and without a tail), on packets with random addresses and ports."""

from __future__ import annotations

import random
import zlib
from collections import Counter

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests.oracles import crc16_arc
from tests.support import DPDK, build_with_server, nfc_run

pytestmark = DPDK

SOURCE = """import "std/headers.nfp";
packet { eth: ethernet; ip: ipv4; udp: udp; }
metadata { a: bit<32>; b: bit<32>; c: bit<16>; d: bit<16>; e: bit<16>; f: bit<32>; }
parser p {
  state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: v4; default: drop(not_ipv4); } }
  state v4 { extract ip; transition select(ip.protocol) { 17: u; default: drop(not_udp); } }
  state u { extract udp; transition accept; }
}
stage hashes {
  meta.a = crc32(ip.src, ip.dst, udp.sport, udp.dport, ip.protocol);
  meta.b = crc32(ip.src, ip.dst, udp.sport, udp.dport, ip.dst, ip.ttl);
  meta.c = crc16(ip.src, ip.dst, ip.protocol);
  meta.d = crc16(ip.ttl);
  meta.e = crc16(ip.src, ip.dst, udp.sport, udp.dport, ip.src);
  meta.f = crc32(ip.src, ip.dst);
  udp.sport = meta.a[15:0];
  udp.dport = meta.a[31:16];
  ip.src = meta.b;
  ip.identification = meta.c;
  udp.checksum = meta.d;
  udp.length = meta.e;
  ip.dst = meta.f;
  forward(1);
}
ports all = [0..1];
pipeline forward { ports = all; parser = p; stages = [hashes]; traffic = 100%; }
"""


def test_crc16_and_crc32_equal_zlib_and_the_crc_catalogue(tmp_path):
    src = tmp_path / "hashes.nfp"
    src.write_text(SOURCE)
    out = build_with_server(str(src), tmp_path / "out", "--target", "dpdk")
    rnd = random.Random(7)
    pkts = [bytes(Ether() / IP(src=_ip(rnd.getrandbits(32)), dst=_ip(rnd.getrandbits(32)), ttl=rnd.randrange(1, 256))
                  / UDP(sport=rnd.randrange(65536), dport=rnd.randrange(65536)) / b"payload") for _ in range(64)]
    got, drops = nfc_run(out, {}, {0: pkts}, tmp_path / "run")
    assert not drops
    want: Counter[bytes] = Counter()
    for p in pkts:
        ip = Ether(p)[IP]
        s, d, ttl = bytes.fromhex(_hex(ip.src)), bytes.fromhex(_hex(ip.dst)), bytes([ip.ttl])
        ports = ip[UDP].sport.to_bytes(2, "big") + ip[UDP].dport.to_bytes(2, "big")
        a = zlib.crc32(s + d + ports + bytes([17]))
        o = Ether(p)
        o[UDP].sport, o[UDP].dport = a & 0xFFFF, a >> 16
        o[IP].src = _ip(zlib.crc32(s + d + ports + d + ttl))
        o[IP].id = crc16_arc(s + d + bytes([17]))
        o[UDP].chksum = crc16_arc(ttl)
        o[UDP].len = crc16_arc(s + d + ports + s)
        o[IP].dst = _ip(zlib.crc32(s + d))
        del o[IP].chksum  # scapy recomputes it, as the server does
        want[bytes(o)] += 1
    assert got == {1: want}


def _ip(value: int) -> str:
    return ".".join(str(b) for b in value.to_bytes(4, "big"))


def _hex(addr: str) -> str:
    return "".join(f"{int(b):02x}" for b in addr.split("."))
