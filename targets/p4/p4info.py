"""P4Info for the generated switch program, built with the ``p4runtime`` package's
protobuf classes, and the name map that ties ``.nfp`` names to P4Runtime names and IDs.

IDs are stable: the P4Runtime prefix of the entity kind in the top byte and the CRC-32 of
the fully qualified name in the low 24 bits (collisions move to the next free value), so
the same program always gets the same IDs and adding a table does not renumber the rest.
"""

from __future__ import annotations

import os
import zlib
from typing import Any

# p4runtime 1.6.0 ships _pb2 modules generated for old protobuf; with protobuf >= 4 they
# load only with the pure-Python implementation (../shared/notes/p4-here.md).
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from targets.p4 import syntax as p

__all__ = ["PREFIX", "build_p4info", "p4info_text"]

# P4Runtime spec §6.3 "ID allocation": the most significant byte names the entity type.
PREFIX = {"action": 0x01, "table": 0x02, "counter": 0x12}
_MATCH = {"exact": p4info_pb2.MatchField.EXACT, "lpm": p4info_pb2.MatchField.LPM,
          "ternary": p4info_pb2.MatchField.TERNARY, "range": p4info_pb2.MatchField.RANGE}


class _Ids:
    def __init__(self) -> None:
        self.used: set[int] = set()

    def get(self, kind: str, name: str) -> int:
        low = zlib.crc32(name.encode()) & 0xFFFFFF
        while (PREFIX[kind] << 24 | low) in self.used or low == 0:
            low = (low + 1) & 0xFFFFFF
        ident = PREFIX[kind] << 24 | low
        self.used.add(ident)
        return ident


def _width(type_: p.Type) -> int:
    return type_.width if isinstance(type_, p.Bits) else 1


def build_p4info(prog: p.Program, arch: str, key_widths: dict[str, list[int]]) -> tuple[Any, dict[str, Any]]:
    """P4Info of ``prog``'s ingress control, and the P4Runtime part of the name map.

    ``key_widths``: table name → the bit width of each key field, in key order."""
    info = p4info_pb2.P4Info()
    info.pkg_info.arch = arch
    ids = _Ids()
    control = next(d for d in prog.decls if isinstance(d, p.Control) and d.name.endswith("Ingress"))
    qual = control.name
    names: dict[str, Any] = {"tables": {}, "actions": {}, "counters": {}}
    actions = [x for x in control.locals if isinstance(x, p.Action)]
    action_ids: dict[str, int] = {}
    for a in actions:
        pa = info.actions.add()
        full = f"{qual}.{a.name}"
        pa.preamble.id = action_ids[a.name] = ids.get("action", full)
        pa.preamble.name = full
        pa.preamble.alias = a.name
        params = {}
        for i, (pname, ptype) in enumerate(a.params, 1):
            prm = pa.params.add()
            prm.id, prm.name, prm.bitwidth = i, pname, _width(ptype)
            params[pname] = {"id": i, "bitwidth": prm.bitwidth}
        names["actions"][a.name] = {"id": pa.preamble.id, "name": full, "params": params}
    for t in (x for x in control.locals if isinstance(x, p.Table)):
        pt = info.tables.add()
        full = f"{qual}.{t.name}"
        pt.preamble.id = ids.get("table", full)
        pt.preamble.name = full
        pt.preamble.alias = t.name
        fields = {}
        for i, (k, width) in enumerate(zip(t.keys, key_widths[t.name], strict=True), 1):
            mf = pt.match_fields.add()
            mf.id, mf.name, mf.bitwidth, mf.match_type = i, k.name, width, _MATCH[k.match]
            fields[k.name] = {"id": i, "bitwidth": width, "match": k.match}
        for action_name in t.actions:
            pt.action_refs.add().id = action_ids[action_name]
        pt.const_default_action_id = action_ids[t.default_action]
        pt.size = t.size
        names["tables"][t.name] = {"id": pt.preamble.id, "name": full, "match_fields": fields,
                                   "actions": list(t.actions)}
    for inst in (x for x in control.locals if isinstance(x, p.Instance) and x.name == "nfc_drops"):
        pc = info.counters.add()
        full = f"{qual}.{inst.name}"
        pc.preamble.id = ids.get("counter", full)
        pc.preamble.name = full
        pc.preamble.alias = inst.name
        pc.spec.unit = p4info_pb2.CounterSpec.PACKETS
        pc.size = 256
        names["counters"][inst.name] = {"id": pc.preamble.id, "name": full}
    packet_io: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = (
        ("packet_in", (("reason", 8), ("ingress_port", 16))), ("packet_out", (("egress_port", 16),)))
    for header, md_fields in packet_io:
        cpm = info.controller_packet_metadata.add()
        cpm.preamble.id = 0x40000000 | (zlib.crc32(header.encode()) & 0xFFFFFF)
        cpm.preamble.name = header
        for i, (mname, width) in enumerate(md_fields, 1):
            md = cpm.metadata.add()
            md.id, md.name, md.bitwidth = i, mname, width
    return info, names


def p4info_text(info: Any) -> str:
    return str(text_format.MessageToString(info))
