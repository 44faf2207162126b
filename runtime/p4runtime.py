"""The runtime's P4Runtime client: the switch side of the runtime API.  The same code drives
the switch model (``nfc switch-model --p4runtime``) and a real switch's P4Runtime endpoint:
arbitration on the stream channel (§5), the pipeline config (§14), Write with per-update
error details (§12) and Read (§13), translated through the build's name map
(``OUT/switch/name_map.json``) from ``.nfp`` names to P4Runtime IDs.  What it sends is
canonical (§8.4 shortest bytestrings, §9.1.1 don't-care matches left out), over TLS or
mutual TLS when given certificates (§3.1.1)."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

import grpc
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from runtime.errors import ChannelError, EntryExists, EntryNotFound, InvalidEntry, RuntimeApiError, TableFull

__all__ = ["ClientTls", "SwitchClient", "SwitchUpdate"]

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
        return grpc.secure_channel(address, creds, options=options)


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
        return int.from_bytes(fm.ternary.value, "big"), int.from_bytes(fm.ternary.mask, "big")
    return int.from_bytes(fm.range.low, "big"), int.from_bytes(fm.range.high, "big")


class SwitchClient:
    """A primary P4Runtime client of one device (plain gRPC, or TLS / mutual TLS with ``tls``)."""

    def __init__(self, address: str, name_map: dict[str, Any], arch: str = "tna", device_id: int = 0,
                 election_id: tuple[int, int] = (0, 1), p4info: Path | None = None, timeout: float = 10.0,
                 tls: ClientTls | None = None) -> None:
        self.names = name_map[arch]
        self.device_id = device_id
        self.election = election_id
        self.timeout = timeout
        self.channel = tls.channel(address) if tls is not None else grpc.insecure_channel(address)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self._requests: queue.Queue[Any] = queue.Queue()
        self._stream_error = "closed"
        self._responses: queue.Queue[Any] = queue.Queue()
        self._stream = self.stub.StreamChannel(iter(self._requests.get, None))
        threading.Thread(target=self._pump, daemon=True).start()
        arb = p4runtime_pb2.StreamMessageRequest()
        arb.arbitration.device_id = device_id
        arb.arbitration.election_id.high, arb.arbitration.election_id.low = election_id
        self._requests.put(arb)
        try:
            resp = self._responses.get(timeout=timeout)
        except queue.Empty:
            self.close()
            raise ChannelError(f"no arbitration answer from the P4Runtime endpoint {address}") from None
        if resp is None:
            self.close()
            raise ChannelError(f"{address}: the P4Runtime endpoint ended the stream: {self._stream_error}")
        if resp.arbitration.status.code != code_pb2.OK:
            self.close()
            raise ChannelError(f"{address}: this client is not the primary (another controller holds the device)")
        if p4info is not None:
            self._set_pipeline(p4info)

    def _pump(self) -> None:
        try:
            for msg in self._stream:
                self._responses.put(msg)
        except grpc.RpcError as e:
            self._stream_error = f"{e.code().name}: {e.details()}"
        self._responses.put(None)

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

    # ---- entries -----------------------------------------------------------------------------

    def _table_entry(self, te: Any, u: SwitchUpdate) -> None:
        t = self.names["tables"].get(u.table)
        if t is None:
            raise InvalidEntry(f"the switch has no table {u.table}")
        info = self.names["p4runtime"]["tables"][t["p4_table"]]
        te.table_id = info["id"]
        te.priority = u.priority
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
        """Send one WriteRequest; the error of each update (None: applied)."""
        if not updates:
            return []
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id)
        req.election_id.high, req.election_id.low = self.election
        for u in updates:
            up = req.updates.add()
            up.type = _TYPES[u.op]
            self._table_entry(up.entity.table_entry, u)
        try:
            self.stub.Write(req, timeout=self.timeout)
            return [None] * len(updates)
        except grpc.RpcError as e:
            return self._errors(e, updates)
        except ValueError as e:  # grpc: the channel was closed
            raise ChannelError(f"P4Runtime Write: {e}") from e

    def _errors(self, e: grpc.RpcError, updates: Sequence[SwitchUpdate]) -> list[RuntimeApiError | None]:
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
                                                                          index=i))
        return out

    def read(self, table: str) -> Iterator[tuple[dict[str, Match], dict[str, int], int]]:
        """Every entry of a table: (match, values, priority) in ``.nfp`` names; a field the
        switch left out is its don't-care match (ternary mask 0, prefix length 0, full range)."""
        t = self.names["tables"][table]
        info = self.names["p4runtime"]["tables"][t["p4_table"]]
        params = {p["id"]: k.removeprefix("v_") for k, p in self.names["p4runtime"]["actions"][t["p4_action"]]
                  ["params"].items()}
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        req.entities.add().table_entry.table_id = info["id"]
        try:
            for resp in self.stub.Read(req, timeout=self.timeout):
                for ent in resp.entities:
                    te = ent.table_entry
                    given = {fm.field_id: fm for fm in te.match}
                    match = {key: _get_match(given.get(spec["id"]), spec) for key, spec in info["match_fields"].items()}
                    values = {params[p.param_id]: int.from_bytes(p.value, "big") for p in te.action.action.params}
                    yield match, values, te.priority
        except grpc.RpcError as e:
            raise ChannelError(f"P4Runtime Read failed: {e.details()}") from e
