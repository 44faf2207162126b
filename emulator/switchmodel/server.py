"""P4Runtime over gRPC for the switch model (P4Runtime spec v1.4: §5 arbitration,
§9 Write/Read of table entries, §12 batch error semantics, §16 packet I/O).

Any P4Runtime client can drive it as it would drive a real switch: it loads the P4Info of
the generated program (``SetForwardingPipelineConfig``), writes table entries, reads
entries and the drop counter, and receives punted packets as ``PacketIn`` on the primary
client's stream.  Entities are translated through the name map to the model's tables.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from compiler.interp import Outcome
from emulator.p4 import Match, TableEntry, TableError
from emulator.switchmodel.model import SwitchModel

__all__ = ["P4RuntimeServer", "serve"]

API_VERSION = "1.4.0"


class _Reject(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _int(data: bytes) -> int:
    return int.from_bytes(data, "big")


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
        self.transmitted: list[tuple[int, bytes]] = []  # packet-outs, in order
        self.primary: tuple[int, int] | None = None
        self.streams: dict[tuple[int, int], queue.Queue[Any]] = {}
        self.table_by_id = {v["id"]: k for k, v in self.names["tables"].items()}
        self.action_by_id = {v["id"]: k for k, v in self.names["actions"].items()}

    # ---- arbitration and packet I/O (StreamChannel) ----------------------------------------

    def StreamChannel(self, requests: Iterator[Any], context: Any) -> Iterator[Any]:
        out: queue.Queue[Any] = queue.Queue()
        me: tuple[int, int] | None = None

        def reader() -> None:
            nonlocal me
            try:
                for req in requests:
                    if req.HasField("arbitration"):
                        me = self._arbitrate(req.arbitration, out)
                    elif req.HasField("packet"):
                        self._packet_out(req.packet)
            except grpc.RpcError:
                pass  # the client went away: end the stream as if it had closed it
            finally:
                out.put(None)

        context.add_callback(lambda: out.put(None))

        threading.Thread(target=reader, daemon=True).start()
        while True:
            msg = out.get()
            if msg is None:
                break
            yield msg
        with self.lock:
            if me is not None:
                self.streams.pop(me, None)
                if self.primary == me:
                    self.primary = max(self.streams, default=None)

    def _arbitrate(self, arb: Any, out: queue.Queue[Any]) -> tuple[int, int]:
        eid = (arb.election_id.high, arb.election_id.low)
        with self.lock:
            self.streams[eid] = out
            if self.primary is None or eid > self.primary:
                self.primary = eid
            primary = self.primary
        resp = p4runtime_pb2.StreamMessageResponse()
        resp.arbitration.device_id = self.device_id
        resp.arbitration.election_id.high, resp.arbitration.election_id.low = primary
        resp.arbitration.status.code = code_pb2.OK if primary == eid else code_pb2.ALREADY_EXISTS
        out.put(resp)
        return eid

    def _packet_out(self, pkt: Any) -> None:
        """§16.1: metadata 1 (egress_port) says where the packet leaves; no processing."""
        port = next((_int(m.value) for m in pkt.metadata if m.metadata_id == 1), None)
        with self.lock:
            if port is not None:
                self.transmitted.append((port, bytes(pkt.payload)))

    def inject(self, port: int, data: bytes) -> Outcome:
        """A packet arrives on ``port``; a punt goes to the primary client as PacketIn."""
        with self.lock:
            outcome = self.model.process(data, port)
            if outcome.kind == "punt" and self.primary in self.streams:
                msg = p4runtime_pb2.StreamMessageResponse()
                msg.packet.payload = outcome.data
                reason = msg.packet.metadata.add()
                reason.metadata_id = 1
                reason.value = bytes([self.punts.get(outcome.reason, 0)])
                self.streams[self.primary].put(msg)
        return outcome

    # ---- pipeline config -----------------------------------------------------------------

    def Capabilities(self, request: Any, context: Any) -> Any:
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    def SetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:
        if not self._is_primary(request.election_id, context):
            return p4runtime_pb2.SetForwardingPipelineConfigResponse()
        tables = {t.preamble.id: t.preamble.alias or t.preamble.name for t in request.config.p4info.tables}
        expected = {v["id"]: k for k, v in self.names["tables"].items()}
        if request.config.HasField("p4info") and tables != expected:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "P4Info does not describe the program this switch model runs (table IDs differ)")
        self.config = request.config
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:
        resp = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        if self.config is not None:
            resp.config.CopyFrom(self.config)
        return resp

    def _is_primary(self, election_id: Any, context: Any) -> bool:
        eid = (election_id.high, election_id.low)
        if self.primary is None or eid != self.primary:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "not the primary client (arbitrate on StreamChannel)")
            return False
        return True

    # ---- Write (§12: updates are applied in order, each on its own) ---------------------------

    def Write(self, request: Any, context: Any) -> Any:
        self._is_primary(request.election_id, context)
        if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported")
        results: list[tuple[int, str]] = []
        with self.lock:
            for update in request.updates:
                try:
                    self._apply(update)
                    results.append((code_pb2.OK, ""))
                except _Reject as r:
                    results.append((r.code, r.message))
        if all(code == code_pb2.OK for code, _ in results):
            return p4runtime_pb2.WriteResponse()
        status = status_pb2.Status(code=code_pb2.UNKNOWN, message="some updates failed")
        for code, message in results:
            err = p4runtime_pb2.Error(canonical_code=code, message=message)
            status.details.add().Pack(err)
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(grpc.StatusCode.UNKNOWN, "some updates failed")
        return None

    def _apply(self, update: Any) -> None:
        if not update.entity.HasField("table_entry"):
            raise _Reject(code_pb2.UNIMPLEMENTED, "only table entries can be written")
        # §9.1: a DELETE names the entry by its key (and priority); its action is ignored
        name, entry = self._entry(update.entity.table_entry, update.type != p4runtime_pb2.Update.DELETE)
        table = self.model.p4_tables[name]
        try:
            if update.type == p4runtime_pb2.Update.INSERT:
                table.insert(entry)
            elif update.type == p4runtime_pb2.Update.MODIFY:
                table.modify(entry)
            elif update.type == p4runtime_pb2.Update.DELETE:
                table.delete(entry.key, entry.priority)
            else:
                raise _Reject(code_pb2.INVALID_ARGUMENT, "unknown update type")
        except TableError as e:
            message = str(e)
            code = (code_pb2.ALREADY_EXISTS if "already exists" in message else
                    code_pb2.NOT_FOUND if "no entry" in message else
                    code_pb2.RESOURCE_EXHAUSTED if "full" in message else code_pb2.INVALID_ARGUMENT)
            raise _Reject(code, message) from e

    def _entry(self, te: Any, with_action: bool = True) -> tuple[str, TableEntry]:
        name = self.table_by_id.get(te.table_id)
        if name is None:
            raise _Reject(code_pb2.NOT_FOUND, f"no table with id {te.table_id}")
        info = self.names["tables"][name]
        by_id = {v["id"]: (k, v) for k, v in info["match_fields"].items()}
        given: dict[str, Match] = {}
        for fm in te.match:
            if fm.field_id not in by_id:
                raise _Reject(code_pb2.INVALID_ARGUMENT, f"table {name} has no match field {fm.field_id}")
            key, spec = by_id[fm.field_id]
            given[key] = _match(fm, spec)
        keys = []
        for key, spec in _in_key_order(info):
            if key in given:
                keys.append(given[key])
            elif spec["match"] in ("ternary", "lpm"):  # omitted: wildcard (§9.1.1)
                keys.append(Match(0, 0))
            elif spec["match"] == "range":
                keys.append(Match(0, (1 << spec["bitwidth"]) - 1))
            else:
                raise _Reject(code_pb2.INVALID_ARGUMENT, f"exact field {key} of table {name} is missing")
        if not with_action:
            return name, TableEntry(tuple(keys), "", {}, te.priority)
        action = te.action.action
        aname = self.action_by_id.get(action.action_id)
        if aname is None or aname not in info["actions"]:
            raise _Reject(code_pb2.INVALID_ARGUMENT, f"action {action.action_id} is not an action of table {name}")
        params = {v["id"]: k for k, v in self.names["actions"][aname]["params"].items()}
        unknown = [prm.param_id for prm in action.params if prm.param_id not in params]
        if unknown:
            raise _Reject(code_pb2.INVALID_ARGUMENT, f"action {aname} has no parameter with id {unknown[0]}")
        values = {params[prm.param_id]: _int(prm.value) for prm in action.params}
        return name, TableEntry(tuple(keys), aname, values, te.priority)

    # ---- Read --------------------------------------------------------------------------------

    def Read(self, request: Any, context: Any) -> Iterator[Any]:
        resp = p4runtime_pb2.ReadResponse()
        with self.lock:
            for ent in request.entities:
                if ent.HasField("table_entry"):
                    self._read_tables(ent.table_entry.table_id, resp)
                elif ent.HasField("counter_entry"):
                    self._read_drops(resp)
        yield resp

    def _read_tables(self, table_id: int, resp: Any) -> None:
        for name, info in self.names["tables"].items():
            if table_id not in (0, info["id"]):
                continue
            fields = _in_key_order(info)
            for entry in self.model.p4_tables[name].entries:
                te = resp.entities.add().table_entry
                te.table_id = info["id"]
                te.priority = entry.priority
                for (_key, spec), m in zip(fields, entry.key, strict=True):
                    _put_match(te.match.add(), spec, m)
                act = self.names["actions"][entry.action]
                te.action.action.action_id = act["id"]
                for pname, p in sorted(act["params"].items(), key=lambda kv: kv[1]["id"]):
                    prm = te.action.action.params.add()
                    prm.param_id = p["id"]
                    prm.value = _bytes(entry.params[pname], p["bitwidth"])

    def _read_drops(self, resp: Any) -> None:
        counter = self.names["counters"].get("nfc_drops")
        if counter is None:
            return
        for reason, count in sorted(self.model.drops.items()):
            code = self.reasons.get(reason)
            if code is None:
                continue
            ce = resp.entities.add().counter_entry
            ce.counter_id = counter["id"]
            ce.index.index = code
            ce.data.packet_count = count


def _in_key_order(info: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A table's match fields in key order (their P4Info IDs count from 1 in key order; the
    name map's JSON object is sorted by name)."""
    return sorted(info["match_fields"].items(), key=lambda kv: kv[1]["id"])


def _match(fm: Any, spec: dict[str, Any]) -> Match:
    kind = spec["match"]
    width = spec["bitwidth"]
    if kind == "exact" and fm.HasField("exact"):
        return Match(_int(fm.exact.value))
    if kind == "lpm" and fm.HasField("lpm"):
        if not 0 <= fm.lpm.prefix_len <= width:
            raise _Reject(code_pb2.INVALID_ARGUMENT, f"prefix length {fm.lpm.prefix_len} out of 0..{width}")
        return Match(_int(fm.lpm.value), fm.lpm.prefix_len)
    if kind == "ternary" and fm.HasField("ternary"):
        return Match(_int(fm.ternary.value), _int(fm.ternary.mask))
    if kind == "range" and fm.HasField("range"):
        return Match(_int(fm.range.low), _int(fm.range.high))
    raise _Reject(code_pb2.INVALID_ARGUMENT, f"field {fm.field_id} must be a {kind} match")


def _bytes(value: int, width: int) -> bytes:
    return value.to_bytes(max(1, (width + 7) // 8), "big")


def _put_match(fm: Any, spec: dict[str, Any], m: Match) -> None:
    fm.field_id = spec["id"]
    width = spec["bitwidth"]
    if spec["match"] == "exact":
        fm.exact.value = _bytes(m.value, width)
    elif spec["match"] == "lpm":
        fm.lpm.value = _bytes(m.value, width)
        fm.lpm.prefix_len = width if m.arg is None else m.arg
    elif spec["match"] == "ternary":
        fm.ternary.value = _bytes(m.value, width)
        fm.ternary.mask = _bytes((1 << width) - 1 if m.arg is None else m.arg, width)
    else:
        fm.range.low = _bytes(m.value, width)
        fm.range.high = _bytes(m.value if m.arg is None else m.arg, width)


def serve(server: P4RuntimeServer, address: str = "127.0.0.1:0") -> tuple[Any, int]:
    """Start a gRPC server on ``address`` (loopback); returns it and the bound port."""
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(server, grpc_server)
    port = grpc_server.add_insecure_port(address)
    grpc_server.start()
    return grpc_server, port
