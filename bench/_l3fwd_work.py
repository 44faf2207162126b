"""The workload of bench/bench_l3fwd.py, shared by every program it runs: a BGP-like IPv4 route
set, flows whose destinations hit it, the frames (plain for l3fwd, testpmd and bench/l3fwd.nfp;
VXLAN-wrapped for the DSR router) and the files each program loads the routes from.

Pure and deterministic (a seed in, the same bytes out), so tests/test_bench_l3fwd.py checks it
without DPDK.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from scapy.utils import RawPcapWriter

from compiler.interp.bits import internet_checksum

__all__ = [
    "DSR_VNI", "DSR_VRF", "FLOWS", "FRAME_BYTES", "LENGTH_SHARES", "OUT_PORT", "Route", "dsr_entries", "dsr_frame",
    "flow_destinations", "frame", "l3fwd_rules", "length_counts", "next_hop_mac", "nfc_entries", "route_set",
    "write_pcap",
]

# Share of each prefix length in the route set: about 60 % /24 and the rest /8-/23, in roughly
# the proportions of the public IPv4 BGP table (/22 and /23 next, few shorter than /16).
# /23 takes what the others leave, so that the shares sum to 1.
_SHARES = {
    8: 0.00002, 9: 0.00002, 10: 0.00005, 11: 0.0001, 12: 0.0003, 13: 0.0006, 14: 0.0012, 15: 0.002,
    16: 0.013, 17: 0.010, 18: 0.016, 19: 0.028, 20: 0.042, 21: 0.050, 22: 0.120, 24: 0.600,
}
LENGTH_SHARES: dict[int, float] = dict(sorted({**_SHARES, 23: 1.0 - sum(_SHARES.values())}.items()))
FLOWS = 4096
OUT_PORT = 1  # every route leads to DPDK port 1 (net_null1); packets come in on port 0 (net_pcap0)
FRAME_BYTES = 64  # Ethernet frame without FCS, as in bench_dpdk.py
ROUTER_MAC = bytes.fromhex("020000000001")  # bench/l3fwd.nfp's ROUTER_MAC, the frames' destination
SENDER_MAC = bytes.fromhex("02000000ff01")
DSR_VNI = 100  # the one tenant: vni_to_vrf maps it to DSR_VRF
DSR_VRF = 1
DSR_TUNNEL_NET = 0x0A000000  # 10.0.0.0/8: the GRE tunnel endpoints, one fabric route
DSR_MAC = bytes.fromhex("02000ac80001")  # examples/dsr_router.nfp's DSR_MAC
DSR_IP = 0x0AC80001


@dataclass(frozen=True, slots=True)
class Route:
    """An IPv4 prefix (network address, host bits zero) and its length."""

    network: int
    length: int


def length_counts(n: int) -> dict[int, int]:
    """How many of n routes have each prefix length: LENGTH_SHARES rounded by largest remainder,
    so that the counts sum to n exactly."""
    exact = {length: share * n for length, share in LENGTH_SHARES.items()}
    counts = {length: int(x) for length, x in exact.items()}
    short = n - sum(counts.values())
    for length in sorted(exact, key=lambda k: counts[k] - exact[k])[:short]:
        counts[length] += 1
    return counts


def _unicast_network(rng: random.Random, length: int) -> int:
    """A random network of ``length`` bits in 1.0.0.0-223.255.255.255 but 127/8 (unicast space)."""
    while True:
        addr = rng.randrange(1 << 24, 224 << 24)
        if addr >> 24 != 127:
            return addr & ~((1 << (32 - length)) - 1) & 0xFFFFFFFF


def route_set(n: int, seed: int = 13) -> list[Route]:
    """n distinct BGP-like routes (LENGTH_SHARES), the same for the same n and seed, in random
    order (they overlap as a real table does: a /24 may lie inside a /16 of the set)."""
    rng = random.Random(f"l3fwd-routes-{n}-{seed}")
    routes: list[Route] = []
    for length, count in sorted(length_counts(n).items()):
        if count > 1 << (length - 1):
            raise ValueError(f"{count} distinct /{length} prefixes do not fit the unicast space")
        nets: set[int] = set()
        while len(nets) < count:
            nets.add(_unicast_network(rng, length))
        routes += [Route(net, length) for net in sorted(nets)]
    rng.shuffle(routes)
    return routes


def flow_destinations(routes: Sequence[Route], flows: int = FLOWS, seed: int = 13) -> list[int]:
    """``flows`` distinct destination addresses, each a random host of a route picked at random
    (every route once before any twice), so every destination has a route."""
    rng = random.Random(f"l3fwd-flows-{len(routes)}-{seed}")
    dests: list[int] = []
    seen: set[int] = set()
    while len(dests) < flows:
        for route in rng.sample(list(routes), min(len(routes), flows - len(dests))):
            addr = route.network | rng.randrange(1 << (32 - route.length))
            if addr not in seen:
                seen.add(addr)
                dests.append(addr)
    return dests


def _ipv4(src: int, dst: int, proto: int, payload_len: int, ttl: int = 64) -> bytes:
    """An IPv4 header without options, with its RFC 1071 checksum."""
    head = struct.pack("!BBHHHBBHII", 0x45, 0, 20 + payload_len, 0, 0, ttl, proto, 0, src, dst)
    return head[:10] + struct.pack("!H", internet_checksum(head)) + head[12:]


def frame(dst: int, flow: int) -> bytes:
    """The FRAME_BYTES-byte Ethernet + IPv4 + UDP frame of flow number ``flow`` to ``dst``."""
    payload = bytes(FRAME_BYTES - 14 - 20 - 8)
    udp = struct.pack("!HHHH", 1024 + flow % 60000, 9, 8 + len(payload), 0) + payload
    src = 0xC0000200 | flow % 256  # 192.0.2.0/24, TEST-NET-1
    return ROUTER_MAC + SENDER_MAC + b"\x08\x00" + _ipv4(src, dst, 17, len(udp)) + udp


def dsr_frame(inner: bytes, flow: int) -> bytes:
    """``inner`` as the DSR router receives it from an access router: VXLAN (RFC 7348, VNI
    DSR_VNI) in UDP to port 4789 in IPv4 to DSR_IP."""
    vxlan = struct.pack("!II", 0x08 << 24, DSR_VNI << 8) + inner
    udp = struct.pack("!HHHH", 49152 + flow % 16384, 4789, 8 + len(vxlan), 0) + vxlan
    access_router = 0xC6336401  # 198.51.100.1, TEST-NET-2
    return DSR_MAC + SENDER_MAC + b"\x08\x00" + _ipv4(access_router, DSR_IP, 17, len(udp)) + udp


def write_pcap(path: Path, frames: Iterable[bytes]) -> None:
    with RawPcapWriter(str(path), linktype=1) as w:  # linktype 1: Ethernet
        for f in frames:
            w.write(f)


def _dotted(addr: int) -> str:
    return ".".join(str(b) for b in addr.to_bytes(4, "big"))


def next_hop_mac(i: int) -> int:
    """The next hop of the i-th route (bench/l3fwd.nfp's routes.next_hop_mac)."""
    return 0x020000000000 | ((i + 2) & 0xFFFFFFFF)


def l3fwd_rules(routes: Iterable[Route], path: Path) -> None:
    """l3fwd's --rule_ipv4 file: ``R<address>/<length> <port>`` (lpm_route_parse.c)."""
    with path.open("w") as f:
        for r in routes:
            f.write(f"R{_dotted(r.network)}/{r.length} {OUT_PORT}\n")


def nfc_entries(routes: Iterable[Route], path: Path, per_route_macs: bool = False) -> None:
    """bench/l3fwd.nfp's entries file (docs/server.md): ``routes <net>/<len> : <port> <mac>``.
    As in l3fwd, whose destination MAC is its output port's (``dest_eth_addr[port]``), every
    route's next hop is its port's; ``per_route_macs`` gives each route a MAC of its own
    instead (a test can then tell which route a packet took)."""
    with path.open("w") as f:
        for i, r in enumerate(routes):
            f.write(f"routes {r.network:#x}/{r.length} : {OUT_PORT} {next_hop_mac(i if per_route_macs else 0):#x}\n")


def dsr_entries(routes: Iterable[Route], path: Path) -> None:
    """examples/dsr_router.nfp's entries: the tenant DSR_VNI -> DSR_VRF, the routes in that VRF's
    FIB (a tunnel endpoint in 10.0.0.0/8 and a GRE key each) and one fabric route to OUT_PORT."""
    with path.open("w") as f:
        f.write(f"vni_to_vrf {DSR_VNI} : {DSR_VRF}\n")
        f.write(f"fabric_routes {DSR_TUNNEL_NET:#x}/8 : {OUT_PORT} 0x020000000002\n")
        for i, r in enumerate(routes):
            tunnel = DSR_TUNNEL_NET | (1 + i % 65534)
            f.write(f"vrf_fib {DSR_VRF} {r.network:#x}/{r.length} : {tunnel:#x} {i % (1 << 24)}\n")
