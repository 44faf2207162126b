"""Fields over 64 bits on the server (issue 15 item 1): the control channel and the entries
file carry a 128-bit key or value as two 64-bit words, low word first (docs/control.md), and
the server program (tests/corpus/wide_fields.nfp under --target dpdk, forwarding on net_null)
keeps them whole.  The words are built here by hand from the document, not by the client's
own encoder, and the expected values are plain Python integers.  Forwarding with wide fields
is compared with the reference interpreter in tests/test_differential_examples.py (corpus
program wide_fields; the Bluebird example's IPv6 routes)."""

from __future__ import annotations

import struct
import subprocess

import pytest

from runtime.control import OP, REQ, VERSION
from runtime.errors import InvalidEntry
from runtime.server_proc import ServerProcess
from tests.support import DPDK, build_with_server

pytestmark = DPDK

TOP = (1 << 128) - 1
DOC = 0x20010DB8_00000000_00000000_00000001  # 2001:db8::1
HIGH = 0xFFFF0000_00000000_00000000_0000ABCD


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("wide") / "out"
    return build_with_server("tests/corpus/wide_fields.nfp", out, "--target", "dpdk")


@pytest.fixture(scope="module")
def srv(built):
    with ServerProcess(built / "server/nf", ["net_null0"]) as s:
        yield s


def _words(v: int, width: int) -> list[int]:
    """docs/control.md: ceil(width/64) words, least significant first."""
    return [(v >> (64 * i)) & ((1 << 64) - 1) for i in range((width + 63) // 64)]


def _entries(srv, table: str) -> int:
    return int(srv.control.counters()["tables"][table]["entries"])


def test_hello_gives_the_128_bit_widths(srv):
    t = srv.control.tables
    assert t["nat66"].keys == (128,) and t["nat66"].values == (128, 8)
    assert t["v6_routes"].keys == (16, 128) and t["v6_routes"].lpm == 1


def test_a_record_written_as_words_by_the_document_reads_back_whole(srv):
    ch = srv.control
    body = struct.pack("<5Q", *_words(DOC, 128), *_words(HIGH, 128), 7)
    status, _index, _ = ch.raw(REQ.pack(b"NFCQ", VERSION, OP["add"], ch.tables["nat66"].index, 1, len(body)), body)
    assert status == 0
    assert ch.read("nat66", [[DOC]]) == [(HIGH, 7)]
    assert (DOC, HIGH, 7) in ch.dump("nat66")
    ch.write("delete", "nat66", [[DOC]])


def test_exact_keys_and_values_at_the_edges_of_128_bits(srv):
    ch = srv.control
    keys = [0, 1, (1 << 64) - 1, 1 << 64, TOP, DOC]
    ch.write("add", "nat66", [[k, TOP - k, k & 0xFF] for k in keys])
    assert ch.read("nat66", [[k] for k in keys]) == [(TOP - k, k & 0xFF) for k in keys]
    assert sorted(ch.dump("nat66")) == sorted((k, TOP - k, k & 0xFF) for k in keys)
    ch.write("modify", "nat66", [[1 << 64, 1 << 127, 1]])
    assert ch.read("nat66", [[1 << 64]]) == [(1 << 127, 1)]
    ch.write("delete", "nat66", [[k] for k in keys])
    assert _entries(srv, "nat66") == 0


def test_lpm_routes_over_64_bits_keep_their_prefix(srv):
    """The key is masked to its prefix length across the word boundary (a /100 keeps bits of
    the low word, a /40 none of them); dumps give the masked prefix."""
    ch = srv.control
    routes = [(5, DOC, 0), (5, DOC, 40), (5, DOC | (0xFFFF << 32), 100), (5, DOC, 127), (5, DOC, 128), (9, TOP, 128)]
    ch.write("add", "v6_routes", [[vrf, a, plen, plen + 1, a ^ TOP] for vrf, a, plen in routes])
    masked = {(vrf, a >> (128 - plen) << (128 - plen) if plen else 0, plen, plen + 1, a ^ TOP)
              for vrf, a, plen in routes}
    assert set(ch.dump("v6_routes")) == masked
    ch.write("delete", "v6_routes", [[vrf, a, plen] for vrf, a, plen in routes])
    assert _entries(srv, "v6_routes") == 0


def test_a_value_too_wide_is_refused_and_changes_nothing(srv):
    ch = srv.control
    with pytest.raises(InvalidEntry):  # does not fit two words: refused before it is sent
        ch.write("add", "nat66", [[DOC, 1 << 128, 0]])
    body = struct.pack("<5Q", *_words(DOC, 128), *_words(1, 128), 256)  # an 8-bit value of 256
    status, _index, _ = srv.control.raw(REQ.pack(b"NFCQ", VERSION, OP["add"], ch.tables["nat66"].index, 1, len(body)),
                                        body)
    assert status != 0
    with pytest.raises(InvalidEntry):  # a 16-bit VRF of 2^16 in the key's first word
        ch.write("add", "v6_routes", [[1 << 16, DOC, 64, 1, 1]])
    assert _entries(srv, "nat66") == 0 and _entries(srv, "v6_routes") == 0


def test_the_entries_file_takes_128_bit_numbers(built, tmp_path):
    """``--entries``: numbers in C syntax (hex, octal, decimal) of up to 128 bits; one over
    its field's width stops the load with the line named."""
    good = tmp_path / "good.txt"
    good.write_text(f"nat66 {DOC:#x} : {HIGH:#x} 7\n"
                    f"nat66 {TOP} : 0 0x10\n"
                    f"v6_routes 3 {DOC:#x}/100 : 1 {1 << 64}\n")
    with ServerProcess(built / "server/nf", ["net_null0"], extra=["--entries", str(good)]) as s:
        assert s.control.read("nat66", [[DOC], [TOP]]) == [(HIGH, 7), (0, 16)]
        assert s.control.dump("v6_routes") == [(3, DOC >> 28 << 28, 100, 1, 1 << 64)]
    bad = tmp_path / "bad.txt"
    bad.write_text(f"nat66 {DOC:#x} : {1 << 128:#x} 7\n")
    r = subprocess.run([str(built / "server/nf"), "--no-huge", "-m", "256", "--no-pci", "--no-shconf",
                        "--no-telemetry", "--log-level=error", "-l", "0", "--vdev=net_null0", "--",
                        "--entries", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "bad.txt:1: entry rejected" in r.stderr, r.stderr
