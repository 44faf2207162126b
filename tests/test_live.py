"""``nfc run --live``: the switch model and the real DPDK server program wired by a veth pair
in a network namespace of their own (net_af_packet); entries added and removed through the
runtime API while traffic flows take effect, and no unrelated packet is lost meanwhile.
Expected packets are built with scapy (tests.test_nfc_run.expected_vxlan)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.utils import rdpcap, wrpcap

from runtime.api import Runtime
from runtime.live import LiveDataPlane, pace
from tests.support import (
    LIVE,
    NH_MAC,
    ROOT,
    P4RuntimeSwitch,
    build_example,
    copy_build,
    expected_vxlan,
    nfc_cli,
)

pytestmark = LIVE


def _customer(c: int, o: int, k: int, seq: int) -> Ether:
    return (Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / Dot1AD(vlan=c) / Dot1Q(vlan=o)
            / IP(src="192.168.200.1", dst=f"192.168.{o}.{k}", id=seq) / UDP(sport=7, dport=9) / b"live")


def test_entries_change_while_traffic_flows(tmp_path):
    out = build_example("examples/vpn_gateway.nfp", "tofino+dpdk", server=True)
    sw = P4RuntimeSwitch(out)
    try:
        with LiveDataPlane(out / "server/nf", sw.p4rt, sw.model.server_ports[0]) as live:
            assert live.server is not None
            rt = Runtime(out, switch=sw.client, server=live.server.control)
            rt.table("underlay_routes").add(outer_ipv4_dst="172.16.0.0/16", port=21, next_hop_mac=NH_MAC)
            routes = rt.table("overlay_routes")
            routes.add_many({"meta_customer": 1, "meta_overlay": 1, "vm_ip": f"192.168.1.{k}",
                             "host_ip": f"172.16.1.{k}", "vni": 1001} for k in range(1, 201))
            # steady traffic to the 200 stable routes, in a thread, while routes come and go
            steady = [_customer(1, 1, 1 + i % 200, i) for i in range(1500)]
            sender = threading.Thread(target=pace, args=([bytes(p) for p in steady],
                                                         lambda d: live.inject(1, d), 1000.0))
            sender.start()
            new = {"meta_customer": 2, "meta_overlay": 9, "vm_ip": "192.168.9.9"}
            churn = [{"meta_customer": 3, "meta_overlay": 3, "vm_ip": f"10.3.{k // 256}.{k % 256}",
                      "host_ip": "172.16.3.3", "vni": 3003} for k in range(5000)]
            time.sleep(0.3)
            live.inject(1, bytes(_customer(2, 9, 9, 1)))  # no route yet: dropped
            time.sleep(0.2)
            routes.add(**new, host_ip="172.16.2.9", vni=2009)
            routes.add_many(churn)  # unrelated churn while forwarding
            time.sleep(0.2)
            live.inject(1, bytes(_customer(2, 9, 9, 2)))  # now forwarded to 172.16.2.9
            time.sleep(0.2)
            routes.delete(**new)
            routes.delete_many(churn)
            time.sleep(0.2)
            live.inject(1, bytes(_customer(2, 9, 9, 3)))  # gone again: dropped
            sender.join()
            assert live.settle(), live.counters()
            got = live.take(21)
            counters = live.counters()
        want_steady = {i: expected_vxlan(p, f"172.16.1.{1 + i % 200}", 1001) for i, p in enumerate(steady)}
        assert len(got) == len(steady) + 1, counters
        got_steady = [d for d in got if d != expected_vxlan(_customer(2, 9, 9, 2), "172.16.2.9", 2009)]
        assert sorted(got_steady) == sorted(want_steady.values())  # every unrelated packet, byte for byte
        assert expected_vxlan(_customer(2, 9, 9, 2), "172.16.2.9", 2009) in got
        assert counters["drops"] == {"server:no_overlay_route": 2}
        assert counters["server"]["tables"]["overlay_routes"]["entries"] == 200
    finally:
        sw.close()
    assert not any(ns.startswith("nfc-") for ns in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                                    text=True).stdout.split())


@pytest.fixture(scope="module")
def built_vpn(tmp_path_factory):
    """A private copy of the VPN gateway's build (its server program's path is this module's
    alone: ``_leftovers`` looks for processes by it while other workers run their own)."""
    out = copy_build(build_example("examples/vpn_gateway.nfp", "tofino+dpdk", server=True),
                     tmp_path_factory.mktemp("live") / "vpn")
    entries = {"overlay_routes": [{"match": {"meta_customer": 1, "meta_overlay": 1, "vm_ip": "192.168.1.5"},
                                   "values": {"host_ip": "172.16.1.5", "vni": 1001}}],
               "underlay_routes": [{"match": {"outer_ipv4_dst": "172.16.0.0/16"},
                                    "values": {"port": 21, "next_hop_mac": NH_MAC}}]}
    (out / "entries.json").write_text(json.dumps(entries))
    return out


def _leftovers(out: Path, pid: int) -> tuple[list[str], str]:
    """The network namespaces the ``nfc run`` of process ``pid`` made (named ``nfc-PID-…``) and
    the server programs of build ``out`` still there (other tests' are not counted)."""
    ns = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
          if n.startswith(f"nfc-{pid}-")]
    procs = subprocess.run(["pgrep", "-af", f"{out}/server/nf "], capture_output=True, text=True).stdout
    return ns, procs


def test_cli_live_run(built_vpn, tmp_path):
    pkts = [_customer(1, 1, 5, i) for i in range(20)] + [_customer(1, 1, 6, 99)]
    wrpcap(str(tmp_path / "in.pcap"), pkts)
    r = nfc_cli("run", str(built_vpn), "--live", "--entries",
                        str(built_vpn / "entries.json"), "--inject", f"1={tmp_path / 'in.pcap'}", "--pps", "2000",
                        "--capture", str(tmp_path / "cap"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert [bytes(p) for p in rdpcap(str(tmp_path / "cap/port-21.pcap"))] == \
        [expected_vxlan(p, "172.16.1.5", 1001) for p in pkts[:20]]
    assert json.loads((tmp_path / "cap/counters.json").read_text())["drops"] == {"server:no_overlay_route": 1}
    assert _leftovers(built_vpn, os.getpid()) == ([], "")


def test_interrupted_live_run_cleans_up(built_vpn, tmp_path):
    wrpcap(str(tmp_path / "in.pcap"), [_customer(1, 1, 5, 0)])
    proc = subprocess.Popen([sys.executable, "-m", "nfc.cli", "run", str(built_vpn), "--live", "--entries",
                             str(built_vpn / "entries.json"), "--inject", f"1={tmp_path / 'in.pcap'}",
                             "--serve-seconds", "120", "--capture", str(tmp_path / "cap")],
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "control socket" in line:
            break
    assert _leftovers(built_vpn, proc.pid)[0], "the live run made its namespace"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    assert _leftovers(built_vpn, proc.pid) == ([], "")
