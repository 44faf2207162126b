"""The switch model: the generated P4 program, read back from the build folder and executed.

What runs is the printed ``switch/tna.p4`` (or ``v1model.p4``) that ``nfc build`` wrote,
parsed back into the P4 syntax tree and executed by ``emulator.p4`` with the
architecture's semantics, so every test and every ``nfc run`` exercises the program a user
deploys.  The model observes the device from outside, as a controller would:

* a dropped packet's reason is the index of the ``nfc_drops`` counter it incremented;
* a packet on the CPU port is a punt: its ``packet_in`` header (the program's
  ``@controller_header("packet_in")`` type) gives the reason code;
* table contents are written per P4 table (``p4_tables``, for the P4Runtime server) or,
  for tests and ``--entries`` files, with ``.nfp`` names (``tables``: key fields in ``.nfp``
  order, values by ``.nfp`` name), translated through the name map.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from compiler.interp import Entry, Match, Outcome, TableError
from compiler.manifest import load_plan, mask_prefix, prefix_mask
from emulator.p4 import Match as P4Match
from emulator.p4 import P4Executor, P4Table, TableEntry
from emulator.p4 import TableError as P4TableError
from targets.p4 import syntax as p
from targets.p4.parse import parse_program

__all__ = ["NfpTable", "SwitchModel"]


class NfpTable:
    """A switch table seen with ``.nfp`` names: ``Entry(key, {value: int})`` ↔ the P4 table's
    ``<table>_hit`` action with parameters ``v_<value>``."""

    def __init__(self, table: P4Table, action: str, keys: list[str], values: list[str],
                 prefixes: frozenset[int] = frozenset()) -> None:
        self.p4 = table
        self.action = action
        self.keys = keys  # .nfp key names, in key order
        self.values = values
        self.prefixes = prefixes  # the .nfp lpm keys the P4 table matches as ternary: a prefix length ↔ a mask

    def _p4_key(self, key: tuple[Match, ...]) -> tuple[P4Match, ...]:
        out = []
        for i, m in enumerate(key):
            arg = m.arg
            if i in self.prefixes and arg is not None:
                arg = prefix_mask(arg, self.p4.keys[i].width)
            out.append(P4Match(m.value, arg))
        return tuple(out)

    def insert(self, e: Entry) -> None:
        try:
            self.p4.insert(TableEntry(self._p4_key(e.key), self.action,
                                      {f"v_{k}": v for k, v in e.values.items()}, e.priority))
        except P4TableError as err:
            raise TableError(str(err)) from err

    def delete(self, key: tuple[Match, ...], priority: int = 0) -> Entry:
        try:
            old = self.p4.delete(self._p4_key(key), priority)
        except P4TableError as err:
            raise TableError(str(err)) from err
        return self._nfp(old)

    def _nfp(self, e: TableEntry) -> Entry:
        key = []
        for i, m in enumerate(e.key):
            arg = m.arg
            if i in self.prefixes and arg is not None:
                arg = mask_prefix(arg, self.p4.keys[i].width)
            key.append(Match(m.value, arg))
        return Entry(tuple(key), {k.removeprefix("v_"): v for k, v in e.params.items()}, e.priority)

    @property
    def entries(self) -> list[Entry]:
        return [self._nfp(e) for e in self.p4.entries]


class SwitchModel:
    """``program`` (a TNA or v1model P4 syntax tree) with the build's name map."""

    def __init__(self, program: p.Program, name_map: dict[str, Any], server_ports: tuple[int, ...] = (),
                 names_of: str = "tna") -> None:
        self.executor = P4Executor(program)
        self.program = program
        self.server_ports = server_ports
        self.reason_of = {code: reason for reason, code in name_map["drop_reasons"].items()}
        self.punt_of = {code: reason for reason, code in name_map["punt_reasons"].items()}
        self.p4_tables = self.executor.tables
        rt_tables = name_map[names_of].get("p4runtime", {}).get("tables", {})
        fields = {t: info["match_fields"] for t, info in rt_tables.items()}
        self.tables: dict[str, NfpTable] = {
            t: NfpTable(self.p4_tables[info["p4_table"]], info["p4_action"], list(info["keys"]), list(info["values"]),
                        frozenset(i for i, k in enumerate(info["keys"])
                                  if fields.get(info["p4_table"], {}).get(k, {}).get("prefix")))
            for t, info in name_map[names_of]["tables"].items()}
        self.cpu_port = self.executor.env.consts["NFC_CPU_PORT"].value
        self.punt_header = self.executor.env.decls["nfc_packet_in_h"]
        self.drops: Counter[str] = Counter()
        self.punts: Counter[str] = Counter()

    @classmethod
    def from_build(cls, out: Path, arch: str = "tna") -> SwitchModel:
        """The model of build folder ``out``: its ``switch/<arch>.p4`` and name map, by ``plan.json``."""
        plan = load_plan(out)
        program = parse_program(plan.path(out, f"switch_{arch}").read_text())
        names = json.loads(plan.path(out, "name_map").read_text())
        return cls(program, names, plan.server_ports, arch)

    def process(self, data: bytes, port: int, now: float = 0.0) -> Outcome:
        drops = self.executor.counter("nfc_drops").packets
        before = dict(drops)
        r = self.executor.process(data, port, now)
        if r.port is None:
            code = next((k for k, n in drops.items() if n != before.get(k, 0)), 0)
            reason = self.reason_of.get(code, f"code_{code}")
            self.drops[reason] += 1
            return Outcome("drop", reason=reason)
        if r.port == self.cpu_port:
            return self._punt(r.data)
        return Outcome("forward", r.port, r.data)

    def _punt(self, data: bytes) -> Outcome:
        widths = [t.width for _n, t in self.punt_header.fields if isinstance(t, p.Bits)]
        size = sum(widths) // 8
        code = data[0] if data else 0  # the first field of packet_in is the reason (bit<8>)
        reason = self.punt_of.get(code, f"code_{code}")
        self.punts[reason] += 1
        return Outcome("punt", data=data[size:], reason=reason)
