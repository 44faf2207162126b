"""Run the built VPN gateway on this machine (``python3 build.py demo`` calls this after
``nfc build``): a few customer and cloud packets made with scapy go through the switch
model and the real DPDK server program (``nfc run``); prints what left by which port and
nfc run's summary table (its counters)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.utils import rdpcap, wrpcap

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "vpn_gateway"

ENTRIES = {
    "overlay_routes": [{"match": {"meta_customer": 7, "meta_overlay": 42, "vm_ip": "192.168.1.10"},
                        "values": {"host_ip": "172.16.5.5", "vni": 5000}}],
    "underlay_routes": [{"match": {"outer_ipv4_dst": "172.16.0.0/16"},
                         "values": {"port": 21, "next_hop_mac": "02:00:00:00:00:99"}}],
    "vni_to_qinq": [{"match": {"vxlan_vni": 5000}, "values": {"s_tag": 7, "c_tag": 42, "port": 3}}],
}


def main() -> int:
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)  # no "MAC address not found" chatter
    with tempfile.TemporaryDirectory(prefix="nfc-demo-") as tmp:
        t = Path(tmp)
        (t / "entries.json").write_text(json.dumps(ENTRIES))
        vm = IP(src="192.168.9.1", dst="192.168.1.10") / UDP(sport=1234, dport=80) / b"hello cloud"
        wrpcap(str(t / "customer.pcap"), [Ether() / Dot1AD(vlan=7) / Dot1Q(vlan=42) / vm,
                                          Ether() / Dot1AD(vlan=7) / Dot1Q(vlan=42) / IP(dst="192.168.1.99")])
        inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(dst="192.168.9.1") / b"hello customer"
        wrpcap(str(t / "cloud.pcap"),
               [Ether() / IP(src="172.16.5.5", dst="10.255.0.1") / UDP(dport=4789) / VXLAN(vni=5000) / inner])
        r = subprocess.run([sys.executable, "-m", "nfc.cli", "run", str(OUT), "--entries", str(t / "entries.json"),
                            "--inject", f"1={t / 'customer.pcap'}", "--inject", f"17={t / 'cloud.pcap'}",
                            "--capture", str(t / "cap")], capture_output=True, text=True, cwd=ROOT)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return r.returncode
        print("\nnfc run: switch model + the compiled DPDK server program")
        for pcap in sorted((t / "cap").glob("port-*.pcap")):
            for p in rdpcap(str(pcap)):
                print(f"  out {pcap.stem}: {p.summary()}")
        summary = [line for line in r.stdout.splitlines() if not line.startswith("capture: ")]  # a temporary one
        print("\n" + "\n".join(f"  {line}" if line else "" for line in summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
