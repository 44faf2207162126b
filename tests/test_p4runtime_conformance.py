"""The switch model's P4Runtime server against the P4Runtime specification (v1.4; sections as
numbered there), one test per rule, each driven by raw ``p4.v1`` messages built from the
generated P4Info (no nfc client code in between), the expectation taken from the section
its docstring cites.  Issue 17: an independent fuzzer found these accepted or answered wrong.

Transport security (§3.1.1): the endpoint binds loopback by default, and serves TLS and
mutual TLS with certificates made here for the test."""

from __future__ import annotations

import ipaddress
import json
import queue
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb
from p4.v1 import p4runtime_pb2_grpc

from emulator.switchmodel import SwitchModel
from emulator.switchmodel.server import P4RuntimeServer, ServerTls, serve
from runtime.errors import ChannelError
from runtime.p4runtime import ClientTls, SwitchClient, SwitchUpdate
from tests.p4rt_helpers import listening, make_pki
from tests.support import build_example

OK, INVALID, OUT_OF_RANGE, NOT_FOUND = code_pb2.OK, code_pb2.INVALID_ARGUMENT, code_pb2.OUT_OF_RANGE, code_pb2.NOT_FOUND


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:
    """vpn_gateway: an exact table (vni_to_qinq, 24-bit key) and an LPM table (underlay_routes,
    32-bit); acl_ternary: a table keyed ternary, ternary, range (acl)."""
    out = {}
    for name, source in (("vpn", "examples/vpn_gateway.nfp"), ("acl", "tests/corpus/acl_ternary.nfp")):
        out[name] = build_example(source, "tofino+dpdk", "--no-verify")
    return out


class Stream:
    """One StreamChannel: requests in, responses out; a stream the server ends yields its RpcError."""

    def __init__(self, stub: Any) -> None:
        self.requests: queue.Queue[Any] = queue.Queue()
        self.responses: queue.Queue[Any] = queue.Queue()
        self.call = stub.StreamChannel(iter(self.requests.get, None))
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        try:
            for msg in self.call:
                self.responses.put(msg)
        except grpc.RpcError as e:
            self.responses.put(e)

    def arbitrate(self, election: tuple[int, int] = (0, 1), device_id: int = 0) -> Any:
        req = pb.StreamMessageRequest()
        req.arbitration.device_id = device_id
        req.arbitration.election_id.high, req.arbitration.election_id.low = election
        self.requests.put(req)
        return self.get()

    def get(self, timeout: float = 5.0) -> Any:
        return self.responses.get(timeout=timeout)

    def close(self) -> None:
        self.requests.put(None)
        self.call.cancel()


class Device:
    """A fresh switch model behind P4Runtime, with one primary controller (election id 0,1),
    and the IDs of its P4Info."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.model = SwitchModel.from_build(out)
        self.names = json.loads((out / "switch/name_map.json").read_text())
        self.server = P4RuntimeServer(self.model, self.names, "tna")
        self.grpc, port = serve(self.server)
        self.addr = f"127.0.0.1:{port}"
        self.channel = grpc.insecure_channel(self.addr)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.p4info = text_format.Parse((out / "switch/tna.p4info.txtpb").read_text(), p4info_pb2.P4Info())
        self.primary = Stream(self.stub)
        assert self.primary.arbitrate().arbitration.status.code == OK

    def table(self, name: str) -> int:
        return next(t.preamble.id for t in self.p4info.tables if t.preamble.alias == name)

    def action(self, name: str) -> int:
        return next(a.preamble.id for a in self.p4info.actions if a.preamble.alias == name)

    def hit(self, table: str) -> int:
        """The ID of the action an entry of ``.nfp`` table ``table`` takes (its name from the name map)."""
        return self.action(self.names["tna"]["tables"][table]["p4_action"])

    def write(self, *entries: tuple[int, Any], atomicity: int = pb.WriteRequest.CONTINUE_ON_ERROR,
              election: tuple[int, int] = (0, 1), device_id: int = 0) -> list[int]:
        """Send (update type, TableEntry) pairs in one batch; the code of each update (§12.3)."""
        req = pb.WriteRequest(device_id=device_id, atomicity=atomicity)
        req.election_id.high, req.election_id.low = election
        for kind, te in entries:
            up = req.updates.add()
            up.type = kind
            up.entity.table_entry.CopyFrom(te)
        try:
            self.stub.Write(req, timeout=5)
        except grpc.RpcError as e:
            return _error_codes(e)
        return [OK] * len(entries)

    def read(self, *queries: Any, device_id: int = 0) -> tuple[list[Any], list[int]]:
        """The entities read and the code of each query (all OK unless the status says otherwise, §13.3)."""
        req = pb.ReadRequest(device_id=device_id)
        for q in queries:
            req.entities.add().CopyFrom(q)
        got: list[Any] = []
        try:
            for resp in self.stub.Read(req, timeout=5):
                got += resp.entities
        except grpc.RpcError as e:
            return got, _error_codes(e)
        return got, [OK] * len(queries)

    def close(self) -> None:
        self.primary.close()
        self.channel.close()
        self.grpc.stop(0)


def _error_codes(e: grpc.RpcError) -> list[int]:
    """The per-element codes of a failed batch (§10: UNKNOWN with one p4.v1.Error each), or
    [the RPC's own code] when it failed as a whole."""
    details = next((v for k, v in (e.trailing_metadata() or ()) if k == "grpc-status-details-bin"), None)
    if details is None:
        return [e.code().value[0]]
    assert e.code() == grpc.StatusCode.UNKNOWN
    codes = []
    for any_ in status_pb2.Status.FromString(details).details:
        err = pb.Error()
        any_.Unpack(err)
        codes.append(err.canonical_code)
    return codes


@pytest.fixture
def vpn(builds):
    d = Device(builds["vpn"])
    yield d
    d.close()


@pytest.fixture
def acl(builds):
    d = Device(builds["acl"])
    yield d
    d.close()


# ---- message builders ---------------------------------------------------------------------------

def exact(fid: int, value: bytes) -> Any:
    return pb.FieldMatch(field_id=fid, exact=pb.FieldMatch.Exact(value=value))


def lpm(fid: int, value: bytes, plen: int) -> Any:
    return pb.FieldMatch(field_id=fid, lpm=pb.FieldMatch.LPM(value=value, prefix_len=plen))


def ternary(fid: int, value: bytes, mask: bytes) -> Any:
    return pb.FieldMatch(field_id=fid, ternary=pb.FieldMatch.Ternary(value=value, mask=mask))


def rng(fid: int, low: bytes, high: bytes) -> Any:
    return pb.FieldMatch(field_id=fid, range=pb.FieldMatch.Range(low=low, high=high))


def entry(table_id: int, match: list[Any], action_id: int | None = None, params: list[tuple[int, bytes]] = (),
          priority: int = 0) -> Any:
    te = pb.TableEntry(table_id=table_id, match=match, priority=priority)
    if action_id is not None:
        te.action.action.action_id = action_id
        te.action.action.params.extend(pb.Action.Param(param_id=i, value=v) for i, v in params)
    return te


def qinq(d: Device, vni: bytes = b"\x13\x88", params: list[tuple[int, bytes]] | None = None) -> Any:
    """An entry of vni_to_qinq (exact vxlan_vni: bit<24>; s_tag, c_tag: bit<12>, port: bit<16>)."""
    return entry(d.table("vni_to_qinq"), [exact(1, vni)], d.hit("vni_to_qinq"),
                 [(1, b"\x07"), (2, b"\x2a"), (3, b"\x03")] if params is None else params)


def route(d: Device, prefix: str, **kw: Any) -> Any:
    """An entry of underlay_routes (lpm outer_ipv4_dst: bit<32>; port: bit<16>, next_hop_mac: bit<48>)."""
    net = ipaddress.IPv4Interface(prefix)
    return entry(d.table("underlay_routes"), [lpm(1, net.ip.packed, net.network.prefixlen)],
                 d.hit("underlay_routes"), [(1, b"\x15"), (2, b"\x02\x00\x00\x00\x00\x99")], **kw)


def rule(d: Device, match: list[Any], priority: int = 10) -> Any:
    """An entry of acl (ternary ipv4_src, ternary ipv4_dst: bit<32>; range udp_dport: bit<16>)."""
    return entry(d.table("acl"), match, d.hit("acl"), [(1, b"\x07")], priority)


INSERT, MODIFY, DELETE = pb.Update.INSERT, pb.Update.MODIFY, pb.Update.DELETE


def table_query(table_id: int, **kw: Any) -> Any:
    return pb.Entity(table_entry=pb.TableEntry(table_id=table_id, **kw))


# ---- §8.4 bytestrings -------------------------------------------------------------------------

def test_padded_values_are_accepted_and_read_back_canonical(vpn):
    """§8.4: a server accepts a value with leading zero bytes (here 5000 in bit<24> sent as 4
    bytes), and a reply carries the shortest string of each value (read-write symmetry)."""
    padded = [(1, b"\x00\x00\x07"), (2, b"\x00\x2a"), (3, b"\x00\x00\x00\x03")]
    assert vpn.write((INSERT, qinq(vpn, b"\x00\x00\x13\x88", padded))) == [OK]
    (got,), codes = vpn.read(table_query(vpn.table("vni_to_qinq")))
    assert codes == [OK]
    assert got.table_entry.match[0].exact.value == b"\x13\x88"
    assert [p.value for p in got.table_entry.action.action.params] == [b"\x07", b"\x2a", b"\x03"]


def test_empty_bytestring_is_out_of_range(vpn):
    """§8.4: "If the string's byte length is zero, the server always rejects the string" with
    OUT_OF_RANGE: as a key, and as an action parameter."""
    assert vpn.write((INSERT, qinq(vpn, b"")),
                     (INSERT, qinq(vpn, params=[(1, b""), (2, b"\x01"), (3, b"\x01")]))) == [OUT_OF_RANGE] * 2
    assert vpn.model.tables["vni_to_qinq"].entries == []


def test_value_wider_than_its_field_is_out_of_range_and_reads_still_work(vpn, acl):
    """§8.4: a value that, without its leading zero bits, is wider than the field is
    OUT_OF_RANGE — a 25-bit key of a bit<24> field, a 13-bit parameter of a bit<12> one, and
    (issue 17) a 33-bit ternary mask of a bit<32> field, which was stored and then failed
    every Read of the table with UNKNOWN "int too big to convert"."""
    assert vpn.write((INSERT, qinq(vpn, b"\x01\x00\x00\x00")),
                     (INSERT, qinq(vpn, params=[(1, b"\x10\x00"), (2, b"\x01"), (3, b"\x01")]))) == [OUT_OF_RANGE] * 2
    wide_mask = rule(acl, [ternary(1, b"\x0a\x00\x00\x00", b"\x01\xff\x00\x00\x00")])
    assert acl.write((INSERT, wide_mask)) == [OUT_OF_RANGE]
    assert acl.read(table_query(acl.table("acl"))) == ([], [OK])


# ---- §9.1 table entries --------------------------------------------------------------------------

def test_match_field_given_twice_is_invalid(vpn):
    """§9.1: each element of ``match`` gives the value of one field of the key; the same
    field twice is a malformed entity, INVALID_ARGUMENT (§12 INSERT)."""
    te = qinq(vpn)
    te.match.append(exact(1, b"\x17\x70"))
    assert vpn.write((INSERT, te)) == [INVALID]
    assert vpn.model.tables["vni_to_qinq"].entries == []


def test_priority_is_set_exactly_when_the_key_needs_one(vpn, acl):
    """§9.1: "The priority field must be set to a non-zero value if the match key includes a
    ternary match (... OPTIONAL, TERNARY or RANGE ...) or to zero otherwise"."""
    assert vpn.write((INSERT, route(vpn, "10.0.0.0/8", priority=5))) == [INVALID]
    te = qinq(vpn)
    te.priority = 1
    assert vpn.write((INSERT, te)) == [INVALID]
    assert acl.write((INSERT, rule(acl, [ternary(1, b"\x0a\x00\x00\x00", b"\xff\x00\x00\x00")], priority=0))) \
        == [INVALID]
    assert acl.write((INSERT, rule(acl, [rng(3, b"\x03\xe8", b"\x07\xd0")], priority=0))) == [INVALID]
    assert vpn.model.tables["underlay_routes"].entries == vpn.model.tables["vni_to_qinq"].entries == []
    assert acl.model.tables["acl"].entries == []


def test_action_parameters_are_exactly_the_actions_own(vpn):
    """§9.1.2: INVALID_ARGUMENT "if a parameter id is missing, if an extra parameter — id not
    found in the P4Info — was provided", and a parameter given twice is no valid value for it."""
    missing = qinq(vpn, params=[(1, b"\x07"), (2, b"\x2a")])
    extra = qinq(vpn, params=[(1, b"\x07"), (2, b"\x2a"), (3, b"\x03"), (9, b"\x01")])
    twice = qinq(vpn, params=[(1, b"\x07"), (2, b"\x2a"), (3, b"\x03"), (3, b"\x04")])
    assert vpn.write((INSERT, missing), (INSERT, extra), (INSERT, twice)) == [INVALID] * 3
    assert vpn.model.tables["vni_to_qinq"].entries == []


def test_lpm_bits_after_the_prefix_must_be_zero(vpn):
    """§9.1.1 LPM: "'Don't care' bits must be 0 in value": 172.16.1.2/16 is refused (issue 17:
    it was stored beside 172.16.0.0/16, two entries for one prefix)."""
    assert vpn.write((INSERT, route(vpn, "172.16.0.0/16")), (INSERT, route(vpn, "172.16.1.2/16"))) == [OK, INVALID]
    assert [(e.key[0].value, e.key[0].arg) for e in vpn.model.tables["underlay_routes"].entries] == [(0xAC100000, 16)]


def test_dont_care_matches_must_be_omitted(vpn, acl):
    """§9.1.1: "For 'don't care' matches, the P4Runtime client must omit the field's entire
    FieldMatch entry": an LPM prefix length 0, a ternary mask 0, a range of every value sent
    explicitly are INVALID_ARGUMENT; the omitted field is the don't-care match."""
    assert vpn.write((INSERT, route(vpn, "0.0.0.0/0"))) == [INVALID]
    assert acl.write((INSERT, rule(acl, [ternary(1, b"\x00", b"\x00")])),
                     (INSERT, rule(acl, [rng(3, b"\x00", b"\xff\xff")]))) == [INVALID, INVALID]
    assert acl.write((INSERT, rule(acl, [ternary(1, b"\x0a\x00\x00\x00", b"\xff\x00\x00\x00")]))) == [OK]
    (e,) = acl.model.p4_tables["acl"].entries
    assert [(m.value, m.arg) for m in e.key] == [(0x0A000000, 0xFF000000), (0, 0), (0, 0xFFFF)]


def test_ternary_value_bits_outside_the_mask_are_invalid(acl):
    """§9.1.1 TERNARY: "Masked bits must be 0 in value" (value & mask == value)."""
    assert acl.write((INSERT, rule(acl, [ternary(2, b"\x0a\x01\x02\x03", b"\xff\x00\x00\x00")]))) == [INVALID]
    assert acl.model.tables["acl"].entries == []


def test_modify_without_an_action_keeps_the_entry(vpn):
    """§9.1.2: the action "may be left unset for MODIFY updates, in which case the action
    specification for the table entry will not be modified"; the entry must exist (NOT_FOUND)."""
    assert vpn.write((INSERT, qinq(vpn))) == [OK]
    keep = entry(vpn.table("vni_to_qinq"), [exact(1, b"\x13\x88")])
    absent = entry(vpn.table("vni_to_qinq"), [exact(1, b"\x13\x89")])
    assert vpn.write((MODIFY, keep), (MODIFY, absent)) == [OK, NOT_FOUND]
    assert [e.values for e in vpn.model.tables["vni_to_qinq"].entries] == [{"s_tag": 7, "c_tag": 42, "port": 3}]


# ---- §12 Write ----------------------------------------------------------------------------------

def test_write_batch_reports_one_error_per_update_in_order(vpn):
    """§12.3: a batch with failures is UNKNOWN with one p4.v1.Error per update, in order, OK for
    those applied; §12: a duplicate INSERT is ALREADY_EXISTS, a MODIFY or DELETE of an
    absent entry NOT_FOUND, an action not of the table INVALID_ARGUMENT, a malformed entity
    INVALID_ARGUMENT."""
    twice = qinq(vpn, b"\x00\x01")
    twice.match.append(exact(1, b"\x00\x02"))
    other_action = qinq(vpn, b"\x00\x03")
    other_action.action.action.action_id = vpn.hit("underlay_routes")
    assert vpn.write((INSERT, qinq(vpn)), (INSERT, qinq(vpn)), (MODIFY, qinq(vpn, b"\x00\x09")),
                     (DELETE, qinq(vpn, b"\x00\x09")), (INSERT, other_action), (INSERT, twice)) \
        == [OK, code_pb2.ALREADY_EXISTS, NOT_FOUND, NOT_FOUND, INVALID, INVALID]
    assert [e.key[0].value for e in vpn.model.tables["vni_to_qinq"].entries] == [5000]


@pytest.mark.parametrize("atomicity", [pb.WriteRequest.ROLLBACK_ON_ERROR, pb.WriteRequest.DATAPLANE_ATOMIC])
def test_all_or_none_batch_changes_nothing_when_an_update_fails(vpn, atomicity):
    """§12.2: ROLLBACK_ON_ERROR (and the stricter DATAPLANE_ATOMIC) is all-or-none: a batch
    whose third update fails leaves the table as it was; the failed update carries its own
    code.  (Optional modes: a server supporting them must honour them; this one does.)"""
    assert vpn.write((INSERT, qinq(vpn, b"\x00\x09"))) == [OK]
    codes = vpn.write((INSERT, qinq(vpn, b"\x00\x01")), (DELETE, qinq(vpn, b"\x00\x09")), (INSERT, qinq(vpn, b"")),
                      (INSERT, qinq(vpn, b"\x00\x02")), atomicity=atomicity)
    assert codes[2] == OUT_OF_RANGE and OK not in codes
    assert [e.key[0].value for e in vpn.model.tables["vni_to_qinq"].entries] == [9]


# ---- §13 Read -----------------------------------------------------------------------------------

def test_read_of_an_unknown_table_is_not_found(vpn):
    """§13.3: a query that cannot be answered gets its own p4.v1.Error — NOT_FOUND for a table
    id the P4Info does not have — in an UNKNOWN status; the valid queries are still answered."""
    assert vpn.write((INSERT, qinq(vpn))) == [OK]
    got, codes = vpn.read(table_query(0x02FFFFFF), table_query(vpn.table("vni_to_qinq")))
    assert codes == [NOT_FOUND, OK]
    assert len(got) == 1


def test_read_of_an_unset_entity_is_invalid(vpn):
    """§13.2: "The entity oneof field in the Entity message must always be set, or the server
    must return an INVALID_ARGUMENT error"."""
    assert vpn.read(pb.Entity())[1] == [INVALID]


def test_read_returns_entries_as_written(acl):
    """§8 "Read-Write Symmetry", §9.1.1: what Read returns is what was written — omitted
    don't-care fields stay omitted, values are canonical, and the opaque controller_metadata
    and metadata come back."""
    te = rule(acl, [ternary(1, b"\x0a\x00\x00\x00", b"\xff\x00\x00\x00"), rng(3, b"\x03\xe8", b"\x07\xd0")])
    te.controller_metadata, te.metadata = 77, b"cookie"
    assert acl.write((INSERT, te)) == [OK]
    (got,), codes = acl.read(table_query(acl.table("acl")))
    assert codes == [OK] and got.table_entry == te


def test_read_filters_by_match_and_priority(acl):
    """§9.1 "Wildcard Reads": a read with ``match`` returns at most the entry with that key;
    with a priority, only entries of that priority."""
    a = rule(acl, [ternary(1, b"\x0a\x00\x00\x00", b"\xff\x00\x00\x00")], priority=10)
    b = rule(acl, [ternary(1, b"\x0b\x00\x00\x00", b"\xff\x00\x00\x00")], priority=20)
    assert acl.write((INSERT, a), (INSERT, b)) == [OK, OK]
    by_match, _ = acl.read(table_query(acl.table("acl"), match=list(b.match), priority=20))
    by_priority, _ = acl.read(table_query(acl.table("acl"), priority=10))
    assert [e.table_entry for e in by_match] == [b] and [e.table_entry for e in by_priority] == [a]


# ---- §5 arbitration and the device id ------------------------------------------------------------

def test_wrong_device_id_is_not_found(vpn):
    """§5 (arbitration rule 1.a), §12, §13, §14, §15: a device id the server does not serve
    is NOT_FOUND — the stream, Write, Read, Set- and GetForwardingPipelineConfig."""
    assert Stream(vpn.stub).arbitrate((0, 2), device_id=7).code() == grpc.StatusCode.NOT_FOUND
    assert vpn.write((INSERT, qinq(vpn)), device_id=7) == [NOT_FOUND]
    assert vpn.read(table_query(0), device_id=7)[1] == [NOT_FOUND]
    for call, req in ((vpn.stub.SetForwardingPipelineConfig, pb.SetForwardingPipelineConfigRequest(
            device_id=7, action=pb.SetForwardingPipelineConfigRequest.VERIFY)),
                      (vpn.stub.GetForwardingPipelineConfig, pb.GetForwardingPipelineConfigRequest(device_id=7))):
        with pytest.raises(grpc.RpcError) as e:
            call(req, timeout=5)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert vpn.model.tables["vni_to_qinq"].entries == []


def test_second_controller_with_the_same_election_id_is_refused(vpn):
    """§5, rules for MasterArbitrationUpdate, 1.b: "If the election_id is set and is already
    used by another live controller for the same (device_id, role), the P4Runtime server
    shall terminate the stream by returning an INVALID_ARGUMENT error" — it does not become a
    second primary."""
    assert Stream(vpn.stub).arbitrate((0, 1)).code() == grpc.StatusCode.INVALID_ARGUMENT
    assert vpn.write((INSERT, qinq(vpn))) == [OK]  # the first is still the primary


def test_primary_leaving_leaves_the_device_without_a_primary(vpn):
    """§5: the primary is the controller with the highest election id ever seen; when it
    disconnects the device has no primary until one arbitrates with an id at least that high,
    and the backups are told so (status NOT_FOUND, §5 "Client Arbitration Notifications")."""
    backup = Stream(vpn.stub)
    assert backup.arbitrate((0, 0)).arbitration.status.code == code_pb2.ALREADY_EXISTS
    vpn.primary.close()
    assert backup.get().arbitration.status.code == NOT_FOUND
    assert vpn.write((INSERT, qinq(vpn)), election=(0, 0)) == [code_pb2.PERMISSION_DENIED]
    backup.close()


def test_packet_out_from_a_backup_is_dropped(vpn):
    """§16.1: only the primary controller takes part in packet I/O: a backup's PacketOut is
    dropped (and reported on its stream), the primary's leaves by its egress port."""
    backup = Stream(vpn.stub)
    backup.arbitrate((0, 0))
    out = pb.StreamMessageRequest()
    out.packet.payload = b"\x00" * 60
    out.packet.metadata.add(metadata_id=1, value=b"\x05")
    backup.requests.put(out)
    assert backup.get().error.canonical_code == code_pb2.PERMISSION_DENIED
    vpn.primary.requests.put(out)
    for _ in range(100):
        if vpn.server.transmitted:
            break
        threading.Event().wait(0.02)
    assert vpn.server.transmitted == [(5, b"\x00" * 60)]
    backup.close()


# ---- §14 pipeline config ----------------------------------------------------------------------

def _set_pipeline(d: Device, action: int, with_config: bool = True) -> grpc.StatusCode:
    req = pb.SetForwardingPipelineConfigRequest(device_id=0, action=action)
    req.election_id.low = 1
    if with_config:
        req.config.p4info.CopyFrom(d.p4info)
    try:
        d.stub.SetForwardingPipelineConfig(req, timeout=5)
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


def test_verify_and_commit_clears_the_forwarding_state(vpn):
    """§14 VERIFY_AND_COMMIT: "The forwarding state in the target is cleared"; VERIFY leaves
    it as it is."""
    assert vpn.write((INSERT, qinq(vpn))) == [OK]
    assert _set_pipeline(vpn, pb.SetForwardingPipelineConfigRequest.VERIFY) == grpc.StatusCode.OK
    assert len(vpn.model.tables["vni_to_qinq"].entries) == 1
    assert _set_pipeline(vpn, pb.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT) == grpc.StatusCode.OK
    assert vpn.model.tables["vni_to_qinq"].entries == []


def test_commit_without_a_saved_config_is_not_found(vpn):
    """§14 COMMIT: "Returns a NOT_FOUND error if no saved config is found, i.e. if no
    VERIFY_AND_SAVE action preceded this one"."""
    assert _set_pipeline(vpn, pb.SetForwardingPipelineConfigRequest.COMMIT, with_config=False) \
        == grpc.StatusCode.NOT_FOUND


# ---- §3.1.1 who may talk to the switch ----------------------------------------------------------

def test_default_bind_is_loopback(vpn):
    """§3.1.1 (firewalling the endpoint): unless told otherwise, only this machine can reach
    the switch model's P4Runtime endpoint."""
    bound = listening(int(vpn.addr.rsplit(":", 1)[1]))
    assert bound and all(a.is_loopback for a in bound), bound
    grpc_server, port = serve(vpn.server, "0.0.0.0:0")  # told otherwise: every interface
    try:
        assert all(a.is_unspecified for a in listening(port))
    finally:
        grpc_server.stop(0)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """Two CAs; the switch's certificate (for 127.0.0.1) and a client's from CA 1; another
    client's from CA 2 (tests/p4rt_helpers.py)."""
    pytest.importorskip("cryptography.x509", reason="the cryptography package makes the test certificates")
    return make_pki(tmp_path_factory.mktemp("pki"))


def _tls_device(builds: dict[str, Path], pki: Path, mutual: bool) -> tuple[Any, str, dict[str, Any]]:
    model = SwitchModel.from_build(builds["vpn"])
    names = json.loads((builds["vpn"] / "switch/name_map.json").read_text())
    tls = ServerTls(pki / "switch.crt", pki / "switch.key", pki / "ca1.crt" if mutual else None)
    grpc_server, port = serve(P4RuntimeServer(model, names, "tna"), tls=tls)
    return grpc_server, f"127.0.0.1:{port}", names


def _client(pki: Path, who: str | None) -> ClientTls:
    if who is None:
        return ClientTls(pki / "ca1.crt")
    return ClientTls(pki / "ca1.crt", pki / f"{who}.crt", pki / f"{who}.key")


@pytest.mark.parametrize("who", [None, "stranger"])
def test_mutual_tls_refuses_clients_without_a_certificate_of_its_ca(builds, pki, who):
    """§3.1.1 mutual TLS: a client with no certificate, or one signed by another CA, cannot
    open the P4Runtime channel."""
    grpc_server, addr, names = _tls_device(builds, pki, mutual=True)
    try:
        with pytest.raises(ChannelError):
            SwitchClient(addr, names, "tna", timeout=5, tls=_client(pki, who)).close()
    finally:
        grpc_server.stop(0)


def test_mutual_tls_accepts_a_client_certificate_of_its_ca(builds, pki):
    """§3.1.1: a client with a certificate of the switch's client CA drives the switch."""
    grpc_server, addr, names = _tls_device(builds, pki, mutual=True)
    client = SwitchClient(addr, names, "tna", timeout=5, tls=_client(pki, "client"))
    try:
        assert client.write([SwitchUpdate("add", "vni_to_qinq", {"vxlan_vni": (5000, None)},
                                          {"s_tag": 7, "c_tag": 42, "port": 3})]) == [None]
        assert [v for _m, v, _p in client.read("vni_to_qinq")] == [{"s_tag": 7, "c_tag": 42, "port": 3}]
    finally:
        client.close()
        grpc_server.stop(0)


def test_tls_refuses_plaintext_and_serves_a_client_that_trusts_its_ca(builds, pki):
    """§3.1.1 TLS (server-authenticated): a plaintext client gets no answer; one checking the
    switch's certificate against its CA is served."""
    grpc_server, addr, names = _tls_device(builds, pki, mutual=False)
    try:
        with pytest.raises(ChannelError):
            SwitchClient(addr, names, "tna", timeout=5).close()
        SwitchClient(addr, names, "tna", timeout=5, tls=_client(pki, None)).close()
    finally:
        grpc_server.stop(0)
