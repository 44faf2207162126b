"""Loading a big switch table over P4Runtime (issue 14, item 4): the runtime API's writes go
in WriteRequests of ``chunk`` updates, each with a deadline of the floor plus an allowance per
update; a failed request stops the write and what went through is undone; the undo values of
a modify or delete are read key by key (§9.1), not by reading the whole table; the switch
model streams a big read in parts.  Against Bluebird's route cache (``ca_to_pa``, exact) in
the switch model behind a real gRPC port."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from p4.v1 import p4runtime_pb2

from emulator.switchmodel import SwitchModel
from emulator.switchmodel.server import P4RuntimeServer, serve
from runtime.api import Runtime, TableSchema, _check, _Entry
from runtime.errors import ChannelError, EntryExists, EntryNotFound
from runtime.p4runtime import CHUNK, SwitchClient, SwitchUpdate
from tests.support import build_example

TABLE = "ca_to_pa"
GRPC_MAX_MESSAGE = 4 << 20  # gRPC's default limit on a received message


def fields(i: int, vtep: int = 0xAC100001) -> dict[str, int]:
    """The i-th cache entry: a distinct (VRF, customer address) key."""
    return {"meta_vrf": 1 + i % 100, "ca": 0x0A000000 + i, "vtep": vtep, "vni": 5000, "vm_mac": 0x020000000000 + i}


@pytest.fixture(scope="module")
def bluebird(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = build_example("examples/bluebird_tor.nfp", "tofino+dpdk")
    return out


class Switch:
    """A fresh switch model on a gRPC port, a client with the given settings, and a Runtime
    with the client as its switch; every Write and Read the client sends is recorded."""

    def __init__(self, out: Path, **client: Any) -> None:
        names = json.loads((out / "switch" / "name_map.json").read_text())
        self.grpc, port = serve(P4RuntimeServer(SwitchModel.from_build(out, "tna"), names, "tna"))
        self.client = SwitchClient(f"127.0.0.1:{port}", names, "tna", **client)
        self.rt = Runtime(out, switch=self.client)
        self.schema: TableSchema = self.rt.schemas[TABLE]
        self.writes: list[tuple[int, float]] = []  # (updates, deadline) of each WriteRequest
        self.ops: list[list[int]] = []  # the update types of each WriteRequest
        self.reads: list[Any] = []  # each ReadRequest
        stub_write, stub_read = self.client.stub.Write, self.client.stub.Read

        def write(req: Any, timeout: float) -> Any:
            self.writes.append((len(req.updates), timeout))
            self.ops.append([u.type for u in req.updates])
            return stub_write(req, timeout=timeout)

        def read(req: Any, timeout: float) -> Iterator[Any]:
            self.reads.append(req)
            return stub_read(req, timeout=timeout)

        self.client.stub.Write, self.client.stub.Read = write, read

    def entries(self, rows: Iterable[int], **kw: int) -> list[_Entry]:
        return [_check(self.schema, fields(i, **kw), True) for i in rows]

    def switch(self, op: str, entries: list[_Entry]) -> None:
        """The switch half of a cache write (what ``Runtime._cached`` sends once the server has it)."""
        self.rt._switch(self.schema, op, entries)

    def contents(self) -> dict[tuple[int, int], int]:
        return {(m["meta_vrf"][0], m["ca"][0]): v["vtep"] for m, v, _p in self.client.read(TABLE)}

    def close(self) -> None:
        self.client.close()
        self.grpc.stop(0)


@pytest.fixture
def switch(bluebird: Path) -> Iterator[Switch]:
    s = Switch(bluebird)
    yield s
    s.close()


def test_50k_entry_cache_loads_with_default_client_settings(switch):
    """All in one WriteRequest under a fixed 10 s deadline, 20K entries took 10 to 16 s here
    (pure-Python protobuf) and 50K failed with DEADLINE_EXCEEDED."""
    switch.switch("add", switch.entries(range(50_000)))
    assert len(switch.contents()) == 50_000


def test_write_goes_in_chunks_each_with_a_deadline_scaled_to_it(bluebird):
    s = Switch(bluebird, chunk=4, per_update=0.5, timeout=3.0)
    try:
        s.switch("add", s.entries(range(10)))
        assert s.writes == [(4, 3.0 + 4 * 0.5), (4, 3.0 + 4 * 0.5), (2, 3.0 + 2 * 0.5)]
        assert len(s.contents()) == 10
    finally:
        s.close()


def test_a_failed_chunk_stops_the_write_and_what_went_through_is_undone(bluebird):
    s = Switch(bluebird, chunk=2)
    try:
        s.switch("add", s.entries(range(3, 4)))  # entry 3 is there already
        with pytest.raises(EntryExists) as e:
            s.switch("add", s.entries(range(8)))  # chunks [0,1] [2,3] [4,5] [6,7]: 3 fails
        assert e.value.index == 3
        add, delete = p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.DELETE
        # [0,1] and [2,3] sent, [4,5] and [6,7] not; then 0, 1 and 2 deleted again
        assert s.ops == [[add], [add, add], [add, add], [delete, delete], [delete]]
        assert s.contents() == {(4, 0x0A000003): 0xAC100001}  # 0, 1 and 2 undone
    finally:
        s.close()


def test_a_whole_chunk_of_failed_updates_reports_each_updates_error(bluebird):
    """A full chunk (4,096) where every update fails: the reply's per-update errors (~330 KB of
    trailing metadata, past gRPC's default 16 KiB) reach the client as one error per update,
    not as a failed call (RESOURCE_EXHAUSTED) that hides them."""
    s = Switch(bluebird)
    try:
        entries = s.entries(range(CHUNK))
        s.switch("add", entries)
        errors = s.client.write([SwitchUpdate("add", TABLE, e.match, e.values, e.priority) for e in entries])
        assert len(errors) == CHUNK and all(isinstance(e, EntryExists) for e in errors)
        assert [e.index for e in errors if e is not None] == list(range(CHUNK))
    finally:
        s.close()


def test_a_transport_failure_after_the_first_chunk_undoes_the_chunks_before(bluebird):
    s = Switch(bluebird, chunk=2)
    try:
        sent = s.client.stub.Write

        def fail_third(req: Any, timeout: float) -> Any:
            if len(s.writes) == 2:
                s.writes.append((len(req.updates), timeout))
                raise ValueError("Cannot invoke RPC on closed channel!")
            return sent(req, timeout=timeout)

        s.client.stub.Write = fail_third
        with pytest.raises(ChannelError) as e:
            s.switch("add", s.entries(range(6)))
        assert e.value.index == 4
        assert s.contents() == {}
    finally:
        s.close()


def test_undo_values_are_read_key_by_key_not_by_reading_the_table(switch):
    switch.switch("add", switch.entries(range(50)))
    switch.reads.clear()
    with pytest.raises(EntryNotFound):  # 60 is not there: the modify is undone with the values read
        switch.switch("modify", switch.entries([7, 8, 60], vtep=0xAC10FFFF))
    assert [len(r.entities) for r in switch.reads] == [3]
    assert all(len(ent.table_entry.match) == 2 for ent in switch.reads[0].entities)  # each a whole key
    got = switch.contents()
    assert got[(8, 0x0A000007)] == got[(9, 0x0A000008)] == 0xAC100001 and len(got) == 50


def test_eviction_batch_reads_only_its_keys(switch):
    switch.switch("add", switch.entries(range(1000)))
    switch.reads.clear()
    switch.switch("delete", switch.entries(range(0, 1000, 100)))
    assert sum(len(r.entities) for r in switch.reads) == 10
    assert len(switch.contents()) == 990


def test_a_big_table_is_read_back_in_parts_under_the_message_limit(switch):
    switch.switch("add", switch.entries(range(12_000)))
    req = p4runtime_pb2.ReadRequest(device_id=0)
    req.entities.add().table_entry.table_id = switch.client.names["p4runtime"]["tables"][TABLE]["id"]
    parts = list(switch.client.stub.Read(req, timeout=30))
    assert len(parts) > 1 and all(p.ByteSize() < GRPC_MAX_MESSAGE // 4 for p in parts)
    assert sum(len(p.entities) for p in parts) == 12_000


def test_reading_one_switch_entry_queries_its_key_not_the_table(switch):
    """Table.read of a table on the switch alone: one query with the whole key (P4Runtime §9.1
    reads that one entry), not a read of every entry filtered here."""
    routes = switch.rt.table("vrf_routes_v4")
    routes.add_many([{"meta_vrf": 1, "ipv4_dst": f"10.{i}.0.0/16", "to_vnet": 0, "port": i, "next_hop_mac": i}
                     for i in range(1, 200)])
    switch.reads.clear()
    assert routes.read(meta_vrf=1, ipv4_dst="10.42.0.0/16") == {"to_vnet": 0, "port": 42, "next_hop_mac": 42}
    assert [len(r.entities) for r in switch.reads] == [1]
    assert len(switch.reads[0].entities[0].table_entry.match) == 2
