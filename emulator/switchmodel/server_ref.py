"""The server part of a placed program, executed by the reference interpreter: what the
generated DPDK program must do with a packet that arrives behind a bridge header.

It decodes the switch→server bridge, re-parses the headers from the validity bits,
restores the bridged metadata, runs the server stages (for a cache miss: the cached
stage against the full table) and sends the packet back behind the server→switch bridge.
Together with ``SwitchModel`` it runs the whole split program on this machine; tests
compare that with the unsplit reference semantics.
"""

from __future__ import annotations

from compiler import ir
from compiler.interp import Interpreter, Outcome, Stop
from compiler.interp.bridge_codec import BridgeError, pack_ctx, unpack_into
from compiler.placement import Bridge, Direction, Placement, find_bridge

__all__ = ["ServerReference"]


class ServerReference:
    def __init__(self, program: ir.Program, placement: Placement, bridges: tuple[Bridge, ...],
                 switch_port: int = 0) -> None:
        self.program = program
        self.placement = placement
        self.bridges = bridges
        self.switch_port = switch_port
        self.interp = Interpreter(program)
        self.tables = self.interp.tables

    def process(self, data: bytes, now: float = 0.0) -> Outcome:
        cut = data[0] if data else -1
        b = next((x for x in self.bridges if x.cut_id == cut and x.direction is Direction.TO_SERVER), None)
        if b is None:
            return Outcome("drop", reason="bad_bridge")
        ctx = self.interp.new_ctx(data, self.switch_port, now)
        try:
            unpack_into(b, data, ctx, self.program)
        except BridgeError as e:
            return Outcome("drop", reason=e.reason)
        pl = next(p for p in self.program.pipelines if p.name == b.pipeline)
        try:
            self.interp.run_stages(ctx, self.placement.server_part(pl.stages, b))
        except Stop as s:
            return s.outcome
        back = find_bridge(self.bridges, b.pipeline, Direction.TO_SWITCH, b.miss)
        assert back is not None, "every cut has its bridge both ways"
        return Outcome("forward", self.switch_port, pack_ctx(back, ctx) + self.interp.deparse(ctx))
