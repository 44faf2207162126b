"""``nfc switch-model`` batch mode: pcaps in per ingress port, pcaps out per egress port."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.utils import rdpcap, wrpcap

from runtime.entries import EntriesError, load_entries
from tests.conftest import ROOT

ENTRIES = """
vni_to_qinq:
  - match: {vxlan_vni: 5000}
    values: {s_tag: 7, c_tag: 42, port: 3}
underlay_routes:
  - match: {outer_ipv4_dst: 172.16.0.0/16}
    values: {port: 21, next_hop_mac: "02:00:00:00:00:99"}
"""


def test_batch_run_from_pcaps(tmp_path):
    out = tmp_path / "build"
    r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", "examples/vpn_gateway.nfp", "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(src="192.168.1.10", dst="8.8.8.8") / b"x"
    good = Ether() / IP(src="172.16.5.5", dst="10.255.0.1") / UDP(dport=4789) / VXLAN(vni=5000) / inner
    unknown = Ether() / IP() / UDP(dport=4789) / VXLAN(vni=1) / inner
    wrpcap(str(tmp_path / "cloud.pcap"), [good, unknown, Ether(bytes(good)[:30]), good])
    (tmp_path / "entries.yaml").write_text(ENTRIES)
    r = subprocess.run([sys.executable, "-m", "nfc.cli", "switch-model", str(out), "--entries",
                        str(tmp_path / "entries.yaml"), "--inject", f"17={tmp_path / 'cloud.pcap'}",
                        "--capture", str(tmp_path / "cap")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    got = [bytes(p) for p in rdpcap(str(tmp_path / "cap/port-3.pcap"))]
    want = bytes(Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / Dot1AD(vlan=7) / Dot1Q(vlan=42)
                 / inner[IP])
    assert got == [want, want]
    counters = json.loads((tmp_path / "cap/counters.json").read_text())
    assert counters["drops"] == {"truncated": 1, "unknown_vni": 1}
    assert counters["egress_packets"] == {"3": 2}


@pytest.mark.parametrize(("text", "msg"), [
    ("[1, 2]", "must map table names"),
    ("t:\n  - match: {k: not-a-number}\n", "t entry 0"),
    ("t: [\n", "not valid YAML"),
])
def test_malformed_entries_files(tmp_path, text, msg):
    path = tmp_path / "e.yaml"
    path.write_text(text)
    with pytest.raises(EntriesError, match=msg):
        load_entries(path)
