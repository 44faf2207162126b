"""The compiled server program as a running DPDK process: EAL arguments (hugepages when they
can be had, ``--no-huge`` otherwise), start with a control socket, stop with SIGINT and
collect its counters.  Whatever happens, the process is gone and the hugepages reserved
for it are given back when the ``with`` block ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from runtime.control import ControlChannel, ControlRefused
from runtime.errors import ChannelError

__all__ = ["ServerProcess", "eal_args", "hugepages"]

NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")
COMMON = ("--no-pci", "--no-shconf", "--no-telemetry", "--log-level=warning")


def eal_args(lcores: str = "0", memory_mb: int = 512, huge: bool = False) -> list[str]:
    """EAL arguments for one program on this machine (dpdk-here.md)."""
    mem = ["--in-memory"] if huge else ["--no-huge"]
    return [*mem, "-m", str(memory_mb), *COMMON, "-l", lcores]


@contextmanager
def hugepages(megabytes: int) -> Iterator[bool]:
    """Reserve 2 MB hugepages for ``megabytes`` (root only); yields whether they were had,
    and restores the previous reservation afterwards."""
    try:
        before = int(NR_HUGEPAGES.read_text())
        NR_HUGEPAGES.write_text(str(before + (megabytes + 1) // 2))
        got = int(NR_HUGEPAGES.read_text()) - before
    except (OSError, ValueError):
        yield False
        return
    try:
        yield got >= (megabytes + 1) // 2
    finally:
        with suppress(OSError):
            NR_HUGEPAGES.write_text(str(before))


class ServerProcess:
    """``nf`` with ``vdevs``; ``control`` is its channel.  ``live``: runs until stopped;
    otherwise until its input ends.  ``attach``: devices hot-plugged at ``control.start()``
    (the program waits for it), e.g. a net_pcap whose input is written after the entries."""

    def __init__(self, binary: Path, vdevs: Sequence[str] = (), eal: Sequence[str] | None = None,
                 extra: Sequence[str] = (), netns: str | None = None, live: bool = True,
                 attach: Sequence[str] = (), control: Path | None = None) -> None:
        """``control``: the control socket's path (default: in a folder of its own, removed
        at ``stop``); a program started again with the same path is found where its
        controller left it (``ControlChannel.reconnect``)."""
        self._tmp = tempfile.TemporaryDirectory(prefix="nfc-srv-")
        self.socket = control if control is not None else Path(self._tmp.name) / "control.sock"
        args = ["--live"] if live else []
        if attach:
            args += ["--wait", *[a for dev in attach for a in ("--attach", dev)]]
        cmd = [str(binary), *(eal if eal is not None else eal_args()), *[f"--vdev={v}" for v in vdevs], "--",
               *args, "--control", str(self.socket), *extra]
        if netns is not None:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.counters: dict[str, Any] = {}
        self.stderr = ""
        self._collected = False
        self.control = self._connect()

    def _connect(self, timeout: float = 30.0) -> ControlChannel:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise ChannelError(f"the server program exited ({self.proc.returncode}): {self.stderr[-2000:]}")
            if self.socket.exists():
                try:
                    return ControlChannel(self.socket)
                except ControlRefused:  # asking again changes nothing
                    self.stop()
                    raise
                except ChannelError:
                    pass
            time.sleep(0.05)
        self.stop()
        raise ChannelError(f"the server program did not open its control socket in {timeout} s")

    def wait(self, timeout: float = 600.0) -> dict[str, Any]:
        """Wait for a program that is not live to reach the end of its input."""
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)
        counters = self.stop()
        if self.proc.returncode != 0:
            raise ChannelError(f"the server program failed ({self.proc.returncode}): {self.stderr[-2000:]}")
        return counters

    def stop(self, timeout: float = 20.0) -> dict[str, Any]:
        """SIGINT (if still running), wait, collect the counters it prints; SIGKILL if it hangs."""
        if self._collected:
            return self.counters
        self._collected = True
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGINT)
        try:
            out, self.stderr = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            out, self.stderr = self.proc.communicate()
        lines = out.strip().splitlines()
        if lines and lines[-1].startswith("{"):
            self.counters = json.loads(lines[-1])
        self._tmp.cleanup()
        return self.counters

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if hasattr(self, "control"):
            self.control.close()
        self.stop()
