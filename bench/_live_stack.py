"""What the cache benchmarks run: a build live as ``nfc run --live`` runs it (the switch model
executing the generated TNA program behind its P4Runtime endpoint, the generated server program
over a veth pair: ``runtime.live.LiveDataPlane``), its runtime API on a control connection of its
own, and cache managers stepping in a thread of their own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from emulator.switchmodel import SwitchModel
from emulator.switchmodel.server import P4RuntimeServer, serve
from runtime.api import Runtime
from runtime.cache_manager import CacheManager, Managers
from runtime.control import ControlChannel
from runtime.live import LiveDataPlane
from runtime.p4runtime import SwitchClient
from runtime.steering import steer_all

ROOT = Path(__file__).resolve().parent.parent


def build(source: Path, out: Path) -> Path:
    """``nfc build SOURCE -o OUT --no-verify`` and ``make`` of its server program (exits on failure)."""
    r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", str(source), "-o", str(out), "--no-verify"],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(r.stderr[-2000:])
    r = subprocess.run(["make", "-C", str(out / "server")], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stderr[-2000:])
    return out


class LiveStack:
    def __init__(self, out: Path, step_ms: float, evict_ms: float, memory_mb: int = 512) -> None:
        """``step_ms``: how often the managers promote (HITS, then writes); ``evict_ms``: how
        often a step also reads every cached entry's idle time; ``memory_mb``: the server
        program's memory."""
        self.model = SwitchModel.from_build(out)
        names = json.loads((out / "switch/name_map.json").read_text())
        self.p4rt = P4RuntimeServer(self.model, names, "tna")
        self.grpc, port = serve(self.p4rt)
        self.client = SwitchClient(f"127.0.0.1:{port}", names, "tna")
        self.live = LiveDataPlane(out / "server/nf", self.p4rt, self.model.server_ports[0], memory_mb=memory_mb)
        assert self.live.server is not None
        # a connection of its own: the managers' threads and the caller each talk on theirs
        self.rt = Runtime(out, switch=self.client, server=ControlChannel(self.live.server.socket))
        steer_all(self.rt)  # a sharded build: this one server program gets every share
        self.step_ms, self.evict_ms = step_ms, evict_ms
        self.loop: Managers | None = None

    def start(self, managers: dict[str, CacheManager]) -> None:
        self.loop = Managers(managers, self.step_ms / 1000, self.evict_ms / 1000).__enter__()

    def steps(self) -> tuple[int, float]:
        """The managers' steps so far, and their seconds in all."""
        return (self.loop.steps, self.loop.seconds) if self.loop is not None else (0, 0.0)

    def total(self, what: str, table: str | None = None) -> int:
        """A StepReport field summed; a manager's failed step fails the benchmark."""
        if self.loop is None:
            return 0
        bad = next(iter(self.loop.last_error.items()), None)
        if bad is not None or self.loop.failed is not None:
            raise RuntimeError(f"a cache manager failed: {bad or self.loop.failed}")
        return self.loop.total(what, table)

    def crossed(self, table: str) -> int:
        """The lookups of ``table`` on the server so far: the switch cache's misses."""
        assert self.live.server is not None
        t = self.live.server.control.counters()["tables"].get(table, {})
        return int(t.get("hits", 0) + t.get("misses", 0))

    def close(self) -> None:
        if self.loop is not None:
            self.loop.__exit__()
        if self.rt.server is not None:
            self.rt.server.close()
        self.live.close()
        self.client.close()
        self.grpc.stop(0)
