"""A lookup takes the burst's prefetched answer without building its key only when nothing
the key reads was written before it in the packet's cut (``compiler.analysis.changed_by``,
``targets/dpdk/lower.py``: ``_as_prefetched``), or, in a program run stage by stage
(docs/server.md, "Stage by stage"), before it in its stage: each stage's lookups are
prefetched at its entry.  The rules on their own, then a program whose
every later lookup's key an earlier statement changes (a field rewritten by a lookup's result,
a header popped, metadata set), run by the generated server against the reference
interpreter: a kept answer taken where the key changed forwards to the wrong port."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from compiler.analysis import changed_by
from compiler.interp import Entry, Interpreter, Match
from tests.support import compile_file, needs_dpdk, nfc_cli, nfc_run, reference_outputs, write


def test_a_read_is_changed_by_its_own_write_and_by_its_header_changing_validity() -> None:
    dst = ("hdr", "ipv4", "dst")
    assert changed_by({dst}, {dst})
    assert changed_by({dst}, {("valid", "ipv4")})  # popped: the field reads 0
    assert changed_by({dst}, {("pkt",)})  # an extern wrote the packet
    assert not changed_by({dst}, {("hdr", "ipv4", "src"), ("valid", "vlan"), ("meta", "x")})
    assert changed_by({("meta", "x")}, {("meta", "x")})
    assert not changed_by({("meta", "x")}, {("local", "x")})
    assert changed_by({("hdrall", "ipv4")}, {("hdr", "ipv4", "ttl")})  # checksum_ok reads every field
    assert changed_by({("std", "packet_length")}, {("valid", "vlan")})  # a push or pop changes the length
    assert not changed_by({("std", "packet_length")}, {("hdr", "ipv4", "ttl")})
    assert changed_by({("std", "packet_length")}, {("pkt",)})  # an extern that wrote the packet may resize it
    assert changed_by({("result", "t")}, {("result", "t")})
    assert not changed_by(set(), {("hdr", "ipv4", "dst")})


PROGRAM = """
import "std/headers.nfp";

packet { eth: ethernet; vlan: vlan; ipv4: ipv4; }
metadata { cls: bit<8>; }

parser p {
  state start {
    extract eth;
    transition select(eth.ethertype) { ETH_VLAN: tagged; ETH_IPV4: ip; default: drop(not_ipv4); }
  }
  state tagged {
    extract vlan;
    transition select(vlan.ethertype) { ETH_IPV4: ip; default: drop(not_ipv4); }
  }
  state ip { extract ipv4; transition accept; }
}

// its key is as the packet arrived: the kept answer
table nat { key { ipv4.dst: exact; } value { to: bit<32>; cls: bit<8>; } size = 64; }
// ipv4.dst after nat rewrote it
table by_dst { key { ipv4.dst: exact; } value { port: bit<16>; } size = 64; }
// vlan.vid after the tag was popped (0)
table by_vid { key { vlan.vid: exact; } value { port: bit<16>; } size = 64; }
// meta.cls as nat set it
table by_cls { key { meta.cls: exact; } value { port: bit<16>; } size = 64; }

stage rewrite {
  lookup nat {
    hit(r) { ipv4.dst = r.to; meta.cls = r.cls; }
    miss { }
  }
  if (vlan.vid == 5) { pop vlan; eth.ethertype = ETH_IPV4; }
}

stage route {
  if (meta.cls == 0) {
    lookup by_dst { hit(r) { forward(r.port); } miss { drop(no_dst); } }
  } else {
    if (meta.cls == 1) {
      lookup by_vid { hit(v) { forward(v.port); } miss { drop(no_vid); } }
    } else {
      lookup by_cls { hit(c) { forward(c.port); } miss { drop(no_cls); } }
    }
  }
}

ports all = [0..7];
pipeline main { ports = all; parser = p; stages = [rewrite, route]; traffic = 100%; }
"""
# a register written: the burst runs packet by packet, every lookup prefetched as the packet arrived
IN_ORDER = PROGRAM.replace("stage rewrite {\n", "register seen: bit<8>[1];\nstage rewrite {\n  seen[0] = 1;\n")
KEPT = {PROGRAM: {"nat", "by_dst", "by_vid", "by_cls"}, IN_ORDER: {"nat"}}


def _build(tmp_path: Path, program: str) -> tuple[str, Path]:
    src = write(tmp_path, program)
    out = tmp_path / "out"
    r = nfc_cli("build", src, "--target", "dpdk", "--allow-overcommit",
                        "-o", str(out))
    assert r.returncode == 0, r.stderr
    return src, out


@pytest.mark.parametrize("program", [PROGRAM, IN_ORDER], ids=["stage-by-stage", "packet-by-packet"])
def test_only_the_lookup_whose_key_nothing_changed_takes_the_kept_answer(tmp_path: Path, program: str) -> None:
    _, out = _build(tmp_path, program)
    nf = (out / "server" / "nf.c").read_text()
    assert ("const int nfc_phases = 0;" in nf) == (program is IN_ORDER)
    kept = {t for t in ("nat", "by_dst", "by_vid", "by_cls")
            if f"/* lookup {t}," in nf and "nfc_kept_answer" in nf.split(f"/* lookup {t},", 1)[1].split("/*", 1)[0]}
    assert kept == KEPT[program], kept


ENTRIES = {
    "nat": [({"ipv4_dst": "10.0.0.1"}, {"to": "10.0.0.2", "cls": 0}),   # by_dst of the new address
            ({"ipv4_dst": "10.0.0.3"}, {"to": "10.0.0.3", "cls": 1}),   # by_vid
            ({"ipv4_dst": "10.0.0.4"}, {"to": "10.0.0.4", "cls": 7})],  # by_cls
    "by_dst": [({"ipv4_dst": "10.0.0.1"}, {"port": 1}), ({"ipv4_dst": "10.0.0.2"}, {"port": 2})],
    "by_vid": [({"vlan_vid": 5}, {"port": 3}), ({"vlan_vid": 0}, {"port": 4})],
    "by_cls": [({"meta_cls": 0}, {"port": 5}), ({"meta_cls": 7}, {"port": 6})],
}


@needs_dpdk
@pytest.mark.parametrize("program", [PROGRAM, IN_ORDER], ids=["stage-by-stage", "packet-by-packet"])
def test_lookups_after_a_rewrite_a_pop_and_a_metadata_write_give_the_reference_outputs(tmp_path: Path,
                                                                                        program: str) -> None:
    src, out = _build(tmp_path, program)
    entries = {t: [{"match": k, "values": v} for k, v in rows] for t, rows in ENTRIES.items()}
    (tmp_path / "entries.json").write_text(json.dumps(entries))
    from runtime.entries import load_entries

    c = compile_file(src, "dpdk", allow_overcommit=True)
    spec = Interpreter(c.program)
    for e in load_entries(tmp_path / "entries.json"):
        t = c.program.tables[e.table]
        spec.tables[e.table].insert(Entry(tuple(Match(*e.match[k.name]) for k in t.keys), e.values, e.priority))
    udp = UDP(sport=1, dport=2) / b"payload"
    pkts = [bytes(Ether() / IP(dst="10.0.0.1") / udp),                  # nat 10.0.0.1 -> .2: by_dst says 2, not 1
            bytes(Ether() / Dot1Q(vlan=5) / IP(dst="10.0.0.3") / udp),  # popped: by_vid of 0 says 4, not 3
            bytes(Ether() / Dot1Q(vlan=6) / IP(dst="10.0.0.3") / udp),  # kept tag: by_vid misses
            bytes(Ether() / IP(dst="10.0.0.4") / udp),                  # cls 7: by_cls says 6, not 5
            bytes(Ether() / IP(dst="10.0.0.9") / udp)]                  # nat misses; by_dst misses
    inputs = {0: pkts * 40}  # more than a burst: the bulk lookups answer most of them
    want = reference_outputs(spec, inputs)
    assert set(want[0]) == {2, 4, 6} and want[1] == {"no_vid": 40, "no_dst": 40}  # the oracle's own view
    assert nfc_run(out, entries, inputs, tmp_path / "run") == want
