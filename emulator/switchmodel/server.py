"""P4Runtime over gRPC for the switch model, to the P4Runtime specification v1.4: §5 client
arbitration, §8.4 bytestrings, §9.1 table entries, §10 error reporting, §12 Write and its batch
atomicity, §13 Read, §14/§15 the pipeline config, §16 packet I/O; §3.1.1 transport security
(TLS, mutual TLS).

Any P4Runtime client can drive it as it would drive a real switch: it loads the P4Info of
the generated program (``SetForwardingPipelineConfig``), writes table entries, reads
entries and the drop counter, and receives punted packets as ``PacketIn`` on the primary
client's stream.  Entities are translated through the name map to the model's tables, and
every rule the specification puts on a request is checked before anything changes: a
request the specification refuses is refused with its status code, never stored.

The device starts with its program loaded (it *is* the program), so ``Write`` and ``Read``
work before any ``SetForwardingPipelineConfig``; the only role is the default role.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from compiler.interp import Outcome
from emulator.p4.tables import DuplicateEntry, Match, MissingEntry, TableEntry, TableError, TableFull, TableState
from emulator.switchmodel.model import SwitchModel

__all__ = ["P4RuntimeServer", "ServerTls", "serve"]

API_VERSION = "1.4.0"
_GRPC_CODE = {c.value[0]: c for c in grpc.StatusCode}
_PRIORITY_KINDS = ("ternary", "range", "optional")  # §9.1: a key with one of these needs a priority
_W = p4runtime_pb2.WriteRequest
_U = p4runtime_pb2.Update
_SET = p4runtime_pb2.SetForwardingPipelineConfigRequest
_GET = p4runtime_pb2.GetForwardingPipelineConfigRequest


class _Reject(Exception):
    """A request (or one update of a batch) refused with a ``google.rpc`` code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _abort(context: Any, r: _Reject) -> None:
    context.abort(_GRPC_CODE[r.code], r.message)


# ---- bytestrings (§8.4) ----------------------------------------------------------------------

def _uint(data: bytes, width: int, what: str) -> int:
    """A received ``bit<width>`` value.  Any length is accepted (leading zero bytes too, so a
    client padding to the field's width is understood), but not the empty string nor a value
    wider than the field, after its leading zero bits: both are OUT_OF_RANGE (§8.4)."""
    if not data:
        raise _Reject(code_pb2.OUT_OF_RANGE, f"{what}: a bytestring must not be empty")
    value = int.from_bytes(data, "big")
    if value.bit_length() > width:
        raise _Reject(code_pb2.OUT_OF_RANGE, f"{what}: 0x{value:x} does not fit in bit<{width}>")
    return value


def _canonical(value: int) -> bytes:
    """The shortest bytestring of ``value`` (§8.4: what a reply carries, for read-write symmetry)."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def _invalid(message: str) -> _Reject:
    return _Reject(code_pb2.INVALID_ARGUMENT, message)


# ---- table entries (§9.1) ------------------------------------------------------------------------

def _in_key_order(info: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A table's match fields in key order (their P4Info IDs count from 1 in key order; the
    name map's JSON object is sorted by name)."""
    return sorted(info["match_fields"].items(), key=lambda kv: kv[1]["id"])


def _match(fm: Any, name: str, spec: dict[str, Any]) -> Match:
    """One ``FieldMatch``, checked against §9.1.1: the set kind is the field's kind, its
    bytestrings fit, a don't-care match is omitted (not sent), LPM host bits and ternary bits
    outside the mask are zero, a range is not empty."""
    kind, width = spec["match"], spec["bitwidth"]
    if fm.WhichOneof("field_match_type") != kind:
        raise _invalid(f"match field {name} is {kind}, not {fm.WhichOneof('field_match_type')}")
    if kind == "exact":
        return Match(_uint(fm.exact.value, width, name))
    if kind == "lpm":
        return _lpm(_uint(fm.lpm.value, width, name), fm.lpm.prefix_len, name, width)
    if kind == "ternary":
        return _ternary(_uint(fm.ternary.value, width, name), _uint(fm.ternary.mask, width, f"{name} mask"), name)
    if kind == "range":
        return _range(_uint(fm.range.low, width, f"{name} low"), _uint(fm.range.high, width, f"{name} high"),
                      name, width)
    raise _invalid(f"match field {name}: {kind} matches are not supported")


def _lpm(value: int, plen: int, name: str, width: int) -> Match:
    if plen == 0:
        raise _invalid(f"{name}: an LPM match with prefix length 0 is a don't-care match: omit the field")
    if not 0 < plen <= width:
        raise _invalid(f"{name}: prefix length must be 1..{width}, not {plen}")
    if value & ((1 << (width - plen)) - 1):
        raise _invalid(f"{name}: the bits after the /{plen} prefix must be zero (0x{value:x})")
    return Match(value, plen)


def _ternary(value: int, mask: int, name: str) -> Match:
    if mask == 0:
        raise _invalid(f"{name}: a ternary match with mask 0 is a don't-care match: omit the field")
    if value & ~mask:
        raise _invalid(f"{name}: value 0x{value:x} has bits outside mask 0x{mask:x}")
    return Match(value, mask)


def _range(low: int, high: int, name: str, width: int) -> Match:
    if low > high:
        raise _invalid(f"{name}: range {low}..{high} is empty")
    if (low, high) == (0, (1 << width) - 1):
        raise _invalid(f"{name}: a range of every value is a don't-care match: omit the field")
    return Match(low, high)


def _dont_care(spec: dict[str, Any]) -> Match:
    """What an omitted field matches (§9.1.1); an exact field has no don't-care."""
    kind = spec["match"]
    if kind in ("ternary", "lpm"):
        return Match(0, 0)
    if kind == "range":
        return Match(0, (1 << spec["bitwidth"]) - 1)
    raise _invalid(f"exact match field {spec['name']} is missing (an exact field has no don't-care value)")


def _is_dont_care(spec: dict[str, Any], m: Match) -> bool:
    kind = spec["match"]
    if kind in ("ternary", "lpm"):
        return m.arg == 0
    return kind == "range" and (m.value, m.arg) == (0, (1 << spec["bitwidth"]) - 1)


def _put_match(fm: Any, spec: dict[str, Any], m: Match) -> None:
    fm.field_id = spec["id"]
    width = spec["bitwidth"]
    if spec["match"] == "exact":
        fm.exact.value = _canonical(m.value)
    elif spec["match"] == "lpm":
        fm.lpm.value = _canonical(m.value)
        fm.lpm.prefix_len = width if m.arg is None else m.arg
    elif spec["match"] == "ternary":
        fm.ternary.value = _canonical(m.value)
        fm.ternary.mask = _canonical((1 << width) - 1 if m.arg is None else m.arg)
    else:
        fm.range.low = _canonical(m.value)
        fm.range.high = _canonical(m.value if m.arg is None else m.arg)


@dataclass(frozen=True)
class _Key:
    """Where an entry lives: its table and its identity there (match and priority, §9.1)."""

    table: str
    match: tuple[Match, ...]
    priority: int


class _Entries:
    """``TableEntry`` messages ↔ the model's P4 tables, through one architecture's part of
    the name map; every check of §9.1 on the way in."""

    def __init__(self, names: dict[str, Any]) -> None:
        self.tables: dict[str, dict[str, Any]] = names["tables"]
        self.actions: dict[str, dict[str, Any]] = names["actions"]
        self.table_by_id: dict[int, str] = {v["id"]: k for k, v in self.tables.items()}
        self.action_by_id: dict[int, str] = {v["id"]: k for k, v in self.actions.items()}

    def table(self, table_id: int) -> str:
        name = self.table_by_id.get(table_id)
        if name is None:
            raise _Reject(code_pb2.NOT_FOUND, f"no table with id {table_id}")
        return name

    def key(self, te: Any, check_priority: bool = True) -> _Key:
        """The table and identity of ``te``: every field once, by a known id; exact fields
        present; priority set exactly when the key has a ternary, range or optional field."""
        name = self.table(te.table_id)
        fields = _in_key_order(self.tables[name])
        by_id = {spec["id"]: (key, spec) for key, spec in fields}
        given: dict[str, Match] = {}
        for fm in te.match:
            if fm.field_id not in by_id:
                raise _invalid(f"table {name} has no match field with id {fm.field_id}")
            key, spec = by_id[fm.field_id]
            if key in given:
                raise _invalid(f"match field {key} of table {name} is given twice")
            given[key] = _match(fm, key, spec)
        match = tuple(given[key] if key in given else _dont_care({**spec, "name": key}) for key, spec in fields)
        if check_priority:
            _check_priority(name, [spec["match"] for _k, spec in fields], te.priority)
        return _Key(name, match, te.priority)

    def entry(self, te: Any) -> tuple[_Key, TableEntry]:
        """An INSERT or MODIFY: the key and the action with all its parameters (§9.1.2)."""
        key = self.key(te)
        if te.action.WhichOneof("type") != "action":
            raise _invalid(f"table {key.table} is a direct table: its entries take an action "
                           f"(not {te.action.WhichOneof('type') or 'nothing'})")
        aname, params = self._action(key.table, te.action.action)
        return key, TableEntry(key.match, aname, params, key.priority)

    def _action(self, table: str, action: Any) -> tuple[str, dict[str, int]]:
        aname = self.action_by_id.get(action.action_id)
        if aname is None or aname not in self.tables[table]["actions"]:
            raise _invalid(f"action {action.action_id} is not an action of table {table}")
        specs = {p["id"]: (pname, p) for pname, p in self.actions[aname]["params"].items()}
        values: dict[str, int] = {}
        for prm in action.params:
            if prm.param_id not in specs:
                raise _invalid(f"action {aname} has no parameter with id {prm.param_id}")
            pname, p = specs[prm.param_id]
            if pname in values:
                raise _invalid(f"parameter {pname} of action {aname} is given twice")
            values[pname] = _uint(prm.value, p["bitwidth"], f"{aname}.{pname}")
        missing = sorted(pname for pname, _p in specs.values() if pname not in values)
        if missing:
            raise _invalid(f"action {aname} needs parameter(s) {', '.join(missing)}")
        return aname, values

    def message(self, te: Any, table: str, entry: TableEntry) -> None:
        """``entry`` as a reply's ``TableEntry``: canonical bytestrings, don't-care fields left
        out (§9.1.1, read-write symmetry)."""
        info = self.tables[table]
        te.table_id = info["id"]
        te.priority = entry.priority
        for (_key, spec), m in zip(_in_key_order(info), entry.key, strict=True):
            if not _is_dont_care(spec, m):
                _put_match(te.match.add(), spec, m)
        act = self.actions[entry.action]
        te.action.action.action_id = act["id"]
        for pname, p in sorted(act["params"].items(), key=lambda kv: kv[1]["id"]):
            prm = te.action.action.params.add()
            prm.param_id = p["id"]
            prm.value = _canonical(entry.params[pname])


def _check_priority(table: str, kinds: list[str], priority: int) -> None:
    if any(k in _PRIORITY_KINDS for k in kinds):
        if priority <= 0:
            raise _invalid(f"table {table} has a ternary, range or optional key: its entries need a priority > 0, "
                           f"not {priority}")
    elif priority != 0:
        raise _invalid(f"table {table} has no ternary, range or optional key: priority must be 0, not {priority}")


def _check_entry_fields(te: Any) -> None:
    """The parts of a ``TableEntry`` this device has no use for must be left unset (§9.1)."""
    if te.is_const:
        raise _invalid("is_const must be false in a write")
    if te.idle_timeout_ns or te.HasField("time_since_last_hit"):
        raise _invalid("the switch model's tables do not support idle timeout")
    if te.HasField("meter_config") or te.HasField("counter_data") or te.HasField("meter_counter_data"):
        raise _invalid("the switch model's tables have no direct counters or meters")


# ---- arbitration (§5) ----------------------------------------------------------------------------

ElectionId = tuple[int, int]


@dataclass
class _Controller:
    election_id: ElectionId | None
    out: queue.Queue[Any]


class _Arbiter:
    """Primary/backup arbitration for one device and the default role (§5): the primary is
    the live controller with the highest election id ever seen; election ids are unique among
    live controllers.  Not thread-safe: the server holds its lock."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self.controllers: dict[int, _Controller] = {}  # by stream
        self.primary: int | None = None
        self.highest: ElectionId | None = None

    def update(self, stream: int, arb: Any, out: queue.Queue[Any]) -> None:
        """A ``MasterArbitrationUpdate`` on ``stream``; raises _Reject to end the stream."""
        eid = (arb.election_id.high, arb.election_id.low) if arb.HasField("election_id") else None
        first = stream not in self.controllers
        if arb.device_id != self.device_id:
            raise _Reject(code_pb2.NOT_FOUND if first else code_pb2.FAILED_PRECONDITION,
                          f"no device {arb.device_id} here (this is device {self.device_id})")
        if arb.role.name or arb.role.id or arb.role.HasField("config"):
            raise _Reject(code_pb2.NOT_FOUND if first else code_pb2.FAILED_PRECONDITION,
                          "the switch model has only the default role")
        if eid is not None and any(c.election_id == eid for s, c in self.controllers.items() if s != stream):
            raise _invalid(f"election id {eid} is used by another live controller")
        was_primary = self.primary == stream
        self.controllers[stream] = _Controller(eid, out)
        if eid is not None and (self.highest is None or eid >= self.highest):
            self.primary, self.highest = stream, eid
            self._notify(self.controllers)
        elif was_primary:  # a primary that lowered its election id steps down
            self.primary = None
            self._notify(self.controllers)
        else:
            self._notify([stream])

    def leave(self, stream: int) -> None:
        if self.controllers.pop(stream, None) is not None and self.primary == stream:
            self.primary = None
            self._notify(self.controllers)

    def is_primary(self, election_id: Any) -> bool:
        return self.primary is not None and \
            self.controllers[self.primary].election_id == (election_id.high, election_id.low)

    def primary_out(self) -> queue.Queue[Any] | None:
        return None if self.primary is None else self.controllers[self.primary].out

    def _notify(self, streams: Iterable[int]) -> None:
        """§5 "Client Arbitration Notifications": the highest election id, OK for the primary,
        ALREADY_EXISTS for a backup while there is a primary, NOT_FOUND while there is none."""
        for s in list(streams):
            msg = p4runtime_pb2.StreamMessageResponse()
            msg.arbitration.device_id = self.device_id
            if self.highest is not None:
                msg.arbitration.election_id.high, msg.arbitration.election_id.low = self.highest
            msg.arbitration.status.code = (code_pb2.OK if s == self.primary else
                                           code_pb2.ALREADY_EXISTS if self.primary is not None else code_pb2.NOT_FOUND)
            self.controllers[s].out.put(msg)


# ---- the service ---------------------------------------------------------------------------------

_Cookies = dict[_Key, tuple[int, bytes]]  # controller_metadata and metadata of each entry, returned by Read
_Snapshot = tuple[dict[str, TableState], _Cookies]


class P4RuntimeServer(p4runtime_pb2_grpc.P4RuntimeServicer):  # type: ignore[misc]
    """Serves one device: ``model``, with the P4Runtime names and IDs of one architecture's
    part of the generated name map (``OUT/switch/name_map.json``)."""

    def __init__(self, model: SwitchModel, name_map: dict[str, Any], arch: str = "tna", device_id: int = 0) -> None:
        self.model = model
        self.names = name_map[arch]["p4runtime"]
        self.reasons: dict[str, int] = name_map["drop_reasons"]
        self.punts: dict[str, int] = name_map["punt_reasons"]
        self.device_id = device_id
        self.lock = threading.Lock()
        self.config: Any = None
        self.saved: Any = None  # VERIFY_AND_SAVE'd, not yet committed
        self.transmitted: list[tuple[int, bytes]] = []  # packet-outs, in order
        self.arbiter = _Arbiter(device_id)
        self.entries = _Entries(self.names)
        self.cookies: _Cookies = {}

    # ---- arbitration and packet I/O (StreamChannel) ----------------------------------------

    def StreamChannel(self, requests: Iterator[Any], context: Any) -> Iterator[Any]:
        out: queue.Queue[Any] = queue.Queue()
        stream = id(out)
        context.add_callback(lambda: out.put(None))
        threading.Thread(target=self._read_stream, args=(requests, stream, out), daemon=True).start()
        try:
            while (msg := out.get()) is not None:
                if isinstance(msg, _Reject):
                    _abort(context, msg)
                yield msg
        finally:
            with self.lock:
                self.arbiter.leave(stream)

    def _read_stream(self, requests: Iterator[Any], stream: int, out: queue.Queue[Any]) -> None:
        try:
            for req in requests:
                if req.HasField("arbitration"):
                    with self.lock:
                        self.arbiter.update(stream, req.arbitration, out)
                elif req.HasField("packet"):
                    self._packet_out(stream, req.packet, out)
        except _Reject as r:
            out.put(r)  # the stream ends with this status
        except grpc.RpcError:
            pass  # the client went away: end the stream as if it had closed it
        out.put(None)

    def _packet_out(self, stream: int, pkt: Any, out: queue.Queue[Any]) -> None:
        """§16.1: metadata 1 (egress_port) says where the packet leaves; no processing.  Only
        the primary may send packets; another's are dropped with a stream error (§16 "Stream Error Reporting")."""
        with self.lock:
            if self.arbiter.primary != stream:
                err = p4runtime_pb2.StreamMessageResponse()
                err.error.canonical_code = code_pb2.PERMISSION_DENIED
                err.error.message = "only the primary controller may send packets"
                err.error.packet_out.packet_out.CopyFrom(pkt)
                out.put(err)
                return
            port = next((int.from_bytes(m.value, "big") for m in pkt.metadata if m.metadata_id == 1), None)
            if port is not None:
                self.transmitted.append((port, bytes(pkt.payload)))

    def inject(self, port: int, data: bytes) -> Outcome:
        """A packet arrives on ``port``; a punt goes to the primary client as PacketIn."""
        with self.lock:
            outcome = self.model.process(data, port)
            primary = self.arbiter.primary_out()
            if outcome.kind == "punt" and primary is not None:
                msg = p4runtime_pb2.StreamMessageResponse()
                msg.packet.payload = outcome.data
                reason = msg.packet.metadata.add()
                reason.metadata_id = 1
                reason.value = _canonical(self.punts.get(outcome.reason or "", 0))
                primary.put(msg)
        return outcome

    # ---- who is asking (§5, §12, §13) ------------------------------------------------------------

    def _check_device(self, device_id: int, role: str = "") -> None:
        if device_id != self.device_id:
            raise _Reject(code_pb2.NOT_FOUND, f"no device {device_id} here (this is device {self.device_id})")
        if role:
            raise _Reject(code_pb2.NOT_FOUND, f"no role {role!r} (the switch model has only the default role)")

    def _check_primary(self, election_id: Any) -> None:
        if not self.arbiter.is_primary(election_id):
            raise _Reject(code_pb2.PERMISSION_DENIED, "not the primary client (arbitrate on StreamChannel)")

    # ---- pipeline config (§14, §15) -----------------------------------------------------------------

    def Capabilities(self, request: Any, context: Any) -> Any:
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    def SetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:
        try:
            with self.lock:
                self._check_device(request.device_id, request.role)
                self._check_primary(request.election_id)
                self._set_pipeline(request)
        except _Reject as r:
            _abort(context, r)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def _set_pipeline(self, request: Any) -> None:
        """VERIFY checks, VERIFY_AND_SAVE keeps for a COMMIT, VERIFY_AND_COMMIT installs and
        clears the forwarding state, RECONCILE_AND_COMMIT installs and keeps it."""
        if request.action == _SET.COMMIT:
            if request.HasField("config"):
                raise _invalid("COMMIT takes no config (it commits the one saved by VERIFY_AND_SAVE)")
            if self.saved is None:
                raise _Reject(code_pb2.NOT_FOUND, "no saved config to commit (VERIFY_AND_SAVE first)")
            self.config, self.saved = self.saved, None
            return
        if request.action not in (_SET.VERIFY, _SET.VERIFY_AND_SAVE, _SET.VERIFY_AND_COMMIT, _SET.RECONCILE_AND_COMMIT):
            raise _invalid(f"unknown SetForwardingPipelineConfig action {request.action}")
        self._verify(request)
        if request.action == _SET.VERIFY_AND_SAVE:
            self.saved = request.config
        elif request.action != _SET.VERIFY:
            self.config = request.config
            if request.action == _SET.VERIFY_AND_COMMIT:
                for table in self.model.p4_tables.values():
                    table.clear()
                self.cookies.clear()

    def _verify(self, request: Any) -> None:
        if not request.HasField("config") or not request.config.HasField("p4info"):
            raise _invalid("a config with the P4Info of the program is needed")
        tables = {t.preamble.id: t.preamble.alias or t.preamble.name for t in request.config.p4info.tables}
        if tables != {v["id"]: k for k, v in self.names["tables"].items()}:
            raise _invalid("P4Info does not describe the program this switch model runs (table IDs differ)")

    def GetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:
        try:
            self._check_device(request.device_id)
        except _Reject as r:
            _abort(context, r)
        resp = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        if self.config is None:
            return resp
        resp.config.cookie.CopyFrom(self.config.cookie)
        if request.response_type in (_GET.ALL, _GET.P4INFO_AND_COOKIE):
            resp.config.p4info.CopyFrom(self.config.p4info)
        if request.response_type in (_GET.ALL, _GET.DEVICE_CONFIG_AND_COOKIE):
            resp.config.p4_device_config = self.config.p4_device_config
        return resp

    # ---- Write (§12) ---------------------------------------------------------------------------

    def Write(self, request: Any, context: Any) -> Any:
        """Checks who writes (device, role, primary), then the batch: CONTINUE_ON_ERROR applies
        every update it can; ROLLBACK_ON_ERROR and DATAPLANE_ATOMIC apply all or none, and no
        packet sees a partial batch (packets are processed under the same lock).  A failure
        is UNKNOWN with one ``p4.v1.Error`` per update, in order (§12.3)."""
        try:
            self._check_device(request.device_id, request.role)
            with self.lock:
                self._check_primary(request.election_id)
                if request.atomicity not in (_W.CONTINUE_ON_ERROR, _W.ROLLBACK_ON_ERROR, _W.DATAPLANE_ATOMIC):
                    raise _invalid(f"unknown atomicity {request.atomicity}")
                results = self._batch(request.updates, request.atomicity != _W.CONTINUE_ON_ERROR)
        except _Reject as r:
            _abort(context, r)
        if any(code != code_pb2.OK for code, _m in results):
            _abort_with_details(context, results, "some updates failed")
        return p4runtime_pb2.WriteResponse()

    def _batch(self, updates: Any, all_or_none: bool) -> list[tuple[int, str]]:
        before = self._snapshot(updates) if all_or_none else None
        results: list[tuple[int, str]] = []
        for i, update in enumerate(updates):
            try:
                self._apply(update)
                results.append((code_pb2.OK, ""))
            except _Reject as r:
                results.append((r.code, r.message))
                if before is not None:
                    return self._roll_back(before, results, len(updates), i)
        return results

    def _snapshot(self, updates: Any) -> _Snapshot:
        """What the tables a batch writes hold now (the only state a write changes)."""
        names = {self.entries.table_by_id.get(u.entity.table_entry.table_id) for u in updates}
        return {n: self.model.p4_tables[n].snapshot() for n in names if n is not None}, dict(self.cookies)

    def _roll_back(self, before: _Snapshot, results: list[tuple[int, str]], n: int,
                   failed: int) -> list[tuple[int, str]]:
        """Back to ``before``: the failed update reports its error, the others ABORTED."""
        snapshots, self.cookies = before
        for name, state in snapshots.items():
            self.model.p4_tables[name].restore(state)
        undone = [(code_pb2.ABORTED, f"rolled back: update {failed} failed")] * failed
        return undone + [results[failed]] + [(code_pb2.ABORTED, f"not attempted: update {failed} failed")] * (
            n - failed - 1)

    def _apply(self, update: Any) -> None:
        if update.entity.WhichOneof("entity") != "table_entry":
            raise _Reject(code_pb2.UNIMPLEMENTED, "only table entries can be written")
        if update.type not in (_U.INSERT, _U.MODIFY, _U.DELETE):
            raise _invalid("the update type must be INSERT, MODIFY or DELETE")
        te = update.entity.table_entry
        if te.is_default_action and update.type != _U.MODIFY:
            raise _invalid("the default entry can only be modified, not inserted or deleted")
        if update.type != _U.DELETE:  # §9.1: a DELETE is read for its key only
            _check_entry_fields(te)
        if te.is_default_action:
            self._modify_default(te)
        elif update.type == _U.DELETE:  # §9.1: a DELETE names the entry by its key; the rest is ignored
            key = self.entries.key(te)
            _table_op(lambda: self.model.p4_tables[key.table].delete(key.match, key.priority))
            self.cookies.pop(key, None)
        elif update.type == _U.MODIFY and not te.HasField("action"):  # §9.1.2: an unset action is kept
            key = self.entries.key(te)
            if self.model.p4_tables[key.table].get(key.match, key.priority) is None:
                raise _Reject(code_pb2.NOT_FOUND, f"{key.table}: no entry with this key")
            self.cookies[key] = (te.controller_metadata, bytes(te.metadata))
        else:
            key, entry = self.entries.entry(te)
            table = self.model.p4_tables[key.table]
            _table_op(lambda: table.insert(entry) if update.type == _U.INSERT else table.modify(entry))
            self.cookies[key] = (te.controller_metadata, bytes(te.metadata))

    def _modify_default(self, te: Any) -> None:
        """§9.1.3 "Default Entry": it has no match and priority 0; a constant one is
        PERMISSION_DENIED; changing one is not supported here."""
        name = self.entries.table(te.table_id)
        if len(te.match) or te.priority:
            raise _invalid("the default entry has no match fields and priority 0")
        if self.entries.tables[name].get("const_default_action"):
            raise _Reject(code_pb2.PERMISSION_DENIED, f"the default action of table {name} is constant")
        raise _Reject(code_pb2.UNIMPLEMENTED, f"changing the default action of table {name} is not supported")

    # ---- Read (§13) ----------------------------------------------------------------------------

    def Read(self, request: Any, context: Any) -> Iterator[Any]:
        """Each entity is a query (§13.3); one that cannot be answered gets its ``p4.v1.Error``
        and the others are still answered; the status is then UNKNOWN with one error per entity."""
        try:
            self._check_device(request.device_id, request.role)
        except _Reject as r:
            _abort(context, r)
        resp = p4runtime_pb2.ReadResponse()
        results: list[tuple[int, str]] = []
        with self.lock:
            for ent in request.entities:
                try:
                    self._read(ent, resp)
                    results.append((code_pb2.OK, ""))
                except _Reject as r:
                    results.append((r.code, r.message))
        yield resp
        if any(code != code_pb2.OK for code, _m in results):
            _abort_with_details(context, results, "some reads failed")

    def _read(self, ent: Any, resp: Any) -> None:
        kind = ent.WhichOneof("entity")
        if kind is None:
            raise _invalid("an entity to read must be set (there is no read of everything, §13.2)")
        if kind == "table_entry":
            self._read_tables(ent.table_entry, resp)
        elif kind == "counter_entry":
            self._read_drops(ent.counter_entry, resp)
        else:
            raise _Reject(code_pb2.UNIMPLEMENTED, f"the switch model cannot read {kind}")

    def _read_tables(self, query: Any, resp: Any) -> None:
        """§9.1 "Wildcard Reads": table id 0 is every table; a match, priority or action id
        filters one table's entries."""
        if query.table_id == 0:
            if len(query.match) or query.priority or query.HasField("action") or query.is_default_action:
                raise _invalid("a read of every table (table id 0) takes no other filter")
            for name in self.entries.tables:
                self._read_table(name, query, resp)
            return
        name = self.entries.table(query.table_id)
        if query.is_default_action:
            self._read_default(name, resp)
            return
        self._read_table(name, query, resp)

    def _read_table(self, name: str, query: Any, resp: Any) -> None:
        match = self.entries.key(query, check_priority=False).match if len(query.match) else None
        action = self.entries.action_by_id.get(query.action.action.action_id) if query.HasField("action") else None
        for entry in self.model.p4_tables[name].entries:
            if (match is not None and entry.key != match) or (query.priority and entry.priority != query.priority) \
                    or (action is not None and entry.action != action):
                continue
            te = resp.entities.add().table_entry
            self.entries.message(te, name, entry)
            te.controller_metadata, te.metadata = self.cookies.get(_Key(name, entry.key, entry.priority), (0, b""))

    def _read_default(self, name: str, resp: Any) -> None:
        info = self.entries.tables[name]
        te = resp.entities.add().table_entry
        te.table_id = info["id"]
        te.is_default_action = True
        te.action.action.action_id = self.entries.actions[info["default_action"]]["id"]

    def _read_drops(self, query: Any, resp: Any) -> None:
        counter = self.names["counters"].get("nfc_drops")
        if counter is None or query.counter_id not in (0, counter["id"]):
            raise _Reject(code_pb2.NOT_FOUND, f"no counter with id {query.counter_id}")
        for reason, count in sorted(self.model.drops.items()):
            code = self.reasons.get(reason)
            if code is None or (query.HasField("index") and query.index.index != code):
                continue
            ce = resp.entities.add().counter_entry
            ce.counter_id = counter["id"]
            ce.index.index = code
            ce.data.packet_count = count


def _table_op(op: Any) -> None:
    """Run a P4Table write; its typed errors become the codes of §12."""
    try:
        op()
    except DuplicateEntry as e:
        raise _Reject(code_pb2.ALREADY_EXISTS, str(e)) from e
    except MissingEntry as e:
        raise _Reject(code_pb2.NOT_FOUND, str(e)) from e
    except TableFull as e:
        raise _Reject(code_pb2.RESOURCE_EXHAUSTED, str(e)) from e
    except TableError as e:
        raise _invalid(str(e)) from e


def _abort_with_details(context: Any, results: list[tuple[int, str]], message: str) -> None:
    """§10: status UNKNOWN, and a ``google.rpc.Status`` with one ``p4.v1.Error`` per element
    of the batch, in order, in the ``grpc-status-details-bin`` trailer."""
    status = status_pb2.Status(code=code_pb2.UNKNOWN, message=message)
    for code, text in results:
        status.details.add().Pack(p4runtime_pb2.Error(canonical_code=code, message=text))
    context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
    context.abort(grpc.StatusCode.UNKNOWN, message)


# ---- transport (§3.1.1) --------------------------------------------------------------------------

@dataclass(frozen=True)
class ServerTls:
    """TLS for the P4Runtime endpoint: the switch's certificate chain and key (PEM files);
    with ``client_ca``, mutual TLS: a client must present a certificate signed by that CA."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key.read_bytes(), self.cert.read_bytes())],
            root_certificates=self.client_ca.read_bytes() if self.client_ca is not None else None,
            require_client_auth=self.client_ca is not None)


def serve(server: P4RuntimeServer, address: str = "127.0.0.1:0", tls: ServerTls | None = None) -> tuple[Any, int]:
    """Start a gRPC server on ``address`` — loopback unless told otherwise, so only this
    machine can drive the switch; with ``tls``, TLS or mutual TLS.  Returns the server and
    its bound port."""
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(server, grpc_server)
    port = (grpc_server.add_secure_port(address, tls.credentials()) if tls is not None
            else grpc_server.add_insecure_port(address))
    grpc_server.start()
    return grpc_server, port
