"""Targets are data: profiles, source overrides, --target resolution, pins, pipeline selection."""

from __future__ import annotations

import subprocess

import pytest

from compiler.interp import Interpreter
from compiler.placement import Direction
from compiler.profiles import ProfileError, load_profiles
from lang import CompileError
from tests.support import ROOT, compile_file, compile_ir, nfc_cli, write

PROG = """
import "std/headers.nfp";
packet { eth: ethernet; ip: ipv4; }
metadata { tag: bit<8>; }
parser p { state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: v4; default: accept; } }
           state v4 { extract ip; transition accept; } }
table fib { key { ip.dst: lpm; } value { port: bit<16>; } size = 1K; PIN }
stage mark { meta.tag = 7; }
stage route { lookup fib { hit(r) { forward(r.port); } miss { drop(no_route); } } }
stage other { forward(std.ingress_port + 100); }
ports all = [0..7];
pipeline ip_traffic { ports = all; parser = p; stages = [mark, route]; when valid(ip); }
pipeline rest { ports = all; parser = p; stages = [other]; }
target big = dpdk_server { cores = 32; clock = 3GHz; memory = 256GiB; link = 100Gbps; }
target bad = dpdk_server { colour = 3; }
deployment d { switch = tofino2; servers = [big]; server_ports = [32]; rate = 10Mpps; }
"""


def test_profiles_carry_their_sources():
    profiles = load_profiles()
    assert {"tofino1", "tofino2", "dpdk_server"} <= set(profiles)
    t1 = profiles["tofino1"]
    assert (t1.res("stages"), t1.res("sram_blocks"), t1.res("tcam_blocks")) == (12, 80, 24)
    assert "crypto" not in t1.ops and "crypto" in profiles["dpdk_server"].ops
    assert profiles["tofino2"].res("stages") == 20


def test_a_server_profile_without_its_table_layout_is_named(tmp_path):
    """A server profile's [memory] is the layout the memory model and the generator read: one
    that lacks a key is refused when the profiles load, naming the file and the keys."""
    shipped = (ROOT / "stdlib/targets/dpdk_server.toml").read_text()
    (tmp_path / "srv.toml").write_text(shipped.replace("key_unit = 16\n", "").replace("grow_by = 4\n", ""))
    with pytest.raises(ProfileError, match=r"stdlib/targets/srv\.toml: a server profile's \[memory\] lacks "
                                           r"key_unit, grow_by$"):
        load_profiles(tmp_path)
    (tmp_path / "srv.toml").write_text(shipped.replace("inline_lpm_value_bits = 56", "inline_lpm_value_bits = 64"))
    with pytest.raises(ProfileError, match=r"inline_lpm_value_bits = 64 \(the runtime takes 0\.\.56\)$"):
        load_profiles(tmp_path)
    (tmp_path / "srv.toml").write_text(shipped)
    assert load_profiles(tmp_path)["dpdk_server"].memory["key_unit"] == 16


def test_unknown_target_property_is_E060(tmp_path):
    with pytest.raises(CompileError) as e:
        compile_file(write(tmp_path, PROG.replace("PIN", "")))
    (d,) = e.value.diagnostics
    assert d.code == "E060" and "unknown property 'colour' for a server target" in d.message


def good(tmp_path, pin=""):
    return write(tmp_path, PROG.replace("PIN", pin).replace("target bad = dpdk_server { colour = 3; }\n", ""))


def test_aliases_follow_the_deployment(tmp_path):
    c = compile_file(good(tmp_path), "tofino+dpdk")
    assert c.targets.switch.name == "tofino2" and c.targets.server.name == "big"
    assert c.targets.server.res("cores") == 32 and c.targets.server.res("clock_ghz") == 3.0
    assert c.targets.server.res("memory_gib") == 256


def test_profile_names_on_the_command_line(tmp_path):
    c = compile_file(good(tmp_path), "tofino1+dpdk_server")
    assert (c.targets.switch.name, c.targets.server.name) == ("tofino1", "dpdk_server")


def test_deployment_link_is_each_servers_bandwidth_and_unknown_properties_are_E060(tmp_path):
    """``link`` in a deployment overrides the servers' switch-facing bandwidth (the VPN gateway
    says 40 Gbps); a property the deployment does not know is an error at its line, not ignored."""
    linked = PROG.replace("PIN", "").replace("target bad = dpdk_server { colour = 3; }\n", "").replace(
        "rate = 10Mpps;", "rate = 10Mpps; link = 25Gbps;")
    c = compile_file(write(tmp_path, linked), "tofino+dpdk", allow_overcommit=True)
    assert c.targets.server.res("link_gbps") == 25
    with pytest.raises(CompileError) as e:
        compile_file(write(tmp_path, linked.replace("link = 25Gbps;", "links = 25Gbps;")))
    (d,) = e.value.diagnostics
    assert d.code == "E060" and "unknown deployment property 'links'" in d.message
    assert (d.span.line, d.span.col) == (15, 87)  # the deployment line, at "links"


def test_unknown_target_name(tmp_path):
    with pytest.raises(CompileError) as e:
        compile_file(good(tmp_path), "tofino+fpga")
    assert "unknown target 'fpga'" in e.value.diagnostics[0].message


def test_pin_forces_the_server(tmp_path):
    assert compile_file(good(tmp_path)).placement.where("route") == "switch"
    c = compile_file(good(tmp_path, "pin = server;"))
    assert c.placement.where("route") == "server"
    # the stage before it stays on the switch, so meta.tag crosses in the bridge... only if read later:
    # route does not read meta.tag, so the bridge carries no fields
    assert [f.name for b in c.bridges for f in b.fields] == ["egress_port", "egress_set"]


@pytest.mark.parametrize(("pin", "target"), [("server", "tofino"), ("switch", "dpdk")])
def test_a_pin_to_a_target_the_build_lacks_is_named(tmp_path, pin, target):
    with pytest.raises(CompileError) as e:
        compile_file(good(tmp_path, f"pin = {pin};"), target, allow_overcommit=True)
    (d,) = e.value.diagnostics
    assert d.code == "E080" and d.span.line == 7, d.message  # the table fib
    assert f"'fib' is pinned to the {pin}" in d.message and f"no {pin} target" in d.message


def test_when_selects_among_pipelines_on_the_same_ports(tmp_path):
    from scapy.layers.inet import IP
    from scapy.layers.l2 import ARP, Ether

    it = Interpreter(compile_ir(good(tmp_path)))
    out = it.process(bytes(Ether() / ARP()), 3)
    # not IPv4: the second pipeline, port = ingress + 100, which is no port of the program's (0..7)
    assert (out.kind, out.reason) == ("drop", "no_such_port")
    out = it.process(bytes(Ether() / IP(dst="1.2.3.4")), 3)
    assert (out.kind, out.reason) == ("drop", "no_route")  # IPv4: the first pipeline


def test_bridge_carries_ingress_port_when_the_server_reads_it(tmp_path):
    src = good(tmp_path).replace  # noqa: F841 - readability
    text = PROG.replace("PIN", "").replace("target bad = dpdk_server { colour = 3; }\n", "")
    text = text.replace("stage other { forward(std.ingress_port + 100); }",
                        "table t2 { key { eth.src: exact; } value { x: bit<8>; } size = 100M; }\n"
                        "stage other { lookup t2 { hit(r) { forward(std.ingress_port + 100); } } }")
    c = compile_file(write(tmp_path, text))
    assert c.placement.where("other") == "server"
    to_server = next(b for b in c.bridges if b.pipeline == "rest" and b.direction is Direction.TO_SERVER)
    assert [f.name for f in to_server.fields] == ["std.ingress_port"]


def test_examples_root_exists():
    assert (ROOT / "examples" / "vpn_gateway.nfp").exists()


PORTS = PROG.replace("PIN", "").replace("target bad = dpdk_server { colour = 3; }\n", "")


@pytest.mark.parametrize(("change", "code", "line", "message"), [
    (("stage other { forward(std.ingress_port + 100); }", "stage other { forward(600); }"), "E084", 10,
     "forward to port 600, which no pipeline takes"),
    (("stage other { forward(std.ingress_port + 100); }", "stage other { forward(32); }"), "E084", 10,
     "forward to port 32, which no pipeline takes"),
    (("ports all = [0..7];", "ports all = [0..700];"), "E083", 12, "takes port 700 does not fit tofino2's 9-bit port"),
    (("server_ports = [32]", "server_ports = [512]"), "E083", 15, "server port 512 does not fit"),
    (("server_ports = [32]", "server_ports = [7]"), "E083", 15, "server port 7 also take a pipeline's packets"),
    (("server_ports = [32]; ", ""), "E083", 15, "must name the switch ports wired to the servers"),
])
def test_ports_are_checked_against_the_switch(tmp_path, change, code, line, message):
    """A port the switch cannot number would be truncated by the generated program (600 -> 88);
    a server port that is also an ingress port, or none at all, leaves the server's share
    nowhere to go: E083 at the construct.  A constant forward to a port no pipeline takes (a
    server port, a number past every pipeline's) would drop every packet there: E084."""
    with pytest.raises(CompileError) as e:
        compile_file(write(tmp_path, PORTS.replace(*change)), "tofino+dpdk", allow_overcommit=True)
    d = e.value.diagnostics[0]
    assert d.code == code and message in d.message and d.span.line == line, (d.span.line, d.message)


def test_without_a_deployment_the_server_port_is_assumed_and_said(tmp_path):
    src = PORTS[:PORTS.index("deployment d")]
    c = compile_file(write(tmp_path, src), "tofino+dpdk", allow_overcommit=True)
    assert c.targets.server_ports == (8,)  # the first after the pipelines' 0..7
    assert compile_file(write(tmp_path, PORTS.replace("server_ports = [32]; ", "")), "dpdk").placement is not None


SMALL = (ROOT / "tests/corpus/all_switch.nfp").read_text()


def _server_build(tmp_path, text: str) -> subprocess.CompletedProcess[str]:
    return nfc_cli("build", write(tmp_path, text), "-o", str(tmp_path / "b"),
                           "--target", "dpdk", "--no-verify")


def test_a_header_over_the_servers_64_byte_slot_is_named_at_its_declaration(tmp_path):
    """nfc_rt.h keeps a header in a 64-byte slot: a 65-byte header was memcpy'd past it."""
    big = "header big { " + " ".join(f"f{i}: bit<8>;" for i in range(65)) + " }\n"
    text = SMALL.replace("packet {\n", big + "packet {\n  b: big;\n")
    r = _server_build(tmp_path, text)
    line = text.splitlines().index(big.rstrip("\n")) + 1
    assert r.returncode == 1 and f"t.nfp:{line}:1: error[E100]: " in r.stderr, r.stderr
    assert "a header over 64 bytes ('big' is 65)" in r.stderr


def test_more_than_32_header_instances_are_named_at_the_33rd(tmp_path):
    extra = "".join(f"  v{i}: vlan_tag;\n" for i in range(32))
    text = SMALL.replace("packet {\n", "header vlan_tag { tci: bit<16>; tpid: bit<16>; }\npacket {\n")
    text = text.replace("  ipv4: ipv4;\n}", "  ipv4: ipv4;\n" + extra + "}")
    r = _server_build(tmp_path, text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.strip().startswith("v30:"))
    assert r.returncode == 1 and f"t.nfp:{line}:" in r.stderr and "more than 32 header instances" in r.stderr, r.stderr


@pytest.mark.parametrize(("key", "message"), [
    ("meta.a: range;", "range fields over 32 bits on the server (meta_a is bit<64>)"),
    ("meta.a: ternary; meta.b: ternary; meta.c: ternary; meta.d: ternary;",
     "keys over 64 bytes (a ternary or range table's rules: 7 chunks of 32 bits)"),
])
def test_a_server_classifier_it_cannot_lay_out_is_named_at_its_table(tmp_path, key, message):
    """rte_acl compares 32-bit chunks: a range over 32 bits would become a range per chunk; a
    rule key (values, masks, priority) over NFC_MAX_KEY bytes does not fit."""
    text = SMALL.replace("key { ipv4.dst: exact; }", "key { " + key + " }").replace(
        "parser p {", "metadata { a: bit<64>; b: bit<64>; c: bit<64>; d: bit<64>; }\n\nparser p {")
    r = _server_build(tmp_path, text)
    line = text.splitlines().index("table fib {") + 1
    assert r.returncode == 1 and f"t.nfp:{line}:1: error[E100]: " in r.stderr, r.stderr
    assert message in r.stderr, r.stderr


def test_a_punt_in_a_server_stage_behind_a_switch_is_named(tmp_path):
    """A punt reaches the control plane through the switch's CPU port; from a server stage
    behind the switch there is no way there yet (a server alone counts it by reason)."""
    text = (ROOT / "tests/corpus/acl_ternary.nfp").read_text().replace(
        "miss { drop(no_port); }", "miss { punt(no_port); }")
    r = nfc_cli("build", write(tmp_path, text), "-o", str(tmp_path / "b"),
                        "--target", "tofino+dpdk", "--no-verify")
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "punt(no_port)" in t)
    assert r.returncode == 1 and f"t.nfp:{line}:" in r.stderr and "punt on the server behind a switch" in r.stderr, \
        r.stderr
