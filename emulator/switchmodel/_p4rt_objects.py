"""Counters, meters and registers of the switch model as P4Runtime writes and reads them (v1.4
§9.5 ``CounterEntry``, §9.6 ``MeterEntry``, §9.8 ``RegisterEntry``): indexed externs of the
running program, found by their P4Info id.  All take MODIFY only (they exist as long as the
program does); an unset ``index`` is every index (§9.5.1 / §9.6.1 wildcard, and the same for
registers); a ``MeterEntry`` without ``config`` puts the index back to its default,
unconfigured (every packet green); a ``RegisterEntry``'s ``data`` is a ``bitstring`` that fits
the cell.  A write that would fail changes nothing.  The ``nfc_drops`` counter is the
service's own (per drop reason)."""

from __future__ import annotations

from typing import Any

from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from compiler.interp.meter import MeterConfig
from emulator.p4.executor import P4Executor
from emulator.p4.externs import CounterObj, MeterObj, RegisterObj
from emulator.switchmodel._p4rt_entries import canonical, uint_of
from emulator.switchmodel._p4rt_status import Reject, invalid

__all__ = ["Objects", "meter_config_ok"]

_U = p4runtime_pb2.Update


def meter_config_ok(cir: int, cburst: int, pir: int, pburst: int) -> bool:
    """Rates a trTCM can run (RFC 2698 §2: PIR >= CIR; both bursts above zero)."""
    return cir > 0 and pir >= cir and cburst > 0 and pburst > 0


class Objects:
    """The program's counters and meters by P4Info id (``names``: the name map's ``p4runtime``)."""

    def __init__(self, names: dict[str, Any], executor: P4Executor) -> None:
        self.counters: dict[int, tuple[str, CounterObj]] = {}
        self.meters: dict[int, tuple[str, MeterObj]] = {}
        self.registers: dict[int, tuple[str, RegisterObj]] = {}
        for kind, into in (("counters", self.counters), ("meters", self.meters), ("registers", self.registers)):
            for name, info in names.get(kind, {}).items():
                obj = executor.externs.get(info["name"].rsplit(".", 1)[-1])
                if obj is not None and name != "nfc_drops":
                    into[info["id"]] = (name, obj)

    def _find(self, table: dict[int, tuple[str, Any]], oid: int, what: str) -> tuple[str, Any]:
        found = table.get(oid)
        if found is None:
            raise Reject(code_pb2.NOT_FOUND, f"no {what} with id {oid}")
        return found

    @staticmethod
    def _indices(size: int, entry: Any, name: str) -> range:
        if not entry.HasField("index"):
            return range(size)
        i = entry.index.index
        if not 0 <= i < size:
            raise Reject(code_pb2.OUT_OF_RANGE, f"{name}: index {i} is outside 0..{size - 1}")
        return range(i, i + 1)

    # ---- Write -------------------------------------------------------------------------------

    def write(self, update: Any) -> None:
        kind = update.entity.WhichOneof("entity")
        if update.type != _U.MODIFY:
            raise invalid(f"a {kind} can only be modified (§9.5, §9.6, §9.8), not inserted or deleted")
        if kind == "register_entry":
            re_ = update.entity.register_entry
            name, reg = self._find(self.registers, re_.register_id, "register")
            if re_.data.WhichOneof("data") != "bitstring":
                raise invalid(f"{name}: a register cell is a bitstring, not {re_.data.WhichOneof('data')}")
            value = uint_of(re_.data.bitstring, reg.width, name)
            for i in self._indices(reg.size, re_, name):
                reg.write(i, value)
            return
        if kind == "counter_entry":
            ce = update.entity.counter_entry
            name, ctr = self._find(self.counters, ce.counter_id, "counter")
            for i in self._indices(ctr.size, ce, name):
                ctr.packets[i], ctr.bytes[i] = ce.data.packet_count, ce.data.byte_count
            return
        me = update.entity.meter_entry
        name, met = self._find(self.meters, me.meter_id, "meter")
        cfg = None
        if me.HasField("config"):
            c = me.config
            if not meter_config_ok(c.cir, c.cburst, c.pir, c.pburst):
                raise invalid(f"{name}: meter config needs cir > 0, pir >= cir, cburst > 0 and pburst > 0")
            cfg = MeterConfig(c.cir, c.cburst, c.pir, c.pburst)
        for i in self._indices(met.size, me, name):
            met.set(i, cfg)

    # ---- Read --------------------------------------------------------------------------------

    def read_counters(self, query: Any, add: Any) -> None:
        """``query.counter_id`` 0: every counter but ``nfc_drops`` (which the caller answers)."""
        def fill(ent: Any, oid: int, i: int, ctr: CounterObj) -> None:
            ce = ent.counter_entry
            ce.counter_id, ce.index.index = oid, i
            ce.data.packet_count, ce.data.byte_count = ctr.packets[i], ctr.bytes[i]
        self._read(self.counters, query.counter_id, query, "counter", add, fill)

    def read_meters(self, query: Any, add: Any) -> None:
        def fill(ent: Any, oid: int, i: int, met: MeterObj) -> None:
            me = ent.meter_entry
            me.meter_id, me.index.index = oid, i
            cfg = met.config.get(i)
            if cfg is not None:  # §9.6: an index at its default config has none
                me.config.cir, me.config.cburst = int(cfg.cir), int(cfg.cbs)
                me.config.pir, me.config.pburst = int(cfg.pir), int(cfg.pbs)
        self._read(self.meters, query.meter_id, query, "meter", add, fill)

    def read_registers(self, query: Any, add: Any) -> None:
        def fill(ent: Any, oid: int, i: int, reg: RegisterObj) -> None:
            re_ = ent.register_entry
            re_.register_id, re_.index.index = oid, i
            re_.data.bitstring = canonical(reg.read(i))
        self._read(self.registers, query.register_id, query, "register", add, fill)

    def _read(self, table: dict[int, tuple[str, Any]], oid: int, query: Any, what: str, add: Any, fill: Any) -> None:
        """Id 0 is every object of the kind, an unset index every index (§9.5.1 / §9.6.1)."""
        for one in (list(table) if oid == 0 else [oid]):
            name, obj = self._find(table, one, what)
            for i in self._indices(obj.size, query, name):
                fill(add(), one, i, obj)

    def snapshot(self, updates: Any) -> list[tuple[Any, Any]]:
        """What the counters and meters a batch writes hold now (for a batch rolled back)."""
        out: list[tuple[Any, Any]] = []
        for u in updates:
            kind = u.entity.WhichOneof("entity")
            if kind == "counter_entry" and u.entity.counter_entry.counter_id in self.counters:
                ctr = self.counters[u.entity.counter_entry.counter_id][1]
                out.append((ctr, (ctr.packets.copy(), ctr.bytes.copy())))
            elif kind == "meter_entry" and u.entity.meter_entry.meter_id in self.meters:
                met = self.meters[u.entity.meter_entry.meter_id][1]
                out.append((met, (dict(met.config), dict(met.buckets))))
            elif kind == "register_entry" and u.entity.register_entry.register_id in self.registers:
                reg = self.registers[u.entity.register_entry.register_id][1]
                out.append((reg, (dict(reg.cells), None)))
        return out

    @staticmethod
    def restore(saved: list[tuple[Any, Any]]) -> None:
        for obj, (a, b) in reversed(saved):
            if isinstance(obj, CounterObj):
                obj.packets, obj.bytes = a, b
            elif isinstance(obj, RegisterObj):
                obj.cells = a
            else:
                obj.config, obj.buckets = a, b

    def owns_counter(self, counter_id: int) -> bool:
        return counter_id in self.counters
