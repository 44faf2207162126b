"""The server memory the compiler gives each table (compiler/resources.py, ``server_memory``; the
``memory_bytes`` of plan.json, the budget check-server-fit holds the tables to) against the DPDK
heap the generated server reports (``heap_bytes`` in its counters): one program built twice, its
tables declared at 8 entries and at the sizes below, each loaded with its size in entries (the
state table with none: it has its size from the start).  The difference of the two heaps is
what the tables took: their ``rte_hash`` to the byte (the layout the server profile's
``[memory]`` gives: DPDK's buckets, key slots and free-slot ring at the capacity the runtime
grows a loaded table to, a state table's room for removed keys), and the classifier rte_acl
builds for the ternary table, a per-rule figure, within 10 %.  Value records (malloc) and an
LPM table's trie (mmap) are not in the DPDK heap; test_lpm_memory.py checks the trie."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench import _l3fwd_work as work
from bench.bench_lpm_memory import load
from compiler.profiles import load_profiles
from compiler.resources import server_memory
from tests.conftest import HAVE_DPDK, L3_HEAD, build_with_server, compile_file

pytestmark = pytest.mark.skipif(not HAVE_DPDK, reason="needs DPDK (python3 build.py setup)")

_PROGRAM = L3_HEAD + """table hosts { key { ipv4.dst: exact; } value { port: bit<9>; } size = HOSTS; }
table pairs { key { ipv4.src: exact; ipv4.dst: exact; } value { mac: bit<48>; tag: bit<32>; } size = PAIRS; }
table routes { key { ipv4.dst: lpm; } value { port: bit<9>; } size = ROUTES; }
table acl { key { ipv4.src: ternary; ipv4.dst: ternary; } value { port: bit<9>; } size = ACL; }
state flows { key { ipv4.src: exact; } value { n: bit<8>; } size = FLOWS; timeout = 1s; }
stage work {
  lookup flows { hit(f) { } miss { insert flows { n = 1; } } }
  lookup pairs { hit(w) { eth.dst = w.mac; } miss { } }
  lookup acl { hit(a) { forward(a.port); } miss { } }
  lookup routes { hit(r) { forward(r.port); } miss { } }
  lookup hosts { hit(h) { forward(h.port); } miss { drop(no_route); } }
}
"""
SIZES = {"HOSTS": 5000, "PAIRS": 3000, "ROUTES": 2000, "ACL": 4000, "FLOWS": 100_000}


def _entries(path: Path) -> None:
    with path.open("w") as f:
        for i in range(SIZES["HOSTS"]):
            f.write(f"hosts 0x{i + 1:08x} : 1\n")
        for i in range(SIZES["PAIRS"]):
            f.write(f"pairs 0x{i + 1:08x} 0x{i + 7:08x} : 0x02000000{i % 256:04x} {i}\n")
        for i in range(SIZES["ROUTES"]):
            f.write(f"routes 0x{(i + 1) << 8:08x}/24 : 1\n")
        for i in range(SIZES["ACL"]):
            f.write(f"acl 0x{(i + 1) << 8:08x}&&&0xffffff00 0x{(i % 60000 + 1) << 16:08x}&&&0xffff0000 @{i + 1} : 1\n")


def _heap(tmp: Path, name: str, sizes: dict[str, int], entries: bool) -> tuple[int, dict[str, int]]:
    """The server's heap bytes and table entries, built with ``sizes``."""
    out = build_with_server(str(_write(tmp, name, sizes)), tmp / name, "--target", "dpdk")
    e = tmp / f"{name}.txt"
    if entries:
        _entries(e)
    else:
        e.write_text("")
    work.write_pcap(tmp / "one.pcap", [work.frame(0x0B000001, 0)])
    c = load(out / "server" / "nf", e, tmp / "one.pcap", 512)
    return c["heap_bytes"], {k: t["entries"] for k, t in c["tables"].items()}


def test_the_tables_take_the_heap_the_memory_model_gives(tmp_path):
    spec = load_profiles()["dpdk_server"]
    prog = compile_file(str(_write(tmp_path, "model", SIZES))).program
    small, _ = _heap(tmp_path, "small", {k: 8 for k in SIZES}, False)
    big, loaded = _heap(tmp_path, "big", SIZES, True)
    assert loaded == {"hosts": 5000, "pairs": 3000, "routes": 2000, "acl": 4000, "flows": 1}
    model = {name: server_memory(t, spec) for name, t in prog.tables.items()}
    eight = {name: server_memory(replace(t, size=8), spec) for name, t in prog.tables.items()}
    hashes = sum(model[n].hash - eight[n].hash for n in model)
    acl = model["acl"].search
    assert acl > 0 and model["routes"].search > 0 and model["pairs"].records > 0
    assert abs((big - small) - hashes - acl) <= 4096 + 0.1 * acl, (big - small, hashes, acl)


def _write(tmp: Path, name: str, sizes: dict[str, int]) -> Path:
    src = _PROGRAM
    for k, v in sizes.items():
        src = src.replace(k, str(v))
    (tmp / f"{name}.nfp").write_text(src)
    return tmp / f"{name}.nfp"
