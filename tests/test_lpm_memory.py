"""The LPM trie's memory as the server reports it (``trie_bytes``, ``trie_tables`` in its counters;
bench/bench_lpm_memory.py measures bytes per route with them) against the layout docs/server.md
gives, worked out here from the routes alone: a VRF costs its root (2^8 words); a VRF's /8
holding a route longer than /8 a table of 2^16 words, or of 2^8 in a trie of small VRFs
(level 1 of 8 bits: the DSR router's vrf_fib, 10M routes over 2^14 VRFs), which then has a
table of 2^8 for a /16 holding a route longer than /16; a /24 holding one longer than /24 a
table of 2^8; every table has a 64-byte header; a VRF field of 14 bits indexes an array of
2^14 pointers."""

from __future__ import annotations

import ipaddress

from bench import _l3fwd_work as work
from bench.bench_lpm_memory import DSR, load, write_entries
from tests.support import DPDK, build_with_server

pytestmark = DPDK

ROUTES = [(1, "10.0.0.0/8"), (1, "10.1.0.0/16"), (1, "10.1.2.0/24"), (1, "10.1.2.128/25"), (1, "11.0.0.0/8"),
          (2, "192.168.0.0/16"), (2, "172.16.0.0/12"), (2, "192.168.1.1/32"), (3, "10.1.2.0/24")]


def layout(routes: list[tuple[int, int, int]], stride1: int) -> tuple[int, int]:
    """(tables of 2^16 words, tables of 2^8 words: roots included) for IPv4 routes under VRFs,
    level 1 of ``stride1`` bits."""
    ends = [8, 16, 24] if stride1 == 8 else [8, 24]  # a level's table exists below each end a route passes
    tables = {(v, end, a >> (32 - end)) for v, a, length in routes for end in ends if length > end}
    big = {t for t in tables if t[1] == 8 and stride1 == 16}
    return len(big), len({(v,) for v, _, _ in routes}) + len(tables - big)


def test_the_trie_reports_the_tables_its_routes_need(tmp_path):
    routes = [(v, int(ipaddress.ip_network(p).network_address), ipaddress.ip_network(p).prefixlen)
              for v, p in ROUTES]
    # 10/8 in VRFs 1 and 3, 192/8 and 172/8 in VRF 2: 4 tables of 2^16 with a level 1 of 16 bits;
    # of 8 bits, those 4 of 2^8 and 10.1 (VRFs 1, 3), 192.168 (VRF 2); then 10.1.2, 192.168.1; 3 roots
    assert layout(routes, 16) == (4, 5) and layout(routes, 8) == (0, 12)
    out = build_with_server(str(DSR), tmp_path / "dsr", "--target", "dpdk")
    write_entries(routes, tmp_path / "routes.txt")
    with (tmp_path / "routes.txt").open("a") as f:  # the fabric's table: one trie, no VRF, a level 1 of 16 bits
        f.write("fabric_routes 0x0a000000/24 : 1 0x020000000002\n")
    work.write_pcap(tmp_path / "one.pcap", [work.dsr_frame(work.frame(0x0B000001, 0), 0)])
    counters = load(out / "server" / "nf", tmp_path / "routes.txt", tmp_path / "one.pcap", 512)
    assert counters["heap_bytes"] > 0  # the DPDK heap: the rules' rte_hash, the mbuf pools
    tables = counters["tables"]
    t = tables["vrf_fib"]
    assert t["entries"] == len(routes)
    assert t["trie_stride1"] == 8  # 10M routes over 2^14 VRFs: small ones
    assert t["trie_tables"] == list(layout(routes, 8))
    assert t["trie_bytes"] == (1 << 14) * 8 + 12 * (64 + 256 * 8)
    fabric = tables["fabric_routes"]
    assert fabric["trie_stride1"] == 16
    assert fabric["trie_tables"] == list(layout([(0, 0x0A000000, 24)], 16)) == [1, 1]
    assert fabric["trie_bytes"] == (64 + (1 << 16) * 8) + (64 + 256 * 8)
