"""Stage-major bursts (docs/server.md, "Stage by stage"): a server program whose stages cannot
see what another packet's stages did runs a burst stage by stage (nfc_phases > 0 in nf.c);
one whose stages keep state another packet sees runs packet by packet, as the reference
does.  Each program here runs through the generated server (``nfc run``: every frame of a
port in one burst) and the reference interpreter on the same frames."""

from __future__ import annotations

import dataclasses
import re

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from compiler.interp import Entry, Interpreter, Match
from compiler.manifest import load_plan
from compiler.placed import load_placed
from targets.dpdk.generator import DpdkGenerator
from tests.support import (
    DPDK,
    build_with_server,
    compile_file,
    entry_json,
    nfc_run,
    reference_outputs,
    run_make,
)

pytestmark = DPDK

HEAD = """import "std/headers.nfp";
import "std/ops.nfp";
packet { eth: ethernet; ip: ipv4; udp: udp; }
parser p {
  state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: v4; default: drop(not_ipv4); } }
  state v4 { extract ip; transition select(ip.protocol) { 17: l4; default: drop(not_udp); } }
  state l4 { extract udp; transition accept; }
}
ports all = [0..1];
pipeline forward { ports = all; parser = p; stages = [first, second]; traffic = 100%; }
"""
# two stages each taking a port from one pool: packet by packet, a packet takes two ports in a
# row; stage by stage, the burst's packets would take every first port before any second one
ALLOC = HEAD + """
stage first { udp.sport = alloc_port(10.0.0.1); }
stage second { udp.dport = alloc_port(10.0.0.1); forward(1); }
"""
# a route looked up by the class an earlier stage looked up: stage by stage
REKEYED = HEAD + """
table classes { key { ip.src: exact; } value { cls: bit<8>; } size = 16; }
table routes { key { ip.ttl: exact; ip.dst: lpm; } value { mark: bit<16>; } size = 16; }
stage first {
  lookup classes { hit(c) { ip.ttl = c.cls; } miss { drop(no_class); } }
}
stage second {
  lookup routes { hit(r) { udp.dport = r.mark; forward(1); } miss { drop(no_route); } }
}
"""


def _frames() -> list[bytes]:
    return [bytes(Ether(dst="02:00:00:00:00:0c") / IP(src=f"10.0.0.{1 + i % 3}", dst=f"10.{i % 2}.0.9", ttl=9) /
                  UDP(sport=7, dport=8) / b"payload") for i in range(12)]


def _ip(a: str) -> int:
    return int.from_bytes(bytes(map(int, a.split("."))), "big")


# the classes of 10.0.0.1-3, and routes for every class and 10.0/16, 10.1/16 but (3, 10.1/16)
REKEYED_ENTRIES = {
    "classes": [Entry((Match(_ip(f"10.0.0.{i}")),), {"cls": i}) for i in (1, 2, 3)],
    "routes": [Entry((Match(c), Match(_ip(f"10.{d}.0.0"), 16)), {"mark": 100 * c + d})
               for c in (1, 2, 3) for d in (0, 1) if (c, d) != (3, 1)],
}


def _reference_and_server(src, out, entries, run):
    """The outputs of the reference interpreter and of ``out``'s server (``nfc run``) for
    _frames() on port 0, with ``entries`` loaded in both."""
    c = compile_file(str(src), target="dpdk")
    spec = Interpreter(c.program)
    for name, rows in entries.items():
        for e in rows:
            spec.tables[name].insert(e)
    want = reference_outputs(spec, {0: _frames()})
    got = nfc_run(out, {name: [entry_json(c, name, e) for e in rows] for name, rows in entries.items()},
                  {0: _frames()}, run)
    return want, got


@pytest.mark.parametrize(("source", "phases", "entries", "sent"),
                         [(ALLOC, 0, {}, 12), (REKEYED, 2, REKEYED_ENTRIES, 10)],
                         ids=["ports-from-one-pool", "rekeyed-route"])
def test_a_burst_gives_what_the_packets_get_one_after_the_other(tmp_path, source, phases, entries, sent):
    src = tmp_path / "t.nfp"
    src.write_text(source)
    out = build_with_server(str(src), tmp_path / "out", "--target", "dpdk")
    assert re.search(r"const int nfc_phases = (\d+);", (out / "server/nf.c").read_text()).group(1) == str(phases)
    want, got = _reference_and_server(src, out, entries, tmp_path / "run")
    assert sum(want[0][1].values()) == sent, want
    assert len(want[0][1]) == (12 if source is ALLOC else 5), want  # distinct frames: ports, marks
    assert got == want


def test_a_server_whose_profile_lacks_stage_major_runs_packet_by_packet(tmp_path):
    """Targets are data: the generator runs an order-free program stage by stage only when the
    server's profile lists the stage_major op, as the cost model prices it (place_problem.py);
    without it the re-keyed route is looked up alone, packet by packet, and gives the same."""
    src = tmp_path / "t.nfp"
    src.write_text(REKEYED)
    out = build_with_server(str(src), tmp_path / "out", "--target", "dpdk")
    placed = load_placed(out / "placed.json")
    srv = placed.targets.server
    assert srv is not None and "stage_major" in srv.ops
    less = dataclasses.replace(placed, targets=dataclasses.replace(
        placed.targets, server=dataclasses.replace(srv, ops=srv.ops - {"stage_major"})))
    DpdkGenerator().emit(less, load_plan(out), out)
    nf = (out / "server/nf.c").read_text()
    assert re.search(r"const int nfc_phases = (\d+);", nf).group(1) == "0"
    m = run_make(out / "server")
    assert m.returncode == 0, m.stderr[-3000:]
    want, got = _reference_and_server(src, out, REKEYED_ENTRIES, tmp_path / "run")
    assert got == want
