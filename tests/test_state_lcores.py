"""Data-plane state on every forwarding lcore (issue 13, item 4; targets/dpdk/runtime/nfc_state.c).

The generated server of tests/corpus/flow_state.nfp (a connection table rewritten by every
packet, a SYN counter, a seen-set) runs on two lcores under ASan + UBSan, each lcore on its own
queue of one net_pcap device, both writing the same tables at once.  The flows of the two
queues are disjoint, as RSS would keep them, except that sources are shared, so the seen-set
is written by both lcores for the same keys.  Each lcore's output must be what the reference
interpreter does with that queue's packets: the per-flow counts (read, then written back by
every packet) come out exact only if no insert of the other lcore is lost or torn.  Every
packet rewrites its flow's entry, so the old records are retired and freed while the other
lcore may be reading them: ASan reports a premature free."""

from __future__ import annotations

import json
import random
import struct
from collections import Counter
from pathlib import Path

import pytest

from tests.packet_fuzz import write_pcap
from tests.support import (
    DPDK,
    L3_HEAD,
    ROOT,
    TABLES_RUNTIME,
    build_example,
    compile_file,
    nfc_cli,
    run_harness,
    run_make,
    sanitized_harness,
)

pytestmark = DPDK

TAG = struct.Struct(">I")  # nf --tagged: the logical port before each frame
FLOWS, PER_FLOW = 240, 12


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    out = build_example("tests/corpus/flow_state.nfp", "dpdk", "--no-verify")
    m = run_make(out / "server", "nf-san")
    assert m.returncode == 0, m.stderr[-3000:]
    return out / "server" / "nf-san", compile_file(str(ROOT / "tests/corpus/flow_state.nfp"))


def _flow_packets(flow: int, rnd: random.Random) -> list[bytes]:
    """One TCP flow's packets in order: a few SYNs (more than 3 trip syn_flood), then data."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    src = f"10.0.{flow % 7}.1"  # sources shared between the queues: the seen-set's keys
    syns = rnd.choice([1, 2, 5])
    return [bytes(Ether(dst="02:00:00:00:00:01", src="02:00:00:00:00:02") / IP(src=src, dst="192.0.2.9")
                  / TCP(sport=1000 + flow, dport=80, flags="S" if i < syns else "A") / (b"x" * (i % 3)))
            for i in range(PER_FLOW)]


def _queues(rnd: random.Random) -> list[list[bytes]]:
    """The packets of each queue: flows alternate between the queues; each queue's flows interleaved."""
    queues: list[list[bytes]] = [[], []]
    for q in (0, 1):
        pending = [_flow_packets(f, rnd) for f in range(q, FLOWS, 2)]
        while pending:
            f = rnd.randrange(len(pending))
            queues[q].append(pending[f].pop(0))
            if not pending[f]:
                pending.pop(f)
    return queues




def test_two_lcores_share_state_and_agree_with_the_reference(server, tmp_path, monkeypatch):
    from scapy.utils import RawPcapReader

    from compiler.interp import Interpreter
    from runtime.server_proc import ServerProcess, eal_args

    binary, compiled = server
    # the live entries at exit are reachable from DPDK's memory only, which LeakSanitizer does not scan
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
    queues = _queues(random.Random(13))
    spec = Interpreter(compiled.program)
    want: list[list[tuple[int, bytes]]] = [[], []]
    want_drops: Counter[str] = Counter()
    for q, frames in enumerate(queues):  # disjoint flows: the queues' order against each other is free
        for data in frames:
            o = spec.process(data, 0)
            if o.kind == "forward":
                want[q].append((o.port or 0, o.data))
            else:
                want_drops[o.reason or o.kind] += 1
    assert want_drops["syn_flood"] > 0 and len(want[0]) > FLOWS  # both outcomes are reached
    for q, frames in enumerate(queues):
        write_pcap(tmp_path / f"in{q}.pcap", [TAG.pack(0) + f for f in frames])
    dev = (f"net_pcap0,rx_pcap={tmp_path / 'in0.pcap'},rx_pcap={tmp_path / 'in1.pcap'},"
           f"tx_pcap={tmp_path / 'out0.pcap'},tx_pcap={tmp_path / 'out1.pcap'}")
    with ServerProcess(binary, eal=eal_args("0,1", 1024), live=False, extra=["--tagged"], attach=[dev]) as srv:
        srv.control.start()
        counters = srv.wait()
    assert "AddressSanitizer" not in srv.stderr and "runtime error" not in srv.stderr, srv.stderr[-3000:]
    for q in (0, 1):
        got = [(TAG.unpack_from(d)[0], bytes(d[TAG.size:])) for d, _ in RawPcapReader(str(tmp_path / f"out{q}.pcap"))]
        assert got == want[q], f"queue {q}: {len(got)} frames out, {len(want[q])} expected"
    drops = Counter({k: v for k, v in counters["drops"].items() if v})
    assert drops == want_drops, json.dumps(counters["drops"])
    tables = counters["tables"]
    assert tables["conns"]["entries"] == FLOWS and tables["seen_sources"]["entries"] == 7


def test_dumps_while_two_lcores_rewrite_the_entries(server, tmp_path, monkeypatch):
    """The copy for a DUMP is made by whichever lcore takes it, between its bursts, while the
    other lcore replaces the very records it copies (every packet rewrites its flow's entry):
    the replaced records are freed only after both lcores passed a quiescent state, so ASan
    sees no read of freed memory; every dumped entry is a flow of the traffic."""
    from runtime.server_proc import ServerProcess, eal_args

    binary, _ = server
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
    queues = _queues(random.Random(14))
    for q, frames in enumerate(queues):
        write_pcap(tmp_path / f"in{q}.pcap", [TAG.pack(0) + f for f in frames])
    dev = (f"net_pcap0,rx_pcap={tmp_path / 'in0.pcap'},rx_pcap={tmp_path / 'in1.pcap'},infinite_rx=1")
    dumps = 0
    with ServerProcess(binary, [dev], eal=eal_args("0,1", 1024), extra=["--tagged"]) as srv:
        while dumps < 40:
            rows = srv.control.dump("conns")
            assert all(1000 <= r[2] < 1000 + FLOWS and r[3] == 80 for r in rows), rows[:3]
            dumps += 1
        counters = srv.control.counters()
    assert "AddressSanitizer" not in srv.stderr and "runtime error" not in srv.stderr, srv.stderr[-3000:]
    assert counters["tables"]["conns"]["entries"] == FLOWS
    assert counters["state_copy"]["slices"] >= dumps


def test_lcores_hammering_the_same_keys_never_read_a_freed_or_torn_record(tmp_path):
    """tests/c/state_check.c: both lcores insert into and look up the same 8 keys for 0.5 s,
    half of them expiring at once (removed by the next lookup): under ASan, a record or key
    slot freed before the other lcore's grace period is a use-after-free or a double free, an
    insert racing another a mixed record (each checks its own values)."""
    harness = sanitized_harness(ROOT / "tests/c/state_check.c",
                                TABLES_RUNTIME,
                                tmp_path / "state_check")
    r = run_harness(harness, "0,1", "500")
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr[-3000:]
    inserts, lookups, hits, live, held, swept = map(int, r.stdout.split()[1:])
    assert inserts == lookups > 10_000 and 0 < hits < lookups  # expired halves miss, the rest hit
    assert live == held <= 8 and swept == 0  # never full


def test_lcores_sweeping_a_full_table_never_read_a_freed_or_torn_record(tmp_path):
    """tests/c/state_check.c with 4,096 keys on a table of 1,024, half expiring at once and half
    after 50 us: the table is full and each lcore's inserts sweep expired entries (nfc_state.c,
    sweep) while the other looks them up and reads their records, and removes some itself.
    Under ASan a swept record or key slot freed before the other lcore's grace period is a
    use-after-free or a double free; at the end the table's count of its entries is what it
    holds, within its size."""
    harness = sanitized_harness(ROOT / "tests/c/state_check.c",
                                TABLES_RUNTIME,
                                tmp_path / "state_check")
    r = run_harness(harness, "0,1", "500", "4096", "50000")
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr[-3000:]
    inserts, lookups, hits, live, held, swept = map(int, r.stdout.split()[1:])
    assert inserts == lookups > 10_000 and 0 < hits < lookups
    assert live == held <= 1024 and swept > 1024  # sweeps ran, more than a table's worth


def test_entries_loaded_from_a_file_are_whole_records_the_lcores_reuse(server, tmp_path, monkeypatch):
    """`conns` entries loaded from the entries file before forwarding (nfc_values.c makes their
    records), one per flow: every packet of a flow rewrites its entry, so the lcore retires the
    loaded record and, once it is freed, keeps it for its next inserts (nfc_state.c, rec_alloc),
    which write a record whole (port slot, links): a loaded record must be as big as an
    insert's, or ASan reports a heap-buffer-overflow.  The output is the reference's with the same
    entries in its state."""
    from scapy.utils import RawPcapReader

    from compiler.interp import Interpreter
    from runtime.server_proc import ServerProcess, eal_args

    binary, compiled = server
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
    frames = [f for q in _queues(random.Random(29)) for f in q]
    added = [(int.from_bytes(bytes([10, 0, f % 7, 1]), "big"), 0xC0000209, 1000 + f, 80, 1000 + f, 3)
             for f in range(FLOWS)]
    spec = Interpreter(compiled.program)
    for *key, packets, port in added:
        spec.state.state_insert("conns", tuple(key), {"packets": packets, "port": port}, 120.0, 0.0)
    want = [(o.port or 0, o.data) for o in (spec.process(d, 0) for d in frames) if o.kind == "forward"]
    assert {p for p, _ in want} == {3}  # every flow forwarded by its ADDed entry's port
    write_pcap(tmp_path / "in.pcap", [TAG.pack(0) + f for f in frames])
    (tmp_path / "entries.txt").write_text("".join(f"conns {' '.join(map(hex, k))} : {v} {p}\n" for *k, v, p in added))
    dev = f"net_pcap0,rx_pcap={tmp_path / 'in.pcap'},tx_pcap={tmp_path / 'out.pcap'}"
    extra = ["--tagged", "--entries", str(tmp_path / "entries.txt")]
    with ServerProcess(binary, eal=eal_args("0", 1024), live=False, extra=extra, attach=[dev]) as srv:
        srv.control.start()
        counters = srv.wait()
    assert "AddressSanitizer" not in srv.stderr and "runtime error" not in srv.stderr, srv.stderr[-3000:]
    got = [(TAG.unpack_from(d)[0], bytes(d[TAG.size:])) for d, _ in RawPcapReader(str(tmp_path / "out.pcap"))]
    assert got == want
    assert counters["tables"]["conns"]["entries"] == FLOWS and counters["tables"]["conns"]["misses"] == 0


def test_a_loaded_mapping_holds_its_port_and_is_refreshed(tmp_path, monkeypatch):
    """examples/cgnat.nfp with one UDP mapping, external port 1024, in both of its state tables
    from the entries file: its outbound packets hit `nat_out` and refresh `nat_in`, the
    `holds_ports` table, whose loaded record holds the port its key names (nfc_state_loaded), as
    the reference's entries do (compiler/interp/state.py, `_hold`).  So a new flow's packet gets
    the lowest port nothing holds, 1025, not the loaded mapping's (before any packet of the
    mapping has refreshed it).  Under ASan; scapy reads each translation and the route's port."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import RawPcapReader

    from runtime.server_proc import ServerProcess, eal_args

    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
    out = build_example("examples/cgnat.nfp", "dpdk", "--allow-overcommit", "--no-verify")
    m = run_make(out / "server", "nf-san")
    assert m.returncode == 0, m.stderr[-3000:]
    (tmp_path / "entries.txt").write_text("subnet_to_external 0x0a000000/8 : 0xcb007101\n"
                                          "upstream_routes 0/0 : 24 0x020000000099\n"
                                          "nat_out 0x0a000001 5000 17 : 1024\n"
                                          "nat_in 0xcb007101 1024 17 : 0x0a000001 5000\n")
    flows = [("10.0.0.2", 6000)] + [("10.0.0.1", 5000)] * 3  # the new flow first: no refresh has held 1024 yet
    frames = [bytes(Ether(dst="02:00:00:00:00:01") / IP(src=src, dst="198.51.100.7", ttl=9)
                    / UDP(sport=sport, dport=53) / bytes(i)) for i, (src, sport) in enumerate(flows)]
    write_pcap(tmp_path / "in.pcap", [TAG.pack(0) + f for f in frames])
    dev = f"net_pcap0,rx_pcap={tmp_path / 'in.pcap'},tx_pcap={tmp_path / 'out.pcap'}"
    extra = ["--tagged", "--entries", str(tmp_path / "entries.txt")]
    with ServerProcess(out / "server" / "nf-san", eal=eal_args("0", 1024), live=False, extra=extra,
                       attach=[dev]) as srv:
        srv.control.start()
        counters = srv.wait()
    assert "AddressSanitizer" not in srv.stderr and "runtime error" not in srv.stderr, srv.stderr[-3000:]
    got = [(TAG.unpack_from(d)[0], Ether(bytes(d[TAG.size:]))) for d, _ in RawPcapReader(str(tmp_path / "out.pcap"))]
    assert [p for p, _ in got] == [24, 24, 24, 24], counters["drops"]
    assert [(e[IP].src, e[UDP].sport, e[IP].dst, e[IP].ttl) for _, e in got] == \
        [("203.0.113.1", 1025, "198.51.100.7", 8)] + [("203.0.113.1", 1024, "198.51.100.7", 8)] * 3
    assert counters["tables"]["nat_out"]["hits"] == 3 and counters["tables"]["nat_out"]["misses"] == 1


# A state table of 8 entries that fills with short-lived flows (1 us) and then gets long-lived ones
# (100 s: `timeout 100`); TTL 1 marks filler packets, dropped before the lookup, that let time pass.
_SWEPT = L3_HEAD + """state flows { key { ipv4.src: exact; } value { n: bit<8>; } size = 8; timeout = 1us; }
stage work {
  if (ipv4.ttl == 1) { drop(filler); }
  lookup flows {
    hit(f) { forward(2); }
    miss {
      if (ipv4.ttl == 9) { insert flows { n = 1; } timeout 100; } else { insert flows { n = 1; } }
      forward(1);
    }
  }
}
"""


def test_a_full_state_table_sweeps_its_expired_entries(tmp_path, monkeypatch):
    """A table full of expired entries (flows that never came back: no lookup removed them)
    takes new flows, as the reference's does: its insert into a full table removes the expired
    ones first (compiler/interp/state.py, state_insert; nfc_state.c, sweep).  A table full of
    live entries still refuses them.  Eight short flows fill the table and expire while filler
    passes; eight long flows are then inserted; two more find the table full of live entries;
    after more filler the ten come back: the eight hit, the two miss again.  Each packet's port
    is the reference interpreter's (packets 1 us apart: the reference's clock); under ASan,
    which would catch a swept record read after its release."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import RawPcapReader

    from compiler.interp import Interpreter
    from runtime.server_proc import ServerProcess, eal_args

    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
    (tmp_path / "swept.nfp").write_text(_SWEPT)
    out = tmp_path / "build"
    r = nfc_cli("build", str(tmp_path / "swept.nfp"), "--target", "dpdk", "-o", str(out), "--no-verify")
    assert r.returncode == 0, r.stderr[-3000:]
    m = run_make(out / "server", "nf-san")
    assert m.returncode == 0, m.stderr[-3000:]

    def pkt(src: str, ttl: int) -> bytes:
        return bytes(Ether(dst="02:00:00:00:00:01") / IP(src=src, dst="192.0.2.1", ttl=ttl) / UDP())

    filler = [pkt("10.9.9.9", 1)] * 300  # well over 1 us of work on any machine
    short = [pkt(f"10.0.0.{i}", 64) for i in range(8)]
    long = [pkt(f"10.0.1.{i}", 9) for i in range(10)]
    frames = short + filler + long + filler + long
    spec = Interpreter(compile_file(str(tmp_path / "swept.nfp")).program)
    want = [o.port for i, f in enumerate(frames) if (o := spec.process(f, 0, i * 1e-6)).kind == "forward"]
    assert want == [1] * 8 + [1] * 10 + [2] * 8 + [1] * 2  # what the scenario means, read off the reference
    write_pcap(tmp_path / "in.pcap", [TAG.pack(0) + f for f in frames])
    dev = f"net_pcap0,rx_pcap={tmp_path / 'in.pcap'},tx_pcap={tmp_path / 'out.pcap'}"
    with ServerProcess(out / "server" / "nf-san", eal=eal_args("0", 1024), live=False, extra=["--tagged"],
                       attach=[dev]) as srv:
        srv.control.start()
        counters = srv.wait()
    assert "AddressSanitizer" not in srv.stderr and "runtime error" not in srv.stderr, srv.stderr[-3000:]
    got = [TAG.unpack_from(d)[0] for d, _ in RawPcapReader(str(tmp_path / "out.pcap"))]
    assert got == want, counters["tables"]["flows"]
    flows = counters["tables"]["flows"]
    assert (flows["hits"], flows["entries"], flows["swept"]) == (8, 8, 8)  # the short flows swept


def test_the_all_zero_key_is_one_entry(tmp_path):
    """tests/c/zero_key_check.c: DPDK 22.11's rte_hash, seeded so that the all-zero key's
    signature is 0 (rte_hash_crc with an init value of 0), makes a second entry for that key
    when it is inserted again after an empty slot opened before it in its bucket; a lookup after
    the key's removal then finds the stale one (a record already retired).  nfc_hash_seed gives
    the key another signature: after its removal the key misses and the table is empty."""
    harness = sanitized_harness(ROOT / "tests/c/zero_key_check.c",
                                TABLES_RUNTIME,
                                tmp_path / "zero_key_check")
    r = run_harness(harness, "0")
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr[-3000:]
    assert r.stdout.split()[1:] == ["0", "0"]
