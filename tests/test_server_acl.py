"""Ternary and range tables on the server (issue 15: the IPsec gateway's traffic selectors on a
server alone): DPDK's classifier, rte_acl, behind the control channel's records
(docs/control.md: key values, then each non-exact field's prefix length / mask / high bound,
then the priority, then the values).  tests/corpus/acl_ternary.nfp (--target dpdk, under
ASan + UBSan) classifies UDP packets by source and destination (ternary) and destination port
(range); the class picks the output port, class 0 drops.

The expected class of every packet comes from a brute-force classifier written here from the
semantics the language documents (highest priority wins; among equal priorities the entry
added first), not from the code under test; records written by hand are built from the
document's layout."""

from __future__ import annotations

import random
import struct
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import RawPcapReader, RawPcapWriter

from runtime.api import Runtime
from runtime.control import OP, REQ, VERSION
from runtime.errors import EntryExists, EntryNotFound, InvalidEntry
from runtime.server_proc import ServerProcess, eal_args
from tests.support import DPDK, build_with_server, run_make

pytestmark = DPDK

TAG = struct.Struct(">I")  # nf --tagged: the logical port before each frame
FULL = 0xFFFFFFFF


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = build_with_server("tests/corpus/acl_ternary.nfp", tmp_path_factory.mktemp("acl") / "out", "--target", "dpdk")
    r = run_make(out / "server", "nf-san")
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.fixture(autouse=True)
def asan_aborts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")


def _udp(src: int, dst: int, dport: int) -> bytes:
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=_ip(src), dst=_ip(dst)) / UDP(sport=5, dport=dport) / b"acl")


def _ip(a: int) -> str:
    return ".".join(str(a >> s & 255) for s in (24, 16, 8, 0))


class Rule:
    def __init__(self, src: tuple[int, int], dst: tuple[int, int], ports: tuple[int, int], prio: int, cls: int):
        self.src, self.dst, self.ports, self.prio, self.cls = src, dst, ports, prio, cls

    def matches(self, src: int, dst: int, dport: int) -> bool:
        return (src & self.src[1] == self.src[0] and dst & self.dst[1] == self.dst[0]
                and self.ports[0] <= dport <= self.ports[1])

    def row(self) -> dict[str, object]:
        return {"ipv4_src": self.src, "ipv4_dst": self.dst, "udp_dport": self.ports, "class": self.cls}


def _brute(rules: list[Rule], src: int, dst: int, dport: int) -> int:
    """The class: the matching rule of highest priority, the first added among equals; 1 on a miss."""
    best = None
    for r in rules:  # in the order they were added
        if r.matches(src, dst, dport) and (best is None or r.prio > best.prio):
            best = r
    return 1 if best is None else best.cls


def _run(out: Path, work: Path, setup, packets: list[bytes]) -> list[tuple[int, bytes]]:
    """The program, ``setup(rt, control)`` through the runtime API, then the packets (port 2):
    what left, with its port."""
    rx, tx = work / "in.pcap", work / "out.pcap"
    with RawPcapWriter(str(rx), linktype=1) as w:
        for data in packets:
            w.write(TAG.pack(2) + data)
    srv = ServerProcess(out / "server/nf-san", eal=eal_args(), live=False, extra=["--tagged"],
                        attach=[f"net_pcap0,rx_pcap={rx},tx_pcap={tx}"])
    with srv:
        setup(Runtime(out, server=srv.control), srv.control)
        srv.control.start()
        srv.wait(120)
    assert "ERROR: AddressSanitizer" not in srv.stderr and "runtime error:" not in srv.stderr, srv.stderr[-3000:]
    return [(TAG.unpack_from(d)[0], bytes(d[TAG.size:])) for d, _ in RawPcapReader(str(tx))] if tx.exists() else []


def _api(out: Path):
    """The generated runtime package of the build (OUT/python/acl_ternary)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("acl_ternary_api", out / "python/acl_ternary/__init__.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.AclTernary


def test_packets_are_classified_as_a_brute_force_classifier_says_through_batches_deletes_and_re_adds(built, tmp_path):
    """Overlapping rules with tied priorities, added in batches; some deleted and added again
    (a re-added rule ranks after the rules of its priority added before it)."""
    rnd = random.Random(15)
    bases = [rnd.getrandbits(32) for _ in range(3)]
    rules: list[Rule] = []
    seen = set()
    while len(rules) < 60:
        def tern() -> tuple[int, int]:
            mask = rnd.choice([0, FULL, 0xFFFFFF00, 0xFFFF0000, 0xFF00FF00, rnd.getrandbits(32)])
            return rnd.choice(bases) & mask, mask
        lo = rnd.choice([0, 53, 1000, rnd.randrange(65536)])
        r = Rule(tern(), tern(), (lo, min(65535, lo + rnd.choice([0, 10, 1000, 65535]))), rnd.choice([1, 2, 3, 5]),
                 rnd.randrange(0, 6))
        ident = (r.src, r.dst, r.ports, r.prio)
        if ident not in seen:
            seen.add(ident)
            rules.append(r)
    # two rules of one priority for one packet: A (class 2) added before B (class 3), then A
    # deleted and added again, so B wins (by hand: ties go to the entry added first)
    a = Rule((0x01020304, FULL), (0x05060708, FULL), (4000, 4242), 4, 2)
    b = Rule((0x01020300, 0xFFFFFF00), (0x05060708, FULL), (4242, 5000), 4, 3)
    rules = [a, b, *rules]
    gone = [a, *rules[10:20]]
    order = [r for r in rules if r not in gone] + gone  # deleted, then added again: last

    def setup(rt, ch):
        acl = rt.table("acl")
        for start in range(0, len(rules), 17):
            part = rules[start:start + 17]
            acl.add_many([r.row() for r in part], [r.prio for r in part])
        acl.delete_many([{k: v for k, v in r.row().items() if k != "class"} for r in gone], [r.prio for r in gone])
        acl.add_many([r.row() for r in gone], [r.prio for r in gone])
        rt.table("class_ports").add_many([{"meta_class": c, "ipv4_dst": d, "port": 10 + c}
                                          for c in range(1, 6) for d in set(dsts)])
        assert acl.read_entry({"ipv4_src": gone[0].src, "ipv4_dst": gone[0].dst, "udp_dport": gone[0].ports},
                              gone[0].prio) == {"class": gone[0].cls}

    dsts = [rnd.choice(bases) ^ rnd.choice([0, 1, 0x100, 0x10000, rnd.getrandbits(32)]) for _ in range(40)]
    tuples = [(rnd.choice(bases) ^ rnd.choice([0, 1, 0x100, 0x10000, rnd.getrandbits(32)]), d,
               rnd.choice([0, 53, 999, 1000, 1010, 2000, rnd.randrange(65536)])) for d in dsts for _ in range(5)]
    tuples.append((0x01020304, 0x05060708, 4242))
    dsts.append(0x05060708)
    outs = _run(built, tmp_path, setup, [_udp(*t) for t in tuples])
    want = [(t, _brute(order, *t)) for t in tuples]
    assert want[-1][1] == 3
    got = sorted((port, IP(o[14:]).src, IP(o[14:]).dst, IP(o[14:]).dport) for port, o in outs)
    # class 0 drops (denied); every other class leaves unchanged on port 10 + class
    assert got == sorted((10 + c, _ip(s), _ip(d), p) for (s, d, p), c in want if c != 0)
    classes = {c for _t, c in want}
    assert len(classes) >= 4, f"the packets reach too few classes: {classes}"
    # the packets tell the orders apart: ties go to the first added
    assert any(c != _brute(list(reversed(order)), *t) for t, c in want)


def test_a_record_laid_out_by_the_document_and_refusals_that_change_nothing(built, tmp_path):
    def setup(rt, ch):
        t = ch.tables["acl"]
        assert t.acl and t.match == ("ternary", "ternary", "range")
        # docs/control.md: src, dst, dport low, src mask, dst mask, dport high, priority, class
        rec = [0x0A000000, 0xC0A80100, 1000, 0xFF000000, 0xFFFFFF00, 2000, 7, 3]
        body = struct.pack("<8Q", *rec)
        status, _i, _ = ch.raw(REQ.pack(b"NFCQ", VERSION, OP["add"], t.index, 1, len(body)), body)
        assert status == 0
        assert ch.dump("acl") == [tuple(rec)]
        acl = rt.table("acl")
        before = ch.dump("acl")
        bad = [({"ipv4_src": (0x0A000001, 0xFF000000)}, 7),  # a value bit outside its mask
               ({"udp_dport": (2000, 1000)}, 7),  # an empty range
               ({}, 0)]  # no priority
        for change, prio in bad:
            row = {"ipv4_src": (0x0B000000, 0xFF000000), "ipv4_dst": (0, 0), "udp_dport": (0, 65535), "class": 2}
            with pytest.raises(InvalidEntry):
                acl.add_many([row | change], [prio])
        with pytest.raises(EntryExists):
            acl.add_many([{"ipv4_src": (0x0A000000, 0xFF000000), "ipv4_dst": (0xC0A80100, 0xFFFFFF00),
                           "udp_dport": (1000, 2000), "class": 4}], [7])
        with pytest.raises(EntryNotFound):  # the same match at another priority is another entry
            acl.delete_many([{"ipv4_src": (0x0A000000, 0xFF000000), "ipv4_dst": (0xC0A80100, 0xFFFFFF00),
                              "udp_dport": (1000, 2000)}], [8])
        assert ch.dump("acl") == before
        gw = _api(built)(built, server=ch)  # the generated API: priority= names the entry
        key = {"ipv4_src": (0x0A000000, 0xFF000000), "ipv4_dst": (0xC0A80100, 0xFFFFFF00), "udp_dport": (1000, 2000)}
        gw.acl.modify(**key, class_=5, priority=7)
        assert gw.acl.get(**key, priority=7).class_ == 5
        gw.class_ports.add(meta_class=5, ipv4_dst="192.168.1.9", port=15)

    outs = _run(built, tmp_path, setup, [_udp(0x0A010203, 0xC0A80109, 1500), _udp(0x0A010203, 0xC0A80109, 999)])
    # the first is class 5 (modified) to port 15; the second misses the rule: class 1, no class_ports entry: dropped
    assert [(port, IP(o[14:]).dport) for port, o in outs] == [(15, 1500)]


def test_the_entries_file_writes_ternary_range_and_priority_as_the_document_says(built, tmp_path):
    """nfc_entries.c: value&&&mask, low..high, a plain value (the whole field), @priority; the
    lines of a table are one batch (one classifier build); a bad line is named and stops the load."""
    good = tmp_path / "good.entries"
    good.write_text("acl 0x0A000000&&&0xFF000000 0xC0A80100&&&0xFFFFFF00 1000..2000 @7 : 3\n"
                    "acl 1 2 53 @1 : 4\n"
                    "class_ports 3 0xC0A80109 : 13\n")
    with ServerProcess(built / "server/nf-san", ["net_null0"], extra=["--entries", str(good)]) as srv:
        assert sorted(srv.control.dump("acl")) == [(1, 2, 53, FULL, FULL, 53, 1, 4),
                                                   (0x0A000000, 0xC0A80100, 1000, 0xFF000000, 0xFFFFFF00, 2000, 7, 3)]
    for line in ("acl 1 2 53 : 4", "acl 1 2 2000..1000 @1 : 4", "acl 1&&&0 2 53 @1 : 4", "acl 1 2 53 @0 : 4"):
        bad = tmp_path / "bad.entries"
        bad.write_text("class_ports 3 0xC0A80109 : 13\n" + line + "\n")
        r = subprocess.run([str(built / "server/nf-san"), *eal_args(), "--vdev=net_null0", "--", "--entries", str(bad)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and f"{bad}:2: entry rejected by table acl" in r.stderr, (line, r.stderr[-2000:])


def test_classifiers_replaced_while_the_lcore_classifies_free_nothing_it_reads(built, tmp_path):
    """Every batch publishes a new rte_acl context and frees the old one after a grace period,
    while the lcore classifies the same packets forever (net_pcap infinite_rx) under ASan: a
    context or value record freed under it would be a sanitizer report or a crash."""
    pcap = tmp_path / "in.pcap"
    with RawPcapWriter(str(pcap), linktype=1) as w:
        for k in range(64):
            w.write(_udp(0x0A000000 | k, 0xC0A80100 | k, 1000 + k))
    replay = f"net_pcap0,rx_pcap={pcap},tx_pcap=/dev/null,infinite_rx=1"
    with ServerProcess(built / "server/nf-san", [replay]) as srv:
        rt = Runtime(built, server=srv.control)
        acl = rt.table("acl")
        rt.table("class_ports").add_many([{"meta_class": c, "ipv4_dst": 0xC0A80100 | k, "port": 0}
                                          for c in range(1, 4) for k in range(64)])
        before = srv.control.counters()
        for round_ in range(40):
            rows = [{"ipv4_src": (0x0A000000 | k, FULL), "ipv4_dst": (0, 0), "udp_dport": (0, 65535),
                     "class": 1 + (round_ + k) % 3} for k in range(0, 64, 2)]
            acl.add_many(rows, [5] * len(rows))
            acl.delete_many([{k: v for k, v in r.items() if k != "class"} for r in rows], [5] * len(rows))
        after = srv.control.counters()
        assert srv.proc.poll() is None
        handled = after["forwarded"] + sum(after["drops"].values())
        assert handled > before["forwarded"] + sum(before["drops"].values())  # it classified all along
        assert srv.control.dump("acl") == []
    assert "ERROR: AddressSanitizer" not in srv.stderr and "runtime error:" not in srv.stderr, srv.stderr[-3000:]
