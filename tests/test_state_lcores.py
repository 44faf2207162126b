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
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import HAVE_DPDK, ROOT, compile_file, nfc_cli, sanitized_harness
from tests.packet_fuzz import write_pcap

pytestmark = pytest.mark.skipif(not HAVE_DPDK, reason="DPDK (libdpdk-dev) missing: python3 build.py setup installs it")

TAG = struct.Struct(">I")  # nf --tagged: the logical port before each frame
FLOWS, PER_FLOW = 240, 12


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("flow_state") / "build"
    r = nfc_cli("build", "tests/corpus/flow_state.nfp", "--target", "dpdk", "-o", str(out), "--no-verify")
    assert r.returncode == 0, r.stderr[-3000:]
    m = subprocess.run(["make", "-C", str(out / "server"), "nf-san"], capture_output=True, text=True)
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
                                ["nfc_state.c", "nfc_tables.c", "nfc_values.c", "nfc_lpm.c", "nfc_acl.c"],
                                tmp_path / "state_check")
    r = subprocess.run([str(harness), "--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--no-telemetry",
                        "--log-level=error", "-l", "0,1", "--", "500"], capture_output=True, text=True, timeout=120,
                       env={"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr[-3000:]
    inserts, lookups, hits = map(int, r.stdout.split()[1:])
    assert inserts == lookups > 10_000 and 0 < hits < lookups  # expired halves miss, the rest hit


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


def test_a_loaded_mapping_that_holds_no_port_is_refreshed(tmp_path, monkeypatch):
    """examples/cgnat.nfp with one UDP mapping in both of its state tables from the entries file:
    an outbound packet hits `nat_out` and refreshes `nat_in`, a `holds_ports` table whose loaded
    record holds no port (its slot is NULL: nfc_state_touch_held must not follow it).  Each packet
    leaves translated, as scapy reads it, on the route's port."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import RawPcapReader

    from runtime.server_proc import ServerProcess, eal_args

    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
    out = tmp_path / "build"
    r = nfc_cli("build", "examples/cgnat.nfp", "--target", "dpdk", "--allow-overcommit", "-o", str(out), "--no-verify")
    assert r.returncode == 0, r.stderr[-3000:]
    m = subprocess.run(["make", "-C", str(out / "server"), "nf-san"], capture_output=True, text=True)
    assert m.returncode == 0, m.stderr[-3000:]
    (tmp_path / "entries.txt").write_text("subnet_to_external 0x0a000000/8 : 0xcb007101\n"
                                          "upstream_routes 0/0 : 24 0x020000000099\n"
                                          "nat_out 0x0a000001 5000 17 : 40000\n"
                                          "nat_in 0xcb007101 40000 17 : 0x0a000001 5000\n")
    frames = [bytes(Ether(dst="02:00:00:00:00:01") / IP(src="10.0.0.1", dst="198.51.100.7", ttl=9)
                    / UDP(sport=5000, dport=53) / bytes(i)) for i in range(3)]
    write_pcap(tmp_path / "in.pcap", [TAG.pack(0) + f for f in frames])
    dev = f"net_pcap0,rx_pcap={tmp_path / 'in.pcap'},tx_pcap={tmp_path / 'out.pcap'}"
    extra = ["--tagged", "--entries", str(tmp_path / "entries.txt")]
    with ServerProcess(out / "server" / "nf-san", eal=eal_args("0", 1024), live=False, extra=extra,
                       attach=[dev]) as srv:
        srv.control.start()
        counters = srv.wait()
    assert "AddressSanitizer" not in srv.stderr and "runtime error" not in srv.stderr, srv.stderr[-3000:]
    got = [(TAG.unpack_from(d)[0], Ether(bytes(d[TAG.size:]))) for d, _ in RawPcapReader(str(tmp_path / "out.pcap"))]
    assert [p for p, _ in got] == [24, 24, 24], counters["drops"]
    for _, e in got:
        assert (e[IP].src, e[UDP].sport, e[IP].dst, e[IP].ttl) == ("203.0.113.1", 40000, "198.51.100.7", 8)
    assert counters["tables"]["nat_out"]["hits"] == 3
