"""nfc_fixed_layout (targets/dpdk/lower.py): a server program without a switch whose packets
leave with the headers they came with, where they came, sends the frame as it is (nfc_output's
first branch).  That holds only when every parse path extracts the instances in the order
``packet`` declares them, each once: the reference deparses the valid headers in that order.
Each program here runs through the generated server (``nfc run``) and the reference
interpreter on the same frames."""

from __future__ import annotations

import re

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from compiler.interp import Interpreter
from tests.support import DPDK, build_with_server, compile_file, nfc_run, reference_outputs

pytestmark = DPDK

TAIL = """
stage s { ip.ttl = ip.ttl - 1; forward(1); }
ports all = [0..1];
pipeline forward { ports = all; parser = p; stages = [s]; traffic = 100%; }
"""
IN_ORDER = """import "std/headers.nfp";
packet { eth: ethernet; ip: ipv4; }
parser p {
  state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: v4; default: drop(not_ipv4); } }
  state v4 { extract ip; transition accept; }
}
""" + TAIL
# parsed eth then ip, declared ip then eth: the reference sends ip, then eth
OUT_OF_ORDER = IN_ORDER.replace("packet { eth: ethernet; ip: ipv4; }", "packet { ip: ipv4; eth: ethernet; }")
# an outer Ethernet header of type 0x88b5 is extracted into eth, then the inner one over it: the
# reference sends only the inner one
TWICE = """import "std/headers.nfp";
packet { eth: ethernet; ip: ipv4; }
parser p {
  state start { extract eth; transition select(eth.ethertype) { 0x88b5: again; ETH_IPV4: v4; default: drop(x); } }
  state again { extract eth; transition select(eth.ethertype) { ETH_IPV4: v4; default: drop(not_ipv4); } }
  state v4 { extract ip; transition accept; }
}
""" + TAIL


@pytest.mark.parametrize(("source", "fixed"), [(IN_ORDER, 1), (OUT_OF_ORDER, 0), (TWICE, 0)],
                         ids=["in-order", "out-of-order", "extracted-twice"])
def test_the_server_sends_what_the_reference_deparses(tmp_path, source, fixed):
    src = tmp_path / "t.nfp"
    src.write_text(source)
    out = build_with_server(str(src), tmp_path / "out", "--target", "dpdk")
    assert re.search(r"const int nfc_fixed_layout = (\d);", (out / "server/nf.c").read_text()).group(1) == str(fixed)
    inner = IP(src="10.0.0.1", dst="10.0.0.2", ttl=9) / UDP(sport=1, dport=2) / b"payload"
    pkts = [bytes(Ether(src="02:00:00:00:00:0a", type=0x88B5) / Ether(dst="02:00:00:00:00:0b") / inner),
            bytes(Ether(dst="02:00:00:00:00:0c") / inner)]
    spec = Interpreter(compile_file(str(src), target="dpdk").program)
    want = reference_outputs(spec, {0: pkts})
    assert sum(want[0][1].values()) == (2 if source is TWICE else 1)
    assert nfc_run(out, {}, {0: pkts}, tmp_path / "run") == want
