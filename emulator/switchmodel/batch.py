"""Batch mode of the switch model: packets per ingress port from pcap files, one pcap per
egress port plus ``counters.json`` (drops by reason, punts, packets per egress port)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from scapy.utils import RawPcapReader, RawPcapWriter

from compiler.interp import Entry, Match, TableError
from emulator.switchmodel.model import SwitchModel
from runtime.entries import EntrySpec

__all__ = ["load_into", "run_batch"]


def load_into(model: SwitchModel, entries: list[EntrySpec]) -> None:
    """Put entries of switch-resident tables into the model (others are not the switch's)."""
    for spec in entries:
        table = model.tables.get(spec.table)
        if table is None:
            continue
        keys = []
        for k in table.keys:
            if k not in spec.match:
                raise TableError(f"{spec.table}: entry has no value for key {k}")
            value, arg = spec.match[k]
            keys.append(Match(value, arg))
        table.insert(Entry(tuple(keys), dict(spec.values), spec.priority))


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
