"""The generated DPDK server program, built with Debian's DPDK and run as a real DPDK
process on net_pcap vdevs (--no-huge): its output must equal the server part of the
reference semantics (ServerReference) byte for byte, and its drops by reason too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.utils import RawPcapReader, RawPcapWriter

from bench._dpdk_proc import telemetry, telemetry_socket
from compiler.interp import Entry, Interpreter, Match
from emulator.switchmodel import SwitchModel
from emulator.switchmodel.server_ref import ServerReference
from tests.support import (
    DPDK,
    ROOT,
    build_example,
    compile_file,
    nfc_cli,
    nfc_run,
    reference_outputs,
    run_make,
)

pytestmark = DPDK

ROUTES = [(7, 42, 0xC0A8010A, 0xAC100505, 5000), (7, 43, 0xC0A8010A, 0xAC100506, 5001),
          (8, 42, 0xC0A80164, 0xAC100507, 77)]


def _run_pcap(binary, packets: list[bytes], work, entries: bool = True, env: dict[str, str] | None = None):
    """The server program ``binary`` on one net_pcap port fed ``packets`` (with
    ``work/entries.txt`` when ``entries``): its counters (the last stdout line) and what it sent."""
    with RawPcapWriter(str(work / "in.pcap"), linktype=1) as w:
        for x in packets:
            w.write(x)
    more = ["--", "--entries", str(work / "entries.txt")] if entries else []
    run = subprocess.run([str(binary), "--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--no-telemetry",
                          "--log-level=warning", "-l", "0",
                          f"--vdev=net_pcap0,rx_pcap={work / 'in.pcap'},tx_pcap={work / 'out.pcap'}", *more],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    counters = json.loads(run.stdout.strip().splitlines()[-1])
    return counters, [bytes(data) for data, _ in RawPcapReader(str(work / "out.pcap"))]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = build_example("examples/vpn_gateway.nfp", "tofino+dpdk", server=True)
    return out


def test_server_program_builds_warning_free(built):
    assert (built / "server/nf").is_file()  # -Wall -Wextra -Werror in the Makefile


def test_without_hugepages_the_packet_buffers_take_what_their_mbufs_need(built):
    """rte_pktmbuf_pool_create without hugepages keeps each mbuf within a 4 KiB page: one 2.3 KiB
    mbuf a page, at the same offset in each, which also puts a burst's mbufs in one L1 set
    (nfc_mbuf_pool, docs/server.md).  The server's EAL heap, read over DPDK's own telemetry, must
    hold less than that layout's pool alone would."""
    prefix = f"nfc-pool-{os.getpid()}"
    proc = subprocess.Popen([str(built / "server/nf"), "--no-huge", "-m", "256", "--no-pci", f"--file-prefix={prefix}",
                             "--log-level=warning", "-l", "0", "--vdev=net_null0,no-rx=1", "--", "--live"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sock = telemetry_socket(prefix)
        pool = jumbo = heap = None
        for _ in range(600):  # until both pools are made and filled (a pool is listed while it is filled)
            if sock.exists():
                pool, jumbo, heap = telemetry(sock, ["/mempool/info,nfc_mbufs", "/mempool/info,nfc_jumbo",
                                                     "/eal/heap_info,0"])
                if pool and jumbo and all(p["populated_size"] == p["size"] for p in (pool, jumbo)):
                    break
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.05)
        assert pool and jumbo and heap, (pool, jumbo, heap)
        assert pool["populated_size"] == pool["size"] == 8191, pool
        assert pool["flags"] & 0x20, pool  # RTE_MEMPOOL_F_NO_IOVA_CONTIG: packed end to end
        one_a_page = pool["size"] * 4096
        assert heap["Alloc_size"] < one_a_page, (heap, pool)
        # and the pool is in it: its mbufs at their element size, not less
        assert heap["Alloc_size"] > pool["size"] * (pool["elt_size"] + pool["header_size"])
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def test_every_artifact_in_the_plan_exists_and_the_server_builds_from_out_alone(built, tmp_path):
    plan = json.loads((built / "plan.json").read_text())
    for key, rel in {**plan["artifacts"], **plan["generated"]}.items():
        assert (built / rel).is_file(), key
    alone = tmp_path / "server"  # the server folder copied anywhere builds by itself
    shutil.copytree(built / "server", alone, ignore=shutil.ignore_patterns("nf", "nf-san", "nf-bench", "*.o"))
    r = subprocess.run(["make", "-j2", "-C", str(alone)], capture_output=True, text=True)  # built, not taken
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("binary", ["nf", "nf-san"])
def test_server_program_equals_the_reference(built, tmp_path, binary):
    """nf-san: the same program under ASan + UBSan; nothing is read past a packet's end."""
    if binary == "nf-san":
        r = run_make(built / "server", "nf-san")
        assert r.returncode == 0, r.stderr[-3000:]
    c = compile_file(str(ROOT / "examples/vpn_gateway.nfp"))
    switch = SwitchModel.from_build(built)
    ref = ServerReference(c.program, c.placement, c.bridges, c.targets.server_ports[0])
    lines = []
    for cu, ov, vm, host, vni in ROUTES:
        ref.tables["overlay_routes"].insert(Entry((Match(cu), Match(ov), Match(vm)), {"host_ip": host, "vni": vni}))
        lines.append(f"overlay_routes {cu} {ov} {vm} : {host} {vni}")
    (tmp_path / "entries.txt").write_text("\n".join(lines) + "\n")
    customer = [Ether(src="00:00:00:00:00:01") / Dot1AD(vlan=cu) / Dot1Q(vlan=ov) / IP(src="10.0.0.9", dst=dst)
                / UDP(sport=1000 + i) / (b"x" * i) for i, (cu, ov, dst) in enumerate(
                    [(7, 42, "192.168.1.10"), (7, 43, "192.168.1.10"), (8, 42, "192.168.1.100"),
                     (7, 42, "192.168.1.11"), (9, 9, "1.2.3.4")])]
    bridged = [switch.process(bytes(p), 1).data for p in customer]
    assert all(b[0] == 1 for b in bridged)
    no_ipv4 = bridged[0][:1] + bytes([bridged[0][1] & ~0x40]) + bridged[0][2:]  # required v_ipv4 bit clear
    # unknown cut, truncated, short bridge, a bridge without the ipv4 every packet has at this cut
    inputs = [*bridged, b"\x09garbage", bridged[0][:12], b"\x01", no_ipv4]
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1"}
    counters, got = _run_pcap(built / "server" / binary, inputs, tmp_path, env=env)
    want, drops = [], {}
    for x in inputs:
        o = ref.process(x)
        if o.kind == "forward":
            want.append(o.data)
        else:
            drops[o.reason] = drops.get(o.reason, 0) + 1
    assert got == want
    assert counters["drops"] == drops and counters["forwarded"] == len(want)
    assert drops == {"no_overlay_route": 2, "bad_bridge": 3, "truncated": 1}


def test_bluebird_cache_miss_path_on_the_server(tmp_path):
    """Packets missing the switch's CA→PA cache reach the server behind the miss-path bridge;
    the generated program answers them from the full table exactly as the reference does."""
    out = build_example("examples/bluebird_tor.nfp", "tofino+dpdk", server=True)
    c = compile_file(str(ROOT / "examples/bluebird_tor.nfp"))
    switch = SwitchModel.from_build(out)
    ref = ServerReference(c.program, c.placement, c.bridges, c.targets.server_ports[0])
    switch.tables["port_vrf"].insert(Entry((Match(1),), {"vrf": 9}))
    switch.tables["vrf_routes_v4"].insert(Entry((Match(9), Match(0xC0A80000, 16)),
                                                {"to_vnet": 1, "port": 5, "next_hop_mac": 1}))
    maps = [(0xC0A80005, 0x0A640204, 20500, 0x00122345A29F), (0xC0A80006, 0x0A640205, 20501, 0x00122345A2A0)]
    lines = []
    for ca, vtep, vni, mac in maps:
        ref.tables["ca_to_pa"].insert(Entry((Match(9), Match(ca)), {"vtep": vtep, "vni": vni, "vm_mac": mac}))
        lines.append(f"ca_to_pa 9 {ca} : {vtep} {vni} {mac}")
    (tmp_path / "entries.txt").write_text("\n".join(lines) + "\n")
    pkts = [Ether() / IP(src="10.0.0.1", dst=dst, ttl=9) / UDP() / b"bm" for dst in
            ("192.168.0.5", "192.168.0.6", "192.168.0.7")]
    bridged = [switch.process(bytes(p), 1).data for p in pkts]  # the cache is empty: every packet misses
    counters, got = _run_pcap(out / "server/nf", bridged, tmp_path)
    want = [o.data for o in (ref.process(x) for x in bridged) if o.kind == "forward"]
    assert len(want) == 2 and got == want
    assert counters["drops"] == {"no_mapping": 1}


def test_dsr_lpm_miss_path_matches_the_reference(tmp_path):
    """DSR's VRF FIB (exact VRF + LPM destination) on the server: random prefixes, packets
    that miss the (empty) switch cache; longest prefix per VRF as the reference says."""
    import random

    out = build_example("examples/dsr_router.nfp", "tofino+dpdk", server=True)
    c = compile_file(str(ROOT / "examples/dsr_router.nfp"))
    switch = SwitchModel.from_build(out)
    ref = ServerReference(c.program, c.placement, c.bridges, c.targets.server_ports[0])
    switch.tables["vni_to_vrf"].insert(Entry((Match(100),), {"vrf": 3}))
    rnd = random.Random(7)
    lines, seen = [], set()
    for i in range(60):
        plen = rnd.choice([0, 8, 16, 20, 24, 28, 32])
        net = rnd.getrandbits(32) & (((1 << plen) - 1) << (32 - plen) if plen else 0)
        vrf = rnd.choice([3, 4])
        if (vrf, net, plen) in seen:
            continue
        seen.add((vrf, net, plen))
        ref.tables["vrf_fib"].insert(Entry((Match(vrf), Match(net, plen)), {"tunnel_dst": 0x0A000000 + i,
                                                                             "tunnel_key": i}))
        lines.append(f"vrf_fib {vrf} {net}/{plen} : {0x0A000000 + i} {i}")
    (tmp_path / "entries.txt").write_text("\n".join(lines) + "\n")
    pkts = []
    for _ in range(200):
        net = rnd.choice(sorted(seen))[1] if rnd.random() < 0.7 else rnd.getrandbits(32)
        dst = net | rnd.getrandbits(8)
        inner = Ether() / IP(dst=".".join(str(dst >> s & 255) for s in (24, 16, 8, 0)), ttl=5) / b"t"
        from scapy.layers.vxlan import VXLAN

        pkts.append(Ether() / IP(dst="10.200.0.1") / UDP(dport=4789) / VXLAN(vni=100) / inner)
    bridged = [switch.process(bytes(p), 1) for p in pkts]
    to_server = [o.data for o in bridged if o.kind == "forward" and o.port in c.targets.server_ports]
    assert len(to_server) == len(pkts)
    counters, got = _run_pcap(out / "server/nf", to_server, tmp_path)
    outs = [ref.process(x) for x in to_server]
    want = [o.data for o in outs if o.kind == "forward"]
    assert got == want and len(want) > 50
    assert counters["drops"] == ({"no_route": len(pkts) - len(want)} if len(want) < len(pkts) else {})


def test_target_dpdk_alone_gives_the_reference_outputs(tmp_path):
    """--target dpdk: every stage on the server, raw packets on logical ports (one net_pcap
    vdev per port); outputs per egress port equal the unsplit reference semantics."""
    from scapy.layers.vxlan import VXLAN

    from compiler.interp import Interpreter

    out = tmp_path / "sw"
    # every packet on the server's own 40G NIC at the deployment's 15 Mpps (61.44 Gbit/s) is E081 without the flag
    r = nfc_cli("build", "examples/vpn_gateway.nfp", "--target", "dpdk",
                        "--allow-overcommit", "-o", str(out))
    assert r.returncode == 0, r.stderr
    r = run_make(out / "server")
    assert r.returncode == 0, r.stderr[-3000:]
    spec = Interpreter(compile_file(str(ROOT / "examples/vpn_gateway.nfp"), "dpdk", allow_overcommit=True).program)
    rows = {"overlay_routes": [((7, 42, 0xC0A8010A), (0xAC100505, 5000)), ((7, 43, 0xC0A8010A), (0xAC100506, 5001))],
            "underlay_routes": [((0xAC100000, 16), (21, 0x020000000099)), ((0xAC100500, 24), (22, 0x020000000098))],
            "vni_to_qinq": [((5000,), (7, 42, 4))]}
    lines = []
    for table, entries in rows.items():
        t = spec.program.tables[table]
        for keys, values in entries:
            if t.match == "lpm":
                spec.tables[table].insert(Entry((Match(keys[0], keys[1]),), dict(zip([v.name for v in t.values], values,
                                                                                     strict=True))))
                lines.append(f"{table} {keys[0]}/{keys[1]} : {' '.join(map(str, values))}")
            else:
                spec.tables[table].insert(Entry(tuple(Match(k) for k in keys),
                                                dict(zip([v.name for v in t.values], values, strict=True))))
                lines.append(f"{table} {' '.join(map(str, keys))} : {' '.join(map(str, values))}")
    (tmp_path / "entries.txt").write_text("\n".join(lines) + "\n")
    inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(dst="8.8.8.8") / b"x"
    customer = [Ether() / Dot1AD(vlan=7) / Dot1Q(vlan=v) / IP(dst="192.168.1.10") / UDP() / b"c" for v in (42, 43, 44)]
    inputs = {1: [*customer, Ether() / Dot1Q(vlan=1) / IP()],
              17: [Ether() / IP(dst="10.255.0.1") / UDP(dport=4789) / VXLAN(vni=n) / inner for n in (5000, 9)]}
    def run(ports: list[int]) -> dict[str, object]:
        """nf with DPDK port i as logical port ports[i]: its counters."""
        vdevs = []
        for i, lp in enumerate(ports):
            with RawPcapWriter(str(tmp_path / f"in{lp}.pcap"), linktype=1) as w:
                for pkt in inputs.get(lp, []):
                    w.write(bytes(pkt))
            vdevs.append(f"--vdev=net_pcap{i},rx_pcap={tmp_path / f'in{lp}.pcap'},tx_pcap={tmp_path / f'out{lp}.pcap'}")
        r = subprocess.run([str(out / "server/nf"), "--no-huge", "-m", "256", "--no-pci", "--no-shconf",
                            "--no-telemetry", "--log-level=warning", "-l", "0", *vdevs, "--",
                            "--entries", str(tmp_path / "entries.txt"), "--ports", ",".join(map(str, ports))],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    def sent(lp: int) -> list[bytes]:
        return [bytes(d) for d, _ in RawPcapReader(str(tmp_path / f"out{lp}.pcap"))]

    ports = [1, 17, 21, 22, 4]
    counters = run(ports)
    want: dict[int, list[bytes]] = {}
    drops: dict[str, int] = {}
    for lp, pkts in inputs.items():
        for pkt in pkts:
            o = spec.process(bytes(pkt), lp)
            if o.kind == "forward":
                want.setdefault(o.port, []).append(o.data)
            else:
                drops[o.reason] = drops.get(o.reason, 0) + 1
    for lp in ports:
        assert sent(lp) == want.get(lp, []), lp
    assert counters["drops"] == drops
    assert sum(len(v) for v in want.values()) == 3 and set(want) == {22, 4}
    # logical port 4 on no DPDK port: what leaves by it is dropped and counted as server_no_port, the rest as before
    (tmp_path / "out22.pcap").unlink()
    counters = run([1, 17, 21, 22])
    assert sent(22) == want[22]
    assert counters["drops"] == {**drops, "server_no_port": len(want[4])}


def test_a_logical_port_leaves_by_the_first_dpdk_port_that_carries_it_through_the_map_and_the_search(tmp_path):
    """nf --ports: a logical egress port's DPDK port comes from a map below 1,024 (its last slot,
    1023, too) and from a search of the DPDK ports from 1,024 on (nfc_main.c's out_port); either
    way, of two DPDK ports given the same logical port the first one sends, and a logical port no
    DPDK port carries is server_no_port.  The frames each port sends are the reference
    interpreter's."""
    from compiler.interp import Interpreter

    nfp = tmp_path / "far_ports.nfp"
    src = (ROOT / "bench/l3fwd.nfp").read_text()
    assert src.count("ports all = [0..15];") == 1
    nfp.write_text(src.replace("ports all = [0..15];", "ports all = [0..2047];"))
    out = tmp_path / "out"
    r = nfc_cli("build", str(nfp), "--target", "dpdk", "--no-verify",
                        "-o", str(out))
    assert r.returncode == 0, r.stderr
    r = run_make(out / "server")
    assert r.returncode == 0, r.stderr[-3000:]
    spec = Interpreter(compile_file(str(nfp), "dpdk").program)
    mac = 0x020000000042
    routes = {10: 5, 20: 1500, 30: 7, 40: 1600, 50: 1023, 60: 1024}  # first octet of a /8 -> logical egress port
    lines = []
    for octet, port in routes.items():
        spec.tables["routes"].insert(Entry((Match(octet << 24, 8),), {"port": port, "next_hop_mac": mac}))
        lines.append(f"routes {octet << 24}/8 : {port} {mac}")
    (tmp_path / "entries.txt").write_text("\n".join(lines) + "\n")
    packets = [bytes(Ether() / IP(dst=f"{octet}.0.0.{i}", ttl=9) / UDP() / b"x") for octet in routes for i in (1, 2)]
    with RawPcapWriter(str(tmp_path / "in.pcap"), linktype=1) as w:
        for x in packets:
            w.write(x)
    ports = [0, 5, 5, 1500, 1500, 1023, 1024]  # DPDK port i is logical port ports[i]; 7 and 1600 are on none
    vdevs = [f"--vdev=net_pcap{i},rx_pcap={tmp_path / ('in.pcap' if i == 0 else 'none.pcap')},"
             f"tx_pcap={tmp_path / f'out{i}.pcap'}" for i in range(len(ports))]
    with RawPcapWriter(str(tmp_path / "none.pcap"), linktype=1):
        pass
    r = subprocess.run([str(out / "server/nf"), "--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--no-telemetry",
                        "--log-level=warning", "-l", "0", *vdevs, "--", "--entries", str(tmp_path / "entries.txt"),
                        "--ports", ",".join(map(str, ports))], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    counters = json.loads(r.stdout.strip().splitlines()[-1])
    want: dict[int, list[bytes]] = {}
    for x in packets:
        o = spec.process(x, 0)
        assert o.kind == "forward"
        want.setdefault(o.port, []).append(o.data)
    assert sorted(want) == [5, 7, 1023, 1024, 1500, 1600] and all(len(v) == 2 for v in want.values())
    sent = [[bytes(d) for d, _ in RawPcapReader(str(tmp_path / f"out{i}.pcap"))] for i in range(len(ports))]
    assert sent == [[], want[5], [], want[1500], [], want[1023], want[1024]]
    assert counters["forwarded"] == 8
    assert counters["drops"] == {"server_no_port": len(want[7]) + len(want[1600])}


def test_cgnat_state_on_the_server(tmp_path):
    """CGNAT mappings created by the generated program (port allocation, two state tables,
    RFC 1624 checksum updates) and used by later packets, in the reference's order."""
    from scapy.layers.inet import TCP

    out = build_example("examples/cgnat.nfp", "tofino+dpdk", server=True)
    c = compile_file(str(ROOT / "examples/cgnat.nfp"))
    switch = SwitchModel.from_build(out)
    ref = ServerReference(c.program, c.placement, c.bridges, c.targets.server_ports[0])
    switch.tables["subnet_to_external"].insert(Entry((Match(0x0A000000, 8),), {"ext_ip": 0xC6336401}))
    inside = [Ether() / IP(src="10.0.0.5", dst="93.184.216.34") / TCP(sport=40000, dport=443, flags="S") / b"hi",
              Ether() / IP(src="10.0.0.5", dst="93.184.216.34") / TCP(sport=40000, dport=443, flags="A") / b"again",
              Ether() / IP(src="10.0.0.6", dst="8.8.8.8") / UDP(sport=5353, dport=53) / b"dns"]
    outside = [Ether() / IP(src="93.184.216.34", dst="198.51.100.1") / TCP(sport=443, dport=1024, flags="SA"),
               Ether() / IP(src="8.8.8.8", dst="198.51.100.1") / UDP(sport=53, dport=1025) / b"answer",
               Ether() / IP(src="6.6.6.6", dst="198.51.100.1") / UDP(sport=1, dport=2000) / b"unsolicited"]
    bridged = [switch.process(bytes(Ether(bytes(p))), 1).data for p in inside] + \
              [switch.process(bytes(Ether(bytes(p))), 25).data for p in outside]
    counters, got = _run_pcap(out / "server/nf", bridged, tmp_path, entries=False)
    outs = [ref.process(x) for x in bridged]
    assert got == [o.data for o in outs if o.kind == "forward"]
    assert [o.kind for o in outs] == ["forward"] * 5 + ["drop"]
    assert counters["drops"] == {"no_mapping": 1}


def test_a_sub_second_state_timeout_is_not_truncated_to_zero(tmp_path):
    """A table's ``timeout = 1500ms`` is 1,500,000,000 ns in the generated insert (it was
    int(1.5) s = 1 s; ``1ms`` became 0 and every entry expired at once)."""
    src = tmp_path / "t.nfp"
    src.write_text((ROOT / "tests/corpus/flow_state.nfp").read_text().replace("timeout = 120s;", "timeout = 1500ms;"))
    out = tmp_path / "build"
    r = nfc_cli("build", str(src), "-o", str(out), "--target", "dpdk",
                        "--no-verify")
    assert r.returncode == 0, r.stderr
    nf = (out / "server/nf.c").read_text()
    assert f", {1_500_000_000:#x}ull)" in nf  # nfc_state_insert's timeout; the C printer writes large constants in hex


def test_cgnat_gives_ports_on_more_external_addresses_than_the_old_256_pools(tmp_path):
    """300 subscribers, each mapped to its own external address: the spec allocates port 1024
    on each; the server used to cap the pools at 256 (the 257th got ports_exhausted)."""
    from scapy.layers.inet import TCP

    out = build_example("examples/cgnat.nfp", "tofino+dpdk", "--no-verify")
    c = compile_file(str(ROOT / "examples/cgnat.nfp"))
    n = 300
    subs = [Entry((Match(0x0A010000 + i, 32),), {"ext_ip": 0xC6336400 + i}) for i in range(n)]
    route = Entry((Match(0, 0),), {"port": 24, "next_hop_mac": 0x020000000099})
    pkts = [bytes(Ether() / IP(src=f"10.1.{i >> 8}.{i & 255}", dst="93.184.216.34") / TCP(sport=40000, dport=443)
                  / b"x") for i in range(n)]
    spec = Interpreter(c.program)
    for e in subs:
        spec.tables["subnet_to_external"].insert(e)
    spec.tables["upstream_routes"].insert(route)
    want = reference_outputs(spec, {1: pkts})
    assert sum(want[0][24].values()) == n and not want[1]  # every one forwarded, on its own address
    entries = {"subnet_to_external": [{"match": {"ipv4_src": f"{e.key[0].value}/32"}, "values": e.values}
                                      for e in subs],
               "upstream_routes": [{"match": {"ipv4_dst": "0/0"}, "values": route.values}]}
    assert nfc_run(out, entries, {1: pkts}, tmp_path / "run") == want


def _one_route(built, tmp_path) -> tuple[SwitchModel, ServerReference, tuple[int, int]]:
    """The VPN gateway's switch model and server reference with ROUTES[0] in overlay_routes, the
    same route in tmp_path/entries.txt, and the route's customer and overlay VLANs."""
    c = compile_file(str(ROOT / "examples/vpn_gateway.nfp"))
    switch = SwitchModel.from_build(built)
    ref = ServerReference(c.program, c.placement, c.bridges, c.targets.server_ports[0])
    cu, ov, vm, host, vni = ROUTES[0]
    ref.tables["overlay_routes"].insert(Entry((Match(cu), Match(ov), Match(vm)), {"host_ip": host, "vni": vni}))
    (tmp_path / "entries.txt").write_text(f"overlay_routes {cu} {ov} {vm} : {host} {vni}\n")
    return switch, ref, (cu, ov)


def test_jumbo_frames_cross_the_server_whole(built, tmp_path):
    """Frames of 2,049 to 9,000 payload bytes (over one 2 KiB mbuf) are encapsulated like any
    other, as the reference does; they were dropped as server_no_buffer (multi-segment)."""
    switch, ref, (cu, ov) = _one_route(built, tmp_path)
    customer = [Ether(src="00:00:00:00:00:01") / Dot1AD(vlan=cu) / Dot1Q(vlan=ov)
                / IP(src="10.0.0.9", dst="192.168.1.10") / UDP(sport=1000) / (bytes(range(256)) * 36)[:n]
                for n in (1400, 1990, 2049, 4000, 9000)]  # 1990: one 2 KiB mbuf in, too big for one out
    inputs = [switch.process(bytes(p), 1).data for p in customer]
    _counters, got = _run_pcap(built / "server/nf", inputs, tmp_path)
    want = [ref.process(x) for x in inputs]
    assert all(o.kind == "forward" for o in want) and len(want[-1].data) > 9000
    assert got == [o.data for o in want]


def _max_pkt() -> int:
    """The most bytes a packet the server sends may have: NFC_MAX_PKT in the runtime's header."""
    text = (ROOT / "targets/dpdk/runtime/nfc_rt.h").read_text()
    return int(next(line.split()[2] for line in text.splitlines() if line.startswith("#define NFC_MAX_PKT ")))


def test_a_frame_the_stages_grow_past_the_largest_packet_is_dropped_as_server_no_buffer(built, tmp_path):
    """The VPN gateway's server part encapsulates (VXLAN behind outer Ethernet, IPv4 and UDP):
    a frame that comes in under NFC_MAX_PKT but would leave one byte over it has no buffer to
    leave in, and is dropped and counted as server_no_buffer (the output loop's drops[0]); one
    that would leave at exactly NFC_MAX_PKT is sent as the reference makes it."""
    switch, ref, (cu, ov) = _one_route(built, tmp_path)

    def to_server(n: int) -> bytes:
        frame = (Ether(src="00:00:00:00:00:01") / Dot1AD(vlan=cu) / Dot1Q(vlan=ov)
                 / IP(src="10.0.0.9", dst="192.168.1.10") / UDP(sport=1000) / (bytes(range(256)) * 40)[:n])
        return switch.process(bytes(frame), 1).data

    assert _max_pkt() == 9216  # the jumbo frame docs/server.md gives
    grows = len(ref.process(to_server(1000)).data) - 1000  # what the server adds to n bytes of UDP payload
    fits = _max_pkt() - grows
    inputs = [to_server(fits), to_server(fits + 1)]
    want = [ref.process(x) for x in inputs]
    assert [o.kind for o in want] == ["forward", "forward"]
    assert [len(o.data) for o in want] == [_max_pkt(), _max_pkt() + 1]
    assert max(map(len, inputs)) < _max_pkt()  # both arrive whole (a jumbo mbuf)
    counters, got = _run_pcap(built / "server/nf", inputs, tmp_path)
    assert got == [want[0].data]
    assert counters["drops"] == {"server_no_buffer": 1} and counters["forwarded"] == 1
