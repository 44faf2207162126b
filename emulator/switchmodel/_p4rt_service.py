"""The P4Runtime service of the switch model (P4Runtime v1.4): the stream channel with
arbitration (§5) and packet I/O (§16), the pipeline config (§14, §15), Write with its batch
atomicity (§12) and Read (§13).  Who asks is checked first (device, role, primary), then
every rule the specification puts on the request; a request it refuses is refused with its
status code and changes nothing.  Entries are translated by ``_p4rt_entries``, arbitration
kept by ``_p4rt_arbiter``; ``server.py`` puts the service on a gRPC port."""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from compiler.interp import Outcome
from emulator.p4.tables import PRIORITY_KINDS, Match, TableEntry, TableState
from emulator.switchmodel._p4rt_arbiter import Arbiter
from emulator.switchmodel._p4rt_entries import Entries, EntryKey, canonical, check_entry_fields
from emulator.switchmodel._p4rt_objects import Objects
from emulator.switchmodel._p4rt_status import Reject, abort, abort_with_details, invalid, table_op
from emulator.switchmodel.model import SwitchModel

__all__ = ["API_VERSION", "P4RuntimeServer"]

API_VERSION = "1.4.0"
_W = p4runtime_pb2.WriteRequest
_U = p4runtime_pb2.Update
_SET = p4runtime_pb2.SetForwardingPipelineConfigRequest
_GET = p4runtime_pb2.GetForwardingPipelineConfigRequest

IDLE_SCAN_S = 0.01  # how often entries with an idle_timeout_ns are checked (§9.1.10 notifications)
_READ_CHUNK = 4096  # entities per ReadResponse: a big table streams in parts under gRPC's 4 MiB message limit
# controller_metadata, metadata and idle_timeout_ns of each entry, returned by Read
_Cookies = dict[EntryKey, tuple[int, bytes, int]]
_Snapshot = tuple[dict[str, TableState], _Cookies, list[tuple[Any, Any]]]


class _Reply:
    """The ReadResponses of one Read: a new one every ``_READ_CHUNK`` entities, so a read of a
    200K-entry table is a stream of small messages, not one the client would refuse."""

    def __init__(self) -> None:
        self.parts = [p4runtime_pb2.ReadResponse()]

    def add(self) -> Any:
        """A new entity of the reply."""
        if len(self.parts[-1].entities) >= _READ_CHUNK:
            self.parts.append(p4runtime_pb2.ReadResponse())
        return self.parts[-1].entities.add()


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
        self.arbiter = Arbiter(device_id)
        self.entries = Entries(self.names)
        self.objects = Objects(self.names, model.executor)
        self.cookies: _Cookies = {}
        self._timeouts: dict[EntryKey, int] = {}  # the entries with an idle_timeout_ns, and it
        self._notified: dict[EntryKey, float] = {}  # entry -> its last hit when it was reported idle
        # when each entry with a timeout is next looked at (time.monotonic()), and a heap of them
        # (stale items, whose time is not the entry's in _due, are skipped)
        self._due: dict[EntryKey, float] = {}
        self._heap: list[tuple[float, int, EntryKey]] = []
        self._seq = itertools.count()
        self._scanner: threading.Thread | None = None

    # ---- arbitration and packet I/O (StreamChannel) ----------------------------------------

    def StreamChannel(self, requests: Iterator[Any], context: Any) -> Iterator[Any]:
        out: queue.Queue[Any] = queue.Queue()
        stream = id(out)
        context.add_callback(lambda: out.put(None))
        threading.Thread(target=self._read_stream, args=(requests, stream, out), daemon=True).start()
        try:
            while (msg := out.get()) is not None:
                if isinstance(msg, Reject):
                    abort(context, msg)
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
        except Reject as r:
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
                reason.value = canonical(self.punts.get(outcome.reason or "", 0))
                primary.put(msg)
        return outcome

    # ---- who is asking (§5, §12, §13) ------------------------------------------------------------

    def _check_device(self, device_id: int, role: str = "") -> None:
        if device_id != self.device_id:
            raise Reject(code_pb2.NOT_FOUND, f"no device {device_id} here (this is device {self.device_id})")
        if role:
            raise Reject(code_pb2.NOT_FOUND, f"no role {role!r} (the switch model has only the default role)")

    def _check_primary(self, election_id: Any) -> None:
        if not self.arbiter.is_primary(election_id):
            raise Reject(code_pb2.PERMISSION_DENIED, "not the primary client (arbitrate on StreamChannel)")

    # ---- pipeline config (§14, §15) -----------------------------------------------------------------

    def Capabilities(self, request: Any, context: Any) -> Any:
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    def SetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:
        try:
            with self.lock:
                self._check_device(request.device_id, request.role)
                self._check_primary(request.election_id)
                self._set_pipeline(request)
        except Reject as r:
            abort(context, r)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def _set_pipeline(self, request: Any) -> None:
        """VERIFY checks, VERIFY_AND_SAVE keeps for a COMMIT, VERIFY_AND_COMMIT installs and
        clears the forwarding state, RECONCILE_AND_COMMIT installs and keeps it."""
        if request.action == _SET.COMMIT:
            if request.HasField("config"):
                raise invalid("COMMIT takes no config (it commits the one saved by VERIFY_AND_SAVE)")
            if self.saved is None:
                raise Reject(code_pb2.NOT_FOUND, "no saved config to commit (VERIFY_AND_SAVE first)")
            self.config, self.saved = self.saved, None
            return
        if request.action not in (_SET.VERIFY, _SET.VERIFY_AND_SAVE, _SET.VERIFY_AND_COMMIT, _SET.RECONCILE_AND_COMMIT):
            raise invalid(f"unknown SetForwardingPipelineConfig action {request.action}")
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
            raise invalid("a config with the P4Info of the program is needed")
        tables = {t.preamble.id: t.preamble.alias or t.preamble.name for t in request.config.p4info.tables}
        if tables != {v["id"]: k for k, v in self.names["tables"].items()}:
            raise invalid("P4Info does not describe the program this switch model runs (table IDs differ)")

    def GetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:
        try:
            self._check_device(request.device_id)
        except Reject as r:
            abort(context, r)
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
                    raise invalid(f"unknown atomicity {request.atomicity}")
                results = self._batch(request.updates, request.atomicity != _W.CONTINUE_ON_ERROR)
        except Reject as r:
            abort(context, r)
        if any(code != code_pb2.OK for code, _m in results):
            abort_with_details(context, results, "some updates failed")
        return p4runtime_pb2.WriteResponse()

    def _batch(self, updates: Any, all_or_none: bool) -> list[tuple[int, str]]:
        before = self._snapshot(updates) if all_or_none else None
        results: list[tuple[int, str]] = []
        for i, update in enumerate(updates):
            try:
                self._apply(update)
                results.append((code_pb2.OK, ""))
            except Reject as r:
                results.append((r.code, r.message))
                if before is not None:
                    return self._roll_back(before, results, len(updates), i)
        return results

    def _snapshot(self, updates: Any) -> _Snapshot:
        """What the tables a batch writes hold now (the only state a write changes)."""
        names = {self.entries.table_by_id.get(u.entity.table_entry.table_id) for u in updates}
        return ({n: self.model.p4_tables[n].snapshot() for n in names if n is not None}, dict(self.cookies),
                self.objects.snapshot(updates))

    def _roll_back(self, before: _Snapshot, results: list[tuple[int, str]], n: int,
                   failed: int) -> list[tuple[int, str]]:
        """Back to ``before``: the failed update reports its error, the others ABORTED."""
        snapshots, self.cookies, objects = before
        self.objects.restore(objects)
        self._timeouts = {k: c[2] for k, c in self.cookies.items() if c[2]}
        for k in [k for k in self._due if k not in self._timeouts]:  # inserted by the batch, undone
            del self._due[k]
            self._notified.pop(k, None)
        now = time.monotonic()
        for k, timeout_ns in self._timeouts.items():  # only those the batch deleted have no time left
            if k not in self._due:
                self._look_at(k, now + timeout_ns / 1e9)
        for name, state in snapshots.items():
            self.model.p4_tables[name].restore(state)
        undone = [(code_pb2.ABORTED, f"rolled back: update {failed} failed")] * failed
        return undone + [results[failed]] + [(code_pb2.ABORTED, f"not attempted: update {failed} failed")] * (
            n - failed - 1)

    def _apply(self, update: Any) -> None:
        kind = update.entity.WhichOneof("entity")
        if kind in ("counter_entry", "meter_entry", "register_entry"):
            self.objects.write(update)
            return
        if kind != "table_entry":
            raise Reject(code_pb2.UNIMPLEMENTED, f"the switch model cannot write {kind}")
        if update.type not in (_U.INSERT, _U.MODIFY, _U.DELETE):
            raise invalid("the update type must be INSERT, MODIFY or DELETE")
        te = update.entity.table_entry
        if te.is_default_action and update.type != _U.MODIFY:
            raise invalid("the default entry can only be modified, not inserted or deleted")
        if update.type != _U.DELETE:  # §9.1: a DELETE is read for its key only
            check_entry_fields(te, self._keeps_idle(te.table_id))
        if te.is_default_action:
            self._modify_default(te)
        elif update.type == _U.DELETE:  # §9.1: a DELETE names the entry by its key; the rest is ignored
            key = self.entries.key(te)
            table_op(lambda: self.model.p4_tables[key.table].delete(key.match, key.priority))
            self.cookies.pop(key, None)
            self._timeouts.pop(key, None)
            self._notified.pop(key, None)
            self._due.pop(key, None)
        elif update.type == _U.MODIFY and not te.HasField("action"):  # §9.1.2: an unset action is kept
            key = self.entries.key(te)
            if self.model.p4_tables[key.table].get(key.match, key.priority) is None:
                raise Reject(code_pb2.NOT_FOUND, f"{key.table}: no entry with this key")
            self._cookie(key, te)
        else:
            key, entry = self.entries.entry(te)
            table = self.model.p4_tables[key.table]
            table_op(lambda: table.insert(entry) if update.type == _U.INSERT else table.modify(entry))
            self._cookie(key, te)
        if te.idle_timeout_ns and self._scanner is None:
            self._scanner = threading.Thread(target=self._scan_idle, daemon=True)
            self._scanner.start()

    def _cookie(self, key: EntryKey, te: Any) -> None:
        self.cookies[key] = (te.controller_metadata, bytes(te.metadata), te.idle_timeout_ns)
        if te.idle_timeout_ns:
            self._timeouts[key] = te.idle_timeout_ns
            # due a timeout after its last hit (or insertion), not after this write: an entry a
            # MODIFY gives a timeout it has already been idle for is reported at the next scan
            table = self.model.p4_tables[key.table]
            entry = table.get(key.match, key.priority)
            now = time.monotonic()
            last = table.last_hit(entry) if entry is not None else now
            self._look_at(key, max(now, last + te.idle_timeout_ns / 1e9))
        else:
            self._timeouts.pop(key, None)

    def _look_at(self, key: EntryKey, when: float) -> None:
        """Look at ``key`` by ``when`` (or when it was due already, if sooner: a look finds an
        entry hit since not idle and looks again a timeout after its hit, so a look too early
        costs a check, one too late a late notification)."""
        if key in self._due and self._due[key] <= when:
            return
        self._due[key] = when
        heapq.heappush(self._heap, (when, next(self._seq), key))

    def _scan_idle(self) -> None:
        """§9.1.10: every IDLE_SCAN_S, the entries with an ``idle_timeout_ns`` not hit for that
        long go to the primary client in one IdleTimeoutNotification.  An entry is reported once,
        and again only once it has been hit and gone idle again.  Only the entries due are looked
        at (each about once per timeout): one hit since is looked at again a timeout after it."""
        while True:
            time.sleep(IDLE_SCAN_S)
            with self.lock:
                primary = self.arbiter.primary_out()
                if primary is None:
                    continue
                msg = p4runtime_pb2.StreamMessageResponse()
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    when, _, key = heapq.heappop(self._heap)
                    timeout_ns = self._timeouts.get(key)
                    if self._due.get(key) != when or timeout_ns is None:
                        continue  # looked at later, or deleted
                    del self._due[key]
                    table = self.model.p4_tables[key.table]
                    entry = table.get(key.match, key.priority)
                    if entry is None:
                        continue
                    last = table.last_hit(entry)
                    if table.idle_ns(entry) < timeout_ns:  # (not before the next scan: rounding)
                        self._look_at(key, max(last + timeout_ns / 1e9, now + IDLE_SCAN_S))
                        continue
                    self._look_at(key, now + timeout_ns / 1e9)  # for its next hit and idle spell
                    if self._notified.get(key) == last:
                        continue
                    te = msg.idle_timeout_notification.table_entry.add()
                    self.entries.message(te, key.table, entry)
                    te.controller_metadata, te.metadata, te.idle_timeout_ns = self.cookies[key]
                    self._notified[key] = last
                if len(msg.idle_timeout_notification.table_entry):
                    msg.idle_timeout_notification.timestamp = time.time_ns()
                    primary.put(msg)

    def _keeps_idle(self, table_id: int) -> bool:
        name = self.entries.table_by_id.get(table_id)
        return name is not None and self.model.p4_tables[name].idle

    def _modify_default(self, te: Any) -> None:
        """§9.1.3 "Default Entry": it has no match and priority 0; a constant one is
        PERMISSION_DENIED; changing one is not supported here."""
        name = self.entries.table(te.table_id)
        if len(te.match) or te.priority:
            raise invalid("the default entry has no match fields and priority 0")
        if self.entries.tables[name].get("const_default_action"):
            raise Reject(code_pb2.PERMISSION_DENIED, f"the default action of table {name} is constant")
        raise Reject(code_pb2.UNIMPLEMENTED, f"changing the default action of table {name} is not supported")

    # ---- Read (§13) ----------------------------------------------------------------------------

    def Read(self, request: Any, context: Any) -> Iterator[Any]:
        """Each entity is a query (§13.3); one that cannot be answered gets its ``p4.v1.Error``
        and the others are still answered; the status is then UNKNOWN with one error per entity."""
        try:
            self._check_device(request.device_id, request.role)
        except Reject as r:
            abort(context, r)
        resp = _Reply()
        results: list[tuple[int, str]] = []
        with self.lock:
            for ent in request.entities:
                try:
                    self._read(ent, resp)
                    results.append((code_pb2.OK, ""))
                except Reject as r:
                    results.append((r.code, r.message))
        yield from resp.parts
        if any(code != code_pb2.OK for code, _m in results):
            abort_with_details(context, results, "some reads failed")

    def _read(self, ent: Any, resp: _Reply) -> None:
        kind = ent.WhichOneof("entity")
        if kind is None:
            raise invalid("an entity to read must be set (there is no read of everything, §13.2)")
        if kind == "table_entry":
            self._read_tables(ent.table_entry, resp)
        elif kind == "counter_entry":
            q = ent.counter_entry
            if q.counter_id == 0 or not self.objects.owns_counter(q.counter_id):
                self._read_drops(q, resp)
            if q.counter_id == 0 or self.objects.owns_counter(q.counter_id):
                self.objects.read_counters(q, resp.add)
        elif kind == "meter_entry":
            self.objects.read_meters(ent.meter_entry, resp.add)
        elif kind == "register_entry":
            self.objects.read_registers(ent.register_entry, resp.add)
        else:
            raise Reject(code_pb2.UNIMPLEMENTED, f"the switch model cannot read {kind}")

    def _read_tables(self, query: Any, resp: _Reply) -> None:
        """§9.1 "Wildcard Reads": table id 0 is every table; a match, priority or action id
        filters one table's entries."""
        if query.table_id == 0:
            if len(query.match) or query.priority or query.HasField("action") or query.is_default_action:
                raise invalid("a read of every table (table id 0) takes no other filter")
            for name in self.entries.tables:
                self._read_table(name, query, resp)
            return
        name = self.entries.table(query.table_id)
        if query.is_default_action:
            self._read_default(name, resp)
            return
        self._read_table(name, query, resp)

    def _read_table(self, name: str, query: Any, resp: _Reply) -> None:
        table = self.model.p4_tables[name]
        idle = query.HasField("time_since_last_hit")
        if idle and not table.idle:
            raise invalid(f"table {name} keeps no idle time (no idle_timeout property): time_since_last_hit "
                          "cannot be read")
        match = self.entries.key(query, check_priority=False).match if len(query.match) else None
        action = self.entries.action_by_id.get(query.action.action.action_id) if query.HasField("action") else None
        for entry in self._candidates(name, match, query.priority):
            if (match is not None and entry.key != match) or (query.priority and entry.priority != query.priority) \
                    or (action is not None and entry.action != action):
                continue
            te = resp.add().table_entry
            self.entries.message(te, name, entry)
            te.controller_metadata, te.metadata, te.idle_timeout_ns = self.cookies.get(
                EntryKey(name, entry.key, entry.priority), (0, b"", 0))
            if idle:  # §9.1.10: asked for by setting time_since_last_hit in the query
                te.time_since_last_hit.elapsed_ns = table.idle_ns(entry)

    def _candidates(self, name: str, match: tuple[Match, ...] | None, priority: int) -> Iterable[TableEntry]:
        """The entries a query of table ``name`` may return: with the whole key (match, and the
        priority where the key ranks by one) the one entry of that key, found as a write finds
        it, so reading a batch's keys costs O(batch) (§9.1: such a query reads one entry); else all."""
        table = self.model.p4_tables[name]
        if match is None or (not priority and any(k.match in PRIORITY_KINDS for k in table.keys)):
            return table.entries
        found = table.get(match, priority)
        return () if found is None else (found,)

    def _read_default(self, name: str, resp: _Reply) -> None:
        info = self.entries.tables[name]
        te = resp.add().table_entry
        te.table_id = info["id"]
        te.is_default_action = True
        te.action.action.action_id = self.entries.actions[info["default_action"]]["id"]

    def _read_drops(self, query: Any, resp: _Reply) -> None:
        counter = self.names["counters"].get("nfc_drops")
        if counter is None or query.counter_id not in (0, counter["id"]):
            raise Reject(code_pb2.NOT_FOUND, f"no counter with id {query.counter_id}")
        for reason, count in sorted(self.model.drops.items()):
            code = self.reasons.get(reason)
            if code is None or (query.HasField("index") and query.index.index != code):
                continue
            ce = resp.add().counter_entry
            ce.counter_id = counter["id"]
            ce.index.index = code
            ce.data.packet_count = count
