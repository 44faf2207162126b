"""bmv2's ``simple_switch`` running a build's v1model twin, for tests that compare it with the
switch model: the twin compiled by ``p4c-bm2-ss``, the model's table entries written through
``simple_switch_CLI``, packets in and out through pcap files (``--use-files``).

The tools are not in the package registries; ``tools/real-p4/build.sh`` builds them, and the
tests find them on PATH (``source $NFC_REAL_P4/env.sh``) or skip, naming what is missing."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest
from scapy.packet import Raw
from scapy.utils import rdpcap, wrpcap

from emulator.p4 import P4Table, TableEntry
from emulator.switchmodel import SwitchModel
from targets.p4 import syntax as p

__all__ = ["BMV2_TOOLS", "needs_bmv2", "run_simple_switch", "table_commands"]

BMV2_TOOLS = {t: shutil.which(t) for t in ("p4c-bm2-ss", "simple_switch", "simple_switch_CLI")}
needs_bmv2 = pytest.mark.skipif(
    not all(BMV2_TOOLS.values()),
    reason=f"{', '.join(t for t, path in BMV2_TOOLS.items() if path is None) or 'nothing'} not on PATH: "
           "p4c and bmv2 are not in the package registries; tools/real-p4/build.sh builds them "
           "(then source $NFC_REAL_P4/env.sh)")

_PRIORITY_TOP = 1 << 24  # bmv2 ranks the lowest priority value first, P4Runtime (and the model) the highest


def _controls(program: p.Program) -> dict[str, str]:
    """Each table's and action's control, by local name (the twin names them ``Control.local``)."""
    out: dict[str, str] = {}
    for d in program.decls:
        if isinstance(d, p.Control):
            for local in d.locals:
                if isinstance(local, p.Table | p.Action):
                    out.setdefault(local.name, d.name)
    return out


def _match(kind: str, value: int, arg: int | None, width: int) -> str:
    if kind == "lpm":
        return f"{value}/{width if arg is None else arg}"
    if kind == "ternary":
        return f"{value}&&&{(1 << width) - 1 if arg is None else arg}"
    if kind == "range":
        return f"{value}->{value if arg is None else arg}"
    return str(value)


def table_commands(program: p.Program, tables: Iterable[P4Table]) -> list[str]:
    """``table_add`` lines of simple_switch_CLI for every entry of ``tables`` (the model's)."""
    where = _controls(program)
    lines = []
    for t in tables:
        ranked = any(k.match in ("ternary", "range", "optional") for k in t.keys)
        for e in t.entries:
            lines.append(_table_add(t, e, where, ranked))
    return lines


def _table_add(t: P4Table, e: TableEntry, where: dict[str, str], ranked: bool) -> str:
    keys = " ".join(_match(k.match, m.value, m.arg, k.width) for k, m in zip(t.keys, e.key, strict=True))
    params = " ".join(str(e.params[name]) for name, _width in t.actions[e.action])
    line = f"table_add {where[t.name]}.{t.name} {where[e.action]}.{e.action} {keys} => {params}"
    return f"{line} {_PRIORITY_TOP - e.priority}" if ranked else line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_simple_switch(out: Path, model: SwitchModel, inputs: dict[int, list[bytes]], outputs: Iterable[int],
                      work: Path, expected: int, deadline_s: float = 120.0) -> dict[int, Counter[bytes]]:
    """The frames simple_switch sends out of each port (as multisets) for ``inputs`` (frames by
    ingress port), running ``out``'s v1model twin with ``model``'s table entries; ``outputs``:
    the ports to listen on besides the ingress ports, the server ports and the CPU port.  Waits
    until ``expected`` frames came out and no more follow for a second (or ``deadline_s``)."""
    work.mkdir(parents=True, exist_ok=True)
    config = work / "twin.json"
    r = subprocess.run([BMV2_TOOLS["p4c-bm2-ss"], str(out / "switch/v1model.p4"), "-o", str(config)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"p4c-bm2-ss refused the v1model twin:\n{r.stderr[-3000:]}"
    ports = sorted({*inputs, *outputs, *model.server_ports, model.cpu_port})
    for port in ports:
        wrpcap(str(work / f"p{port}_in.pcap"), [Raw(f) for f in inputs.get(port, [])], linktype=1)  # Ethernet
    thrift = _free_port()
    wait_s = 10  # seconds before simple_switch reads the inputs: the entries go in first
    # its own Thrift port, device id and notification socket: two switches at once do not meet
    cmd = [BMV2_TOOLS["simple_switch"], "--use-files", str(wait_s), "--thrift-port", str(thrift),
           "--device-id", str(thrift), "--notifications-addr", f"ipc://{work}/notifications.ipc",
           *[a for port in ports for a in ("-i", f"{port}@{work}/p{port}")], str(config)]
    log = open(work / "simple_switch.log", "w")  # noqa: SIM115 -- closed with the switch
    switch = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        commands = "\n".join(table_commands(model.program, model.p4_tables.values())) + "\n"
        started = time.monotonic()
        while True:  # the CLI connects once the switch listens
            r = subprocess.run([BMV2_TOOLS["simple_switch_CLI"], "--thrift-port", str(thrift)], input=commands,
                               capture_output=True, text=True)
            if r.returncode == 0 and "Could not connect" not in r.stdout + r.stderr:
                break
            assert switch.poll() is None, f"simple_switch stopped:\n{(work / 'simple_switch.log').read_text()[-3000:]}"
            assert time.monotonic() - started < 30, f"simple_switch_CLI:\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
            time.sleep(0.2)
        assert "Error" not in r.stdout, f"a table_add was refused:\n{r.stdout[-3000:]}"
        assert time.monotonic() - started < wait_s, "the entries went in after the packets started"
        seen, steady = -1, time.monotonic()
        while time.monotonic() - started < deadline_s:
            n = sum(_count(work / f"p{port}_out.pcap") for port in ports)
            if n != seen:
                seen, steady = n, time.monotonic()
            elif n >= expected and time.monotonic() - steady > 1.0:
                break
            time.sleep(0.2)
    finally:
        switch.terminate()
        switch.wait(10)
        log.close()
    return {port: Counter(bytes(f) for f in rdpcap(str(work / f"p{port}_out.pcap")))
            for port in ports if _count(work / f"p{port}_out.pcap")}


def _count(path: Path) -> int:
    """Frames in a pcap file being written (16-byte record headers after the 24-byte file header)."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    n, at = 0, 24
    while at + 16 <= len(data):
        incl = int.from_bytes(data[at + 8:at + 12], "little")
        if at + 16 + incl > len(data):
            break
        n, at = n + 1, at + 16 + incl
    return n
