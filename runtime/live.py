"""``nfc run --live``: the hybrid data plane running, with the switch↔server link a real one.

The server program runs as a DPDK process in a network namespace of its own, its NIC a
``net_af_packet`` on one end of a veth pair; the switch model sends to its server port on
the other end (a raw socket) and receives what the server sends back, as a switch port and
a server NIC are wired in a PE.  The switch model serves P4Runtime and the server program
its control channel, so entries can change (through :mod:`runtime.api`) while packets flow.
Everything made here — the namespace with its veths, the process, the sockets — is removed
by :meth:`LiveDataPlane.close`, which ``with`` calls even when interrupted.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from runtime.server_proc import ServerProcess, eal_args

__all__ = ["LiveDataPlane", "LiveError", "pace"]

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_RCVBUFFORCE = 33


class LiveError(RuntimeError):
    """The live data plane could not be set up (no root, no veth support, ...)."""


class Switch(Protocol):
    """What the switch side needs: P4RuntimeServer.inject (the model under its lock)."""

    def inject(self, port: int, data: bytes) -> Any: ...


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise LiveError(f"{' '.join(cmd)}: {r.stderr.strip()}")


def _raw_socket_in(netns: str, iface: str) -> socket.socket:
    """An AF_PACKET socket on ``iface`` inside ``netns`` (this thread visits it, then returns)."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise LiveError(f"setns({netns}): {os.strerror(ctypes.get_errno())}")
        try:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
            s.bind((iface, 0))
        finally:
            libc.setns(own, CLONE_NEWNET)
    finally:
        os.close(own)
        os.close(target)
    return s


class LiveDataPlane:
    """Switch model + server program over a veth pair; ``inject`` packets, read ``outputs``."""

    def __init__(self, binary: Path, switch: Switch, server_port: int, lcores: str = "0") -> None:
        self.switch = switch
        self.server_port = server_port
        self.netns = f"nfc-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}"
        self.outputs: dict[int, list[bytes]] = {}
        self.drops: Counter[str] = Counter()
        self.sent_to_server = 0
        self.back_from_server = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.server: ServerProcess | None = None
        self._sock: socket.socket | None = None
        self._made_netns = False
        try:
            self._wire()
            self.server = ServerProcess(binary, ["net_af_packet0,iface=nfcsrv,qpairs=1"], netns=self.netns,
                                        eal=eal_args(lcores))
            self._reader = threading.Thread(target=self._from_server, daemon=True)
            self._reader.start()
        except BaseException:
            self.close()
            raise

    def _wire(self) -> None:
        _ip("netns", "add", self.netns)
        self._made_netns = True
        _ip("link", "add", "nfcsw", "type", "veth", "peer", "name", "nfcsrv", netns=self.netns)
        for dev in ("nfcsw", "nfcsrv"):
            with contextlib.suppress(OSError):  # no IPv6 chatter on the link
                subprocess.run(["ip", "netns", "exec", self.netns, "sysctl", "-qw",
                                f"net.ipv6.conf.{dev}.disable_ipv6=1"], capture_output=True)
            _ip("link", "set", dev, "mtu", "9000", "up", netns=self.netns)
        self._sock = _raw_socket_in(self.netns, "nfcsw")
        self._sock.settimeout(0.2)

    # ---- the switch side -------------------------------------------------------------------

    def _deliver(self, outcome: Any) -> None:
        if outcome.kind == "forward" and outcome.port == self.server_port:
            assert self._sock is not None
            self._sock.send(outcome.data)
            with self._lock:
                self.sent_to_server += 1
            return
        with self._lock:
            if outcome.kind == "forward":
                self.outputs.setdefault(outcome.port, []).append(outcome.data)
            elif outcome.kind == "drop":
                self.drops[f"switch:{outcome.reason}"] += 1
            else:
                self.drops[f"punt:{outcome.reason}"] += 1

    def inject(self, port: int, data: bytes) -> None:
        """A packet arrives on a front-panel port of the switch."""
        self._deliver(self.switch.inject(port, data))

    def _from_server(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                data, addr = self._sock.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            with self._lock:
                self.back_from_server += 1
            self._deliver(self.switch.inject(self.server_port, data))

    def settle(self, timeout: float = 30.0) -> bool:
        """Wait until every packet sent to the server came back or was dropped there."""
        assert self.server is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            c = self.server.control.counters()
            handled = c["forwarded"] + sum(c["drops"].values()) + sum(c.get("punts", {}).values())
            with self._lock:
                if handled >= self.sent_to_server and self.back_from_server >= c["forwarded"]:
                    return True
            time.sleep(0.05)
        return False

    def take(self, port: int) -> list[bytes]:
        with self._lock:
            return self.outputs.pop(port, [])

    def counters(self) -> dict[str, Any]:
        server = self.server.control.counters() if self.server is not None else {}
        with self._lock:
            drops = self.drops + Counter({f"server:{k}": v for k, v in server.get("drops", {}).items()})
            drops += Counter({f"punt:{k}": v for k, v in server.get("punts", {}).items()})
            return {"drops": dict(sorted(drops.items())),
                    "egress_packets": {str(p): len(v) for p, v in sorted(self.outputs.items())},
                    "server": {"forwarded": server.get("forwarded", 0), "tables": server.get("tables", {})}}

    # ---- teardown --------------------------------------------------------------------------

    def close(self) -> None:
        self._stop.set()
        if self.server is not None:
            self.server.control.close()
            self.server.stop()
        if self._sock is not None:
            self._sock.close()
        if self._made_netns:  # deleting the namespace deletes its veths
            with contextlib.suppress(LiveError):
                _ip("netns", "del", self.netns)
            self._made_netns = False

    def __enter__(self) -> LiveDataPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pace(packets: list[bytes], send: Callable[[bytes], None], pps: float) -> None:
    """Send at about ``pps`` packets per second."""
    start = time.monotonic()
    for i, p in enumerate(packets):
        delay = start + i / pps - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        send(p)
