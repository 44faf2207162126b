"""Validity learned from a guard that ends the packet (compiler/passes/validity.py
``must_branches``): after ``if (!valid(h)) { drop(..); }`` (or ``!valid(a) || !valid(b)``)
every path that goes on has the header, so the switch program reads its fields directly
instead of through zeroed metadata copies (``nfc_rd_*``), the lint (P4L050) agrees, and the
switch model still forwards exactly what the reference interpreter forwards, for packets with
and without the header (scapy builds them)."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether

from compiler.interp import Interpreter
from nfc._build_dir import open_build
from targets.p4.lint import lint
from targets.p4.parse import parse_program
from tests.support import compile_ir, nfc_cli, write

_SRC = """import "std/headers.nfp";
packet {{ eth: ethernet; ipv4: ipv4; }}
parser p {{ state start {{ extract eth; transition select(eth.ethertype) {{ ETH_IPV4: ip; default: accept; }} }}
           state ip {{ extract ipv4; transition accept; }} }}
stage s {{ {guard} eth.src = bit<48>(ipv4.dst); forward(1); }}
pipeline m {{ ports = [0..3]; parser = p; stages = [s]; }}
"""


@pytest.mark.parametrize(("guard", "direct"), [
    ("if (!valid(ipv4)) { drop(no_ip); }", True),
    ("if (!valid(ipv4) || ipv4.ttl == 0) { drop(no_ip); }", True),
    ("if (valid(ipv4)) { } else { drop(no_ip); }", True),
    ("if (!valid(eth)) { drop(no_eth); }", False),  # says nothing of ipv4: its read stays guarded
])
def test_a_dropping_guard_makes_the_header_valid_after_it(tmp_path, guard, direct):
    src = write(tmp_path, _SRC.format(guard=guard))
    r = nfc_cli("build", src, "-o", str(tmp_path / "o"), "--target", "tofino", "--no-verify")
    assert r.returncode == 0, r.stderr
    for arch in ("tna", "v1model"):
        text = (tmp_path / f"o/switch/{arch}.p4").read_text()
        assert ("nfc_rd_ipv4__dst" not in text) == direct, arch
        assert [str(e) for e in lint(parse_program(text), arch) if e.severity == "error"] == []
    prog = compile_ir(src)
    packets = [bytes(Ether(src="02:00:00:00:00:01") / IP(dst="10.1.2.3", ttl=t) / UDP()) for t in (0, 5)]
    packets.append(bytes(Ether(src="02:00:00:00:00:01") / ARP()))
    for arch in ("tna", "v1model"):
        spec, model = Interpreter(prog), open_build(tmp_path / "o", arch)[2]
        for data in packets:
            want, got = spec.process(data, 1), model.process(data, 1)
            assert (got.kind, got.data if got.kind == "forward" else got.reason) == \
                (want.kind, want.data if want.kind == "forward" else want.reason), (arch, guard)
