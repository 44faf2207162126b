"""``nfc run``: the switch model and the real DPDK server program together turn scapy-built
customer packets into the right VXLAN packets and cloud VXLAN into QinQ, with 100K overlay
routes loaded; expected packets are built with scapy here, never copied from the output."""

from __future__ import annotations

import json
import sqlite3
import subprocess

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.utils import rdpcap, wrpcap

from tests.support import (
    DPDK,
    GW_IP,
    L3_HEAD,
    NH_MAC,
    VPN_ENTRIES,
    build_example,
    expected_vxlan,
    needs_redis,
    nfc_cli,
    nfc_run,
    write,
)

pytestmark = DPDK

N_ROUTES = 100_000


def test_nfc_run_vpn_gateway_both_directions(tmp_path):
    out = build_example("examples/vpn_gateway.nfp", "tofino+dpdk")
    # 100K overlay routes: customer 1..10, overlay 1..100, VM 192.168.<o>.<k>; host 172.16.<c>.<k>, VNI c*1000+o
    routes = [{"match": {"meta_customer": c, "meta_overlay": o, "vm_ip": f"192.168.{o}.{k}"},
               "values": {"host_ip": f"172.16.{c}.{k}", "vni": c * 1000 + o}}
              for c in range(1, 11) for o in range(1, 101) for k in range(1, 101)]
    assert len(routes) == N_ROUTES
    entries = {"overlay_routes": routes,
               "underlay_routes": [{"match": {"outer_ipv4_dst": "172.16.0.0/16"},
                                    "values": {"port": 21, "next_hop_mac": NH_MAC}}],
               "vni_to_qinq": [{"match": {"vxlan_vni": 3007}, "values": {"s_tag": 3, "c_tag": 7, "port": 4}}]}
    (tmp_path / "entries.json").write_text(json.dumps(entries))
    customer = [Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / Dot1AD(vlan=c) / Dot1Q(vlan=o)
                / IP(src="192.168.200.1", dst=f"192.168.{o}.{k}") / UDP(sport=7, dport=9) / b"to the cloud"
                for c, o, k in ((1, 1, 1), (10, 100, 100), (5, 42, 17))]
    unknown = Ether() / Dot1AD(vlan=5) / Dot1Q(vlan=42) / IP(dst="192.168.42.200") / b"no such VM"
    wrpcap(str(tmp_path / "customer.pcap"), [*customer, unknown])
    inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(src="192.168.7.9", dst="10.1.1.1") / b"hi"
    cloud = Ether() / IP(src="172.16.3.9", dst=GW_IP) / UDP(sport=1, dport=4789) / VXLAN(vni=3007) / inner
    wrpcap(str(tmp_path / "cloud.pcap"), [cloud])
    r = nfc_cli("run", str(out), "--entries", str(tmp_path / "entries.json"),
                        "--inject", f"1={tmp_path / 'customer.pcap'}", "--inject", f"17={tmp_path / 'cloud.pcap'}",
                        "--capture", str(tmp_path / "cap"))
    assert r.returncode == 0, r.stderr[-3000:]
    got21 = [bytes(p) for p in rdpcap(str(tmp_path / "cap/port-21.pcap"))]
    want21 = [expected_vxlan(p, f"172.16.{c}.{k}", c * 1000 + o)
              for p, (c, o, k) in zip(customer, ((1, 1, 1), (10, 100, 100), (5, 42, 17)), strict=True)]
    assert got21 == want21
    got4 = [bytes(p) for p in rdpcap(str(tmp_path / "cap/port-4.pcap"))]
    assert got4 == [bytes(Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / Dot1AD(vlan=3) / Dot1Q(vlan=7)
                          / inner[IP])]
    counters = json.loads((tmp_path / "cap/counters.json").read_text())
    assert counters["drops"] == {"server:no_overlay_route": 1}


def test_server_alone_runs_on_its_logical_ports_and_capture_starts_empty(tmp_path):
    """``--target dpdk``: nfc run starts the DPDK program alone (no switch model), the packets
    of each input port enter on that logical port and leave by their egress port; a second
    run into the same capture folder leaves no file of the first behind; --live needs a switch."""
    out = build_example("examples/vpn_gateway.nfp", "dpdk", "--no-verify", "--allow-overcommit")
    (tmp_path / "entries.json").write_text(json.dumps(VPN_ENTRIES))
    customer = (Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / Dot1AD(vlan=5) / Dot1Q(vlan=42)
                / IP(src="192.168.200.1", dst="192.168.42.17") / UDP(sport=7, dport=9) / b"to the cloud")
    wrpcap(str(tmp_path / "customer.pcap"), [customer, customer])
    inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(src="192.168.7.9", dst="10.1.1.1") / b"hi"
    wrpcap(str(tmp_path / "cloud.pcap"), [Ether() / IP(dst=GW_IP) / UDP(dport=4789) / VXLAN(vni=3007) / inner])
    cap = tmp_path / "cap"

    def run(*injects: str, live: bool = False) -> subprocess.CompletedProcess[str]:
        args = [a for i in injects for a in ("--inject", i)] + (["--live"] if live else [])
        return nfc_cli("run", str(out), "--entries",
                               str(tmp_path / "entries.json"), *args, "--capture", str(cap), "--json")

    r = run(f"3={tmp_path / 'customer.pcap'}", f"17={tmp_path / 'cloud.pcap'}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert [bytes(p) for p in rdpcap(str(cap / "port-21.pcap"))] == [expected_vxlan(customer, "172.16.5.17", 5042)] * 2
    want_qinq = Ether(src=inner.src, dst=inner.dst) / Dot1AD(vlan=3) / Dot1Q(vlan=7) / inner[IP]
    assert [bytes(p) for p in rdpcap(str(cap / "port-4.pcap"))] == [bytes(want_qinq)]
    assert json.loads(r.stdout)["egress_packets"] == {"21": 2, "4": 1}
    r = run(f"17={tmp_path / 'cloud.pcap'}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in cap.glob("port-*.pcap")) == ["port-4.pcap"]
    r = run(f"17={tmp_path / 'cloud.pcap'}", live=True)
    assert r.returncode == 1 and "has no switch program" in r.stderr


@pytest.mark.parametrize("store", ["sqlite", pytest.param("redis", marks=needs_redis)])
def test_a_run_with_the_goal_file_of_an_earlier_one_forwards_as_it_did_without_its_entries(tmp_path, request, store):
    """``--goal FILE``: the entries a run wrote are kept in FILE (SQLite), or in a Redis (a
    unix:// URL: a store gateways share); a later run with the same goal and no entries brings
    its fresh data plane to them first (Runtime.reconcile) and forwards the same packets the
    same way; without it, it has no route.  A file that is not a goal store, or a store that
    cannot be reached, is refused with a message, not a traceback."""
    out = build_example("examples/vpn_gateway.nfp", "dpdk", "--no-verify", "--allow-overcommit")
    entries = {"overlay_routes": [{"match": {"meta_customer": 5, "meta_overlay": 42, "vm_ip": "192.168.42.17"},
                                   "values": {"host_ip": "172.16.5.17", "vni": 5042}}],
               "underlay_routes": [{"match": {"outer_ipv4_dst": "172.16.0.0/16"},
                                    "values": {"port": 21, "next_hop_mac": NH_MAC}}]}
    (tmp_path / "entries.json").write_text(json.dumps(entries))
    customer = (Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / Dot1AD(vlan=5) / Dot1Q(vlan=42)
                / IP(src="192.168.200.1", dst="192.168.42.17") / UDP(sport=7, dport=9) / b"to the cloud")
    wrpcap(str(tmp_path / "customer.pcap"), [customer])
    cap = tmp_path / "cap"
    goal = str(tmp_path / "goal.sqlite") if store == "sqlite" else request.getfixturevalue("redis_url")

    def run(*more: str) -> subprocess.CompletedProcess[str]:
        return nfc_cli("run", str(out), "--inject",
                               f"3={tmp_path / 'customer.pcap'}", "--capture", str(cap), "--json", *more)

    want = [expected_vxlan(customer, "172.16.5.17", 5042)]
    r = run("--entries", str(tmp_path / "entries.json"), "--goal", str(goal))
    assert r.returncode == 0, r.stderr[-3000:]
    assert [bytes(p) for p in rdpcap(str(cap / "port-21.pcap"))] == want
    r = run("--goal", str(goal))  # no entries given: the goal's
    assert r.returncode == 0, r.stderr[-3000:]
    assert [bytes(p) for p in rdpcap(str(cap / "port-21.pcap"))] == want
    r = run("--entries", str(tmp_path / "entries.json"), "--goal", str(goal))  # the first command again
    assert r.returncode == 0, r.stderr[-3000:]
    assert [bytes(p) for p in rdpcap(str(cap / "port-21.pcap"))] == want
    r = run()  # neither: nothing routes it
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["egress_packets"] == {} and not (cap / "port-21.pcap").exists()
    if store == "redis":
        r = run("--goal", f"unix://{tmp_path / 'nobody.sock'}")
        assert r.returncode == 1 and "goal state" in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]
        return
    (tmp_path / "not.sqlite").write_text("entries: []\n")
    r = run("--goal", str(tmp_path / "not.sqlite"))
    assert r.returncode == 1 and "goal state" in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]
    with sqlite3.connect(goal) as db:  # an entry of the table as another program (or version) has it
        db.execute("INSERT INTO entries VALUES ('overlay_routes', '[[5, null], [42, null]]', 0, '[1, 2]')")
    r = run("--goal", str(goal))
    assert r.returncode == 1 and "table overlay_routes" in r.stderr and "2 key fields" in r.stderr, r.stderr[-3000:]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("cache", ["on", "off"])
def test_a_rebuild_into_the_same_folder_runs_the_new_program(tmp_path, monkeypatch, cache):
    """``nfc run`` makes the server program from the sources the folder holds now: after the
    source changes and is built again into the same folder, the next run forwards as the new
    program says, not as the binary the first run left there (with the cache of programs by
    content, and without it: NFC_CACHE_DIR=off)."""
    if cache == "off":
        monkeypatch.setenv("NFC_CACHE_DIR", "off")
    out = tmp_path / "out"
    packet = bytes(Ether() / IP(src="10.0.0.9", dst="10.0.0.1", ttl=9) / UDP(sport=1, dport=2) / b"rebuilt")
    for port in (2, 3):
        src = write(tmp_path, L3_HEAD + f"stage work {{ ipv4.ttl = ipv4.ttl - 1; forward({port}); }}\n"
                    "target srv = dpdk_server { cores = 1; }\ndeployment d { servers = [srv]; rate = 1Mpps; }\n")
        r = nfc_cli("build", src, "--target", "dpdk", "--no-verify", "-o", str(out))
        assert r.returncode == 0, r.stderr
        got, drops = nfc_run(out, {}, {1: [packet]}, tmp_path / f"run{port}")
        assert not drops and set(got) == {port}, (port, got, drops)
        (data,) = got[port]
        assert Ether(data)[IP].ttl == 8 and Ether(data)[UDP].load == b"rebuilt"
