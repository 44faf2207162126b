"""``std.packet_length`` (issue 17, "truncated frames never forwarded with length fields that
promise bytes that are not there"): the packet as it is when read, placed where a target has
it, and the same on every target; ``push`` values read before the header is made valid.
The generated server against the reference on random frames is
``tests/test_differential_examples.py`` (``tests/corpus/frame_length.nfp``)."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from compiler.interp import Interpreter
from emulator.switchmodel import SwitchModel, SwitchReference
from lang.diagnostics import CompileError
from tests.support import compile_file, nfc_cli, write

HEAD = """import "std/headers.nfp";
packet { eth: ethernet; vlan: vlan; ipv4: ipv4; udp: udp; }
parser p {
  state start { extract eth; transition select(eth.ethertype) { ETH_VLAN: tagged; ETH_IPV4: ip; default: accept; } }
  state tagged { extract vlan; transition select(vlan.ethertype) { ETH_IPV4: ip; default: accept; } }
  state ip { extract ipv4; transition accept; }
}
"""
TAIL = "pipeline main { ports = [0..7]; parser = p; stages = [s]; }\n"


def _frame(payload: bytes = b"abcd") -> bytes:
    return bytes(Ether(dst="02:00:00:00:00:01") / Dot1Q(vlan=7) / IP(dst="10.0.0.1", proto=17) / payload)


def test_frame_length_is_the_packet_as_it_is_now(tmp_path):
    """Read after the parser, after a pop and after a push: each time the length scapy gives
    the packet in that shape (the pushed UDP header's fields carry the three readings)."""
    stage = """stage s {
  let a: bit<16> = std.packet_length;
  pop vlan;
  let b: bit<16> = std.packet_length;
  push udp { sport = a; dport = b; length = 8; }
  udp.checksum = std.packet_length;
  eth.ethertype = ETH_IPV4;
  forward(1);
}
"""
    c = compile_file(write(tmp_path, HEAD + stage + TAIL), "dpdk")
    frame = _frame()
    out = Interpreter(c.program).process(frame, 0)
    assert out.kind == "forward"
    udp = UDP(out.data[len(Ether()) + len(IP()):][: len(UDP())])  # the pushed header, after eth and ipv4
    assert udp.sport == len(frame)
    assert udp.dport == len(frame) - len(Dot1Q())
    assert udp.chksum == len(out.data) == len(frame) - len(Dot1Q()) + len(UDP())


def test_frame_length_read_in_a_parser_is_the_arriving_frame(tmp_path):
    parser = HEAD.replace("state ip { extract ipv4; transition accept; }",
                          "state ip { verify(std.packet_length >= 64, runt); extract ipv4; transition accept; }")
    prog = parser + "stage s { forward(1); }\n" + TAIL
    spec = Interpreter(compile_file(write(tmp_path, prog), "dpdk").program)
    assert spec.process(_frame(), 0).reason == "runt"
    assert spec.process(_frame(bytes(30)), 0).kind == "forward"


def test_a_switch_parser_reading_frame_length_is_refused_at_its_span(tmp_path):
    """Tofino's ingress has no frame length and the switch runs the parsers: E071 there, with
    the way out (a stage, which the partitioner can place on the server)."""
    prog = HEAD.replace("state ip { extract ipv4;", "state ip { verify(std.packet_length > 20, runt); extract ipv4;")
    with pytest.raises(CompileError) as e:
        compile_file(write(tmp_path, prog + "stage s { forward(1); }\n" + TAIL), "tofino+dpdk")
    [d] = [d for d in e.value.diagnostics if d.code == "E071"]
    assert (d.span.line, d.span.col) == (6, 21)
    assert "std.packet_length in parser 'p' is unsupported on tofino1" in d.message


def test_a_stage_reading_frame_length_runs_on_the_server(tmp_path):
    prog = HEAD + """stage first { pop vlan; }
stage s { verify(ipv4.total_len <= std.packet_length - 14, bad_ipv4_length); forward(1); }
pipeline main { ports = [0..7]; parser = p; stages = [first, s]; }
"""
    c = compile_file(write(tmp_path, prog), "tofino+dpdk")
    assert {s: c.placement.segment[s].name for s in ("first", "s")} == {"first": "SWITCH", "s": "SERVER"}
    assert not any(f.name == "std.packet_length" for b in c.bridges for f in b.fields)  # read off the packet
    with pytest.raises(CompileError) as e:
        compile_file(write(tmp_path, prog), "tofino")
    assert [d.code for d in e.value.diagnostics] == ["E071"]


@pytest.mark.parametrize("arch", ["tna", "v1model"])
def test_push_values_are_read_before_the_header_is_made_valid(tmp_path, arch):
    """``push vlan { pcp = vlan.vid[2:0]; vid = vlan.pcp ++ vlan.vid[8:0]; }`` re-pushes a
    valid tag from its old fields (language.md: a re-pushed header is reset). A target that
    makes the header valid and writes its fields in order would read the new pcp."""
    stage = """stage s {
  if (valid(vlan)) {
    push vlan { pcp = vlan.vid[2:0]; vid = vlan.pcp ++ vlan.vid[8:0]; ethertype = vlan.ethertype; }
  }
  forward(1);
}
"""
    src = write(tmp_path, HEAD + stage + TAIL)
    out = tmp_path / "out"
    r = nfc_cli("build", src, "-o", str(out), "--target", "tofino")
    assert r.returncode == 0, r.stderr
    c = compile_file(src, "tofino")
    frame = bytes(Ether() / Dot1Q(prio=5, vlan=0x123) / IP() / b"x")
    model = SwitchModel.from_build(out, arch).process(frame, 0)
    spec = SwitchReference(c.program, c.placement, c.bridges, c.targets.server_ports).process(frame, 0)
    tag = Ether(spec.data)[Dot1Q]
    assert (tag.prio, tag.vlan) == (0x123 & 7, (5 << 9) | (0x123 & 0x1FF))  # from the old fields
    assert (model.kind, model.port, model.data) == (spec.kind, spec.port, spec.data)
