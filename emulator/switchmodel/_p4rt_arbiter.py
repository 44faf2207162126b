"""Client arbitration for the switch model's P4Runtime server (P4Runtime v1.4 §5): which
stream is the primary controller of the device, and the arbitration notifications each
controller is sent when that changes."""

from __future__ import annotations

import queue
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from emulator.switchmodel._p4rt_status import Reject, invalid

__all__ = ["Arbiter", "ElectionId"]

ElectionId = tuple[int, int]


@dataclass
class Controller:
    """A live controller: its election id (None: it sent none) and its stream's outbox."""

    election_id: ElectionId | None
    out: queue.Queue[Any]


class Arbiter:
    """Primary/backup arbitration for one device and the default role (§5): the primary is
    the live controller with the highest election id ever seen; election ids are unique among
    live controllers.  Not thread-safe: the server holds its lock."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self.controllers: dict[int, Controller] = {}  # by stream
        self.primary: int | None = None
        self.highest: ElectionId | None = None

    def update(self, stream: int, arb: Any, out: queue.Queue[Any]) -> None:
        """A ``MasterArbitrationUpdate`` on ``stream``; raises Reject to end the stream."""
        eid = (arb.election_id.high, arb.election_id.low) if arb.HasField("election_id") else None
        first = stream not in self.controllers
        if arb.device_id != self.device_id:
            raise Reject(code_pb2.NOT_FOUND if first else code_pb2.FAILED_PRECONDITION,
                         f"no device {arb.device_id} here (this is device {self.device_id})")
        if arb.role.name or arb.role.id or arb.role.HasField("config"):
            raise Reject(code_pb2.NOT_FOUND if first else code_pb2.FAILED_PRECONDITION,
                         "the switch model has only the default role")
        if eid is not None and any(c.election_id == eid for s, c in self.controllers.items() if s != stream):
            raise invalid(f"election id {eid} is used by another live controller")
        was_primary = self.primary == stream
        self.controllers[stream] = Controller(eid, out)
        if eid is not None and (self.highest is None or eid >= self.highest):
            self.primary, self.highest = stream, eid
            self._notify(self.controllers)
        elif was_primary:  # a primary that lowered its election id steps down
            self.primary = None
            self._notify(self.controllers)
        else:
            self._notify([stream])

    def leave(self, stream: int) -> None:
        """``stream`` ended; if it was the primary, the device has none until a new arbitration."""
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
