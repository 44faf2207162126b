"""DPDK programs as bench/bench_l3fwd.py runs them: started once, paused (SIGSTOP) while the
others are measured, and measured in windows by what the program's port counted (ethdev stats
over the DPDK telemetry socket, the same counters for every program) divided by the CPU time its
forwarding thread got (``/proc/PID/task/TID/schedstat``), so that a busy shared machine slows the
wall clock but not the figure.

Nothing here knows which program it runs: l3fwd, testpmd and the generated servers alike.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = ["Program", "Running", "Sample", "Window", "parse_schedstat", "parse_switches", "settle", "start",
           "stop_all", "telemetry", "telemetry_socket", "thread_name", "thread_usage", "window_between"]


def parse_schedstat(text: str) -> int:
    """Nanoseconds a thread has run on a CPU: the first of the three fields of
    ``/proc/PID/task/TID/schedstat`` (run time, wait time, time slices; Documentation/scheduler/
    sched-stats.rst)."""
    fields = text.split()
    if len(fields) != 3 or not all(f.isdigit() for f in fields):
        raise ValueError(f"not a schedstat line: {text!r}")
    return int(fields[0])


def thread_run_ns(pid: int) -> dict[int, int]:
    """Run time of every thread of process ``pid`` (threads that ended meanwhile are left out)."""
    out: dict[int, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with suppress(OSError, ValueError):
            out[int(task.name)] = parse_schedstat((task / "schedstat").read_text())
    return out


def thread_name(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return "?"


def telemetry_socket(prefix: str) -> Path:
    """Where EAL started with ``--file-prefix prefix`` serves telemetry (eal_common_options.c:
    /var/run/dpdk for root, else $XDG_RUNTIME_DIR/dpdk or /tmp/dpdk)."""
    base = Path("/var/run") if os.geteuid() == 0 else Path(os.environ.get("XDG_RUNTIME_DIR", "/tmp"))
    return base / "dpdk" / prefix / "dpdk_telemetry.v2"


def telemetry(sock_path: Path, commands: Sequence[str]) -> list[Any]:
    """The replies to ``commands`` (as ``/ethdev/stats,0``), sent one after the other over one
    connection to a telemetry socket (so that they are close together in time); each reply is
    the value under the command's name (``None``: the command gave none)."""
    out = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(5.0)
        s.connect(str(sock_path))
        s.recv(1024)  # the greeting: version, pid, max output length
        for cmd in commands:
            s.send(cmd.encode())
            out.append(json.loads(s.recv(1 << 16)).get(cmd.split(",")[0]))
    return out


def port_stats(sock_path: Path, ports: Sequence[int]) -> list[dict[str, int]]:
    """ethdev stats of each of ``ports`` (``/ethdev/stats,PORT``), read over one connection."""
    out = []
    for port, stats in zip(ports, telemetry(sock_path, [f"/ethdev/stats,{port}" for port in ports]), strict=True):
        if not isinstance(stats, dict):
            raise RuntimeError(f"no stats for port {port}: {stats}")
        out.append({k: v for k, v in stats.items() if isinstance(v, int)})
    return out


@dataclass(frozen=True, slots=True)
class Program:
    """A DPDK program to start: its command line and the EAL ``--file-prefix`` it was given (where
    its telemetry socket is).  Packets arrive on port ``rx_port``; those it forwards leave by
    ``tx_port``, anything it sends back out of ``rx_port`` is counted as ``returned``."""

    name: str
    argv: tuple[str, ...]
    prefix: str
    rx_port: int = 0
    tx_port: int = 1


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of a running program: wall clock, port counters, run time per thread.  The
    counters are read between two readings of the run times; ``run_ns`` is their midpoint and
    ``spread_ns`` the most a thread ran in between: how far the run times may be from the moment
    the counters were read (the telemetry thread shares the machine, so this varies)."""

    t: float
    offered: int  # received on rx_port
    forwarded: int  # sent on tx_port
    returned: int  # sent on rx_port
    run_ns: dict[int, int]
    spread_ns: int = 0


@dataclass(frozen=True, slots=True)
class Window:
    """What a program did between two samples.  ``thread`` is its forwarding thread: the one that
    ran most in the window (each program here forwards on one lcore and otherwise sleeps)."""

    offered: int
    forwarded: int
    returned: int
    cpu_s: float
    wall_s: float
    thread: int
    spread_s: float = 0.0  # the two samples' spread_ns, in seconds: the uncertainty of cpu_s

    @property
    def mpps_cpu(self) -> float:
        """Packets forwarded per second of the forwarding thread's CPU time, in millions."""
        return self.forwarded / self.cpu_s / 1e6 if self.cpu_s > 0 else 0.0

    @property
    def mpps_wall(self) -> float:
        return self.forwarded / self.wall_s / 1e6 if self.wall_s > 0 else 0.0


def window_between(a: Sample, b: Sample) -> Window:
    """The window from sample ``a`` to the later sample ``b`` of the same program."""
    ran = {tid: ns - a.run_ns.get(tid, 0) for tid, ns in b.run_ns.items()}
    thread = max(ran, key=lambda tid: ran[tid])
    return Window(b.offered - a.offered, b.forwarded - a.forwarded, b.returned - a.returned, ran[thread] / 1e9,
                  b.t - a.t, thread, (a.spread_ns + b.spread_ns) / 1e9)


class Running:
    """A started Program.  Its output goes to ``log``; stdin stays open (testpmd without -i exits at
    end of input).  ``stop`` ends it whatever state it is in."""

    def __init__(self, program: Program, log: Path) -> None:
        self.program = program
        self.log = log
        self.socket = telemetry_socket(program.prefix)
        self._out: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(program.argv, stdin=subprocess.PIPE, stdout=self._out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.paused = False
        self.last: Sample | None = None
        self._interrupted = False

    def log_tail(self, chars: int = 1500) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def sample(self) -> Sample:
        """Read now; kept as ``last`` (its counters are totals since the program started)."""
        t0, before = time.monotonic(), thread_run_ns(self.proc.pid)
        tx, rx = port_stats(self.socket, (self.program.tx_port, self.program.rx_port))
        after, t1 = thread_run_ns(self.proc.pid), time.monotonic()
        ran = {tid: ns - before.get(tid, ns) for tid, ns in after.items()}
        mid = {tid: ns - ran[tid] // 2 for tid, ns in after.items()}
        self.last = Sample((t0 + t1) / 2, rx["ipackets"], tx["opackets"], rx["opackets"], mid, max(ran.values()))
        return self.last

    def steady_sample(self, max_spread_ns: int, tries: int = 5) -> Sample:
        """The sample of least spread of up to ``tries``, the first within ``max_spread_ns``."""
        best = self.sample()
        for _ in range(tries - 1):
            if best.spread_ns <= max_spread_ns:
                break
            s = self.sample()
            best = s if s.spread_ns < best.spread_ns else best
        self.last = best
        return best

    def forwarding(self) -> bool:
        """Whether it has forwarded a packet yet (False while it loads or its socket is not up)."""
        try:
            return port_stats(self.socket, (self.program.tx_port,))[0]["opackets"] > 0
        except (OSError, RuntimeError, ValueError):
            return False

    def pin(self, core: int, probe_s: float = 0.1) -> int:
        """Restrict the thread that runs most (the forwarding one) to CPU ``core``; its id.  For a
        program whose forwarding lcore may float while it loads (l3fwd's ``--lcores``)."""
        a = thread_run_ns(self.proc.pid)
        time.sleep(probe_s)
        b = thread_run_ns(self.proc.pid)
        tid = max(b, key=lambda t: b[t] - a.get(t, 0))
        os.sched_setaffinity(tid, {core})
        return tid

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def measure(self, warmup_s: float, window_s: float) -> Window:
        """Resume, let it warm up, measure a window, pause again.  A sample whose spread is over
        0.1 % of the window is taken again (the window then starts or ends a little later)."""
        limit = int(window_s * 1e6)
        self.resume()
        try:
            time.sleep(warmup_s)
            a = self.steady_sample(limit)
            time.sleep(window_s)
            b = self.steady_sample(limit)
        finally:
            self.pause()
        return window_between(a, b)

    def interrupt(self) -> None:
        """Ask it to end (SIGINT: the programs print their counters on the way out), once."""
        if self.proc.poll() is None and not self._interrupted:
            self._interrupted = True
            with suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGINT)

    def stop(self, timeout: float = 20.0) -> str:
        """Interrupt it and wait; SIGKILL if it does not end in ``timeout`` seconds (l3fwd only
        looks at its signal once its routes are loaded).  The program's whole output."""
        self.interrupt()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self._out.close()
        shutil.rmtree(self.socket.parent, ignore_errors=True)  # EAL's runtime folder of this prefix
        return self.log.read_text(errors="replace")


def stop_all(runs: Iterable[Running], timeout: float = 20.0) -> list[str]:
    """Stop them, interrupting all first so that they end together (and those that hang are killed
    after ``timeout`` seconds from now, all of them); their outputs."""
    runs = list(runs)
    for r in runs:
        r.interrupt()
    deadline = time.monotonic() + timeout
    return [r.stop(max(0.0, deadline - time.monotonic())) for r in runs]


def start(programs: Sequence[Program], logs: Path) -> dict[str, Running]:
    """Start the programs together (each logs to ``logs/PREFIX.log``), keyed by their prefix."""
    return {p.prefix: Running(p, logs / f"{p.prefix}.log") for p in programs}


def settle(runs: dict[str, Running], core: int, timeout: float) -> dict[str, str]:
    """Pin (to ``core``) and pause each of the started programs as soon as it forwards, so that none
    keeps forwarding beside another's loading or measurement.  Why each of the others is not running
    (it exited, or did not forward within ``timeout`` seconds: stopped and removed from ``runs``)."""
    errors: dict[str, str] = {}
    pending = set(runs)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for key in sorted(pending):
            r = runs[key]
            if r.proc.poll() is not None:
                errors[key] = f"exited ({r.proc.returncode}) before forwarding:\n{r.log_tail()}"
            elif r.forwarding():
                r.pin(core)
                r.pause()
            else:
                continue
            pending.discard(key)
        time.sleep(0.1)
    for key in pending:
        errors[key] = f"did not forward within {timeout:.0f} s:\n{runs[key].log_tail()}"
    stop_all([runs.pop(key) for key in errors])
    return errors


def parse_switches(status: str) -> int:
    """Involuntary context switches of a thread: ``nonvoluntary_ctxt_switches`` of
    ``/proc/PID/task/TID/status`` (proc(5)): how often the scheduler took its CPU away."""
    for line in status.splitlines():
        if line.startswith("nonvoluntary_ctxt_switches:"):
            return int(line.split(":", 1)[1])
    raise ValueError("no nonvoluntary_ctxt_switches line")


def thread_usage(pid: int, tid: int) -> tuple[int, int]:
    """(nanoseconds run, involuntary context switches) of thread ``tid`` of process ``pid``."""
    task = Path(f"/proc/{pid}/task/{tid}")
    return parse_schedstat((task / "schedstat").read_text()), parse_switches((task / "status").read_text())
