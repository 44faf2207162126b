"""The runtime's P4Runtime client: the switch side of the runtime API.  The same code drives
the switch model (``nfc switch-model --p4runtime``) and a real switch's P4Runtime endpoint:
arbitration on the stream channel (§5), the pipeline config (§14), Write with per-update
error details (§12) and Read (§13), translated through the build's name map
(``OUT/switch/name_map.json``) from ``.nfp`` names to P4Runtime IDs.  What it sends is
canonical (§8.4 shortest bytestrings, §9.1.1 don't-care matches left out), over TLS or
mutual TLS when given certificates (§3.1.1).

A large write or read is split into requests of ``chunk`` updates (entities), each with a
deadline that scales with it: the floor ``timeout`` plus ``per_update`` seconds per update, so
a 200K-entry cache loads as ~50 requests none of which can outlive its own allowance."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from compiler.manifest import mask_prefix, prefix_mask
from runtime.errors import ChannelError, EntryExists, EntryNotFound, InvalidEntry, RuntimeApiError, TableFull

__all__ = ["CHUNK", "PER_UPDATE", "ClientTls", "SwitchClient", "SwitchUpdate"]

CHUNK = 4096  # updates (or read entities) per request: ~200 KB, far below gRPC's 4 MiB message limit
# A failed WriteRequest carries one p4.v1.Error per update in its trailing metadata
# (grpc-status-details-bin, §12.3): ~80 bytes each, ~330 KB for a chunk where every update
# failed, past gRPC's default limits on received metadata (8 KiB soft, 16 KiB hard: the call
# then fails as RESOURCE_EXHAUSTED with no update's error).  Allow 64 MiB.
METADATA_LIMIT = 64 << 20
# A switch that restarted is reconnected to within a second or two: gRPC's reconnection
# backoff (1 s first, growing to 120 s) otherwise fails every call meanwhile, fast.
CHANNEL_OPTIONS = [("grpc.max_metadata_size", METADATA_LIMIT), ("grpc.absolute_max_metadata_size", METADATA_LIMIT),
                   ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 2000)]
PER_UPDATE = 0.002  # seconds of deadline per update on top of the floor: ~70x the switch model's ~30 µs

_TYPES = {"add": p4runtime_pb2.Update.INSERT, "modify": p4runtime_pb2.Update.MODIFY,
          "delete": p4runtime_pb2.Update.DELETE}
_CODES: dict[int, type[RuntimeApiError]] = {
    code_pb2.ALREADY_EXISTS: EntryExists, code_pb2.NOT_FOUND: EntryNotFound, code_pb2.RESOURCE_EXHAUSTED: TableFull,
    code_pb2.INVALID_ARGUMENT: InvalidEntry, code_pb2.OUT_OF_RANGE: InvalidEntry}
Match = tuple[int, int | None]  # value, and prefix length / mask / high bound (None: the whole field)


@dataclass(frozen=True)
class SwitchUpdate:
    """One entry write in ``.nfp`` names: key field -> (value, prefix length / mask / high or
    None), value field -> integer."""

    op: str  # add / modify / delete
    table: str
    match: dict[str, Match]
    values: dict[str, int]
    priority: int = 0
    idle_timeout_ns: int = 0  # a cache's entry: notify when idle this long (0: never; §9.1.10)


@dataclass(frozen=True)
class ClientTls:
    """TLS to a switch's P4Runtime endpoint: the CA that signed the switch's certificate; with
    ``cert`` and ``key``, this client's own certificate for mutual TLS.  ``server_name``: the
    name to check the switch's certificate against, when it is not the address's host."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None
    server_name: str | None = None

    def channel(self, address: str) -> grpc.Channel:
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.ca.read_bytes(),
            private_key=self.key.read_bytes() if self.key is not None else None,
            certificate_chain=self.cert.read_bytes() if self.cert is not None else None)
        options = [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []
        return grpc.secure_channel(address, creds, options=[*CHANNEL_OPTIONS, *options])


def _bytes(value: int) -> bytes:
    """The canonical bytestring of ``value``: the shortest (§8.4)."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def _put_match(fm: Any, spec: dict[str, Any], value: int, arg: int | None) -> bool:
    """Fill ``fm``; False for a don't-care match, which P4Runtime wants left out (§9.1.1)."""
    w = spec["bitwidth"]
    fm.field_id = spec["id"]
    if spec["match"] == "exact":
        fm.exact.value = _bytes(value)
    elif spec["match"] == "lpm":
        fm.lpm.value = _bytes(value)
        fm.lpm.prefix_len = w if arg is None else arg
        return arg != 0
    elif spec["match"] == "ternary":
        if spec.get("prefix") and arg is not None:  # an .nfp lpm field the switch matches as ternary
            arg = prefix_mask(arg, w)
        fm.ternary.value = _bytes(value)
        fm.ternary.mask = _bytes((1 << w) - 1 if arg is None else arg)
        return arg != 0
    else:
        high = value if arg is None else arg
        fm.range.low, fm.range.high = _bytes(value), _bytes(high)
        return (value, high) != (0, (1 << w) - 1)
    return True


def _get_match(fm: Any | None, spec: dict[str, Any]) -> Match:
    """A read field match; an omitted (None) one is the field's don't-care match."""
    kind, w = spec["match"], spec["bitwidth"]
    if fm is None:
        return (0, (1 << w) - 1) if kind == "range" else (0, 0)
    if kind == "exact":
        return int.from_bytes(fm.exact.value, "big"), None
    if kind == "lpm":
        return int.from_bytes(fm.lpm.value, "big"), fm.lpm.prefix_len
    if kind == "ternary":
        mask = int.from_bytes(fm.ternary.mask, "big")
        if spec.get("prefix"):  # the prefix length of a mask the client wrote from one
            return int.from_bytes(fm.ternary.value, "big"), mask_prefix(mask, w)
        return int.from_bytes(fm.ternary.value, "big"), mask
    return int.from_bytes(fm.range.low, "big"), int.from_bytes(fm.range.high, "big")


class SwitchClient:
    """A primary P4Runtime client of one device (plain gRPC, or TLS / mutual TLS with ``tls``).
    ``timeout``: the deadline of a request of no updates (arbitration, pipeline config) and the
    floor of every other; ``chunk`` and ``per_update``: how writes and reads are split, and the
    deadline each part gets on top of the floor (:meth:`deadline`)."""

    def __init__(self, address: str, name_map: dict[str, Any], arch: str = "tna", device_id: int = 0,
                 election_id: tuple[int, int] = (0, 1), p4info: Path | None = None, timeout: float = 10.0,
                 tls: ClientTls | None = None, chunk: int = CHUNK, per_update: float = PER_UPDATE) -> None:
        self.names = name_map[arch]
        self.device_id = device_id
        self.election = election_id
        self.timeout = timeout
        self.chunk = chunk
        self.per_update = per_update
        self.channel = tls.channel(address) if tls is not None else grpc.insecure_channel(address,
                                                                                          options=CHANNEL_OPTIONS)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.address = address
        self.p4info = p4info
        self._idle: queue.Queue[tuple[str, dict[str, Match], int]] = queue.Queue()
        try:
            self._open()
        except ChannelError:
            self.channel.close()
            raise

    def _open(self) -> None:
        """Open the stream channel, become the primary (§5) and, given a P4Info, set the
        pipeline; the stream is read by a thread of its own until it ends.  If any of it
        fails the stream is ended, so the client stays ``lost`` (reconnect again)."""
        try:
            self._stream_open()
        except BaseException:
            self._requests.put(None)
            if self._stream is not None:  # (a switch that accepted it and never answered: no thread left on it)
                self._stream.cancel()
            self._ended.set()
            raise

    def _stream_open(self) -> None:
        self._stream: Any = None
        self._requests: queue.Queue[Any] = queue.Queue()
        self._responses: queue.Queue[Any] = queue.Queue()
        self._stream_error = "closed"
        self._ended = threading.Event()
        self._stream = stream = self.stub.StreamChannel(iter(self._requests.get, None))
        threading.Thread(target=self._pump, args=(stream, self._responses, self._ended), daemon=True).start()
        arb = p4runtime_pb2.StreamMessageRequest()
        arb.arbitration.device_id = self.device_id
        arb.arbitration.election_id.high, arb.arbitration.election_id.low = self.election
        self._requests.put(arb)
        try:
            resp = self._responses.get(timeout=self.timeout)
        except queue.Empty:
            raise ChannelError(f"no arbitration answer from the P4Runtime endpoint {self.address}") from None
        if resp is None:
            raise ChannelError(f"{self.address}: the P4Runtime endpoint ended the stream: {self._stream_error}")
        if resp.arbitration.status.code != code_pb2.OK:
            raise ChannelError(f"{self.address}: this client is not the primary (another controller holds the "
                               "device)")
        if self.p4info is not None:
            self._set_pipeline(self.p4info)

    def _pump(self, stream: Any, responses: queue.Queue[Any], ended: threading.Event) -> None:
        try:
            for msg in stream:
                if msg.HasField("idle_timeout_notification"):
                    self._notified(msg.idle_timeout_notification)
                else:
                    responses.put(msg)
        except grpc.RpcError as e:
            if ended is self._ended:  # (an old stream's end says nothing of the new one)
                self._stream_error = f"{e.code().name}: {e.details()}"
        ended.set()
        responses.put(None)

    @property
    def lost(self) -> bool:
        """The stream channel ended: the switch (or its P4Runtime agent) restarted or went
        away, or this client was closed.  A switch that restarted has lost this client's
        primacy, its pipeline config and every entry: ``reconnect``, then reconcile."""
        return self._ended.is_set()

    def reconnect(self) -> None:
        """The stream channel again, over the same gRPC channel (which reconnects by itself):
        primacy and, given a P4Info, the pipeline.  A ChannelError while the switch does not
        answer."""
        self._requests.put(None)
        self._open()

    def _notified(self, note: Any) -> None:
        by_id = {info["id"]: (name, info) for name, info in self.names["p4runtime"]["tables"].items()}
        logical = {t["p4_table"]: name for name, t in self.names["tables"].items()}
        for te in note.table_entry:
            p4_name, info = by_id.get(te.table_id, (None, None))
            if p4_name is not None and p4_name in logical:
                self._idle.put((logical[p4_name], self._match(info, te), te.priority))

    def idle_expired(self) -> list[tuple[str, dict[str, Match], int]]:
        """The entries the switch reported idle past their ``idle_timeout_ns`` since the last
        call (IdleTimeoutNotification on the stream, §9.1.10), as (table, match, priority)."""
        out = []
        while True:
            try:
                out.append(self._idle.get_nowait())
            except queue.Empty:
                return out

    def _set_pipeline(self, p4info: Path) -> None:
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
        req.election_id.high, req.election_id.low = self.election
        req.config.p4info.CopyFrom(text_format.Parse(p4info.read_text(), p4info_pb2.P4Info()))
        try:
            self.stub.SetForwardingPipelineConfig(req, timeout=self.timeout)
        except grpc.RpcError as e:
            raise ChannelError(f"SetForwardingPipelineConfig: {e.details()}") from e

    def close(self) -> None:
        self._requests.put(None)
        self.channel.close()

    def deadline(self, n: int) -> float:
        """Seconds a request of ``n`` updates or read entities may take: the floor plus the
        allowance per update, so the deadline grows with the work and never cuts a big request."""
        return self.timeout + self.per_update * n

    # ---- entries -----------------------------------------------------------------------------

    def _table_entry(self, te: Any, u: SwitchUpdate) -> None:
        t = self.names["tables"].get(u.table)
        if t is None:
            raise InvalidEntry(f"the switch has no table {u.table}")
        info = self.names["p4runtime"]["tables"][t["p4_table"]]
        te.table_id = info["id"]
        te.priority = u.priority
        te.idle_timeout_ns = u.idle_timeout_ns if u.op != "delete" else 0
        for key, spec in info["match_fields"].items():
            if not _put_match(te.match.add(), spec, *u.match[key]):
                del te.match[-1]
        if u.op == "delete":
            return
        act = self.names["p4runtime"]["actions"][t["p4_action"]]
        te.action.action.action_id = act["id"]
        for pname, p in act["params"].items():
            prm = te.action.action.params.add()
            prm.param_id = p["id"]
            prm.value = _bytes(u.values[pname.removeprefix("v_")])

    def write(self, updates: Sequence[SwitchUpdate]) -> list[RuntimeApiError | None]:
        """Send the updates in WriteRequests of ``chunk`` each, in order; the error of each
        update (None: applied).  After a request with a failed update nothing more is sent: the
        rest is reported not attempted, so the caller undoes exactly the updates that are None.
        A transport failure of the first request raises ChannelError (nothing was applied)."""
        errors: list[RuntimeApiError | None] = []
        for start in range(0, len(updates), self.chunk):
            part = updates[start:start + self.chunk]
            try:
                errors += self._write_chunk(part, start)
            except ChannelError as e:
                if start == 0:
                    raise
                e.index = start  # the updates before went through: the caller undoes them
                return [*errors, e, *_not_attempted(updates, start + 1, start)]
            if any(err is not None for err in errors):
                return errors + _not_attempted(updates, len(errors), start)
        return errors

    def _write_chunk(self, updates: Sequence[SwitchUpdate], offset: int) -> list[RuntimeApiError | None]:
        """One WriteRequest (CONTINUE_ON_ERROR, §12.2): the error of each of its updates."""
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id)
        req.election_id.high, req.election_id.low = self.election
        for u in updates:
            up = req.updates.add()
            up.type = _TYPES[u.op]
            self._table_entry(up.entity.table_entry, u)
        try:
            self.stub.Write(req, timeout=self.deadline(len(updates)))
            return [None] * len(updates)
        except grpc.RpcError as e:
            return self._errors(e, updates, offset)
        except ValueError as e:  # grpc: the channel was closed
            raise ChannelError(f"P4Runtime Write: {e}") from e

    def _errors(self, e: grpc.RpcError, updates: Sequence[SwitchUpdate],
                offset: int) -> list[RuntimeApiError | None]:
        details = next((v for k, v in (e.trailing_metadata() or ()) if k == "grpc-status-details-bin"), None)
        if details is None:
            raise ChannelError(f"P4Runtime Write failed: {e.code().name}: {e.details()}") from e
        status = status_pb2.Status.FromString(details)
        out: list[RuntimeApiError | None] = []
        for i, (any_, u) in enumerate(zip(status.details, updates, strict=True)):
            err = p4runtime_pb2.Error()
            any_.Unpack(err)
            cls = _CODES.get(err.canonical_code, ChannelError)
            out.append(None if err.canonical_code == code_pb2.OK else cls(f"switch {u.op} {u.table}: {err.message}",
                                                                          index=offset + i))
        return out

    def read(self, table: str, keys: Sequence[tuple[dict[str, Match], int]] | None = None,
             ) -> Iterator[tuple[dict[str, Match], dict[str, int], int]]:
        """Every entry of a table, or with ``keys`` ((match, priority) each, every field given)
        only the entries with those keys, as (match, values, priority) in ``.nfp`` names; a
        field the switch left out is its don't-care match (ternary mask 0, prefix length 0, full
        range).  A key is a query with the whole key (§9.1 "Wildcard Reads": it filters to one
        entry), sent in ReadRequests of ``chunk`` queries."""
        t = self.names["tables"][table]
        info = self.names["p4runtime"]["tables"][t["p4_table"]]
        if keys is None:  # a wildcard read of the table: its capacity bounds the reply
            yield from self._read(table, [self._query(info, None, 0)], t["size"])
            return
        for start in range(0, len(keys), self.chunk):
            part = keys[start:start + self.chunk]
            yield from self._read(table, [self._query(info, m, p) for m, p in part], len(part))

    @staticmethod
    def _query(info: dict[str, Any], match: dict[str, Match] | None, priority: int) -> Any:
        """A read entity: the table, and with ``match`` the key of one entry."""
        ent = p4runtime_pb2.Entity()
        te = ent.table_entry
        te.table_id = info["id"]
        te.priority = priority
        if match is None:
            return ent
        for key, spec in info["match_fields"].items():
            if not _put_match(te.match.add(), spec, *match[key]):
                del te.match[-1]
        return ent

    def idle(self, table: str, keys: Sequence[tuple[dict[str, Match], int]] | None = None,
             ) -> Iterator[tuple[dict[str, Match], int, int]]:
        """Every entry of a table that keeps idle time (a switch cache: TNA ``idle_timeout``),
        or with ``keys`` those entries only, as (match, priority, nanoseconds since its last
        hit, or since it was written if never hit): a read with ``time_since_last_hit`` set
        (P4Runtime §9.1.10)."""
        t = self.names["tables"][table]
        info = self.names["p4runtime"]["tables"][t["p4_table"]]
        queries = [self._query(info, m, p) for m, p in keys] if keys is not None else [self._query(info, None, 0)]
        for q in queries:
            q.table_entry.time_since_last_hit.SetInParent()  # §9.1.10: asks for the idle time
        for start in range(0, len(queries), self.chunk):
            part = queries[start:start + self.chunk]
            for te in self._entries(part, t["size"] if keys is None else len(part)):
                yield self._match(info, te), te.priority, te.time_since_last_hit.elapsed_ns

    @staticmethod
    def _match(info: dict[str, Any], te: Any) -> dict[str, Match]:
        given = {fm.field_id: fm for fm in te.match}
        return {key: _get_match(given.get(spec["id"]), spec) for key, spec in info["match_fields"].items()}

    def _read(self, table: str, entities: list[Any],
              expect: int) -> Iterator[tuple[dict[str, Match], dict[str, int], int]]:
        t = self.names["tables"][table]
        info = self.names["p4runtime"]["tables"][t["p4_table"]]
        params = {p["id"]: k.removeprefix("v_") for k, p in self.names["p4runtime"]["actions"][t["p4_action"]]
                  ["params"].items()}
        for te in self._entries(entities, expect):
            values = {params[p.param_id]: int.from_bytes(p.value, "big") for p in te.action.action.params}
            yield self._match(info, te), values, te.priority

    def _entries(self, entities: list[Any], expect: int) -> Iterator[Any]:
        """The table entries one ReadRequest of ``entities`` returns, its deadline scaled to
        ``expect`` entries."""
        for ent in self._entities(entities, expect):
            yield ent.table_entry

    def _entities(self, entities: list[Any], expect: int) -> Iterator[Any]:
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        req.entities.extend(entities)
        try:
            for resp in self.stub.Read(req, timeout=self.deadline(expect)):
                yield from resp.entities
        except grpc.RpcError as e:
            raise ChannelError(f"P4Runtime Read failed: {e.details()}{_reasons(e)}") from e
        except ValueError as e:  # grpc: the channel was closed
            raise ChannelError(f"P4Runtime Read: {e}") from e

    # ---- counters and meters (§9.5, §9.6) ----------------------------------------------------

    def _object_entity(self, kind: str, name: str, index: int) -> Any:
        """A CounterEntry, MeterEntry or RegisterEntry entity of one index, by the ``.nfp`` name."""
        info = self.names["p4runtime"].get(f"{kind}s", {}).get(name)
        if info is None or kind not in ("counter", "meter", "register"):
            raise InvalidEntry(f"the switch has no {kind} {name}")
        ent = p4runtime_pb2.Entity()
        e = getattr(ent, f"{kind}_entry")
        setattr(e, f"{kind}_id", info["id"])
        e.index.index = index
        return ent

    def object_read(self, kind: str, name: str, indices: Sequence[int]) -> list[tuple[int, ...]]:
        """Per index, in the control channel's layout: a counter's (packets, bytes); a meter's
        (configured, cir, cbs, pir, pbs); a register's (value,)."""
        got: dict[int, tuple[int, ...]] = {}
        for start in range(0, len(indices), self.chunk):
            part = [self._object_entity(kind, name, i) for i in indices[start:start + self.chunk]]
            for ent in self._entities(part, len(part)):
                if ent.HasField("counter_entry"):
                    ce = ent.counter_entry
                    got[ce.index.index] = (ce.data.packet_count, ce.data.byte_count)
                elif ent.HasField("register_entry"):
                    re_ = ent.register_entry
                    got[re_.index.index] = (int.from_bytes(re_.data.bitstring, "big"),)
                elif ent.HasField("meter_entry"):
                    me, c = ent.meter_entry, ent.meter_entry.config
                    got[me.index.index] = ((1, c.cir, c.cburst, c.pir, c.pburst) if me.HasField("config")
                                           else (0, 0, 0, 0, 0))
        missing = [i for i in indices if i not in got]
        if missing:
            raise ChannelError(f"the switch did not return {kind} {name} index {missing[0]}")
        return [got[i] for i in indices]

    def object_write(self, kind: str, name: str, records: Sequence[Sequence[int]]) -> list[RuntimeApiError | None]:
        """MODIFY of counter indices (index, packets, bytes), meter indices (index, cir, cbs,
        pir, pbs; all four 0: back to unconfigured) or register cells (index, value), in order;
        the error of each (None: applied)."""
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id)
        req.election_id.high, req.election_id.low = self.election
        for r in records:
            up = req.updates.add()
            up.type = p4runtime_pb2.Update.MODIFY
            up.entity.CopyFrom(self._object_entity(kind, name, r[0]))
            if kind == "counter":
                up.entity.counter_entry.data.packet_count, up.entity.counter_entry.data.byte_count = r[1], r[2]
            elif kind == "register":
                up.entity.register_entry.data.bitstring = _bytes(r[1])
            elif any(r[1:]):
                c = up.entity.meter_entry.config
                c.cir, c.cburst, c.pir, c.pburst = r[1:5]
        try:
            self.stub.Write(req, timeout=self.deadline(len(records)))
            return [None] * len(records)
        except grpc.RpcError as e:
            return self._errors(e, [SwitchUpdate("modify", name, {}, {}) for _ in records], 0)
        except ValueError as e:
            raise ChannelError(f"P4Runtime Write: {e}") from e


def _reasons(e: grpc.RpcError) -> str:
    """The messages of the per-entity errors a failed call carries (§12.3), as ': m1; m2'."""
    details = next((v for k, v in (e.trailing_metadata() or ()) if k == "grpc-status-details-bin"), None)
    if details is None:
        return ""
    messages = []
    for any_ in status_pb2.Status.FromString(details).details:
        err = p4runtime_pb2.Error()
        if any_.Unpack(err) and err.canonical_code != code_pb2.OK:
            messages.append(err.message)
    return f": {'; '.join(messages)}" if messages else ""


def _not_attempted(updates: Sequence[SwitchUpdate], start: int, failed: int) -> list[RuntimeApiError | None]:
    """The errors of ``updates[start:]``, never sent because the request from ``failed`` on failed."""
    return [ChannelError(f"switch {u.op} {u.table}: not attempted (the request of update {failed} failed)",
                         index=start + i) for i, u in enumerate(updates[start:])]
