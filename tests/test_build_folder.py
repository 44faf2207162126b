"""The build folder is the product: ``nfc run``, ``nfc verify``, ``nfc switch-model`` and the
runtime API use what it holds (``placed.json``: the placed program, loaded without the front
end), from any working directory, with the source gone; an edited source is reported with
both hashes and the folder's program still runs; a placed program of another version is
refused with a message that says to rebuild."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.utils import rdpcap, wrpcap

from compiler.interp import Entry, Interpreter, Match
from compiler.placed import PlacedError, load_placed
from runtime.api import Runtime
from runtime.errors import InvalidEntry
from tests.support import ROOT, compile_file, needs_dpdk, nfc_cli

ROUTE = {"match": {"meta_customer": 7, "meta_overlay": 42, "vm_ip": "192.168.1.10"},
         "values": {"host_ip": "172.16.5.5", "vni": 5000}}
UNDERLAY = {"match": {"outer_ipv4_dst": "172.16.0.0/16"}, "values": {"port": 21, "next_hop_mac": "02:00:00:00:00:21"}}


def _nfc(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    return nfc_cli(*args, cwd=cwd)


@pytest.fixture
def moved(tmp_path):
    """vpn_gateway built from a copy of its source, the folder moved, the copy deleted."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "examples", src)
    r = _nfc("build", "vpn_gateway.nfp", "-o", "out", cwd=src)
    assert r.returncode == 0, r.stderr
    shutil.move(src / "out", tmp_path / "deployed")
    shutil.rmtree(src)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return tmp_path / "deployed", elsewhere


def test_verify_and_switch_model_use_the_folder_alone(moved):
    out, cwd = moved
    r = _nfc("verify", str(out), cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert "2 of 2 pipelines proved" in r.stderr and "warning" not in r.stderr
    pkt = Ether() / Dot1AD(vlan=7) / Dot1Q(vlan=42) / IP(src="10.0.0.9", dst="192.168.1.10") / UDP() / b"x"
    wrpcap(str(cwd / "in.pcap"), [pkt])
    r = _nfc("switch-model", str(out), "--inject", "1=in.pcap", "--capture", "cap", cwd=cwd)
    assert r.returncode == 0, r.stderr
    (bridged,) = [bytes(p) for p in rdpcap(str(cwd / "cap/port-32.pcap"))]
    assert bridged[0] == 1  # to the server behind bridge #1


@needs_dpdk
def test_run_and_the_runtime_api_use_the_folder_alone(moved):
    out, cwd = moved
    (cwd / "entries.json").write_text(json.dumps({"overlay_routes": [ROUTE], "underlay_routes": [UNDERLAY]}))
    pkt = Ether() / Dot1AD(vlan=7) / Dot1Q(vlan=42) / IP(src="10.0.0.9", dst="192.168.1.10") / UDP() / b"x"
    wrpcap(str(cwd / "in.pcap"), [pkt])
    r = _nfc("run", str(out), "--entries", "entries.json", "--inject", "1=in.pcap", "--capture", "cap", cwd=cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    # the reference interpreter, on the program compiled from the repository's copy of the source
    spec = Interpreter(compile_file(str(ROOT / "examples/vpn_gateway.nfp")).program)
    spec.tables["overlay_routes"].insert(Entry((Match(7), Match(42), Match(0xC0A8010A)),
                                               {"host_ip": 0xAC100505, "vni": 5000}))
    spec.tables["underlay_routes"].insert(Entry((Match(0xAC100000, 16),), {"port": 21, "next_hop_mac": 0x020000000021}))
    want = spec.process(bytes(pkt), 1)
    assert (want.kind, want.port) == ("forward", 21)
    assert [bytes(p) for p in rdpcap(str(cwd / "cap/port-21.pcap"))] == [want.data]
    rt = Runtime(out)  # the runtime API reads plan.json: typed errors without a source anywhere
    with pytest.raises(InvalidEntry):
        rt.table("overlay_routes").add(meta_customer=1 << 12, meta_overlay=1, vm_ip=1, host_ip=1, vni=1)


def test_an_edited_source_is_reported_with_both_hashes(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "src")
    r = _nfc("build", "vpn_gateway.nfp", "-o", "out", "--no-verify", cwd=tmp_path / "src")
    assert r.returncode == 0, r.stderr
    source = tmp_path / "src/vpn_gateway.nfp"
    built = hashlib.sha256(source.read_bytes()).hexdigest()
    assert json.loads((tmp_path / "src/out/plan.json").read_text())["source_sha256"] == built
    source.write_text(source.read_text().replace("size = 16M;", "size = 10K;"))
    now = hashlib.sha256(source.read_bytes()).hexdigest()
    r = _nfc("verify", "out", cwd=tmp_path / "src")
    assert r.returncode == 0, r.stderr  # it proves the program in out: the 16M-entry table's placement
    assert f"built from sha256 {built}" in r.stderr and f"the file now has {now}" in r.stderr
    placed = load_placed(tmp_path / "src/out/placed.json")
    assert placed.program.tables["overlay_routes"].size == 16_000_000
    assert placed.placement.where("overlay_route") == "server"


def test_a_placed_program_of_another_version_is_refused(tmp_path):
    r = _nfc("build", "examples/vpn_gateway.nfp", "-o", str(tmp_path / "out"), "--no-verify", cwd=ROOT)
    assert r.returncode == 0, r.stderr
    path = tmp_path / "out/placed.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data | {"placed_version": 999}))
    with pytest.raises(PlacedError, match=r"version 999.*rebuild"):
        load_placed(path)
    r = _nfc("verify", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 1 and "rebuild with this nfc" in r.stderr and "Traceback" not in r.stderr
    path.write_text("{not json")
    r = _nfc("verify", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 1 and "placed.json: not JSON" in r.stderr
    r = _nfc("verify", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert r.returncode == 1 and "not a build folder" in r.stderr


def test_the_placed_program_round_trips_for_every_example(tmp_path):
    from compiler.placed import Placed, dump_placed
    from compiler.placement import Segment

    for path in sorted((ROOT / "examples").glob("*.nfp")):
        c = compile_file(str(path))
        assert c.placement is not None
        placed = Placed(c.need_program(), c.need_targets(), c.placement, c.bridges)
        (tmp_path / "placed.json").write_text(dump_placed(placed))
        back = load_placed(tmp_path / "placed.json")
        assert back == placed, path.name
        assert dump_placed(back) == dump_placed(placed), f"{path.name}: a value came back as another type"
        assert all(type(v) is Segment for v in back.placement.segment.values())


def test_the_typed_plan_of_every_example(tmp_path):
    """plan.json read back as typed data: placements are an enum with predicates, bridges carry
    their direction; another plan version is refused with what to do."""
    from compiler.manifest import PLAN_VERSION, Direction, PlanError, TablePlacement, load_plan

    kinds = set()
    for example in ("bluebird_tor", "vpn_gateway"):
        out = tmp_path / example
        r = _nfc("build", f"examples/{example}.nfp", "-o", str(out), "--no-verify", cwd=ROOT)
        assert r.returncode == 0, r.stderr
        plan = load_plan(out)
        kinds |= {t.placement for t in plan.tables}
        raw = json.loads((out / "plan.json").read_text())
        assert [t.placement.value for t in plan.tables] == [t["placement"] for t in raw["tables"]]
        assert {b.direction for b in plan.bridges} == {Direction.TO_SERVER, Direction.TO_SWITCH}
        assert plan.path(out, "name_map").is_file() and plan.path(out, "placed").is_file()
    assert {TablePlacement.SWITCH, TablePlacement.SERVER, TablePlacement.CACHED} <= kinds
    cached = TablePlacement.CACHED
    assert cached.on_switch and cached.on_server and cached.cached
    assert not TablePlacement.SERVER.on_switch and not TablePlacement.SWITCH.on_server
    assert not any(p.on_switch or p.on_server for p in [TablePlacement.UNUSED])
    out = tmp_path / "vpn_gateway"
    raw = json.loads((out / "plan.json").read_text())
    (out / "plan.json").write_text(json.dumps(raw | {"plan_version": 1}))
    with pytest.raises(PlanError, match=f"plan version 1, this nfc reads version {PLAN_VERSION}: rebuild"):
        load_plan(out)
    r = _nfc("switch-model", str(out), cwd=tmp_path)
    assert r.returncode == 1 and "rebuild with this nfc" in r.stderr and "Traceback" not in r.stderr
    del raw["tables"]
    (out / "plan.json").write_text(json.dumps(raw))
    with pytest.raises(PlanError, match="malformed plan"):
        load_plan(out)
