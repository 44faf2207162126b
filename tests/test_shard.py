"""``shard by``: the switch spreads the servers' share over the deployment's servers (issue 15
item 5, the first part of issue 16).

* the front end and the ports pass refuse what cannot be steered, at its span;
* the switch program (TNA and v1model, run by the switch model) sends each packet to the
  server an independent CRC-16/ARC (or the key's range) says, and back from any server port;
* ``nfc run`` of the IPsec gateway starts one server program per GPN, both carry their
  tunnels (seed 001 §4.3), and the fleet keeps control-plane tables alike on both.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import replace
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from compiler.manifest import load_plan
from compiler.resources import entries_share, server_capacity, size_for_share
from compiler.server_load import fmt_bytes
from compiler.shard import server_state
from lang import Diagnostics
from lang.parser import parse_text
from lang.printer import print_module
from nfc._build_dir import open_build
from runtime import carry
from runtime.api import Runtime
from runtime.control import ControlChannel
from runtime.entries import load_entries
from runtime.errors import ChannelError, EntryExists, EntryNotFound, InvalidEntry, RuntimeApiError
from runtime.fleet import ServerFleet, merge_counters
from runtime.goal import GoalStore
from runtime.server_proc import ServerProcess
from runtime.steering import balance
from tests.oracles import crc16_arc
from tests.support import (
    ROOT,
    P4RuntimeSwitch,
    build_with_server,
    compile_file,
    needs_dpdk,
    nfc_cli,
    nfc_run,
    write,
)

_PROGRAM = """import "std/headers.nfp";
packet { eth: ethernet; ipv4: ipv4; tcp: tcp; }
metadata { k: bit<8>; j: bit<3>; }
parser p {
  state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: ip; default: drop(not_ipv4); } }
  state ip { extract ipv4; transition select(ipv4.protocol) { IP_TCP: l4; default: drop(not_tcp); } }
  state l4 { extract tcp; transition accept; }
}
state seen { key { ipv4.src: exact; } size = 16K; timeout = 60s; }
stage pick { meta.k = ipv4.dst[31:24]; meta.j = ipv4.dst[2:0]; }
stage learn {
  lookup seen { hit(s) { } miss { insert seen { } timeout 30; } }
  forward(1);
}
ports all = [0..31];
pipeline main { ports = all; parser = p; stages = [pick, learn]; traffic = 100%; }
target srv = dpdk_server { cores = 2; }
deployment d {
  switch = tofino1;
  servers = [srv, srv, srv];
  server_ports = [40..42];
  rate = 1Mpps;
  SHARD
}
"""


def _program(shard: str) -> str:
    return _PROGRAM.replace("SHARD", shard)


def _packet(dst: str, src: str = "10.0.0.1") -> bytes:
    return bytes(Ether(dst="02:00:00:00:00:01") / IP(src=src, dst=dst) / TCP(sport=1, dport=2))


@pytest.mark.parametrize("shard", ["shard by hash(meta.k);", "shard by range(meta.k);"])
def test_the_clause_prints_back_as_written(front, shard):
    _prog, diags, _ = front.load(_program(shard))
    assert not diags.has_errors
    text = print_module(parse_text(_program(shard), "t.nfp", Diagnostics()))
    assert f"  {shard}" in text
    assert print_module(parse_text(text, "t.nfp", Diagnostics())) == text


@pytest.mark.parametrize(("shard", "code", "says"), [
    ("shard by modulo(meta.k);", "E060", "say hash(key, ...) or range(key)"),
    ("shard by range(meta.k, meta.k);", "E023", "range(...) takes one key"),
    ("shard by hash(meta.k); shard by range(meta.k);", "E060", "one 'shard by' clause"),
    ("shard by hash(meta.nope);", "E012", "nope"),
    ("shard by hash(ipv4.dst == 1);", "E020", "expected bit<N>"),
    ("shard by hash(5);", "E060", "not a bare number"),
    ("shard by hash(meta.k, 5);", "E060", "not a bare number"),
])
def test_the_front_end_refuses_a_bad_clause_at_its_span(front, shard, code, says):
    _prog, diags, sources = front.load(_program(shard))
    found = [d for d in diags.items if d.code == code]
    assert found and says in found[0].message, [sources.render(d) for d in diags.items]
    assert found[-1].span.line == _program(shard).splitlines().index(f"  {shard}") + 1


@pytest.mark.parametrize(("shard", "servers", "code", "says"), [
    ("shard by hash(ipv4.dst);", "[srv, srv, srv]", "E060", "metadata and constants only"),
    ("shard by hash(meta.k);", "[srv, srv]", "E083", "2 servers but 3 server ports"),
    ("shard by hash(bit<8>(5));", "[srv, srv, srv]", "E060", "reads no metadata"),
    ("shard by range(meta.j[0:0]);", "[srv, srv, srv]", "E060", "fewer values than the 3 servers"),
    ("", "[srv, srv, srv]", "W084", "sends every packet to the first server port (40)"),
])
def test_the_build_refuses_what_it_cannot_steer(tmp_path, shard, servers, code, says):
    src = write(tmp_path, _program(shard).replace("[srv, srv, srv]", servers))
    r = nfc_cli("build", src, "-o", str(tmp_path / "out"), "--no-verify", "--target", "tofino+dpdk")
    assert f"[{code}]" in r.stderr and says in r.stderr, r.stderr
    assert (r.returncode == 0) == code.startswith("W")


def test_without_a_clause_the_compiler_shards_by_the_key_of_the_largest_table_keyed_by_metadata(tmp_path):
    """Two tables keyed by metadata the switch sets: the larger (``big``, 1M entries, keyed by
    meta.k and the destination) gives the keys; the build says so (W086), every server gets
    packets, and ``big`` is split among them."""
    text = _program("").replace(
        "stage pick {",
        "table small { key { meta.j: exact; } value { x: bit<8>; } size = 8; }\n"
        "table big { key { meta.k: exact; ipv4.dst: exact; } value { port: bit<16>; } size = 1M; pin = server; }\n"
        "stage route { lookup small { hit(r) { } miss { } } lookup big { hit(r) { forward(r.port); } "
        "miss { drop(no_route); } } }\n"
        "stage pick {").replace("stages = [pick, learn]", "stages = [pick, route, learn]")
    out = tmp_path / "out"
    r = nfc_cli("build", write(tmp_path, text), "-o", str(out), "--no-verify", "--target", "tofino+dpdk")
    assert r.returncode == 0, r.stderr
    assert "[W086]" in r.stderr and "table 'big'" in r.stderr and "shard by hash(meta.k);" in r.stderr, r.stderr
    assert "[W084]" not in r.stderr
    plan = json.loads((out / "plan.json").read_text())
    assert plan["targets"]["shard"]["keys"][0].startswith("meta.k") and len(plan["targets"]["shard"]["keys"]) == 1
    assert plan["resources"]["server"]["servers_carrying"] == 3
    assert {t["name"]: t.get("server", {}).get("shard_fields") for t in plan["tables"]}["big"] == [0]

@pytest.mark.parametrize(("index", "servers", "cells_from"), [("x.slot", 3, [["slots", "slot"]]), ("meta.j", 3, None),
                                                             ("meta.j", 1, [])])
def test_a_monotonic_register_names_the_split_tables_values_that_index_it(tmp_path, index, servers, cells_from):
    """``register ... monotonic;`` prints back as written, and plan.json says which table's
    value field names the cells (``slots`` is keyed by the shard key: split, so a moved
    bucket's cells are its entries'); indexed by anything else, a sharded build is E061 at the
    index (a move could not tell which cells go along), and one server's plan names none."""
    text = _program("shard by hash(meta.k);" if servers > 1 else "").replace(
        "stage pick {",
        "register seq: bit<32>[256] monotonic;\n"
        "table slots { key { meta.k: exact; } value { slot: bit<8>; } size = 256; }\n"
        "stage pick {").replace(
        "  forward(1);\n",
        f"  lookup slots {{ hit(x) {{ seq[{index}] = seq[{index}] + 1; }} miss {{ drop(no_slot); }} }}\n"
        "  forward(1);\n")
    if servers == 1:
        text = text.replace("servers = [srv, srv, srv];", "servers = [srv];").replace("[40..42]", "[40..40]")
    assert print_module(parse_text(text, "t.nfp", Diagnostics())).count("register seq: bit<32>[256] monotonic;") == 1
    out = tmp_path / "out"
    r = nfc_cli("build", write(tmp_path, text), "-o", str(out), "--no-verify", "--target", "tofino+dpdk")
    if cells_from is None:
        assert r.returncode != 0 and "[E061]" in r.stderr and "monotonic register 'seq' is indexed here" in r.stderr
        assert r.stderr.count("^") >= 1 and "t.nfp:" in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr
    plan = json.loads((out / "plan.json").read_text())
    (seq,) = [o for o in plan["objects"] if o["name"] == "seq"]
    assert (seq["placement"], seq["monotonic"], seq["cells_from"]) == ("server", True, cells_from)
    assert {t["name"]: t.get("server", {}).get("shard_fields") for t in plan["tables"]}["slots"] == \
        ([0] if servers > 1 else None)


def test_a_key_the_switch_never_sets_before_the_cut_is_a_warning(tmp_path):
    text = _program("shard by hash(meta.k);").replace("meta.k = ipv4.dst[31:24]; ", "")
    text = text.replace("  forward(1);\n", "  meta.k = ipv4.dst[31:24];\n  forward(1);\n")  # on the server: too late
    r = nfc_cli("build", write(tmp_path, text), "-o", str(tmp_path / "out"), "--no-verify", "--target", "tofino+dpdk")
    assert r.returncode == 0 and "[W085]" in r.stderr, r.stderr
    assert "pipeline 'main' sends packets to the servers (main) before its switch part sets any shard key" in r.stderr


@pytest.mark.parametrize(("shard", "carrying"), [("", 1), ("shard by hash(meta.k);", 3)])
def test_only_the_servers_that_get_packets_count_towards_cores_and_links(tmp_path, shard, carrying):
    """Three servers of 2 cores and 10 Gbit/s: without shard by, the first gets every packet."""
    text = _program(shard).replace("target srv = dpdk_server { cores = 2; }",
                                   "target srv = dpdk_server { cores = 2; link = 10Gbps; }")
    r = nfc_cli("build", write(tmp_path, text), "-o", str(tmp_path / "out"), "--no-verify", "--target", "tofino+dpdk")
    assert r.returncode == 0, r.stderr
    res = json.loads((tmp_path / "out/plan.json").read_text())["resources"]["server"]
    assert (res["servers_carrying"], res["cores_available"], res["link_gbps_available"]) == (
        carrying, 2 * carrying, 10.0 * carrying)
    report = (tmp_path / "out/report.txt").read_text()
    assert ("server cores (the first srv of 3: no shard by)" in report) == (carrying == 1), report


@pytest.mark.parametrize(("key", "keyed", "assumed"), [
    ("ipv4.src", (), ("seen",)),  # a subscriber's packets could reach several servers: assumed
    ("meta.k", ("seen",), ()),  # keyed by the shard key: on one server by construction
])
def test_verify_names_the_state_the_sharding_keeps_apart_and_what_it_assumes(tmp_path, key, keyed, assumed):
    text = _program("shard by hash(meta.k);").replace("key { ipv4.src: exact; }", f"key {{ {key}: exact; }}")
    c = compile_file(write(tmp_path, text))
    state = server_state(c.program, c.placement, c.targets)
    assert (state.keyed, state.assumed) == (keyed, assumed)
    r = nfc_cli("build", write(tmp_path, text), "-o", str(tmp_path / "out"), "--target", "tofino+dpdk")
    assert r.returncode == 0, r.stderr
    said = "kept on one server by its key: seen" if keyed else "assumed used by one shard's packets"
    assert said in r.stderr, r.stderr


def test_a_range_key_is_at_most_32_bits(tmp_path):
    src = write(tmp_path, _program("shard by range(meta.k ++ meta.k ++ meta.k ++ meta.k ++ meta.k);"))
    r = nfc_cli("build", src, "-o", str(tmp_path / "out"), "--no-verify", "--target", "tofino+dpdk")
    assert "[E060]" in r.stderr and "40-bit key: at most 32 bits" in r.stderr, r.stderr


CLAUSES = {"hash": "shard by hash(meta.k);", "range": "shard by range(meta.k);",
           "hash2": "shard by hash(meta.k, meta.j);",  # 11 bits: padded to 16 before the CRC
           "range3": "shard by range(meta.j);"}  # 3 bits: 8 buckets, the key's own values
SELECTOR_BITS = {"hash": 16, "range": 8, "hash2": 16, "range3": 3}


@pytest.fixture(scope="module", params=sorted(CLAUSES))
def sharded(tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp(f"shard_{request.param}")
    src = write(tmp, _program(CLAUSES[request.param]))
    out = tmp / "out"
    r = nfc_cli("build", src, "-o", str(out), "--target", "tofino+dpdk")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    return request.param, src, out


def _expected_server(method: str, k: int, j: int) -> int:
    """The selector's top 8 bits (all of a shorter one) are its bucket; server i of 3 takes
    buckets [i * B / 3, (i + 1) * B / 3) of B (docs/language.md); hash2's selector is the CRC
    of k's 8 bits, j's 3 and 5 zero bits."""
    value = {"hash": crc16_arc(bytes([k])), "range": k, "range3": j,
             "hash2": crc16_arc(((k << 8) | (j << 5)).to_bytes(2, "big"))}[method]
    bits = SELECTOR_BITS[method]
    buckets = 1 << min(8, bits)
    bucket = value >> (bits - min(8, bits))
    return next(i for i in (2, 1, 0) if bucket >= i * buckets // 3)


@pytest.mark.parametrize("arch", ["tna", "v1model"])
def test_the_switch_sends_each_packet_to_the_server_its_key_picks(sharded, arch):
    method, _src, out = sharded
    _plan, _placed, model = open_build(out, arch)
    seen = set()
    for k in range(0, 256, 5):
        data = _packet(f"{k}.1.2.{k % 8}")
        o = model.process(data, 3)
        want = _expected_server(method, k, k % 8)
        seen.add(want)
        assert (o.kind, o.port) == ("forward", 40 + want), (k, o)
    assert seen == {0, 1, 2}


def test_plan_json_lists_each_servers_share(sharded):
    method, _src, out = sharded
    shard = json.loads((out / "plan.json").read_text())["targets"]["shard"]
    bits = SELECTOR_BITS[method]
    assert shard["by"] == method.rstrip("23") and shard["selector_bits"] == bits
    if bits >= 8:
        assert shard["bucket_bits"] == 8
        b = 1 << (bits - 8)  # selector values per bucket; 256 buckets: 85, 85, 86
        want = [(40, 0, 85 * b - 1), (41, 85 * b, 170 * b - 1), (42, 170 * b, 256 * b - 1)]
    else:  # a 3-bit key: its 8 values are the buckets, 2, 3 and 3
        assert shard["bucket_bits"] == 3
        want = [(40, 0, 1), (41, 2, 4), (42, 5, 7)]
    assert [(s["port"], s["first"], s["last"]) for s in shard["shares"]] == want


def test_a_server_alone_ignores_the_clause(tmp_path):
    src = write(tmp_path, _program("shard by hash(meta.k);"))
    r = nfc_cli("build", src, "-o", str(tmp_path / "out"), "--no-verify", "--target", "dpdk")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "out/plan.json").read_text())["targets"]["shard"] is None


# ---- the IPsec gateway over two GPNs -------------------------------------------------------



@pytest.fixture(scope="module")
def ipsec(tmp_path_factory):
    return build_with_server("examples/ipsec_gateway.nfp", tmp_path_factory.mktemp("ipsec") / "out",
                             "--target", "tofino+dpdk")


@needs_dpdk
def test_both_gpns_carry_their_tunnels_and_hold_every_sa(ipsec, tmp_path):
    """Tunnels 9 and 11 hash (CRC-16/ARC of the 16-bit tunnel) to different GPNs: each GPN gets
    its tunnel's packets, inbound and outbound; the SA tables are on both."""
    from tests.support import ipsec as esp

    out = ipsec
    gpn = {t: _gpn(t) for _spi_in, _spi_out, t, _k, _s in esp.SAS}
    assert sorted(gpn.values()) == [0, 1]
    n = 6
    outbound = [esp.tenant(sa[2], i) for sa in esp.SAS for i in range(1, n + 1)]
    inbound = [esp.inbound(a, seq, bytes(IP(src="192.168.9.9", dst="10.8.0.1", id=seq)))
               for a in range(2) for seq in range(1, 4)]
    work = tmp_path / "run"
    got, drops = nfc_run(out, esp.entries(), {esp.VNET_PORT: outbound, esp.INTERNET_PORT: inbound}, work)
    assert sum(drops.values()) == 0, drops
    assert sum(got[esp.INTERNET_PORT].values()) == 2 * n and sum(got[esp.VNET_PORT].values()) == 6
    servers = json.loads((work / "cap/counters.json").read_text())["servers"]
    want = [0, 0]
    for _spi_in, _spi_out, t, _k, _s in esp.SAS:
        want[gpn[t]] += n + 3
    assert [(s["port"], s["received"], s["forwarded"]) for s in servers] == [(32, want[0], want[0]),
                                                                            (33, want[1], want[1])]


def _gpn(tunnel: int) -> int:
    return int(crc16_arc(tunnel.to_bytes(2, "big")) >= 0x8000)


_SA = {"meta_tunnel": 9, "spi": 0x2001, "key": 1 << 100, "salt": 7, "peer": 0xC6336407, "seq_index": 9}
_IN_SA = {"esp_spi": 0x1001, "key": 1 << 100, "salt": 7, "sa_index": 9, "vnet_port": 18, "vnet_mac": 0x020000000A01}


@pytest.fixture
def fleet(ipsec):
    with ServerProcess(ipsec / "server/nf", ["net_null0"]) as a, ServerProcess(ipsec / "server/nf", ["net_null0"]) as b:
        rt = Runtime.connect(ipsec, control=[a.socket, b.socket])
        yield rt, a, b
        rt.close()


def _dumps(a, b, table):
    return [sorted(a.control.dump(table)), sorted(b.control.dump(table))]


@needs_dpdk
def test_a_fleet_writes_every_server_and_a_refused_write_changes_none(fleet):
    """inbound_sa is keyed by SPI, not by the shard key: every GPN holds all of it."""
    rt, a, b = fleet
    rt.table("inbound_sa").add(**_IN_SA)
    one = _dumps(a, b, "inbound_sa")
    assert one[0] == one[1] and len(one[0]) == 1
    assert rt.table("inbound_sa").read(esp_spi=0x1001)["sa_index"] == 9
    with pytest.raises(EntryExists):
        rt.table("inbound_sa").add(**_IN_SA)
    with pytest.raises(InvalidEntry):  # the second row's SPI is 33 bits: the batch is refused whole
        rt.table("inbound_sa").add_many([{**_IN_SA, "esp_spi": 5}, {**_IN_SA, "esp_spi": 1 << 32}])
    assert _dumps(a, b, "inbound_sa") == one


def test_plan_json_splits_the_tables_keyed_by_the_shard_key(ipsec):
    tables = {t["name"]: t for t in json.loads((ipsec / "plan.json").read_text())["tables"]}
    assert tables["outbound_sa"]["server"]["shard_fields"] == [0]  # meta.tunnel
    assert "shard_fields" not in tables["inbound_sa"]["server"]  # esp.spi: every GPN holds it
    share = tables["outbound_sa"]["server"]["share"]  # a hash spreads it: each GPN sized for half
    assert (share["servers"], share["entries"]) == (2, 32_000)
    assert 0 < share["memory_bytes"] < tables["outbound_sa"]["server"]["memory_bytes"]
    assert "share" not in tables["inbound_sa"]["server"]
    report = (ipsec / "report.txt").read_text()
    assert f"{fmt_bytes(share['memory_bytes'])} on each of 2 (sharded by meta_tunnel)" in report
    read = load_plan(ipsec).table("outbound_sa")
    assert (read.share_servers, read.share_bytes) == (2, share["memory_bytes"])


def test_a_table_split_by_a_range_is_counted_whole_on_each_server(tmp_path):
    """By a range of tunnels one GPN may be given every tunnel: outbound_sa is still split (each
    entry goes to one GPN) but each is sized and counted for the whole table."""
    src = tmp_path / "ipsec.nfp"
    text = (ROOT / "examples/ipsec_gateway.nfp").read_text()
    assert "shard by hash(meta.tunnel);" in text
    src.write_text(text.replace("shard by hash(meta.tunnel);", "shard by range(meta.tunnel);"))
    r = nfc_cli("build", str(src), "-o", str(tmp_path / "out"), "--no-verify")
    assert r.returncode == 0, r.stderr
    tables = {t["name"]: t for t in json.loads((tmp_path / "out/plan.json").read_text())["tables"]}
    assert tables["outbound_sa"]["server"]["shard_fields"] == [0] and "share" not in tables["outbound_sa"]["server"]
    full = fmt_bytes(tables["outbound_sa"]["server"]["memory_bytes"])
    report = (tmp_path / "out/report.txt").read_text()
    assert f"{full} (sharded by range of meta_tunnel: a server may hold all)" in report
    sized = re.search(r'\.name = "outbound_sa",.*?\.size = (\d+)u', (tmp_path / "out/server/nf.c").read_text(), re.S)
    assert sized is not None and int(sized[1]) == 64_000


def test_a_table_split_over_three_servers_is_sized_for_the_most_loaded(tmp_path):
    """Three GPNs split 256 buckets 85 / 85 / 86 (the steering the switch is given: plan.json's
    shares); with 64,001 tunnels over every bucket alike the third GPN holds 86 / 256 of them,
    21,501 rounded up, and that, not a third (21,334), is what each GPN's outbound_sa is sized
    and priced for.  The largest size that the hint of W087 names for a share is the inverse."""
    src = tmp_path / "ipsec.nfp"
    text = (ROOT / "examples/ipsec_gateway.nfp").read_text()
    servers = "servers = [gpn, gpn];\n  server_ports = [32..33];"
    assert servers in text and text.count("seq_index: bit<16>;  // this SA's slot of sa_seq\n  }\n  size = 64K;") == 1
    src.write_text(text.replace(servers, "servers = [gpn, gpn, gpn];\n  server_ports = [32..34];").replace(
        "seq_index: bit<16>;  // this SA's slot of sa_seq\n  }\n  size = 64K;",
        "seq_index: bit<16>;  // this SA's slot of sa_seq\n  }\n  size = 64001;"))
    r = nfc_cli("build", str(src), "-o", str(tmp_path / "out"), "--no-verify")
    assert r.returncode == 0, r.stderr
    plan = json.loads((tmp_path / "out/plan.json").read_text())
    shard = plan["targets"]["shard"]
    shift = shard["selector_bits"] - shard["bucket_bits"]
    buckets = [(s["last"] + 1 - s["first"]) >> shift for s in shard["shares"]]
    assert sorted(buckets) == [85, 85, 86]
    table = {t["name"]: t for t in plan["tables"]}["outbound_sa"]
    assert table["size"] == 64_001
    most = -(-max(buckets) * table["size"] // (1 << shard["bucket_bits"]))
    assert most == 21_501
    share = table["server"]["share"]
    assert (share["servers"], share["entries"]) == (3, most)
    sized = re.search(r'\.name = "outbound_sa",.*?\.size = (\d+)u', (tmp_path / "out/server/nf.c").read_text(), re.S)
    assert sized is not None and int(sized[1]) == most
    for n in (1, 2, 3, 5, 7, 256):
        size = size_for_share(most, n)
        assert entries_share(size, n) <= most < entries_share(size + 1, n)


@needs_dpdk
def test_a_split_table_puts_each_entry_on_the_server_its_packets_reach(fleet):
    """outbound_sa is keyed by meta.tunnel, the shard key: tunnel 9's SA only on GPN 0,
    tunnel 11's only on GPN 1 (the independent CRC says so); a batch that GPN 1 refuses in
    part is taken back from GPN 0 too."""
    rt, a, b = fleet
    assert (_gpn(9), _gpn(11)) == (0, 1)
    out = rt.table("outbound_sa")
    out.add_many([_SA, {**_SA, "meta_tunnel": 11, "seq_index": 11}])
    held = [[r[0] for r in a.control.dump("outbound_sa")], [r[0] for r in b.control.dump("outbound_sa")]]
    assert held == [[9], [11]]
    assert (out.read(meta_tunnel=9)["seq_index"], out.read(meta_tunnel=11)["seq_index"]) == (9, 11)
    with pytest.raises(EntryExists):  # 3 is GPN 0's and new; 11 is GPN 1's and there already
        out.add_many([{**_SA, "meta_tunnel": 3}, {**_SA, "meta_tunnel": 11}])
    assert [[r[0] for r in a.control.dump("outbound_sa")], [r[0] for r in b.control.dump("outbound_sa")]] == held
    record = [_SA[k] for k in ("meta_tunnel", "spi", "key", "salt", "peer", "seq_index")]
    assert _gpn(19) == 1
    with pytest.raises(EntryNotFound):  # modify 9 (GPN 0) and 19 (GPN 1, absent): 9 keeps its values
        rt.server.write("modify", "outbound_sa", [[*record[:-1], 99], [19, *record[1:]]])
    assert out.read(meta_tunnel=9)["seq_index"] == 9
    with pytest.raises(EntryNotFound):  # delete 9 and 19: 9 is put back
        rt.server.write("delete", "outbound_sa", [[9], [19]])
    assert out.read(meta_tunnel=9)["seq_index"] == 9 and len(rt.server.dump("outbound_sa")) == 2
    rt.table("inbound_sa").add(**_IN_SA)
    tables = rt.server.counters()["tables"]  # a split table's entries add up, a replicated one's do not
    assert (tables["outbound_sa"]["entries"], tables["inbound_sa"]["entries"]) == (2, 1)


@needs_dpdk
def test_a_split_table_is_sized_for_each_servers_share(ipsec):
    """outbound_sa (size 64000) is split by tunnel over two GPNs: each server sizes it for its
    share, 32,000, as the memory model prices it.  Loaded by ADDs of 1,000 with all 64,000
    tunnels (32,000 on each GPN by the independent CRC), a GPN's table grows to room for 32,000
    below 7/8 full, 32,000 + 32,000 // 7 + 1 = 36,572 slots (sized for the whole 64,000 it went on
    to 65,536).  1,000 tunnels more take each past its share, by a quarter (grow_past_div 4):
    36,572 + 9,143 = 45,715 (the fourfold step took it to 146,288)."""
    plan = {t["name"]: t for t in json.loads((ipsec / "plan.json").read_text())["tables"]}
    assert plan["outbound_sa"]["size"] == 64_000

    def grown(a: ServerProcess, b: ServerProcess, end: int) -> list[int]:
        """Each GPN's capacity, with tunnels [0, end) loaded: each holds those the CRC gives it."""
        capacity = []
        for gpn in (a, b):
            with ControlChannel(gpn.socket) as again:  # HELLO again: the capacities now
                capacity.append(again.tables["outbound_sa"].capacity)
        assert [gpn.control.counters()["tables"]["outbound_sa"]["entries"] for gpn in (a, b)] == \
            [sum(_gpn(t) == g for t in range(end)) for g in (0, 1)]
        return capacity

    with ServerProcess(ipsec / "server/nf", ["net_null0"]) as a, ServerProcess(ipsec / "server/nf", ["net_null0"]) as b:
        rt = Runtime.connect(ipsec, control=[a.socket, b.socket])
        try:
            at = []
            for firsts in (range(0, 64_000, 1_000), range(64_000, 65_000, 1_000)):  # batches within a step
                for first in firsts:
                    rt.table("outbound_sa").add_many([{**_SA, "meta_tunnel": t, "seq_index": t % 64_000}
                                                      for t in range(first, first + 1_000)])  # 64K cells: 64,000
                at.append(grown(a, b, firsts.stop))
        finally:
            rt.close()
    assert [sum(_gpn(t) == g for t in range(64_000)) for g in (0, 1)] == [32_000, 32_000]
    assert at == [[36_572, 36_572], [45_715, 45_715]]
    assert server_capacity(entries_share(64_000, 2)) == 36_572  # what the model prices each GPN for


@needs_dpdk
@pytest.mark.parametrize("monotonic", [False, True])
def test_a_register_cell_reads_from_the_server_whose_packets_changed_it(ipsec, monotonic):
    """A cell changed by one server's packets reads as that server's; changed on two, it has no
    single value — unless the register is ``monotonic`` (sa_seq as the example declares it):
    then the highest, which is where a moved cell's new owner goes on from."""
    plan = load_plan(ipsec)
    assert plan.object("sa_seq").monotonic
    if not monotonic:  # the same program as if sa_seq were declared without the keyword
        plan = replace(plan, objects=tuple(replace(o, monotonic=False, cells_from=()) for o in plan.objects))
    with ServerProcess(ipsec / "server/nf", ["net_null0"]) as a, ServerProcess(ipsec / "server/nf", ["net_null0"]) as b:
        seq = Runtime(ipsec, server=ServerFleet([a.control, b.control], plan)).register("sa_seq")
        seq.write(9, 5)
        assert [a.control.object_read("sa_seq", [9]), b.control.object_read("sa_seq", [9])] == [[(5,)], [(5,)]]
        assert seq.read(9) == 5 and seq.read(10) == 0
        b.control.object_write("sa_seq", [(9, 8)])  # as tunnel 9's packets would, on its GPN
        assert seq.read(9) == 8
        a.control.object_write("sa_seq", [(9, 6)])  # and on the other: no single value
        if monotonic:
            assert seq.read(9) == 8
        else:
            with pytest.raises(InvalidEntry, match=r"sa_seq\[9\] was changed differently on several servers \(6, 8\)"):
                seq.read(9)


@needs_dpdk
def test_a_monotonic_cells_new_owner_starts_past_the_old_one_and_an_overrun_is_named(fleet):
    """runtime/carry.py on its own, the old owner's packets written as its lcore would: the new
    owner starts at the old value + the margin (its first number one more); an old owner that
    went on past that start (more packets before the steering flipped than the margin) is named
    an overrun, the live cell left alone; a start that would pass 2^32 - 1 is the top, used up."""
    rt, a, b = fleet
    rt.table("outbound_sa").add_many([_SA, {**_SA, "meta_tunnel": 11, "seq_index": 11}])
    (rec,) = b.control.dump("outbound_sa")  # tunnel 11's, on GPN 1
    f = rt.server
    bucket = f.bucket("outbound_sa", rec)
    top = 0xFFFFFFFF
    for last, start, after, used, over in [(40, 50, 50, {}, {}), (40, 50, 51, {}, {"sa_seq": [11]}),
                                           (top - 6, top, top - 6, {"sa_seq": [11]}, {})]:
        b.control.object_write("sa_seq", [(11, last)])
        a.control.object_write("sa_seq", [(11, 3)])
        carried = carry.forward(f, rt.plan, {bucket: 0}, {bucket: 1}, {"outbound_sa": [list(rec)]}, 10)
        assert carried.count() == {"sa_seq": 1, "replay_check state": 0}
        assert a.control.object_read("sa_seq", [9, 11]) == [(0,), (start,)]
        b.control.object_write("sa_seq", [(11, after)])  # what GPN 1 sent before the switch steered away
        assert carry.check(f, carried, rt.plan) == carry.Checked(used, over)
        assert a.control.object_read("sa_seq", [11]) == [(start,)]  # never written once live
    with pytest.raises(InvalidEntry, match="margin 0: at least 1"):
        carry.forward(f, rt.plan, {bucket: 0}, {bucket: 1}, {"outbound_sa": [list(rec)]}, 0)


@needs_dpdk
def test_an_entry_naming_a_monotonic_cell_out_of_range_is_refused(fleet):
    """seq_index is 16 bits, sa_seq 64,000 cells: an SA at slot 64,000 would read 0 and store
    nothing (number 1 for every packet, the GCM nonce again and again), so the runtime refuses
    it, in a bulk add naming the row, and writes none of the batch."""
    rt, a, b = fleet
    with pytest.raises(InvalidEntry, match=r"outbound_sa.seq_index: 64000 is not a cell of monotonic register "
                                           r"sa_seq \(0..63999\)") as e:
        rt.table("outbound_sa").add_many([_SA, {**_SA, "meta_tunnel": 11, "seq_index": 64000}])
    assert e.value.index == 1 and _dumps(a, b, "outbound_sa") == [[], []]
    rt.table("outbound_sa").add(**{**_SA, "seq_index": 63999})
    with pytest.raises(InvalidEntry, match="not a cell"):
        rt.table("outbound_sa").modify(**{**_SA, "seq_index": 65535})
    assert rt.table("outbound_sa").read(meta_tunnel=9)["seq_index"] == 63999


@needs_dpdk
def test_replay_windows_read_and_merge_over_the_control_channel(ipsec):
    """WINDOWS / WINDOW_MERGE (docs/control.md): a merged window holds every number either
    window saw, aligned at the higher top (RFC 4303 Appendix A's bit i = top - i); a window
    64 or more behind adds nothing; 50,000 windows come back (in one reply); a bad SA number
    is refused."""
    with ServerProcess(ipsec / "server/nf", ["net_null0"]) as a:
        ch = a.control
        assert ch.windows() == []
        ch.window_merge([(5, 100, 0b1011), (7, 3, 1)])
        assert sorted(ch.windows()) == [(5, 100, 0b1011), (7, 3, 1)]
        ch.window_merge([(5, 102, 1), (7, 2, 1)])  # 5: theirs ahead by 2; 7: theirs one behind
        assert sorted(ch.windows()) == [(5, 102, (0b1011 << 2) | 1), (7, 3, 0b11)]
        ch.window_merge([(5, 38, 1), (5, 39, 1)])  # 38 is 64 behind 102: out of the window; 39 is its oldest
        assert sorted(ch.windows())[0] == (5, 102, (0b1011 << 2) | 1 | (1 << 63))
        with pytest.raises(RuntimeApiError, match="below 2"):
            ch.window_merge([(1 << 32, 1, 1)])
        ch.window_merge([(1000 + i, i, 1) for i in range(50_000)])
        got = ch.windows()
        assert len(got) == 50_002 and len(set(got)) == 50_002 and (1000 + 49_999, 49_999, 1) in got


@needs_dpdk
def test_a_server_that_died_is_named_and_the_first_keeps_the_write(fleet):
    rt, a, b = fleet
    b.stop()
    with pytest.raises(ChannelError, match=r"server 1 .* failed after the servers before it took it"):
        rt.table("inbound_sa").add(**_IN_SA)
    assert len(a.control.dump("inbound_sa")) == 1


def test_merged_counters_sum_packets_and_take_the_largest_of_what_each_server_holds_whole():
    a = {"forwarded": 3, "drops": {"x": 1}, "tables": {"sa": {"hits": 2, "entries": 4}, "seen": {"entries": 3}},
         "state_copy": {"max_ns": 10, "slices": 1}}
    b = {"forwarded": 4, "drops": {"y": 2}, "tables": {"sa": {"hits": 1, "entries": 4}, "seen": {"entries": 5}},
         "state_copy": {"max_ns": 30, "slices": 2}}
    assert merge_counters([a, b], {"sa"}) == {
        "forwarded": 7, "drops": {"x": 1, "y": 2},
        "tables": {"sa": {"hits": 3, "entries": 4}, "seen": {"entries": 8}},  # replicated: 4; state: 3 + 5
        "state_copy": {"max_ns": 30, "slices": 3}}


@needs_dpdk
def test_a_restarted_server_gets_its_part_back_from_the_goal_state(ipsec, tmp_path):
    """GPN 1 restarts empty while GPN 0 keeps everything: reconcile repairs GPN 1 alone, with
    the replicated inbound SA and its own share of the split outbound SAs (tunnel 11)."""
    goal = tmp_path / "goal.sqlite"
    nf = ipsec / "server/nf"
    with ServerProcess(nf, ["net_null0"]) as a:
        with ServerProcess(nf, ["net_null0"]) as b:
            rt = Runtime(ipsec, server=ServerFleet([a.control, b.control], load_plan(ipsec)), goal=GoalStore(goal))
            rt.table("inbound_sa").add(**_IN_SA)
            rt.table("outbound_sa").add_many([_SA, {**_SA, "meta_tunnel": 11, "seq_index": 11}])
            rt.goal.close()
        with ServerProcess(nf, ["net_null0"]) as b2:  # a new GPN 1: empty
            assert b2.control.dump("inbound_sa") == [] and b2.control.dump("outbound_sa") == []
            rt = Runtime(ipsec, server=ServerFleet([a.control, b2.control], load_plan(ipsec)), goal=GoalStore(goal))
            report = rt.reconcile()
            assert (report["inbound_sa"]["server"].added, report["outbound_sa"]["server"].added) == (1, 1)
            assert [r[0] for r in b2.control.dump("outbound_sa")] == [11]
            # the new GPN 1's count for tunnel 11 started again at 0: its slot is used up until IKE rekeys
            # (RFC 4303 §3.3.3), GPN 0's untouched (it kept its entry)
            assert report["outbound_sa"]["server"].used_up == {"sa_seq": [11]}
            assert b2.control.object_read("sa_seq", [11]) == [(0xFFFFFFFF,)]
            assert a.control.object_read("sa_seq", [9, 11]) == [(0,), (0,)]
            assert [r[0] for r in a.control.dump("outbound_sa")] == [9]
            assert len(b2.control.dump("inbound_sa")) == 1
            assert not any(rt.reconcile()[t]["server"] for t in ("inbound_sa", "outbound_sa"))  # nothing left
            rt.goal.close()


@needs_dpdk
@pytest.mark.parametrize("arch", ["tna", "v1model"])
def test_a_dead_gpn_is_detected_and_its_tunnels_move_to_the_other_entries_first(ipsec, tmp_path, arch):
    """GPN 1 (tunnel 11's) dies: the fleet sees it stop answering; fail_over gives GPN 0
    tunnel 11's outbound SA from the goal state, then the switch steers GPN 1's buckets to GPN
    0's port; tunnel 9 is untouched; the dead GPN's state is reported lost.  A new GPN joining
    on port 33 gets the replicated SAs and half the buckets back (GPN 1's, the fewest moves)."""
    from tests.support import ipsec as esp

    sw = P4RuntimeSwitch(ipsec, arch)
    nf = ipsec / "server/nf"
    try:
        with ServerProcess(nf, ["net_null0"]) as a, ServerProcess(nf, ["net_null0"]) as b:
            fleet = ServerFleet([a.control, b.control], load_plan(ipsec))
            rt = Runtime(ipsec, switch=sw.client, server=fleet, goal=GoalStore(tmp_path / "goal.sqlite"))
            (tmp_path / "e.json").write_text(json.dumps(esp.entries()))
            rt.load(load_entries(tmp_path / "e.json"))

            def port_of(tunnel: int) -> int:
                o = sw.model.process(esp.tenant(tunnel, 1), esp.VNET_PORT)
                assert o.kind == "forward", o
                return o.port

            assert (port_of(9), port_of(11)) == (32, 33)
            assert fleet.alive() == [True, True] and rt.check_servers() == []
            b.stop()
            assert fleet.alive() == [True, False]
            (report,) = rt.check_servers()  # the liveness round moves GPN 1's buckets to GPN 0
            assert (report.dead, report.to, report.buckets) == (1, (0,), {0: 128}) and rt.check_servers() == []
            assert report.copied == {"outbound_sa": 1} and [k[0] for k in report.moved["outbound_sa"]] == [11]
            assert sorted(r[0] for r in a.control.dump("outbound_sa")) == [9, 11]
            assert report.lost == ("replay_check state",)  # the replay windows; sa_seq is carried forward:
            # GPN 1's count died with it, so tunnel 11's slot on GPN 0 is used up until IKE rekeys
            assert report.carried == {"sa_seq": 1} and report.must_rekey == {"sa_seq": [11]}
            assert a.control.object_read("sa_seq", [9, 11]) == [(0,), (0xFFFFFFFF,)]
            assert (port_of(9), port_of(11)) == (32, 32)
            assert rt.table("outbound_sa").read(meta_tunnel=11)["seq_index"] == 11  # asked of GPN 0 now
            with ServerProcess(nf, ["net_null0"]) as c:  # GPN 1 replaced
                joined = rt.add_server(c.control, 33)
                assert joined.buckets == {2: 128} and joined.copied == {"outbound_sa": 1}
                assert (port_of(9), port_of(11)) == (32, 33)
                assert [r[0] for r in c.control.dump("outbound_sa")] == [11]
                assert sorted(c.control.dump("inbound_sa")) == sorted(a.control.dump("inbound_sa")) != []
                assert [r[0] for r in a.control.dump("outbound_sa")] == [9]  # GPN 0's copy deleted
                with pytest.raises(InvalidEntry):
                    rt.steer(256, 0)  # 256 buckets
                with pytest.raises(InvalidEntry):
                    rt.move({0: 1})  # GPN 1 is gone
            rt.goal.close()
    finally:
        sw.close()




@settings(derandomize=True, max_examples=300, deadline=None)
@given(route=st.lists(st.integers(0, 5), min_size=1, max_size=64),
       servers=st.sets(st.integers(0, 7), min_size=1, max_size=6))
def test_rebalancing_moves_the_fewest_buckets_to_counts_within_one(route, servers):
    """After ``balance`` every bucket is on one of ``servers``, their counts differ by at most
    one, and no assignment with counts within one needs fewer moves (an oracle over which
    servers take the larger count)."""
    targets = sorted(servers)
    moves = balance(route, targets)
    after = [moves.get(b, r) for b, r in enumerate(route)]
    counts = Counter(after)
    assert set(after) <= servers and all(route[b] != t for b, t in moves.items())
    assert max(counts[t] for t in targets) - min(counts[t] for t in targets) <= 1
    n, k, held = len(route), len(targets), Counter(route)
    fewest = min(n - sum(min(held[t], n // k + (t in big)) for t in targets) for big in combinations(targets, n % k))
    assert len(moves) == fewest


@needs_dpdk
def test_a_server_removed_without_a_goal_hands_its_entries_over_before_its_packets(ipsec, tmp_path):
    """No goal state: the leaving GPN's split entries come from its own dump; after the move
    GPN 0 holds both tunnels' outbound SAs and gets both tunnels' packets, GPN 1 holds none,
    and a write of tunnel 11's SA goes to GPN 0."""
    from tests.support import ipsec as esp

    sw = P4RuntimeSwitch(ipsec)
    nf = ipsec / "server/nf"
    try:
        with ServerProcess(nf, ["net_null0"]) as a, ServerProcess(nf, ["net_null0"]) as b:
            rt = Runtime(ipsec, switch=sw.client, server=ServerFleet([a.control, b.control], load_plan(ipsec)))
            (tmp_path / "e.json").write_text(json.dumps(esp.entries()))
            rt.load(load_entries(tmp_path / "e.json"))
            assert [r[0] for r in b.control.dump("outbound_sa")] == [11]
            b.control.object_write("sa_seq", [(11, 1000)])  # tunnel 11 sent 1000 packets on GPN 1
            a.control.object_write("sa_seq", [(11, 3)])  # and, long ago, 3 on GPN 0
            report = rt.remove_server(1)
            assert report.buckets == {0: 128} and report.copied == {"outbound_sa": 1}
            assert report.lost == ()  # the sequence slot and the replay windows go along
            # GPN 0 goes on from beyond GPN 1's last number, the margin left for what GPN 1 still sent
            assert report.carried == {"sa_seq": 1, "replay_check state": 0} and report.must_rekey == {}
            assert a.control.object_read("sa_seq", [9, 11]) == [(0,), (1000 + carry.MARGIN,)]
            assert sorted(r[0] for r in a.control.dump("outbound_sa")) == [9, 11]
            assert b.control.dump("outbound_sa") == []
            ports = {t: sw.model.process(esp.tenant(t, 1), esp.VNET_PORT).port for t in (9, 11)}
            assert ports == {9: 32, 11: 32}
            sa = rt.table("outbound_sa").read(meta_tunnel=11)
            rt.table("outbound_sa").modify(**{**sa, "meta_tunnel": 11, "seq_index": 12})
            assert [r[-1] for r in a.control.dump("outbound_sa") if r[0] == 11] == [12]
            assert rt.rebalance() == type(report)()  # nothing left to move
    finally:
        sw.close()


@needs_dpdk
def test_moves_overwrite_a_leftover_copy_refuse_bad_targets_and_retire_a_dead_server_without_buckets(ipsec, tmp_path):
    """A copy of tunnel 11's SA that an earlier failed move left on GPN 0 (other values) is
    overwritten by the move, not a reason to fail it; fail-overs and rebalances to no server,
    to the dead one or to a server twice change nothing; a server that dies holding no bucket
    is retired by the liveness round, so that replicated writes go on."""
    from tests.support import ipsec as esp

    sw = P4RuntimeSwitch(ipsec)
    nf = ipsec / "server/nf"
    try:
        with ServerProcess(nf, ["net_null0"]) as a, ServerProcess(nf, ["net_null0"]) as b:
            fleet = ServerFleet([a.control, b.control], load_plan(ipsec))
            rt = Runtime(ipsec, switch=sw.client, server=fleet)
            (tmp_path / "e.json").write_text(json.dumps(esp.entries()))
            rt.load(load_entries(tmp_path / "e.json"))
            (sa9,), (sa11,) = a.control.dump("outbound_sa"), b.control.dump("outbound_sa")
            a.control.write("add", "outbound_sa", [[*sa11[:-1], sa11[-1] + 100]])  # the leftover, stale
            for bad in ([], [1], [0, 0], [7]):
                with pytest.raises(InvalidEntry):
                    rt.fail_over(1, bad)
                assert fleet.down == set() and fleet.buckets_of(1)
            with pytest.raises(InvalidEntry):
                rt.rebalance([0, 0])
            report = rt.remove_server(1)
            assert report.copied == {"outbound_sa": 1} and report.stale == {}
            with pytest.raises(InvalidEntry):
                rt.fail_over(1, [1])  # a bad target is refused even with nothing to move
            assert rt.fail_over(1, [0]).buckets == {} and fleet.down == {1}  # nothing left to move
            assert sorted(a.control.dump("outbound_sa")) == sorted([sa9, sa11])
            with ServerProcess(nf, ["net_null0"]) as c:
                rt.add_server(c.control, 33)
                assert fleet.buckets_of(2) and [r[0] for r in c.control.dump("outbound_sa")] == [11]
                rt.move(dict.fromkeys(fleet.buckets_of(2), 0))  # c keeps its replicated entries, no bucket
                assert not fleet.buckets_of(2) and c.control.dump("outbound_sa") == []
                # a controller restarted: its fleet routes the buckets where the switch steers them
                again = Runtime(ipsec, switch=sw.client, server=ServerFleet([a.control, c.control], load_plan(ipsec)))
                assert isinstance(again.server, ServerFleet) and again.server.route == [0] * 256
                c.stop()
                assert rt.check_servers() == [] and fleet.down == {1, 2}
                rt.table("inbound_sa").add(**{**_IN_SA, "esp_spi": 0x1999})  # replicated: GPN 0 alone now
                assert len(a.control.dump("inbound_sa")) == 3
    finally:
        sw.close()


@needs_dpdk
def test_a_dead_servers_flows_are_counted_lost_as_of_the_last_counters(tmp_path):
    """Three servers learn the sources of the packets the switch sends them (``state seen``);
    the fleet's counters are read, server 1 dies, and its fail-over counts exactly the sources
    it had learned (the switch model said which packets went to port 41) as lost entries."""
    from scapy.utils import RawPcapWriter

    out = build_with_server(write(tmp_path, _program("shard by hash(meta.k);")), tmp_path / "out",
                            "--target", "tofino+dpdk")
    _plan, _placed, model = open_build(out, "tna")
    to: dict[int, list[bytes]] = {40: [], 41: [], 42: []}
    learned: dict[int, set[str]] = {40: set(), 41: set(), 42: set()}
    for i in range(60):
        src = f"10.0.{i // 3}.1"  # each source three times, to one server each time (its k is fixed)
        o = model.process(_packet(f"{(i // 3) * 13 % 256}.1.2.3", src), 3)
        assert o.kind == "forward" and o.port in to, o
        to[o.port].append(o.data)
        learned[o.port].add(src)
    assert all(learned.values())
    procs = []
    sw = P4RuntimeSwitch(out)
    try:
        for port in (40, 41, 42):
            with RawPcapWriter(str(tmp_path / f"{port}.pcap"), linktype=1) as w:
                for data in to[port]:
                    w.write(data)
            procs.append(ServerProcess(out / "server/nf", [f"net_pcap0,rx_pcap={tmp_path / f'{port}.pcap'},"
                                                          f"tx_pcap={tmp_path / f'{port}.out.pcap'}"]))
        fleet = ServerFleet([s.control for s in procs], load_plan(out))
        rt = Runtime(out, switch=sw.client, server=fleet)
        for _ in range(100):  # each server has taken its packets
            if fleet.counters()["forwarded"] == 60:
                break
            time.sleep(0.05)
        assert fleet.counters()["tables"]["seen"]["entries"] == sum(len(v) for v in learned.values())
        procs[1].stop()
        (report,) = rt.check_servers()
        assert report.dead == 1 and report.to == (0, 2) and report.lost == ("seen",)
        assert report.lost_entries == {"seen": len(learned[41])}
    finally:
        for s in procs:
            s.stop()
        sw.close()

@needs_dpdk
def test_the_vpn_gateway_over_three_servers_split_by_overlay_agrees_with_the_spec(tmp_path):
    """Seed 000's overlay table scaled out (issue 16): the VPN gateway with three PE servers and
    ``shard by hash(meta.customer, meta.overlay)``; overlay_routes is split (each server a third),
    the servers keep no state, and nfc run (three server programs) forwards random traffic as
    the reference interpreter does, byte for byte."""
    from tests.support.differential import agree

    text = (ROOT / "examples/vpn_gateway.nfp").read_text()
    for old, new in (("servers = [pe_server];", "servers = [pe_server, pe_server, pe_server];"),
                     ("server_ports = [32..32];", "server_ports = [32..34];"),
                     ("  rate = 15Mpps;", "  shard by hash(meta.customer, meta.overlay);\n  rate = 15Mpps;")):
        assert old in text
        text = text.replace(old, new)
    src = tmp_path / "vpn_gateway.nfp"
    src.write_text(text)
    out = tmp_path / "out"
    r = nfc_cli("build", str(src), "-o", str(out), "--target", "tofino+dpdk")
    assert r.returncode == 0 and "the servers keep no state, so the whole is the spec" in r.stderr, r.stderr
    plan = json.loads((out / "plan.json").read_text())
    assert {t["name"]: t.get("server", {}).get("shard_fields") for t in plan["tables"]}["overlay_routes"] == [0, 1]
    assert plan["resources"]["server"]["servers_carrying"] == 3
    agree("vpn_gateway", src, out, tmp_path, 300)
