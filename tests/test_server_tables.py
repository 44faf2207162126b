"""Server tables changed through the control channel (issue 13): LPM routes added, replaced
and deleted in all-or-nothing batches (the trie of targets/dpdk/runtime/nfc_lpm.c behind
them, value records shared between entries), and control-plane tables growing past the room
they start with.  The generated program (tests/corpus/lpm_routes.nfp, --target dpdk, under
ASan + UBSan) must then forward as the reference interpreter does with the entries that are
left."""

from __future__ import annotations

import random
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.utils import RawPcapReader, RawPcapWriter

from compiler.interp import Entry, Interpreter, Match
from runtime.control import ControlChannel
from runtime.server_proc import ServerProcess, eal_args
from tests.support import (
    DPDK,
    ROOT,
    TABLES_RUNTIME,
    compile_file,
    nfc_cli,
    reference_outputs,
    run_harness,
    run_make,
    sanitized_harness,
)

pytestmark = DPDK

SOURCE = ROOT / "tests" / "corpus" / "lpm_routes.nfp"
TAG = struct.Struct(">I")  # nf --tagged: the logical port before each frame
SRC_IP = 0x0A000001


@dataclass
class Built:
    binary: Path
    spec: Interpreter


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("lpm_routes")
    r = nfc_cli("build", str(SOURCE.relative_to(ROOT)), "--target", "dpdk", "-o", str(out))
    assert r.returncode == 0, r.stderr
    r = run_make(out / "server", "nf-san")
    assert r.returncode == 0, r.stderr[-3000:]
    return Built(out / "server" / "nf-san", Interpreter(compile_file(str(SOURCE), "dpdk").program))


@pytest.fixture(autouse=True)
def asan_aborts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sanitizer report ends the program (the entries still held at exit are not leaks)."""
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")


def _ip(a: int) -> str:
    return ".".join(str(a >> s & 255) for s in (24, 16, 8, 0))


def _run(b: Built, load: Callable[[ControlChannel], None], packets: list[tuple[int, bytes]],
         work: Path) -> tuple[dict[int, Counter[bytes]], Counter[str]]:
    """The program with what ``load(control)`` writes, then the tagged packets: outputs per
    port (multisets) and drops by reason."""
    rx, tx = work / "in.pcap", work / "out.pcap"
    with RawPcapWriter(str(rx), linktype=1) as w:
        for port, data in packets:
            w.write(TAG.pack(port) + data)
    srv = ServerProcess(b.binary, eal=eal_args(), live=False, extra=["--tagged"],
                        attach=[f"net_pcap0,rx_pcap={rx},tx_pcap={tx}"])
    with srv:
        load(srv.control)
        srv.control.start()
        counters = srv.wait(120)
    assert "ERROR: AddressSanitizer" not in srv.stderr and "runtime error:" not in srv.stderr, srv.stderr[-3000:]
    got: dict[int, Counter[bytes]] = {}
    for data, _ in RawPcapReader(str(tx)) if tx.exists() else []:
        got.setdefault(TAG.unpack_from(data)[0], Counter())[bytes(data[TAG.size:])] += 1
    return got, Counter(counters.get("drops", {}))


def _packet(dst: int, vid: int | None = None) -> bytes:
    ip = IP(src=_ip(SRC_IP), dst=_ip(dst), ttl=9) / UDP(sport=1, dport=2) / b"lpm"
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / (Dot1Q(vlan=vid) / ip if vid else ip))


def _routes(rnd: random.Random, n: int) -> Iterator[tuple[int, int, int]]:
    """(vrf, prefix, length): nested around a few bases, at and beside the trie's level
    boundaries (8, 24, 32)."""
    bases = [rnd.getrandbits(32) for _ in range(4)]
    for _ in range(n):
        plen = rnd.choice([0, 7, 8, 9, 16, 23, 24, 25, 31, 32, rnd.randint(0, 32)])
        addr = rnd.choice(bases) ^ rnd.getrandbits(rnd.choice([4, 12, 20, 32]))
        yield rnd.choice([1, 2]), addr >> (32 - plen) << (32 - plen) if plen else 0, plen


def test_routes_added_replaced_and_deleted_over_the_control_channel_forward_as_the_reference(
        built: Built, tmp_path: Path) -> None:
    """Routes share a few next hops (so entries share value records, nfc_values.c), are
    replaced by the same or another next hop, and deleted; a record freed while a route
    still used it would be an ASan report or a wrong output."""
    rnd = random.Random(13)
    hops = [(rnd.randrange(32), rnd.getrandbits(48), rnd.choice([0, rnd.randrange(1, 4096)])) for _ in range(5)]
    routes = {key: rnd.choice(hops) for key in _routes(rnd, 300)}
    keys = sorted(routes)
    replaced = {k: rnd.choice(hops) for k in rnd.sample(keys, 80)}
    deleted = set(rnd.sample([k for k in keys if k not in replaced], 120))
    final = {k: replaced.get(k, v) for k, v in routes.items() if k not in deleted}

    def load(ch: ControlChannel) -> None:
        ch.write("add", "port_vrf", [[1, 1], [2, 2]])
        ch.write("add", "allowed_src", [[1, SRC_IP], [2, SRC_IP]])
        ch.write("add", "routes", [[*k, *routes[k]] for k in keys], chunk=100)
        ch.write("modify", "routes", [[*k, *v] for k, v in replaced.items()], chunk=30)
        ch.write("delete", "routes", [list(k) for k in sorted(deleted)], chunk=50)

    spec = built.spec
    for port, vrf in ((1, 1), (2, 2)):
        spec.tables["port_vrf"].insert(Entry((Match(port),), {"vrf": vrf}))
        spec.tables["allowed_src"].insert(Entry((Match(vrf), Match(SRC_IP)), {}))
    for (vrf, net, plen), (port, mac, vid) in final.items():
        spec.tables["routes"].insert(Entry((Match(vrf), Match(net, plen)),
                                           {"port": port, "next_hop_mac": mac, "vid": vid}))
    packets = []
    for _ in range(600):
        _, net, plen = rnd.choice(keys)
        dst = net | rnd.getrandbits(32 - plen) if plen < 32 else net
        packets.append((rnd.choice([1, 2]), _packet(dst if rnd.random() < 0.9 else rnd.getrandbits(32))))
    got = _run(built, load, packets, tmp_path)
    inputs: dict[int, list[bytes]] = {}
    for port, data in packets:
        inputs.setdefault(port, []).append(data)
    want = reference_outputs(spec, inputs)
    assert got == want
    assert sum(sum(c.values()) for c in want[0].values()) > 300  # most packets found a route


def test_tables_grow_as_the_server_profile_says(built: Built, tmp_path: Path) -> None:
    """The generator hands the server profile's [memory] to the runtime (nfc_prog.h), the layout
    the compiler's memory model prices: with grow_from 64, grow_by 2 and grow_past_div 2 instead
    of 1,024, 4 and 4,
    allowed_src (size 64K) starts with room for 64 entries, a batch of 100 takes it to 128 (two
    times 64 is more than the 115 that 100 need below 7/8 full), a batch of 200 more straight to
    the 343 that 300 need (more than two times 128), and every entry is there.  port_vrf (size
    64) starts at 64 too; 60 entries take it to 74, the room of its size (64 + 64/7 + 1), not
    128; 10 more, past its size, to 74 + 74/2 = 111 (not two times 74: past its size a table
    grows by 1/grow_past_div)."""
    from nfc._build_dir import open_placed
    from targets.dpdk.generator import DpdkGenerator

    out = tmp_path / "build"
    r = nfc_cli("build", str(SOURCE.relative_to(ROOT)), "--target", "dpdk", "-o", str(out),
                        "--no-verify")
    assert r.returncode == 0, r.stderr
    plan, placed = open_placed(out)
    assert placed.targets.server is not None
    layout = {"grow_from": 64, "grow_by": 2, "grow_past_div": 2}
    spec = replace(placed.targets.server, memory={**placed.targets.server.memory, **layout})
    DpdkGenerator().emit(replace(placed, targets=replace(placed.targets, server=spec)), plan, out)
    m = run_make(out / "server")
    assert m.returncode == 0, m.stderr[-3000:]
    sources = random.Random(6).sample(range(1 << 24, 1 << 25), 300)
    capacity: list[int] = []

    def load(ch: ControlChannel) -> None:
        capacity.append(ch.tables["allowed_src"].capacity)
        for batch in (sources[:100], sources[100:]):
            ch.write("add", "allowed_src", [[1, s] for s in batch])
            with ControlChannel(ch.path) as again:  # HELLO again
                capacity.append(again.tables["allowed_src"].capacity)
        assert sorted(r[1] for r in ch.dump("allowed_src")) == sorted(sources)
        capacity.append(ch.tables["port_vrf"].capacity)
        for ports in (range(60), range(60, 70)):
            ch.write("add", "port_vrf", [[p, 1] for p in ports])
            with ControlChannel(ch.path) as again:
                capacity.append(again.tables["port_vrf"].capacity)
        assert sorted(r[0] for r in ch.dump("port_vrf")) == list(range(70))

    _run(Built(out / "server" / "nf", built.spec), load, [], tmp_path)
    assert capacity == [64, 128, 343, 64, 74, 111]


def test_a_table_full_below_seven_eighths_doubles_its_buckets(tmp_path: Path) -> None:
    """tests/c/cuckoo_check.c: 17 keys that share both their rte_hash buckets (16 slots) in a
    size-64 table (74 slots, 16 buckets): the 17th finds no place below 7/8 full.  The table is
    rebuilt with twice the buckets, a capacity of 129 (one more than 128, the power of two DPDK
    rounds 74 to), and takes the key; not the fourfold step past its size (296)."""
    harness = sanitized_harness(ROOT / "tests/c/cuckoo_check.c",
                                TABLES_RUNTIME,
                                tmp_path / "cuckoo_check")
    r = run_harness(harness, "0")
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr[-3000:]
    assert [int(v) for v in r.stdout.split()[1:]] == [74, 129, 17, 0]


def test_exact_table_grows_past_its_start_size_and_keeps_every_entry(built: Built, tmp_path: Path) -> None:
    """allowed_src (size 64K) starts with room for 1,024 entries (NFC_GROW_FROM) and grows
    as 5,000 are added in batches: every entry is still there, in the program's own dump and
    for the packets, and HELLO reports the room it has now."""
    rnd = random.Random(5)
    sources = rnd.sample(range(1 << 24, 1 << 25), 5000)
    capacity: list[int] = []

    def load(ch: ControlChannel) -> None:
        assert ch.tables["port_vrf"].capacity == 74  # size 64 and room for it below 7/8 full
        ch.write("add", "port_vrf", [[1, 1]])
        ch.write("add", "routes", [[1, 0, 0, 3, 0x020000000003, 0]])
        assert ch.tables["allowed_src"].capacity == 1024
        ch.write("add", "allowed_src", [[1, s] for s in sources], chunk=700)
        assert sorted(r[1] for r in ch.dump("allowed_src")) == sorted(sources)
        with ControlChannel(ch.path) as again:  # HELLO again
            capacity.append(again.tables["allowed_src"].capacity)

    allowed = rnd.sample(sources, 200)
    packets = [(1, bytes(Ether() / IP(src=_ip(s), dst="1.2.3.4") / b"g")) for s in allowed]
    packets.append((1, bytes(Ether() / IP(src="9.9.9.9", dst="1.2.3.4") / b"g")))
    got, drops = _run(built, load, packets, tmp_path)
    assert capacity and capacity[0] >= 5000
    assert sum(got.get(3, Counter()).values()) == 200 and drops == Counter({"source_not_allowed": 1})
