"""``nfc run`` in batch mode: the whole hybrid data plane on this machine.

The switch part runs in the switch model; the server part is the compiled DPDK program,
started as a real DPDK process (``--no-huge``, net_pcap vdevs). Packets from the input
pcaps go through the switch; those the switch sends to its server port are handed to the
DPDK process (as the server NIC would receive them); what it sends back re-enters the
switch on the server port; every egress port gets a pcap. Entries (in ``.nfp`` names) go
where ``plan.json`` places their table: the switch model's tables, and/or the server
program's entries file.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from scapy.utils import RawPcapReader, RawPcapWriter

from runtime.entries import EntrySpec

__all__ = ["EAL_ARGS", "RunError", "run_hybrid"]

EAL_ARGS = ("--no-huge", "-m", "512", "--no-pci", "--no-shconf", "--no-telemetry", "--log-level=warning", "-l", "0")


class RunError(RuntimeError):
    """The server program could not be built or run; the message says why."""


class SwitchLike(Protocol):
    server_ports: tuple[int, ...]

    def process(self, data: bytes, port: int, now: float = 0.0) -> Any: ...


def _placement(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in plan["tables"]}


def server_entry_lines(plan: dict[str, Any], entries: list[EntrySpec]) -> list[str]:
    """Entries of server-side tables in the server program's text format."""
    tables = _placement(plan)
    lines = []
    for e in entries:
        t = tables.get(e.table)
        if t is None or "server" not in t:
            continue
        keys = [f"{e.match[k['name']][0]}/{e.match[k['name']][1]}" if k["match"] == "lpm" and
                e.match[k["name"]][1] is not None else str(e.match[k["name"]][0]) for k in t["keys"]]
        values = [str(e.values[v["name"]]) for v in t["values"]]
        lines.append(f"{e.table} {' '.join(keys)} : {' '.join(values)}")
    return lines


def _write(path: Path, packets: list[bytes]) -> None:
    with RawPcapWriter(str(path), linktype=1) as w:
        for p in packets:
            w.write(p)


def build_server(out: Path) -> Path:
    binary = out / "server" / "nf"
    if not binary.exists():
        r = subprocess.run(["make", "-C", str(out / "server")], capture_output=True, text=True)
        if r.returncode != 0:
            raise RunError(f"building the server program failed:\n{r.stderr[-2000:]}")
    return binary


def run_server(binary: Path, packets: list[bytes], entries: list[str],
               work: Path) -> tuple[list[bytes], dict[str, int]]:
    (work / "entries.txt").write_text("\n".join(entries) + "\n")
    _write(work / "to_server.pcap", packets)
    r = subprocess.run([str(binary), *EAL_ARGS,
                        f"--vdev=net_pcap0,rx_pcap={work / 'to_server.pcap'},tx_pcap={work / 'from_server.pcap'}",
                        "--", "--entries", str(work / "entries.txt")], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RunError(f"the server program failed ({r.returncode}):\n{r.stderr[-2000:]}")
    counters = json.loads(r.stdout.strip().splitlines()[-1])
    back = [bytes(d) for d, _ in RawPcapReader(str(work / "from_server.pcap"))]
    return back, counters["drops"]


def run_hybrid(out: Path, plan: dict[str, Any], switch: SwitchLike, entries: list[EntrySpec],
               injects: list[tuple[int, Path]], capture: Path) -> dict[str, Any]:
    capture.mkdir(parents=True, exist_ok=True)
    outputs: dict[int, list[bytes]] = {}
    drops: Counter[str] = Counter()
    to_server: list[bytes] = []
    server_port = switch.server_ports[0] if switch.server_ports else -1

    def deliver(o: Any) -> None:
        if o.kind == "forward" and o.port == server_port:
            to_server.append(o.data)
        elif o.kind == "forward":
            outputs.setdefault(o.port, []).append(o.data)
        elif o.kind == "drop":
            drops[f"switch:{o.reason}"] += 1
        else:
            drops[f"punt:{o.reason}"] += 1

    for port, path in injects:
        for data, _ in RawPcapReader(str(path)):
            deliver(switch.process(bytes(data), port))
    server_drops: dict[str, int] = {}
    if to_server:
        with tempfile.TemporaryDirectory(prefix="nfc-run-") as tmp:
            back, server_drops = run_server(build_server(out), to_server, server_entry_lines(plan, entries),
                                            Path(tmp))
        to_server = []
        for data in back:
            deliver(switch.process(data, server_port))
        if to_server:
            raise RunError("a packet went back to the server twice; nfc run handles one round trip")
    for port, packets in sorted(outputs.items()):
        _write(capture / f"port-{port}.pcap", packets)
    counters = {"drops": dict(sorted((drops + Counter({f"server:{k}": v for k, v in server_drops.items()})).items())),
                "egress_packets": {str(p): len(v) for p, v in sorted(outputs.items())}}
    (capture / "counters.json").write_text(json.dumps(counters, indent=2, sort_keys=True) + "\n")
    return counters
