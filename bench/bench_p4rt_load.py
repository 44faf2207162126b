"""Loading a switch cache over P4Runtime (issue 14, item 4): how long the runtime API takes to
put N entries of a built example's cached table into ``nfc switch-model --p4runtime``.

    .venv/bin/python bench/bench_p4rt_load.py               # Bluebird 10K/50K/221,140 exact, DSR 10K LPM
    .venv/bin/python bench/bench_p4rt_load.py --quick       # Bluebird 10K, DSR 2K
    .venv/bin/python bench/bench_p4rt_load.py --python-protobuf --exact 10000 --lpm 0   # "before"

The tables: Bluebird's route cache ``ca_to_pa`` (``examples/bluebird_tor.nfp``; exact on VRF and
customer address; 221,140 entries fit the switch, the cache of the example) and DSR's ``vrf_fib``
(``examples/dsr_router.nfp``; exact VRF + LPM destination, /24 routes), each built with
``nfc build --target tofino+dpdk`` into a temporary folder.  For every size a fresh switch model
serves P4Runtime on loopback; the client is the runtime API's switch half (``Runtime._switch``:
what ``Runtime._cached`` sends once the server holds the entries), with default settings.  One
run: the load (adds), then evicting 5 % of it (deletes: the API reads those keys first for its
undo values), then a read of the whole table to check the count.  An eviction the switch
fails (a deadline) is reported as failed, not fatal; a failed load is reported and the exit
status is then 1.

Per run: seconds and entries/s of the load, client CPU-seconds (this process) and server
CPU-seconds (``/proc/PID/stat`` of the switch model) over the load, the eviction's and the
read's seconds.  ``--python-protobuf`` runs everything with protobuf's pure-Python
implementation (``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``), how P4Runtime ran before
the modules were regenerated for upb (tools/p4rt_protos.py).  docs/runtime.md has a run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

if "--python-protobuf" in sys.argv:  # before protobuf is first imported (runtime.api imports it)
    os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"

from runtime.api import Runtime, TableSchema, _check, _Entry  # noqa: E402
from runtime.errors import ChannelError  # noqa: E402
from runtime.p4runtime import SwitchClient  # noqa: E402

EVICT = 0.05  # share of the load deleted again, as one eviction batch


def log(msg: str) -> None:
    print(f"[bench_p4rt_load {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Workload:
    """A built example, its cached table, and its i-th entry's fields."""

    example: str
    table: str

    def fields(self, i: int) -> dict[str, object]:
        if self.table == "ca_to_pa":
            return {"meta_vrf": 1 + i % 1000, "ca": 0x0A000000 + i, "vtep": 0xAC100000 + i % 4096,
                    "vni": 5000 + i % 1000, "vm_mac": 0x020000000000 + i}
        return {"meta_vrf": 1 + i % 1000, "ipv4_dst": (0x0A000000 + (i << 8) & 0xFFFFFFFF, 24),
                "tunnel_dst": 0xAC100000 + i % 4096, "tunnel_key": i % (1 << 24)}


BLUEBIRD = Workload("bluebird_tor", "ca_to_pa")
DSR = Workload("dsr_router", "vrf_fib")


@dataclass(frozen=True, slots=True)
class Result:
    protobuf: str
    table: str
    entries: int
    load_s: float
    entries_per_s: float
    client_cpu_s: float
    server_cpu_s: float
    evict_s: float | None  # None: the eviction failed
    read_s: float


def build(w: Workload, tmp: Path) -> Path:
    out = tmp / w.example
    if not (out / "plan.json").exists():
        r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", str(ROOT / "examples" / f"{w.example}.nfp"),
                            "--target", "tofino+dpdk", "-o", str(out)], cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"nfc build {w.example} failed: {r.stderr[-400:]}")
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/PID/stat fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def switch_model(out: Path, port: int) -> subprocess.Popen[bytes]:
    """``nfc switch-model OUT --p4runtime`` on loopback, once it accepts connections."""
    proc = subprocess.Popen([sys.executable, "-m", "nfc.cli", "switch-model", str(out), "--p4runtime",
                             f"127.0.0.1:{port}"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr is not None else ""
                raise RuntimeError(f"nfc switch-model exited: {err[-400:]}") from None
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("nfc switch-model did not listen within 60 s")


def run(w: Workload, out: Path, n: int) -> Result:
    port = free_port()
    proc = switch_model(out, port)
    try:
        names = json.loads((out / "switch" / "name_map.json").read_text())
        rt = Runtime(out, switch=SwitchClient(f"127.0.0.1:{port}", names, "tna"))
        s: TableSchema = rt.schemas[w.table]
        entries = [_check(s, w.fields(i), True) for i in range(n)]
        server0, client0, t0 = cpu_seconds(proc.pid), time.process_time(), time.perf_counter()
        rt._switch(s, "add", entries)
        load = time.perf_counter() - t0
        client, server = time.process_time() - client0, cpu_seconds(proc.pid) - server0
        evict, left = evict_and_count(rt, s, entries)
        t2 = time.perf_counter()
        found = sum(1 for _ in rt.switch.read(w.table)) if rt.switch is not None else 0
        read = time.perf_counter() - t2
        if left is not None and found != left:
            raise RuntimeError(f"{w.table}: {found} entries read back, {left} expected")
        rt.close()
    finally:
        proc.terminate()
        proc.wait(10)
    impl = "python" if os.environ.get("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION") == "python" else "upb"
    return Result(impl, w.table, n, round(load, 2), round(n / load), round(client, 2), round(server, 2),
                  None if evict is None else round(evict, 2), round(read, 2))


def evict_and_count(rt: Runtime, s: TableSchema, entries: list[_Entry]) -> tuple[float | None, int | None]:
    """Delete every 1/EVICT-th entry as one batch: its seconds and the entries left; (None,
    None) when the switch failed it (reported, not fatal: what is left is then unknown)."""
    gone = [_Entry(e.match, {}, e.priority) for e in entries[::round(1 / EVICT)]]
    t = time.perf_counter()
    try:
        rt._switch(s, "delete", gone)
    except ChannelError as e:
        log(f"  eviction failed: {e}")
        return None, None
    return time.perf_counter() - t, len(entries) - len(gone)


def render(rows: list[Result]) -> str:
    head = f"{'protobuf':8} {'table':9} {'entries':>8} {'load s':>7} {'entries/s':>9} {'client CPU s':>12} " \
           f"{'server CPU s':>12} {'evict 5% s':>10} {'read s':>7}"
    return "\n".join([head, *(_row(r) for r in rows)])


def _row(r: Result) -> str:
    evict = "failed" if r.evict_s is None else r.evict_s
    return (f"{r.protobuf:8} {r.table:9} {r.entries:>8} {r.load_s:>7} {r.entries_per_s:>9} {r.client_cpu_s:>12} "
            f"{r.server_cpu_s:>12} {evict:>10} {r.read_s:>7}")


def sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if int(x) > 0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one short round: 10K Bluebird entries, 2K DSR routes")
    ap.add_argument("--exact", type=sizes, default=None, help="Bluebird ca_to_pa sizes (default 10000,50000,221140)")
    ap.add_argument("--lpm", type=sizes, default=None, help="DSR vrf_fib sizes, /24 routes (default 10000; 0: none)")
    ap.add_argument("--python-protobuf", action="store_true", help="protobuf's pure-Python implementation (before)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    exact = args.exact if args.exact is not None else [10_000] if args.quick else [10_000, 50_000, 221_140]
    lpm = args.lpm if args.lpm is not None else [2_000] if args.quick else [10_000]
    rows, failed = [], []
    with tempfile.TemporaryDirectory(prefix="bench-p4rt-") as tmp:
        for w, ns in ((BLUEBIRD, exact), (DSR, lpm)):
            out = build(w, Path(tmp)) if ns else None
            for n in ns:
                assert out is not None
                log(f"{w.table}: {n} entries")
                try:
                    rows.append(run(w, out, n))
                except ChannelError as e:  # a load the switch did not take: reported, the others still run
                    failed.append(f"{w.table} {n} entries: the load failed: {e}")
                    log(f"  {failed[-1]}")
                    continue
                log(f"  {rows[-1].load_s} s")
    print("\n".join([render(rows), *failed]))
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows], "failed": failed}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
