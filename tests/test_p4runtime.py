"""The switch model driven only through P4Runtime by an independent client (p4runtime-shell
from PyPI, in its own virtualenv): entries it writes change forwarding; bad entries are
rejected with P4Runtime's error semantics and change nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN

from emulator.switchmodel import SwitchModel
from emulator.switchmodel.server import P4RuntimeServer, serve
from tests.support import ROOT, build_example, copy_build

CLIENT = ROOT / ".venv-p4rt" / "bin" / "python"
pytestmark = pytest.mark.skipif(not CLIENT.exists(), reason="the p4runtime-shell virtualenv is missing "
                                                            "(python3 build.py setup makes it)")


@pytest.fixture(scope="module")
def switch(tmp_path_factory):
    # the build is shared read-only: the client's device file and command files go to a folder of this module's
    out = copy_build(build_example("examples/vpn_gateway.nfp", "tofino+dpdk"), tmp_path_factory.mktemp("p4rt") / "vpn")
    model = SwitchModel.from_build(out)
    names = json.loads((out / "switch/name_map.json").read_text())
    server = P4RuntimeServer(model, names, "tna")
    grpc_server, port = serve(server)
    (out / "device.bin").write_bytes((out / "switch/tna.p4").read_bytes())
    yield server, f"127.0.0.1:{port}", out
    grpc_server.stop(0)


def client(addr: str, out: Path, commands: list[dict]) -> list[dict]:
    path = out / "cmds.json"
    path.write_text(json.dumps(commands))
    r = subprocess.run([str(CLIENT), str(ROOT / "tests/clients/p4rt_shell_client.py"), addr,
                        str(out / "switch/tna.p4info.txtpb"), str(out / "device.bin"), str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def hit(out: Path, table: str) -> str:
    """The P4 action an entry of ``.nfp`` table ``table`` takes, by the build's name map."""
    return json.loads((out / "switch/name_map.json").read_text())["tna"]["tables"][table]["p4_action"]


def vni(out: Path) -> dict:
    return {"op": "insert", "table": "vni_to_qinq", "action": hit(out, "vni_to_qinq"),
            "match": {"vxlan_vni": "5000"}, "params": {"v_s_tag": "7", "v_c_tag": "42", "v_port": "3"}}


def test_entries_written_by_an_independent_client_change_forwarding(switch):
    server, addr, out = switch
    inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(src="192.168.1.10", dst="8.8.8.8") / b"x"
    pkt = bytes(Ether() / IP(src="172.16.5.5", dst="10.255.0.1") / UDP(sport=5555, dport=4789) / VXLAN(vni=5000)
                / inner)
    assert server.inject(17, pkt).reason == "unknown_vni"
    assert client(addr, out, [vni(out)]) == [{"ok": True}]
    got = server.inject(17, pkt)
    want = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / Dot1AD(vlan=7) / Dot1Q(vlan=42) / inner[IP]
    assert (got.kind, got.port, got.data) == ("forward", 3, bytes(want))


def test_bad_entries_are_rejected_and_change_nothing(switch):
    """The client's session starts with SetForwardingPipelineConfig(VERIFY_AND_COMMIT), which
    clears the forwarding state (P4Runtime §14): the duplicate is one this session wrote."""
    server, addr, out = switch
    results = client(addr, out, [
        {**vni(out), "match": {"vxlan_vni": "6000"}, "params": {"v_s_tag": "7", "v_c_tag": "42", "v_port": "70000"}},
        vni(out),
        vni(out),  # a duplicate of an installed entry
        {"op": "delete", "table": "vni_to_qinq", "match": {"vxlan_vni": "4242"}},
        {"op": "read", "table": "vni_to_qinq"},
    ])
    assert results[0]["ok"] is False  # 70000 does not fit the 16-bit port: refused by client or server
    assert results[1] == {"ok": True}
    assert results[2]["ok"] is False and "ALREADY_EXISTS" in results[2]["error"]
    assert results[3]["ok"] is False and "NOT_FOUND" in results[3]["error"]
    assert results[4] == {"ok": True, "count": 1}
    assert [e.key[0].value for e in server.model.tables["vni_to_qinq"].entries] == [5000]


def test_lpm_entries_and_customer_path_to_the_server(switch):
    server, addr, out = switch
    res = client(addr, out, [{"op": "insert", "table": "underlay_routes",
                              "action": hit(out, "underlay_routes"),
                              "match": {"outer_ipv4_dst": "172.16.0.0/16"},
                              "params": {"v_port": "21", "v_next_hop_mac": "02:00:00:00:00:99"}}])
    assert res == [{"ok": True}]
    (entry,) = server.model.tables["underlay_routes"].entries
    assert (entry.key[0].value, entry.key[0].arg) == (0xAC100000, 16)
    assert entry.values == {"port": 21, "next_hop_mac": 0x020000000099}
    cust = bytes(Ether() / Dot1AD(vlan=7) / Dot1Q(vlan=42) / IP(dst="192.168.1.10") / b"p")
    got = server.inject(1, cust)
    assert (got.kind, got.port) == ("forward", 32) and got.data[0] == 1  # bridge #1 towards the server


def test_packet_out_leaves_by_the_port_in_its_metadata(switch):
    import time

    server, addr, out = switch
    payload = bytes(Ether(dst="00:00:00:00:00:07") / IP() / b"from the controller")
    assert client(addr, out, [{"op": "packet_out", "payload": payload.hex(), "port": 5}]) == [{"ok": True}]
    for _ in range(50):  # the stream is asynchronous
        if server.transmitted:
            break
        time.sleep(0.05)
    assert server.transmitted[-1] == (5, payload)
