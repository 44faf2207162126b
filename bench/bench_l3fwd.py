"""The generated server against DPDK's own l3fwd (issue 13, item 5): bench/l3fwd.nfp (what
``l3fwd --lookup=lpm`` does) and the DSR router example, both built with ``--target dpdk``, beside
l3fwd built from Debian's dpdk-doc sources and ``dpdk-testpmd`` in io mode (the I/O ceiling), on the
same vdevs, routes, packets and core, in interleaved rounds.

    .venv/bin/python bench/bench_l3fwd.py                 # 1K and 1M routes, with and without hugepages
    .venv/bin/python bench/bench_l3fwd.py --quick         # one round
    .venv/bin/python bench/bench_l3fwd.py --json out.json

The figure is Mpps per CPU-second of the forwarding thread: packets the program sent on its output
port (ethdev stats, read over each program's telemetry socket) divided by the time its forwarding
thread ran (``/proc/PID/task/TID/schedstat``), because the machine is shared; wall-clock Mpps is
reported beside it.  Every program is started once per row and loads its routes, then all are
paused (SIGSTOP) and resumed one at a time for a measured window: l3fwd, nfc, DSR, testpmd, l3fwd,
... for --rounds rounds; the table shows medians.  The ports: net_pcap0 replays 4,096 flows of
64-byte frames from memory (``infinite_rx=1``), every route leads to net_null1 (``no-rx=1``); what
a program does not send there (dropped, or sent back out of port 0 as l3fwd does on a miss) is
reported, and more than 1 % of the offered packets is an error (exit status 1).  docs/server.md,
"Speed against l3fwd", shows the table and how each program is built and run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _l3fwd_work as work  # noqa: E402
from bench._dpdk_proc import Program, Running, Sample, Window, settle, start, stop_all, thread_name  # noqa: E402
from compiler.manifest import load_plan  # noqa: E402
from runtime.server_proc import hugepages  # noqa: E402

L3FWD_SRC = Path("/usr/share/dpdk/examples")  # Debian's dpdk-doc
ORDER = ("l3fwd", "nfc", "dsr", "testpmd")  # the order within a round
# what the rows without hugepages compare besides the forwarding (docs/server.md, "Packet buffers
# packed without hugepages"): printed under the tables
POOL_LAYOUT = ("Without hugepages, this tree's generated programs pack their mbufs end to end (nfc_mbuf_pool); "
               "l3fwd and testpmd make theirs with rte_pktmbuf_pool_create, one mbuf a 4 KiB page, every mbuf "
               "at the same page offset.")
MEMORY_MB = {"l3fwd": 512, "nfc": 1024, "base": 1024, "dsr": 1024, "dsr_base": 1024, "testpmd": 256}


def order(args: argparse.Namespace) -> tuple[str, ...]:
    """The programs of a round: with ``--base TREE``, the nfc and DSR programs as that tree builds
    them come right after this tree's (the comparison of two commits, interleaved in one run)."""
    return (*ORDER[:2], "base", ORDER[2], "dsr_base", *ORDER[3:]) if args.base else ORDER
MAX_NOT_FORWARDED = 0.01
# l3fwd's LPM is created for 1,024 rules; and it asks every port for RX checksum offload, which
# net_pcap lacks (nothing in the LPM path reads the offload's result).
L3FWD_PATCHES = (
    ("l3fwd_lpm.c", r"#define IPV4_L3FWD_LPM_MAX_RULES\s+1024", "#define IPV4_L3FWD_LPM_MAX_RULES (1 << 21)"),
    ("main.c", r"\.offloads = RTE_ETH_RX_OFFLOAD_CHECKSUM,", ".offloads = 0,"),
)
# l3fwd's scalar path, which it builds where it has no SIMD code for the CPU (l3fwd_lpm.h: a
# packet at a time, rte_lpm_lookup, send_single_packet) instead of its SSE one (l3fwd_lpm_sse.h:
# four packets a step, rte_lpm_lookupx4): bench_specialised.py's l3fwd_scalar
L3FWD_SCALAR_PATCHES = (
    ("l3fwd_lpm.c", r'#include "l3fwd_lpm_sse.h"\n', '#include "l3fwd_lpm_sse.h"\n#include "l3fwd_lpm.h"\n'),
    ("l3fwd_lpm.c", r"\bl3fwd_lpm_send_packets\(nb_rx,", "l3fwd_lpm_no_opt_send_packets(nb_rx,"),
)


def log(msg: str) -> None:
    print(f"[bench_l3fwd {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- building ---------------------------------------------------------------------------------------


def pkg_config(*args: str) -> list[str]:
    return subprocess.run(["pkg-config", *args, "libdpdk"], check=True, capture_output=True, text=True).stdout.split()


def makefile_sources(makefile: Path) -> list[str]:
    """The C files a DPDK example's Makefile compiles (its ``SRCS-y :=`` and ``SRCS-y +=`` lines)."""
    return [f for line in makefile.read_text().splitlines()
            if (m := re.match(r"SRCS-y\s*[:+]?=(.*)", line)) for f in m.group(1).split()]


def build_l3fwd(tmp: Path, scalar: bool = False) -> Path:
    """l3fwd from dpdk-doc's sources, copied and patched (L3FWD_PATCHES; with ``scalar``, also
    L3FWD_SCALAR_PATCHES), built as its Makefile does but with ``-march=native`` after
    pkg-config's ``-march=corei7`` (docs/server.md)."""
    if not (L3FWD_SRC / "l3fwd" / "l3fwd_lpm.c").exists():
        raise SystemExit(f"no l3fwd sources in {L3FWD_SRC}: apt-get install dpdk-doc (python3 build.py setup does)")
    src = tmp / "examples"
    for folder in ("l3fwd", "common"):
        shutil.copytree(L3FWD_SRC / folder, src / folder)
    for name, pattern, new in (*L3FWD_PATCHES, *(L3FWD_SCALAR_PATCHES if scalar else ())):
        path = src / "l3fwd" / name
        text, n = re.subn(pattern, new, path.read_text())
        if n != 1:
            raise SystemExit(f"l3fwd's {name} changed: {pattern!r} found {n} times")
        path.write_text(text)
    binary = src / "l3fwd" / "l3fwd"
    r = subprocess.run(["gcc", *pkg_config("--cflags"), "-O3", "-march=native", "-DALLOW_EXPERIMENTAL_API",
                        "-I../common", *makefile_sources(src / "l3fwd" / "Makefile"), "-o", str(binary),
                        *pkg_config("--libs")], cwd=src / "l3fwd", capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"l3fwd did not build:\n{r.stderr[-2000:]}")
    return binary


def last_lines(r: subprocess.CompletedProcess[str], n: int = 4) -> str:
    return "\n".join((r.stdout + r.stderr).strip().splitlines()[-n:])


def build_nfc(nfp: Path, out: Path, *extra: str, tree: Path = ROOT, target: str = "dpdk",
              make: tuple[str, ...] = ("nf",)) -> Path:
    """``nfc build NFP --target TARGET EXTRA...`` and the server's ``make MAKE...`` (default
    ``nf``, as its Makefile has it; the last word is the program returned); ``tree``: the checkout
    whose nfc builds it (its own virtualenv's Python if it has one)."""
    venv = tree / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else sys.executable
    r = subprocess.run([python, "-m", "nfc.cli", "build", str(nfp), "--target", target, *extra, "-o", str(out)],
                       cwd=tree, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"nfc build {nfp.name} failed: {last_lines(r, 1)}")
    server = load_plan(out).path(out, "server_makefile").parent
    r = subprocess.run(["make", "-C", str(server), "-j2", *make], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"make {' '.join(make)} ({nfp.name}) failed:\n{last_lines(r)}")
    return server / make[-1]


# ---- the rows: routes x memory ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    """A row of the table: the route set's size, and whether the programs run on hugepages."""

    routes: int
    huge: bool

    @property
    def label(self) -> str:
        n = f"{self.routes // 1_000_000}M" if self.routes >= 1_000_000 else f"{self.routes // 1000}K"
        return f"{n}, {'hugepages' if self.huge else 'no hugepages'}"

    @property
    def key(self) -> str:
        return f"{self.routes}{'h' if self.huge else 'n'}"


@dataclass(frozen=True, slots=True)
class Files:
    """What every program of one route set loads and replays."""

    l3fwd_v4: Path
    l3fwd_v6: Path
    nfc_entries: Path
    dsr_entries: Path
    pcap: Path
    dsr_pcap: Path


class Workload:
    """The route set of n routes, its flows and frames, and their files in ``tmp``: l3fwd's first
    (``for_l3fwd``), so that it can load while the rest are written (``for_nfc``)."""

    def __init__(self, n: int, tmp: Path) -> None:
        self.routes = work.route_set(n)
        self.frames = [work.frame(dst, i) for i, dst in enumerate(work.flow_destinations(self.routes))]
        self.files = Files(tmp / f"l3fwd{n}.v4", tmp / "l3fwd.v6", tmp / f"nfc{n}.txt", tmp / f"dsr{n}.txt",
                           tmp / f"flows{n}.pcap", tmp / f"dsr{n}.pcap")

    def for_l3fwd(self) -> None:
        work.l3fwd_rules(self.routes, self.files.l3fwd_v4)
        self.files.l3fwd_v6.write_text(f"R2001:db8::/32 {work.OUT_PORT}\n")  # l3fwd wants both files
        work.write_pcap(self.files.pcap, self.frames)

    def for_nfc(self) -> None:
        work.nfc_entries(self.routes, self.files.nfc_entries)
        work.dsr_entries(self.routes, self.files.dsr_entries)
        work.write_pcap(self.files.dsr_pcap, [work.dsr_frame(fr, i) for i, fr in enumerate(self.frames)])


@dataclass(frozen=True, slots=True)
class Cores:
    """The core every program forwards on, and the other one (testpmd's main lcore, where l3fwd
    may also load its routes before it is pinned)."""

    fwd: int
    other: int


def eal(name: str, row: Row, prefix: str, lcores: list[str], pcap: Path) -> list[str]:
    mem = "--in-memory" if row.huge else "--no-huge"
    return [*lcores, mem, "-m", str(MEMORY_MB[name]), "--no-pci", f"--file-prefix={prefix}", "--log-level=warning",
            f"--vdev=net_pcap0,rx_pcap={pcap},infinite_rx=1", "--vdev=net_null1,no-rx=1"]


def l3fwd_program(binary: Path, row: Row, f: Files, cores: Cores, tag: str) -> Program:
    """One lcore that may run on either core while rte_lpm_add loads the routes (1M take minutes),
    pinned to the forwarding core before it is measured (``settle``)."""
    prefix = f"{tag}-l3fwd-{row.key}"
    return Program("l3fwd", (str(binary), *eal("l3fwd", row, prefix, [f"--lcores=0@({cores.fwd},{cores.other})"],
                                                f.pcap),
                             "--", "-p", "0x3", "--config=(0,0,0)", "--lookup=lpm", "--parse-ptype",
                             f"--rule_ipv4={f.l3fwd_v4}", f"--rule_ipv6={f.l3fwd_v6}"), prefix)


def nfc_program(name: str, binary: Path, row: Row, entries: Path, pcap: Path, cores: Cores, tag: str) -> Program:
    prefix = f"{tag}-{name}-{row.key}"
    return Program(name, (str(binary), *eal(name, row, prefix, ["-l", str(cores.fwd)], pcap),
                          "--", "--live", "--entries", str(entries)), prefix)


def testpmd_program(binary: Path, row: Row, f: Files, cores: Cores, tag: str) -> Program:
    """testpmd in io mode.  ``--no-flush-rx``: before forwarding, testpmd otherwise drains its
    receive queues, up to a second of them, and frees what it drains; from an ``infinite_rx``
    pcap that is ~1 s of packets received and never sent, which in a one-round run (``--quick``)
    was 0.5-1.0 % of all testpmd was offered, against 0.01 % for the others, and over the 1 %
    of MAX_NOT_FORWARDED in some runs (every window itself forwarded what it was offered)."""
    prefix = f"{tag}-testpmd-{row.key}"
    lcores = ["-l", f"{cores.fwd},{cores.other}", "--main-lcore", str(cores.other)]
    return Program("testpmd", (str(binary), *eal("testpmd", row, prefix, lcores, f.pcap), "--",
                               "--forward-mode=io", "--nb-cores=1", "--total-num-mbufs=8192", "--burst=32",
                               "--no-flush-rx"), prefix)


# ---- measuring ----------------------------------------------------------------------------------------


@dataclass
class Result:
    """One program in one row: its windows, or why it has none; the counters it printed."""

    windows: list[Window] = field(default_factory=list)
    error: str | None = None
    counters: dict[str, Any] | None = None
    thread: str = ""
    totals: Sample | None = None  # the last sample: counters since the program started

    def median(self, attr: str) -> float | None:
        return statistics.median(getattr(w, attr) for w in self.windows) if self.windows else None

    def shares(self) -> tuple[float, float]:
        """Of the packets offered since the program started: the share not sent on the output
        port, and the share sent back out of the input port.  From the totals, not the windows:
        a window's two ports are read a moment apart, which its short span would magnify."""
        t = self.totals
        if t is None or t.offered == 0:
            return 1.0, 0.0
        return max(0.0, 1 - t.forwarded / t.offered), t.returned / t.offered

    def to_json(self) -> dict[str, Any]:
        lost, returned = self.shares()
        return {"mpps_cpu": self.median("mpps_cpu"), "mpps_wall": self.median("mpps_wall"), "error": self.error,
                "not_forwarded": lost, "returned": returned, "thread": self.thread, "counters": self.counters,
                "windows": [{"offered": w.offered, "forwarded": w.forwarded, "returned": w.returned,
                             "cpu_s": round(w.cpu_s, 6), "wall_s": round(w.wall_s, 6),
                             "cpu_share": round(w.cpu_s / w.wall_s, 4) if w.wall_s else None,
                             "spread_s": round(w.spread_s, 6),
                             "mpps_cpu": w.mpps_cpu, "mpps_wall": w.mpps_wall} for w in self.windows]}


def exit_counters(output: str) -> dict[str, Any] | None:
    """The JSON line a generated server prints on exit (docs/server.md), if there is one."""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                counters: dict[str, Any] = json.loads(line)
            except ValueError:
                return None
            return counters
    return None


def run_rounds(running: dict[str, Running], results: dict[str, Result], args: argparse.Namespace) -> None:
    """``args.rounds`` rounds, each a window of every running program in ORDER."""
    for r in range(args.rounds):
        for name in order(args):
            if name in running:
                w = running[name].measure(args.warmup, args.window)
                results[name].windows.append(w)
                results[name].thread = thread_name(running[name].proc.pid, w.thread)
                results[name].totals = running[name].last
        log(f"  round {r + 1}/{args.rounds}, Mpps per CPU-s: " + ", ".join(
            f"{n} {results[n].windows[-1].mpps_cpu:.2f}" for n in order(args) if n in running))


def measure_row(row: Row, l3fwd: Running | str, progs: list[Program], errors: dict[str, str], tmp: Path,
                args: argparse.Namespace) -> dict[str, Result]:
    """Start the row's nfc, DSR and testpmd beside its l3fwd (loaded and paused), run the rounds and
    stop them all; ``errors``: the programs that could not even be built."""
    results = {name: Result(error=errors.get(name)) for name in order(args)}
    if isinstance(l3fwd, str):
        results["l3fwd"].error = l3fwd
    runs = start(progs, tmp)
    running = {"l3fwd": l3fwd} if isinstance(l3fwd, Running) else {}
    try:
        failed = settle(runs, args.core, args.start_timeout)
        for p in progs:
            results[p.name].error = failed.get(p.prefix, results[p.name].error)
        running.update({r.program.name: r for r in runs.values()})
        run_rounds(running, results, args)
    finally:
        everyone = {**{r.program.name: r for r in runs.values()}, **running}
        for name, output in zip(everyone, stop_all(everyone.values()), strict=True):
            if name in ("nfc", "base", "dsr", "dsr_base"):
                results[name].counters = exit_counters(output)
    return results


# ---- checking and reporting ---------------------------------------------------------------------------


def problems(row: Row, results: dict[str, Result]) -> list[str]:
    """Why the row's figures would not be what they claim (item 3 of the issue): a program that did
    not run, or did not send at least 99 % of what it was offered out of the routes' port."""
    out = []
    for name, res in results.items():
        if res.error is not None:
            out.append(f"{row.label}: {name} did not run: {res.error.strip()[-800:]}")
            continue
        lost, returned = res.shares()
        if lost > MAX_NOT_FORWARDED:
            back = f"{returned:.1%} sent back out of the input port (l3fwd's LPM miss), " if returned else ""
            drops = (res.counters or {}).get("drops", {})
            out.append(f"{row.label}: {name} did not forward {lost:.1%} of the packets offered ({back}"
                       f"drops by reason: {drops or 'none counted'})")
    return out


def fig(x: float | None) -> str:
    return f"{x:.2f}" if x is not None else "—"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "—"


def table(rows: dict[Row, dict[str, Result]], attr: str) -> str:
    base = any("base" in res for res in rows.values())
    extra = (" base | nfc / base | DSR base | DSR / base |", "---|---|---|---|") if base else ("", "")
    lines = ["| routes, memory | l3fwd | nfc, same function | nfc / l3fwd | DSR router | DSR / l3fwd | testpmd io |"
             + extra[0], "|---|---|---|---|---|---|---|" + extra[1]]
    for row, res in rows.items():
        m = {n: res[n].median(attr) for n in res}
        more = (f" {fig(m['base'])} | {ratio(m['nfc'], m['base'])} | {fig(m['dsr_base'])} | "
                f"{ratio(m['dsr'], m['dsr_base'])} |") if base else ""
        lines.append(f"| {row.label} | {fig(m['l3fwd'])} | {fig(m['nfc'])} | {ratio(m['nfc'], m['l3fwd'])} | "
                     f"{fig(m['dsr'])} | {ratio(m['dsr'], m['l3fwd'])} | {fig(m['testpmd'])} |{more}")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"cpu": model, "cpus": os.cpu_count(), "kernel": platform.release(), "loadavg": os.getloadavg()}


def report(rows: dict[Row, dict[str, Result]], errors: list[str], args: argparse.Namespace, seconds: float) -> None:
    rounds = f"median of {args.rounds} interleaved round{'s' if args.rounds > 1 else ''}"
    print(f"\nMpps per CPU-second of the forwarding thread ({rounds}, {args.window:g} s windows, core {args.core}):")
    print(table(rows, "mpps_cpu"))
    print("\nWall-clock Mpps of the same windows:")
    print(table(rows, "mpps_wall"))
    if any(not row.huge for row in rows):
        print(f"\n{POOL_LAYOUT}")
    for e in errors:
        print(f"ERROR: {e}")
    print(f"\ntotal {seconds:.0f} s; load average {os.getloadavg()[0]:.1f}", flush=True)
    if args.json:
        data = {"command": " ".join(sys.argv), "machine": machine(), "rounds": args.rounds, "window_s": args.window,
                "core": args.core, "errors": errors,
                "rows": [{"routes": row.routes, "hugepages": row.huge,
                          "programs": {n: r.to_json() for n, r in res.items()}} for row, res in rows.items()]}
        Path(args.json).write_text(json.dumps(data, indent=1) + "\n")


# ---- the run --------------------------------------------------------------------------------------------


@contextmanager
def hugepages_for(rows: list[Row], names: tuple[str, ...]) -> Iterator[bool]:
    """Hugepages for every l3fwd that uses them (all load first and wait for their row) plus one
    row's other programs, with room to spare; yields whether they were had."""
    n = sum(r.huge for r in rows)
    if n == 0:
        yield False
        return
    with hugepages(n * MEMORY_MB["l3fwd"] + sum(MEMORY_MB[p] for p in names if p != "l3fwd") + 512) as got:
        yield got


def row_programs(row: Row, w: Workload, binaries: dict[str, Path | str], cores: Cores, tag: str,
                 ) -> tuple[list[Program], dict[str, str]]:
    """The row's nfc, DSR and testpmd programs, and why each of the others has no binary."""
    f = w.files
    progs, errors = [], {}
    for name, entries, pcap in (("nfc", f.nfc_entries, f.pcap), ("base", f.nfc_entries, f.pcap),
                                ("dsr", f.dsr_entries, f.dsr_pcap), ("dsr_base", f.dsr_entries, f.dsr_pcap)):
        if name not in binaries:
            continue
        b = binaries[name]
        if isinstance(b, Path):
            progs.append(nfc_program(name, b, row, entries, pcap, cores, tag))
        else:
            errors[name] = b
    testpmd = binaries["testpmd"]
    if isinstance(testpmd, Path):
        progs.append(testpmd_program(testpmd, row, f, cores, tag))
    else:
        errors["testpmd"] = testpmd
    return progs, errors


def build_servers(tmp: Path, base: Path | None) -> dict[str, Path | str]:
    """The two generated servers (built in ``tmp``; with ``base``, the two as that tree builds
    them, too) and testpmd, or why each is missing."""
    out: dict[str, Path | str] = {}
    l3, dsr = ROOT / "bench" / "l3fwd.nfp", ROOT / "examples" / "dsr_router.nfp"
    trees = [("nfc", l3, ROOT), ("dsr", dsr, ROOT)]
    for name, nfp, tree in trees + ([("base", l3, base), ("dsr_base", dsr, base)] if base is not None else []):
        try:
            out[name] = build_nfc(nfp, tmp / name, tree=tree)
        except RuntimeError as e:
            out[name] = str(e)
    testpmd = shutil.which("dpdk-testpmd")
    out["testpmd"] = Path(testpmd) if testpmd else "dpdk-testpmd is not installed (apt-get install dpdk)"
    return out


def run(args: argparse.Namespace, tmp: Path, stack: ExitStack) -> tuple[dict[Row, dict[str, Result]], list[str]]:
    """Build, load every l3fwd (in parallel with the other builds), then measure row by row."""
    cores, tag = Cores(args.core, args.other_core), f"nfcb{os.getpid()}"
    rows = [Row(n, huge) for huge in {"both": (False, True), "nohuge": (False,), "huge": (True,)}[args.memory]
            for n in args.routes]
    log("building l3fwd from dpdk-doc's sources; writing the route sets")
    l3fwd = build_l3fwd(tmp)
    if any(r.huge for r in rows) and not stack.enter_context(hugepages_for(rows, order(args))):
        log("hugepages: could not reserve them (root only): the hugepage rows are left out")
        rows = [r for r in rows if not r.huge]
    loads = {n: Workload(n, tmp) for n in args.routes}
    for w in loads.values():
        w.for_l3fwd()
    log(f"l3fwd loads its routes for {len(rows)} rows (rte_lpm_add: 1M routes take minutes)")
    l3fwd_prog = {r: l3fwd_program(l3fwd, r, loads[r.routes].files, cores, tag) for r in rows}
    l3fwds = start(list(l3fwd_prog.values()), tmp)
    stack.callback(lambda: stop_all(list(l3fwds.values())))
    with ThreadPoolExecutor(1) as pool:  # pause each l3fwd as soon as it has loaded, while building
        settled = pool.submit(settle, l3fwds, cores.fwd, args.l3fwd_timeout)
        try:
            for w in loads.values():
                w.for_nfc()
            binaries = build_servers(tmp, args.base)
            log("the generated servers are built; waiting for l3fwd")
            l3fwd_failed = settled.result()
        except BaseException:
            stop_all(list(l3fwds.values()))  # so that settle returns at once
            raise
    results = {}
    for row in rows:
        log(f"{row.label}: l3fwd, nfc, DSR, testpmd")
        progs, errors = row_programs(row, loads[row.routes], binaries, cores, tag)
        prefix = l3fwd_prog[row].prefix
        l3: Running | str = l3fwds.pop(prefix) if prefix in l3fwds else l3fwd_failed[prefix]
        results[row] = measure_row(row, l3, progs, errors, tmp, args)
    return results, [p for row in rows for p in problems(row, results[row])]


def on_sigterm(*_: object) -> None:
    """SIGTERM unwinds like ^C, so that the programs are stopped and the hugepages given back."""
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--quick", action="store_true", help="one round")
    ap.add_argument("--window", type=float, default=0.8, help="seconds measured per program per round")
    ap.add_argument("--warmup", type=float, default=0.2, help="seconds after resuming before the window")
    ap.add_argument("--routes", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 1_000_000],
                    help="route set sizes, comma-separated (default 1000,1000000)")
    ap.add_argument("--memory", choices=["both", "nohuge", "huge"], default="both")
    ap.add_argument("--core", type=int, default=1, help="the core every program forwards on (default 1: DPDK "
                    "tests run on 0)")
    ap.add_argument("--other-core", type=int, default=0, help="testpmd's main lcore; where l3fwd may load")
    ap.add_argument("--start-timeout", type=float, default=120.0)
    ap.add_argument("--l3fwd-timeout", type=float, default=1200.0, help="seconds l3fwd may take to load")
    ap.add_argument("--json", help="also write every window and counter to this file")
    ap.add_argument("--base", type=Path, help="a checkout of another commit (e.g. a git worktree): its nfc builds "
                    "bench/l3fwd.nfp and the DSR router too, measured in the same rounds (columns base, nfc / base, "
                    "DSR base, DSR / base)")
    args = ap.parse_args()
    if args.quick:
        args.rounds = 1
    if subprocess.run(["pkg-config", "--exists", "libdpdk"]).returncode != 0:
        print("bench_l3fwd: no DPDK (pkg-config libdpdk): python3 build.py setup installs it")
        return 1
    signal.signal(signal.SIGTERM, on_sigterm)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="nfc-l3fwd-") as tmp, ExitStack() as stack:
            rows, errors = run(args, Path(tmp), stack)
    except KeyboardInterrupt:
        print("bench_l3fwd: interrupted; every program stopped, the hugepages given back", flush=True)
        return 130
    report(rows, errors, args, time.monotonic() - started)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
