"""Batch mode of the switch model: packets per ingress port from pcap files, one pcap per
egress port plus ``counters.json`` (drops by reason, punts, packets per egress port)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from scapy.utils import RawPcapReader, RawPcapWriter

from compiler.interp import Entry, Match
from compiler.manifest import TableInfo
from emulator.switchmodel._p4rt_entries import check_values
from emulator.switchmodel._p4rt_status import Reject
from emulator.switchmodel.model import SwitchModel
from runtime.api import check_entry
from runtime.entries import EntrySpec
from runtime.errors import InvalidEntry

__all__ = ["load_into", "run_batch"]


def load_into(model: SwitchModel, schemas: Mapping[str, TableInfo], entries: list[EntrySpec]) -> None:
    """Put entries of switch-resident tables into the model (others are not the switch's),
    checked as they would be on their way through the runtime API and P4Runtime, so a file
    that ``nfc run`` refuses is refused here too: the API's checks of ``schemas`` (the
    plan's tables: fields, widths, address kinds; LPM host bits cleared), then §9.1's rules
    (priority, ternary mask, range).  InvalidEntry names the table and field; a duplicate or
    a full table is the model's TableError."""
    for spec in entries:
        table = model.tables.get(spec.table)
        if table is None:
            continue
        spec = check_entry(schemas[spec.table], spec)
        match = [spec.match[k] for k in table.keys]
        try:
            check_values(spec.table, table.p4.keys, match, spec.priority)
        except Reject as r:
            raise InvalidEntry(f"{spec.table}: {r.message}") from r
        table.insert(Entry(tuple(Match(v, a) for v, a in match), dict(spec.values), spec.priority))


def _write(path: Path, packets: list[bytes]) -> None:
    with RawPcapWriter(str(path), linktype=1) as w:  # linktype 1: Ethernet
        for data in packets:
            w.write(data)


def run_batch(model: SwitchModel, injects: list[tuple[int, Path]], capture: Path) -> dict[str, dict[str, int]]:
    capture.mkdir(parents=True, exist_ok=True)
    outputs: dict[int, list[bytes]] = {}
    punted: list[bytes] = []
    sent: Counter[int] = Counter()
    for port, path in injects:
        for data, _meta in RawPcapReader(str(path)):
            out = model.process(bytes(data), port)
            if out.kind == "forward" and out.port is not None:
                outputs.setdefault(out.port, []).append(out.data)
                sent[out.port] += 1
            elif out.kind == "punt":
                punted.append(out.data)
    for port, packets in sorted(outputs.items()):
        _write(capture / f"port-{port}.pcap", packets)
    if punted:
        _write(capture / "punted.pcap", punted)
    counters = {"drops": dict(sorted(model.drops.items())),
                "punts": dict(sorted(model.punts.items())),
                "egress_packets": {str(k): v for k, v in sorted(sent.items())}}
    (capture / "counters.json").write_text(json.dumps(counters, indent=2, sort_keys=True) + "\n")
    return counters
