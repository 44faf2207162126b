"""The switch part of a placed program, executed by the reference interpreter (the split
reference semantics: tests compare the split program with the spec through it; the switch
model that serves P4Runtime runs the generated P4 instead, see ``model.py``).

It behaves as the generated P4 program does: packets from front-panel ports run their
pipeline's switch stages before the server; a pipeline with a server part then goes to
the server port behind its bridge header; packets from a server port are decoded from
their bridge header (metadata restored, headers re-parsed from the validity bits) and
run the switch stages after the server.  A miss in a switch-cached table goes to the
server with the miss-path bridge.  With ``shard by``, each goes to its share's server port
(the steering tables' overrides, which the runtime writes, are not modelled here).  Only
switch-resident table contents are consulted.
"""

from __future__ import annotations

from compiler import ir
from compiler.interp import Ctx, Interpreter, Outcome, Stop
from compiler.interp.bridge_codec import BridgeError, pack_ctx, unpack_into
from compiler.placement import Bridge, Direction, Placement, Segment, find_bridge
from compiler.shard import steering

__all__ = ["SwitchReference"]


class SwitchReference:
    def __init__(self, program: ir.Program, placement: Placement, bridges: tuple[Bridge, ...],
                 server_ports: tuple[int, ...]) -> None:
        self.program = program
        self.placement = placement
        self.bridges = bridges
        self.server_ports = server_ports
        self.interp = Interpreter(program, cache_miss=self._cache_miss)
        shard = program.deployment.shard if program.deployment is not None else None
        self.steering = steering(shard, len(server_ports)) if shard is not None and len(server_ports) > 1 else None
        self.tables = self.interp.tables  # switch-resident contents, written through P4Runtime

    @property
    def drops(self) -> dict[str, int]:
        return dict(self.interp.state.drops)

    def process(self, data: bytes, port: int, now: float = 0.0) -> Outcome:
        out = self._process(data, port, now)
        if out.kind == "drop":
            self.interp.state.drops[out.reason] += 1
        elif out.kind == "punt":
            self.interp.state.punts[out.reason] += 1
        return out

    def _process(self, data: bytes, port: int, now: float) -> Outcome:
        if port in self.server_ports:
            return self._from_server(data, port, now)
        for pl in self.program.pipelines:
            if not pl.has_port(port):
                continue
            ctx = self.interp.new_ctx(data, port, now)
            try:
                self.interp.parse(ctx, self.program.parsers[pl.parser], data)
                if pl.when is not None and not self.interp.eval(pl.when, ctx):
                    continue
                self.interp.run_stages(ctx, self.placement.stages_in(pl.stages, Segment.SWITCH))
                bridge = find_bridge(self.bridges, pl.name, Direction.TO_SERVER)
                if bridge is not None:
                    return self._to_server(bridge, ctx)
            except Stop as s:
                return s.outcome
            return self.interp.finish(ctx)
        return Outcome("drop", reason="no_pipeline")

    def _to_server(self, b: Bridge, ctx: Ctx) -> Outcome:
        """To the first server port, or with ``shard by`` to the port of the share the
        selector's value (read here, where the packet leaves) falls in (compiler/shard.py)."""
        port = self.server_ports[0] if self.server_ports else 0
        if self.steering is not None:
            port = self.server_ports[self.steering.server_of(self.interp.eval(self.steering.selector, ctx))]
        return Outcome("forward", port, pack_ctx(b, ctx) + self.interp.deparse(ctx))

    def _cache_miss(self, lookup: ir.Lookup, ctx: Ctx) -> None:
        pl = self.program.pipeline_of(next(s for s, st in self.program.stages.items() if _contains(st, lookup)))
        bridge = find_bridge(self.bridges, pl.name, Direction.TO_SERVER, lookup.table)
        if bridge is None:
            raise Stop(Outcome("drop", reason="no_server_for_miss"))
        raise Stop(self._to_server(bridge, ctx))

    def _from_server(self, data: bytes, port: int, now: float) -> Outcome:
        cut = data[0] if data else -1
        b = next((x for x in self.bridges if x.cut_id == cut and x.direction is Direction.TO_SWITCH), None)
        if b is None:
            return Outcome("drop", reason="bad_bridge")
        ctx = self.interp.new_ctx(data, port, now)
        try:
            unpack_into(b, data, ctx, self.program)
        except BridgeError as e:
            return Outcome("drop", reason=e.reason)
        pl = next(p for p in self.program.pipelines if p.name == b.pipeline)
        after = pl.stages[pl.stages.index(b.before_stage):] if b.before_stage else ()
        outcome = self.interp.run_stages_outcome(ctx, tuple(s for s in after if self.placement.segment[s].on_switch))
        return outcome if outcome is not None else self.interp.finish(ctx)


def _contains(stage: ir.Stage, lookup: ir.Lookup) -> bool:
    from compiler.analysis import walk_stmts

    return any(s is lookup for s in walk_stmts(stage.body))
