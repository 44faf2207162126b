"""The IPsec gateway (examples/ipsec_gateway.nfp) under test: its constants, two tunnels' SAs,
the entries that program them, and packets built with scapy (tenant packets, the peer's ESP)."""

from __future__ import annotations

from scapy.layers.inet import IP, UDP
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.l2 import Ether

from tests.oracles import ip2int, mac2int

__all__ = ["GATEWAY_MAC", "GATEWAY_VIP", "INTERNET_PORT", "NH_MAC", "PEER", "SAS", "VNET_MAC", "VNET_PORT",
           "entries", "inbound", "scapy_sa", "tenant"]

GATEWAY_VIP, GATEWAY_MAC = "203.0.113.1", "02:00:cb:00:71:01"  # the example's constants
PEER, NH_MAC, VNET_MAC = "198.51.100.7", "02:00:00:00:00:99", "02:00:00:00:0a:01"
INTERNET_PORT, VNET_PORT = 3, 18
# (SPI in, SPI out, tunnel, key, salt): two tunnels with keys of their own
SAS = [(0x1001, 0x2001, 9, bytes(range(16)), bytes.fromhex("cafebabe")),
       (0x1002, 0x2002, 11, bytes(range(100, 116)), bytes.fromhex("0badf00d"))]


def entries() -> dict[str, list[dict[str, object]]]:
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


def scapy_sa(spi: int, key: bytes, salt: bytes, src: str, dst: str) -> SecurityAssociation:
    return SecurityAssociation(ESP, spi=spi, crypt_algo="AES-GCM", crypt_key=key + salt,  # type: ignore[no-untyped-call]
                               tunnel_header=IP(src=src, dst=dst))


def tenant(tunnel: int, i: int) -> bytes:
    return bytes(Ether(src="02:00:00:00:0b:01", dst=GATEWAY_MAC) /
                 IP(src="10.8.0.1", dst=f"192.168.{tunnel}.{i}", id=i) / UDP(sport=7, dport=8) / (b"secret%d" % i))


def inbound(sa: int, seq: int, inner: bytes, tamper: bool = False) -> bytes:
    """scapy's ESP of an inner IPv4 packet from the peer, sequence number ``seq``."""
    spi_in, _spi_out, _tunnel, key, salt = SAS[sa]
    enc = scapy_sa(spi_in, key, salt, PEER, GATEWAY_VIP).encrypt(IP(inner), seq_num=seq)
    frame = bytearray(bytes(Ether(dst=GATEWAY_MAC) / enc))
    if tamper:
        frame[-20] ^= 1  # a ciphertext byte
    return bytes(frame)
