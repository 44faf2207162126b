"""Would a specialised burst reach l3fwd? (issue 13; docs/server.md, "Would the specialised burst
reach l3fwd?").  ``bench/l3fwd.nfp``'s generated server (*nfc*) beside copies of it whose
processing is replaced by hand, as a generator that specialised the whole burst for the program
could write it:

* *specialised*: ``nfc_burst`` replaced by ``bench/specialised/l3fwd_burst.h`` (no packet model:
  the parse checks on the mbuf's bytes, the keys straight into the bulk trie lookup, the stage on
  the packet's bytes);
* *nfc_loop* and *specialised_loop*: the same two with ``nfc_main.c``'s forwarding loop cut to
  l3fwd's (``bench/specialised/l3fwd_loop.c``: one rx port, one tx_burst, no per-port queues);

and DPDK's l3fwd, l3fwd built with its scalar path (*l3fwd_scalar*: ``l3fwd_lpm.h``, a packet at
a time and ``rte_lpm_lookup``, the path it builds for a CPU it has no SIMD code for, where x86
gets ``l3fwd_lpm_sse.h``, four packets a step and ``rte_lpm_lookupx4``) and testpmd io, all as
``bench/bench_l3fwd.py`` runs them (the same vdevs, routes, flows and core; interleaved rounds;
Mpps per CPU-second of the forwarding thread).  Before
any timing, every nfc variant forwards the flows once into a pcap that must equal *nfc*'s byte
for byte, with the same counters: the hand-written code must do what the generated code does
(l3fwd's two builds are not compared; after the rounds every program, theirs included, must
have sent 99 % of what it was offered out of the routes' port, or the script fails).

    .venv/bin/python bench/bench_specialised.py                 # 1K routes, both memories, 5 rounds
    .venv/bin/python bench/bench_specialised.py --quick         # 1 round, no hugepages
    .venv/bin/python bench/bench_specialised.py --check-only    # the outputs compared, nothing timed
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._dpdk_proc import Program, settle, start, stop_all  # noqa: E402
from bench.bench_l3fwd import (  # noqa: E402
    MAX_NOT_FORWARDED,
    MEMORY_MB,
    Cores,
    Result,
    Row,
    Workload,
    build_l3fwd,
    build_nfc,
    exit_counters,
    l3fwd_program,
    nfc_program,
    testpmd_program,
)
from runtime.server_proc import hugepages  # noqa: E402

HERE = ROOT / "bench" / "specialised"
VARIANTS = ("nfc", "specialised", "nfc_loop", "specialised_loop")
ORDER = (*VARIANTS, "l3fwd", "l3fwd_scalar", "testpmd")


def log(msg: str) -> None:
    print(f"[bench_specialised {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _replace_function(text: str, start: str, end: str, new: str, what: str) -> str:
    """``text`` with the span from ``start`` (included) to ``end`` (excluded) replaced by ``new``;
    each marker must occur once (the generated runtime changed otherwise: stop, do not guess)."""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"{what}: the markers {start!r} .. {end!r} are not there once each")
    a, b = text.index(start), text.index(end)
    return text[:a] + new + text[b:]


def variant(server: Path, out: Path, burst: bool, loop: bool) -> Path:
    """A copy of the server folder with the hand-written burst and/or loop, built; its binary."""
    shutil.copytree(server, out)
    if burst:
        p = out / "nfc_burst.h"
        p.write_text(_replace_function(p.read_text(), "/* Process in[0..n)", "#endif",
                                       (HERE / "l3fwd_burst.h").read_text() + "\n", "nfc_burst.h"))
    if loop:
        p = out / "nfc_main.c"
        text = _replace_function(p.read_text(), "static int forward(void *arg)", "static int start_ports(",
                                 (HERE / "l3fwd_loop.c").read_text(), "nfc_main.c")
        text, n = re.subn(r"^static uint32_t process\(", "__attribute__((unused)) static uint32_t process(", text,
                          flags=re.M)
        if n != 1:
            raise SystemExit("nfc_main.c: process() is not there once")
        p.write_text(text)
    subprocess.run(["make", "-C", str(out), "-B", "nf"], check=True, capture_output=True)
    return out / "nf"


def same_output(binaries: dict[str, Path], w: Workload, tmp: Path) -> list[str]:
    """Every variant run once over the flows (net_pcap in and out): what differs from nfc's."""
    outs: dict[str, tuple[bytes, dict[str, object] | None]] = {}
    for name, b in binaries.items():
        pcap = tmp / f"check-{name}.pcap"
        r = subprocess.run([str(b), "-l", "1", "--no-huge", "-m", str(MEMORY_MB["nfc"]), "--no-pci", "--no-shconf",
                            "--no-telemetry", "--log-level=warning", f"--vdev=net_pcap0,rx_pcap={w.files.pcap}",
                            f"--vdev=net_pcap1,tx_pcap={pcap}", "--", "--entries", str(w.files.nfc_entries),
                            "--idle-ms", "500"], capture_output=True, text=True, timeout=120)
        counters = exit_counters(r.stdout)
        outs[name] = (_frames(pcap), counters)
    want = outs["nfc"]
    return [f"{name}: {'frames' if got[0] != want[0] else 'counters'} differ from nfc's"
            for name, got in outs.items() if got != want]


def _frames(pcap: Path) -> bytes:
    """The frames of a pcap, without its record headers (net_pcap stamps the send time)."""
    data, out, off = pcap.read_bytes(), bytearray(), 24
    while off + 16 <= len(data):
        n = int.from_bytes(data[off + 8:off + 12], "little")
        out += n.to_bytes(4, "little") + data[off + 16:off + 16 + n]
        off += 16 + n
    return bytes(out)


def measure(row: Row, w: Workload, binaries: dict[str, Path], l3fwds: dict[str, Path], args: argparse.Namespace,
            tmp: Path, short: list[str]) -> dict[str, list[float]]:
    """Every program's Mpps per CPU-second, round by round; into ``short``, each that did not send
    at least 99 % of what it was offered out of the routes' port (bench_l3fwd's check: l3fwd's
    builds are not compared byte for byte, so this is what says their packets were routed)."""
    cores = Cores(args.core, args.other_core)
    # each variant runs as bench_l3fwd runs its nfc program (its memory, its arguments), under its own name
    progs: list[Program] = [replace(nfc_program("nfc", b, row, w.files.nfc_entries, w.files.pcap, cores,
                                                f"spec-{name}"), name=name) for name, b in binaries.items()]
    progs += [replace(l3fwd_program(b, row, w.files, cores, f"spec-{name}"), name=name) for name, b in l3fwds.items()]
    testpmd = shutil.which("dpdk-testpmd")
    if testpmd:
        progs.append(testpmd_program(Path(testpmd), row, w.files, cores, "spec"))
    runs = start(progs, tmp)
    out: dict[str, list[float]] = {p.name: [] for p in progs}
    try:
        for key, why in settle(runs, args.core, args.start_timeout).items():
            log(f"  {key}: {why}")
        running = {r.program.name: r for r in runs.values()}
        for rnd in range(args.rounds):
            for name in ORDER:
                if name in running:
                    out[name].append(running[name].measure(args.warmup, args.window).mpps_cpu)
            log(f"  round {rnd + 1}/{args.rounds}, Mpps per CPU-s: "
                + ", ".join(f"{n} {v[-1]:.2f}" for n, v in out.items() if v))
        for name, r in running.items():
            lost, _ = Result(totals=r.last).shares()
            if lost > MAX_NOT_FORWARDED:
                short.append(f"{row.label}: {name} did not forward {lost:.1%} of the packets offered")
    finally:
        stop_all(runs.values())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one round, no hugepages")
    ap.add_argument("--routes", type=int, default=1000)
    ap.add_argument("--memory", choices=["both", "nohuge", "huge"], default="both")
    ap.add_argument("--window", type=float, default=0.8)
    ap.add_argument("--warmup", type=float, default=0.2)
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--other-core", type=int, default=0)
    ap.add_argument("--start-timeout", type=float, default=120.0)
    ap.add_argument("--json", help="also write every round's figures to this file")
    ap.add_argument("--check-only", action="store_true",
                    help="build the variants and compare their outputs with nfc's, time nothing")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.memory = 1, "nohuge"
    memories = {"both": (False, True), "nohuge": (False,), "huge": (True,)}[args.memory]
    rows = [Row(args.routes, huge) for huge in memories]
    results: dict[str, dict[str, list[float]]] = {}
    short: list[str] = []
    with tempfile.TemporaryDirectory(prefix="nfc-spec-") as d:
        tmp = Path(d)
        w = Workload(args.routes, tmp)
        w.for_l3fwd()
        w.for_nfc()
        nfc = build_nfc(ROOT / "bench" / "l3fwd.nfp", tmp / "nfc")
        binaries = {"nfc": nfc}
        for name in VARIANTS[1:]:
            binaries[name] = variant(nfc.parent, tmp / name, "specialised" in name, name.endswith("_loop"))
        wrong = same_output(binaries, w, tmp)
        if wrong:
            print("ERROR: " + "; ".join(wrong))
            return 1
        log("every variant forwards the flows as nfc does, byte for byte")
        if args.check_only:
            return 0
        l3fwds = {"l3fwd": build_l3fwd(tmp / "l3fwd"), "l3fwd_scalar": build_l3fwd(tmp / "l3fwd_scalar", scalar=True)}
        for row in rows:
            log(row.label)
            need = len(VARIANTS) * MEMORY_MB["nfc"] + len(l3fwds) * MEMORY_MB["l3fwd"] + MEMORY_MB["testpmd"] + 512
            with hugepages(need if row.huge else 0) as got:
                if row.huge and not got:
                    log("  no hugepages to be had: row skipped")
                    continue
                results[row.label] = measure(row, w, binaries, l3fwds, args, tmp, short)
    print("\nMpps per CPU-second of the forwarding thread (median of the rounds; / nfc in brackets):")
    print("| routes, memory | " + " | ".join(ORDER) + " |")
    print("|---" * (len(ORDER) + 1) + "|")
    for label, res in results.items():
        med = {n: statistics.median(v) for n, v in res.items() if v}
        cells = [f"{med[n]:.2f} ({med[n] / med['nfc']:.2f})" if n in med and "nfc" in med else "—" for n in ORDER]
        print(f"| {label} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    for s in short:
        print(f"ERROR: {s}")
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
