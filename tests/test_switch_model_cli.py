"""``nfc switch-model``: batch mode (pcaps in per ingress port, pcaps out per egress port,
entries checked as the runtime API and P4Runtime check them) and the P4Runtime endpoint's
flags, loopback by default and TLS / mutual TLS with certificates made for the test (also
for ``nfc run --live``)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.utils import rdpcap, wrpcap

from runtime.entries import EntriesError, load_entries
from runtime.errors import ChannelError
from runtime.p4runtime import ClientTls, SwitchClient, SwitchUpdate
from tests.p4rt_helpers import listening, make_pki
from tests.support import HAVE_DPDK, ROOT, build_example, nfc_cli, run_make

ENTRIES = """
vni_to_qinq:
  - match: {vxlan_vni: 5000}
    values: {s_tag: 7, c_tag: 42, port: 3}
underlay_routes:
  - match: {outer_ipv4_dst: 172.16.0.0/16}
    values: {port: 21, next_hop_mac: "02:00:00:00:00:99"}
"""


@pytest.fixture(scope="module")
def vpn(tmp_path_factory) -> Path:
    out = build_example("examples/vpn_gateway.nfp", "tofino+dpdk", "--no-verify")
    return out


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    pytest.importorskip("cryptography.x509", reason="the cryptography package makes the test certificates")
    return make_pki(tmp_path_factory.mktemp("pki"))


def _nfc(*args: str) -> subprocess.CompletedProcess[str]:
    return nfc_cli(*args)


def test_batch_run_from_pcaps(vpn, tmp_path):
    out = vpn
    inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(src="192.168.1.10", dst="8.8.8.8") / b"x"
    good = Ether() / IP(src="172.16.5.5", dst="10.255.0.1") / UDP(dport=4789) / VXLAN(vni=5000) / inner
    unknown = Ether() / IP() / UDP(dport=4789) / VXLAN(vni=1) / inner
    wrpcap(str(tmp_path / "cloud.pcap"), [good, unknown, Ether(bytes(good)[:30]), good])
    (tmp_path / "entries.yaml").write_text(ENTRIES)
    r = nfc_cli("switch-model", str(out), "--entries",
                        str(tmp_path / "entries.yaml"), "--inject", f"17={tmp_path / 'cloud.pcap'}",
                        "--capture", str(tmp_path / "cap"))
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


def test_entries_file_address_of_another_width_is_refused(vpn, tmp_path):
    """``--entries`` is checked as the runtime API checks a call: the IPv6 address "::a00:1"
    is not a value of the bit<32> key outer_ipv4_dst (it is not 10.0.0.1); one line names
    the table and the field, and nothing runs."""
    path = tmp_path / "e.yaml"
    path.write_text('underlay_routes:\n  - match: {outer_ipv4_dst: "::a00:1/8"}\n'
                    '    values: {port: 21, next_hop_mac: "02:00:00:00:00:99"}\n')
    r = _nfc("switch-model", str(vpn), "--entries", str(path), "--inject", f"1={tmp_path / 'none.pcap'}")
    assert r.returncode == 1
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "underlay_routes.outer_ipv4_dst" in r.stderr and "IPv6" in r.stderr


@pytest.mark.parametrize(("command", "flags", "message"), [
    ("switch-model", ["--p4runtime", "0", "--p4rt-cert", "s.crt"], "--p4rt-cert needs --p4rt-key"),
    ("switch-model", ["--p4runtime", "0", "--p4rt-key", "s.key"], "--p4rt-key needs --p4rt-cert"),
    ("switch-model", ["--p4runtime", "0", "--p4rt-client-ca", "ca.crt"], "--p4rt-client-ca needs --p4rt-cert"),
    ("switch-model", ["--p4rt-cert", "s.crt", "--p4rt-key", "s.key"], "need --p4runtime"),
    ("run", ["--live", "--inject", "1=in.pcap", "--p4rt-cert", "s.crt"], "--p4rt-cert needs --p4rt-key"),
    ("run", ["--inject", "1=in.pcap", "--p4rt-cert", "s.crt", "--p4rt-key", "s.key"], "need --live"),
])
def test_tls_flags_that_do_not_go_together_are_refused(vpn, command, flags, message):
    """A certificate without its key (and the like) is a usage error: exit status 2 and one
    line, no traceback, before anything starts."""
    r = _nfc(command, str(vpn), *flags)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [r.stderr.strip()] and message in r.stderr, r.stderr


def _endpoint(proc: subprocess.Popen[str], until: str = "P4Runtime") -> int:
    """The port the command says it serves P4Runtime on, once its stderr has said ``until``."""
    assert proc.stderr is not None
    port = None
    for line in proc.stderr:
        m = re.search(r"P4Runtime.* on 127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else port
        if until in line and port is not None:
            return port
    raise AssertionError(f"no P4Runtime endpoint announced (exit status {proc.wait()})")


@pytest.fixture
def serving(vpn) -> Iterator[list[subprocess.Popen[str]]]:
    """Commands started in the background, stopped (SIGTERM) at the end of the test."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def _start(serving: list[subprocess.Popen[str]], *args: str, until: str = "P4Runtime") -> int:
    proc = subprocess.Popen([sys.executable, "-m", "nfc.cli", *args], stderr=subprocess.PIPE, text=True, cwd=ROOT)
    serving.append(proc)
    return _endpoint(proc, until)


def _names(out: Path) -> Any:
    return json.loads((out / "switch/name_map.json").read_text())


def _mutual(pki: Path) -> list[str]:
    return ["--p4rt-cert", str(pki / "switch.crt"), "--p4rt-key", str(pki / "switch.key"),
            "--p4rt-client-ca", str(pki / "ca1.crt")]


def test_switch_model_serves_mutual_tls_from_the_command_line(vpn, pki, serving):
    """``--p4rt-cert/--p4rt-key/--p4rt-client-ca``: a client with no certificate, or with one
    of another CA, cannot open the channel; one with a certificate of the client CA writes
    and reads entries (P4Runtime §3.1.1)."""
    port = _start(serving, "switch-model", str(vpn), "--p4runtime", "127.0.0.1:0", *_mutual(pki),
                  "--serve-seconds", "60")
    addr, names = f"127.0.0.1:{port}", _names(vpn)
    for refused in (None, ClientTls(pki / "ca1.crt"), ClientTls(pki / "ca1.crt", pki / "stranger.crt",
                                                               pki / "stranger.key")):
        with pytest.raises(ChannelError):
            SwitchClient(addr, names, "tna", timeout=5, tls=refused).close()
    client = SwitchClient(addr, names, "tna", timeout=5,
                          tls=ClientTls(pki / "ca1.crt", pki / "client.crt", pki / "client.key"))
    try:
        assert client.write([SwitchUpdate("add", "vni_to_qinq", {"vxlan_vni": (5000, None)},
                                          {"s_tag": 7, "c_tag": 42, "port": 3})]) == [None]
        assert [v for _m, v, _p in client.read("vni_to_qinq")] == [{"s_tag": 7, "c_tag": 42, "port": 3}]
    finally:
        client.close()


def test_p4runtime_port_alone_binds_loopback(vpn, serving):
    """``--p4runtime PORT`` (no host) listens on loopback only: only this machine can drive
    the switch unless another address is named."""
    port = _start(serving, "switch-model", str(vpn), "--p4runtime", "0", "--serve-seconds", "60")
    bound = listening(port)
    assert bound and all(a.is_loopback for a in bound), bound


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_DPDK or os.geteuid() != 0 or not Path("/usr/sbin/ip").exists(),
                    reason="nfc run --live needs DPDK, root and iproute2")
def test_live_run_serves_mutual_tls_and_loads_its_own_entries(vpn, pki, serving, tmp_path):
    """``nfc run --live`` with the same flags: its own runtime still loads the entries file
    (over a private socket, holding no client certificate), while on the TCP endpoint a
    client without a certificate is refused and one with a certificate of the client CA
    reads what was loaded."""
    assert run_make(vpn / "server").returncode == 0
    (tmp_path / "e.json").write_text(json.dumps({"underlay_routes": [
        {"match": {"outer_ipv4_dst": "172.16.0.0/16"}, "values": {"port": 21, "next_hop_mac": "02:00:00:00:00:99"}}]}))
    wrpcap(str(tmp_path / "in.pcap"), [Ether() / IP() / UDP()])
    port = _start(serving, "run", str(vpn), "--live", "--entries", str(tmp_path / "e.json"), "--inject",
                  f"1={tmp_path / 'in.pcap'}", "--capture", str(tmp_path / "cap"), "--serve-seconds", "60",
                  *_mutual(pki), until="control socket")  # said once the entries are in
    addr, names = f"127.0.0.1:{port}", _names(vpn)
    with pytest.raises(ChannelError):
        SwitchClient(addr, names, "tna", timeout=5, tls=ClientTls(pki / "ca1.crt")).close()
    client = SwitchClient(addr, names, "tna", timeout=5, election_id=(0, 2),
                          tls=ClientTls(pki / "ca1.crt", pki / "client.crt", pki / "client.key"))
    try:
        assert [(m["outer_ipv4_dst"], v["port"]) for m, v, _p in client.read("underlay_routes")] == [
            ((0xAC100000, 16), 21)]
    finally:
        client.close()
