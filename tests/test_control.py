"""The server program's control channel (nfc_ctl.h), against the real DPDK process forwarding
on net_null: entries applied while it runs, all-or-nothing messages, malformed requests
answered with an error that changes nothing."""

from __future__ import annotations

import json
import random
import socket
import struct
import time
from pathlib import Path

import pytest

from runtime.control import OP, REQ, ControlChannel
from runtime.errors import ChannelError, EntryExists, EntryNotFound, InvalidEntry
from runtime.server_proc import ServerProcess
from tests.support import DPDK, build_example

pytestmark = DPDK


def _build(tmp_path_factory, example: str, target: str = "tofino+dpdk"):
    # cgnat's 59 Mpps on its servers' own NICs (--target dpdk) is E081 without --allow-overcommit
    return build_example(example, target, "--allow-overcommit", server=True)


@pytest.fixture(scope="module")
def vpn(tmp_path_factory):
    out = _build(tmp_path_factory, "vpn_gateway")
    with ServerProcess(out / "server/nf", ["net_null0"]) as srv:  # forwarding (garbage) all along
        yield out, srv


def _route(i: int) -> list[int]:
    return [1 + i % 4000, 1 + (i // 4000) % 4000, 0xC0A80000 + i, 0xAC100000 + i % 65536, i % (1 << 24)]


def _count(ch: ControlChannel) -> int:
    return int(ch.counters()["tables"]["overlay_routes"]["entries"])


def test_hello_describes_the_planned_tables(vpn):
    out, srv = vpn
    plan = json.loads((out / "plan.json").read_text())
    server_tables = {t["name"]: t for t in plan["tables"] if "server" in t}
    assert set(srv.control.tables) == set(server_tables)
    for name, t in srv.control.tables.items():
        assert t.keys == tuple(k["width"] for k in server_tables[name]["keys"])
        assert t.values == tuple(v["width"] for v in server_tables[name]["values"])
    assert srv.control.program == "vpn_gateway"


def test_bulk_add_read_dump_delete_while_forwarding(vpn):
    _out, srv = vpn
    ch = srv.control
    recs = [_route(i) for i in range(100_000)]
    ch.write("add", "overlay_routes", recs, chunk=100_000)
    assert _count(ch) == 100_000
    sample = random.Random(5).sample(recs, 200)
    assert ch.read("overlay_routes", [r[:3] for r in sample]) == [tuple(r[3:]) for r in sample]
    assert sorted(ch.dump("overlay_routes")) == sorted(tuple(r) for r in recs)
    ch.write("modify", "overlay_routes", [[*r[:3], 1, 2] for r in sample[:10]])
    assert ch.read("overlay_routes", [r[:3] for r in sample[:10]]) == [(1, 2)] * 10
    ch.write("delete", "overlay_routes", [r[:3] for r in recs])
    assert _count(ch) == 0
    assert ch.counters()["drops"]["bad_bridge"] > 0  # net_null's packets went through meanwhile


@pytest.mark.parametrize("bad, error", [
    ([4096, 1, 1, 1, 1], InvalidEntry),          # key field wider than 12 bits
    ([9, 9, 9, 1, 1 << 24], InvalidEntry),       # value wider than 24 bits
    ([*_route(50)[:3], 1, 1], EntryExists),      # already there
    ([3, 3, 3, 1, 1], InvalidEntry),             # the same key as record 0 of the message
])
def test_a_bad_add_changes_nothing(vpn, bad, error):
    _out, srv = vpn
    ch = srv.control
    base = [_route(i) for i in range(100)]
    ch.write("add", "overlay_routes", base)
    before = sorted(ch.dump("overlay_routes"))
    batch = [[3, 3, 3, 5, 5]] + [[3000 + i, 7, i, 1, 1] for i in range(56)] + [bad] + [[3001, 8, 8, 1, 1]]
    with pytest.raises(error) as e:
        ch.write("add", "overlay_routes", batch)
    assert e.value.index == 57
    assert sorted(ch.dump("overlay_routes")) == before
    with pytest.raises(EntryNotFound):
        ch.read("overlay_routes", [[3, 3, 3]])
    ch.write("delete", "overlay_routes", [r[:3] for r in base])


def test_bad_modify_and_delete_change_nothing(vpn):
    _out, srv = vpn
    ch = srv.control
    base = [_route(i) for i in range(10)]
    ch.write("add", "overlay_routes", base)
    with pytest.raises(EntryNotFound) as e:
        ch.write("modify", "overlay_routes", [[*r[:3], 0, 0] for r in base] + [[9, 9, 9, 0, 0]])
    assert e.value.index == 10
    with pytest.raises(EntryNotFound):
        ch.write("delete", "overlay_routes", [r[:3] for r in base] + [[9, 9, 9]])
    with pytest.raises(InvalidEntry):  # the same key twice
        ch.write("delete", "overlay_routes", [base[0][:3], base[0][:3]])
    assert sorted(ch.dump("overlay_routes")) == sorted(tuple(r) for r in base)
    ch.write("delete", "overlay_routes", [r[:3] for r in base])


def test_malformed_requests_get_an_error_reply(vpn):
    _out, srv = vpn
    ch = ControlChannel(srv.socket)
    base = [_route(i) for i in range(5)]
    ch.write("add", "overlay_routes", base)
    for header, body in [
        (REQ.pack(b"NFCQ", 1, 42, 0, 0, 0), b""),                        # unknown op
        (REQ.pack(b"NFCQ", 1, OP["add"], 7, 1, 40), bytes(40)),          # no table 7
        (REQ.pack(b"NFCQ", 1, OP["add"], 0, 2, 40), bytes(40)),          # 2 records, 1 in the body
        (REQ.pack(b"NFCQ", 1, OP["delete"], 0, 1, 40), bytes(40)),       # a delete record is 3 words
    ]:
        status, _index, why = ch.raw(header, body)
        assert status != 0 and why
    status, _i, why = ch.raw(REQ.pack(b"NFCQ", 2, OP["hello"], 0, 0, 0))  # a future version
    assert status == 1 and b"version 1" in why
    with pytest.raises(ChannelError):  # and the connection is closed
        ch.counters()
    ch.close()
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # a client that vanishes mid-message
    raw.connect(str(srv.socket))
    raw.sendall(REQ.pack(b"NFCQ", 1, OP["add"], 0, 1000, 40_000) + struct.pack("<5Q", *_route(999)))
    raw.close()
    with ControlChannel(srv.socket) as ch2:
        assert sorted(ch2.dump("overlay_routes")) == sorted(tuple(r) for r in base)
        ch2.write("delete", "overlay_routes", [r[:3] for r in base])


@pytest.fixture(scope="module")
def dsr(tmp_path_factory):
    out = _build(tmp_path_factory, "dsr_router", "dpdk")
    with ServerProcess(out / "server/nf", ["net_null0"]) as srv:
        yield srv


def test_lpm_entries_are_masked_to_their_prefix(dsr):
    ch = dsr.control
    name, t = next((n, t) for n, t in ch.tables.items() if t.lpm >= 0)
    key = [0] * len(t.keys)
    key[t.lpm] = 0x0A010203  # 10.1.2.3/16 is stored as 10.1.0.0/16
    width = t.keys[t.lpm]
    key[t.lpm] <<= max(0, width - 32)
    values = [1] * len(t.values)
    ch.write("add", name, [[*key, 16, *values]])
    other = list(key)
    other[t.lpm] = 0x0A010000 << max(0, width - 32)
    assert ch.read(name, [[*other, 16]]) == [tuple(values)]
    with pytest.raises(EntryExists):
        ch.write("add", name, [[*other, 16, *values]])
    with pytest.raises(InvalidEntry):  # a prefix longer than the field
        ch.write("add", name, [[*other, width + 1, *values]])
    ch.write("delete", name, [[*key, 16]])
    assert ch.counters()["tables"][name]["entries"] == 0


def test_two_forwarding_lcores_and_hugepages_when_they_can_be_had(vpn):
    from runtime.server_proc import eal_args, hugepages
    out, _srv = vpn
    reserved = Path("/proc/sys/vm/nr_hugepages").read_text()
    with hugepages(512) as huge, ServerProcess(out / "server/nf", ["net_null0"],
                                               eal=eal_args("0,1", 512, huge=huge)) as srv:
        srv.control.write("add", "overlay_routes", [_route(i) for i in range(1000)])
        first = srv.control.counters()["drops"].get("bad_bridge", 0)  # none yet on a slow start
        deadline = time.monotonic() + 20
        while srv.control.counters()["drops"].get("bad_bridge", 0) <= first:  # still forwarding
            assert time.monotonic() < deadline, srv.control.counters()
            time.sleep(0.05)
    assert srv.counters["tables"]["overlay_routes"]["entries"] == 1000
    assert Path("/proc/sys/vm/nr_hugepages").read_text() == reserved  # given back
