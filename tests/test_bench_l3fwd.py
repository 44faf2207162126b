"""The pure parts of bench/bench_l3fwd.py, against oracles of their own: the route sets (shape,
determinism, masking by the ipaddress module), the flows (every destination routed, by an LPM
over ipaddress networks), the frames (dissected by scapy), the files each program loads, the
schedstat parser (against the thread CPU clock) and the window arithmetic; and, where DPDK is
installed, bench/l3fwd.nfp's server on a pcap: it must route, rewrite and drop as l3fwd does.
The benchmark itself is `python3 build.py bench`."""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN
from scapy.utils import RawPcapReader

from bench import _l3fwd_work as work
from bench._dpdk_proc import Sample, parse_schedstat, window_between
from compiler.manifest import load_plan
from runtime.server_proc import eal_args
from tests.support import build_example, needs_dpdk

Net = ipaddress.IPv4Network


def networks(routes: list[work.Route]) -> dict[int, set[Net]]:
    """The routes as ipaddress networks by prefix length; strict: host bits set would raise."""
    by_len: dict[int, set[Net]] = {}
    for r in routes:
        by_len.setdefault(r.length, set()).add(Net(f"{ipaddress.IPv4Address(r.network)}/{r.length}"))
    return by_len


def longest_match(by_len: dict[int, set[Net]], addr: int) -> Net | None:
    """LPM the slow, obvious way: the longest of the networks holding ``addr``."""
    for length in sorted(by_len, reverse=True):
        net = Net((addr, length), strict=False)
        if net in by_len[length]:
            return net
    return None


def scapy_checksum(ip_header: bytes) -> int:
    """The RFC 1071 header checksum as scapy computes it for an IPv4 header."""
    p = IP(ip_header)
    p.chksum = None
    return int(IP(bytes(p)).chksum)


def test_route_set_has_the_bgp_shape() -> None:
    n = 20_000
    routes = work.route_set(n)
    by_len = networks(routes)
    lengths = Counter(r.length for r in routes)
    assert len(routes) == n == sum(len(s) for s in by_len.values())  # distinct
    assert abs(lengths[24] / n - 0.60) < 0.001
    assert set(lengths) <= set(range(8, 25)) and min(lengths) <= 13
    assert lengths[22] + lengths[23] > lengths[16] + lengths[17] + lengths[18]  # the long tail is short
    for net in set().union(*by_len.values()):
        first = int(net.network_address) >> 24
        assert 1 <= first <= 223 and first != 127, net


def test_route_set_is_the_same_for_the_same_size_and_seed() -> None:
    assert work.route_set(3000) == work.route_set(3000)
    assert work.route_set(3000, seed=1) != work.route_set(3000)
    assert work.flow_destinations(work.route_set(3000)) == work.flow_destinations(work.route_set(3000))


def test_length_counts_sum_to_the_size_with_shares_summing_to_one() -> None:
    assert sum(work.LENGTH_SHARES.values()) == pytest.approx(1.0)
    for n in (1, 999, 1000, 1_000_000):
        assert sum(work.length_counts(n).values()) == n


@pytest.mark.parametrize("n", [1000, 50_000])
def test_every_flow_destination_has_a_route(n: int) -> None:
    """4,096 distinct destinations, more than the routes or fewer, each with a route by an LPM
    independent of the generator."""
    routes = work.route_set(n)
    by_len = networks(routes)
    dests = work.flow_destinations(routes)
    assert len(dests) == len(set(dests)) == work.FLOWS
    assert all(longest_match(by_len, d) is not None for d in dests)
    hit = {longest_match(by_len, d) for d in dests}
    assert len(hit) >= min(n, work.FLOWS) * 0.9  # spread over the routes, not a few of them


def test_frames_are_64_byte_udp_in_ipv4_to_the_flow_destination() -> None:
    dests = work.flow_destinations(work.route_set(1000))[:50]
    for i, d in enumerate(dests):
        raw = work.frame(d, i)
        pkt = Ether(raw)
        assert len(raw) == work.FRAME_BYTES
        assert pkt[IP].dst == str(ipaddress.IPv4Address(d)) and pkt[IP].ttl > 1 and pkt[IP].ihl == 5
        assert pkt[IP].len == len(raw) - 14 and UDP in pkt
        assert pkt[IP].chksum == scapy_checksum(raw[14:34])


def test_dsr_frames_carry_the_same_frame_in_vxlan_to_the_tenant() -> None:
    inner = work.frame(0x0A010203, 7)
    pkt = Ether(work.dsr_frame(inner, 7))
    assert pkt[UDP].dport == 4789 and pkt[VXLAN].vni == work.DSR_VNI and pkt[VXLAN].flags & 0x08
    assert bytes(pkt[VXLAN].payload) == inner
    assert pkt[IP].chksum == scapy_checksum(bytes(pkt[IP])[:20])


def test_route_files_say_the_same_routes(tmp_path: Path) -> None:
    """l3fwd's rule file, bench/l3fwd.nfp's entries and DSR's FIB entries name the same prefixes,
    each to the output port; every DSR tunnel endpoint has a fabric route."""
    routes = work.route_set(1000)
    want = {(r.network, r.length) for r in routes}
    work.l3fwd_rules(routes, tmp_path / "l3fwd")
    work.nfc_entries(routes, tmp_path / "nfc")
    work.dsr_entries(routes, tmp_path / "dsr")
    l3fwd = [re.fullmatch(r"R(\S+)/(\d+) (\d+)", line).groups()  # type: ignore[union-attr]
             for line in (tmp_path / "l3fwd").read_text().splitlines()]
    assert {(int(ipaddress.IPv4Address(a)), int(n)) for a, n, _ in l3fwd} == want
    assert {int(p) for *_, p in l3fwd} == {work.OUT_PORT}
    nfc = [line.split() for line in (tmp_path / "nfc").read_text().splitlines()]
    assert {(int(k.split("/")[0], 0), int(k.split("/")[1])) for _, k, *_ in nfc} == want
    assert {int(v[3]) for v in nfc} == {work.OUT_PORT} and {v[0] for v in nfc} == {"routes"}
    dsr = [line.split() for line in (tmp_path / "dsr").read_text().splitlines()]
    fib = [v for v in dsr if v[0] == "vrf_fib"]
    fabric = {Net((int(k.split("/")[0], 0), int(k.split("/")[1]))) for t, k, *_ in dsr if t == "fabric_routes"}
    assert {(int(k.split("/")[0], 0), int(k.split("/")[1])) for _, _, k, *_ in fib} == want
    assert {int(v[1]) for v in fib} == {work.DSR_VRF}
    assert all(any(ipaddress.IPv4Address(int(v[4], 0)) in f for f in fabric) for v in fib)
    assert [v for v in dsr if v[0] == "vni_to_vrf"] == [["vni_to_vrf", str(work.DSR_VNI), ":", str(work.DSR_VRF)]]


def test_schedstat_parser_reads_the_run_time() -> None:
    assert parse_schedstat("123456 789 10\n") == 123456
    for bad in ("", "1 2", "1 2 x", "1 2 3 4"):
        with pytest.raises(ValueError):
            parse_schedstat(bad)


def test_schedstat_run_time_follows_the_thread_cpu_clock() -> None:
    """The run time /proc gives a thread agrees with CLOCK_THREAD_CPUTIME_ID over busy work, while
    another thread of the process spins too (the figure is per thread, not per process)."""
    path = Path(f"/proc/self/task/{threading.get_native_id()}/schedstat")
    if not path.exists():
        pytest.skip("no schedstat (kernel without CONFIG_SCHED_INFO)")
    stop = threading.Event()
    other = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)])
    other.start()
    try:
        a, ca = parse_schedstat(path.read_text()), time.thread_time_ns()
        while time.thread_time_ns() - ca < 100_000_000:
            pass
        b, cb = parse_schedstat(path.read_text()), time.thread_time_ns()
    finally:
        stop.set()
        other.join()
    assert (b - a) == pytest.approx(cb - ca, rel=0.1)


def test_window_is_the_busiest_threads_cpu_time() -> None:
    a = Sample(10.0, offered=1000, forwarded=900, returned=0, run_ns={1: 5, 2: 100, 3: 7})
    b = Sample(12.0, offered=5_001_000, forwarded=4_000_900, returned=10, run_ns={1: 6, 2: 1_000_000_100, 3: 7, 4: 9})
    w = window_between(a, b)
    assert (w.thread, w.cpu_s, w.wall_s) == (2, 1.0, 2.0)
    assert (w.offered, w.forwarded, w.returned) == (5_000_000, 4_000_000, 10)
    assert (w.mpps_cpu, w.mpps_wall) == (4.0, 2.0)



def routed(frame: bytes, next_hop: int) -> bytes:
    """What a router does to ``frame`` (RFC 1812 §5.3.1 TTL - 1, RFC 1071 checksum, both computed by
    scapy) sending it to ``next_hop`` from bench/l3fwd.nfp's ROUTER_MAC."""
    p = Ether(frame)
    p.dst = ":".join(f"{b:02x}" for b in next_hop.to_bytes(6, "big"))
    p.src = "02:00:00:00:00:01"
    p[IP].ttl -= 1
    p[IP].chksum = None
    return bytes(p)


def malformed(good: bytes) -> dict[str, bytes]:
    """One frame per reason bench/l3fwd.nfp drops for (checksums right, so only the named fault)."""
    def ip(**kw: int) -> bytes:
        p = Ether(good)
        for k, v in kw.items():
            setattr(p[IP], k, v)
        p[IP].chksum = None
        return bytes(p)
    return {"not_ipv4": good[:12] + b"\x08\x06" + good[14:], "no_route": ip(dst=0xF0000001),
            "bad_ipv4_header": ip(version=6), "ipv4_options": ip(ihl=6), "bad_ipv4_length": ip(len=19)}


@needs_dpdk
def test_l3fwd_nfp_routes_rewrites_and_drops_as_l3fwd_does(tmp_path: Path) -> None:
    """The benchmark's .nfp, built for DPDK and loaded with the benchmark's entries file: every
    flow leaves by the route's port with the longest match's next hop (an LPM over ipaddress),
    TTL - 1 and a right checksum; what l3fwd's RFC 1812 checks refuse is dropped by name."""
    out = build_example("bench/l3fwd.nfp", "dpdk")
    server = load_plan(out).path(out, "server_makefile").parent
    subprocess.run(["make", "-C", str(server), "-j2", "nf"], check=True, capture_output=True)
    routes = work.route_set(1000)
    by_len, index = networks(routes), {Net((r.network, r.length)): i for i, r in enumerate(routes)}
    dests = work.flow_destinations(routes)[:300]
    frames = [work.frame(d, i) for i, d in enumerate(dests)]
    bad = malformed(frames[0])
    work.write_pcap(tmp_path / "in.pcap", [*frames, *bad.values()])
    work.nfc_entries(routes, tmp_path / "entries.txt", per_route_macs=True)
    vdevs = [f"net_pcap0,rx_pcap={tmp_path / 'in.pcap'}", f"net_pcap{work.OUT_PORT},tx_pcap={tmp_path / 'out.pcap'}"]
    # run to the end of the pcap (a control client could connect only after a short input ended)
    run = subprocess.run([str(server / "nf"), *eal_args("0", 256), *[f"--vdev={v}" for v in vdevs], "--",
                          "--entries", str(tmp_path / "entries.txt")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    counters = json.loads(run.stdout.strip().splitlines()[-1])
    got = [bytes(d) for d, _ in RawPcapReader(str(tmp_path / "out.pcap"))]
    want = [routed(f, work.next_hop_mac(index[longest_match(by_len, d)]))  # type: ignore[index]
            for f, d in zip(frames, dests, strict=True)]
    assert got == want
    assert counters["drops"] == {reason: 1 for reason in bad}
