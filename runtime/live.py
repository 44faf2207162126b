"""``nfc run --live``: the hybrid data plane running, with the switch↔server link a real one.

Each server program runs as a DPDK process in a network namespace of its own (two af_packet
PMDs in one namespace may draw the same PACKET_FANOUT group id and refuse to start), its NIC a
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
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runtime.errors import RuntimeApiError
from runtime.fleet import merge_counters
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


@dataclass
class _Link:
    """One server: its switch port, the veth pair to it, its program and what crossed."""

    port: int
    index: int
    netns: str  # its own network namespace: the af_packet fanout groups of two servers never meet
    sock: socket.socket | None = None
    server: ServerProcess | None = None
    sent: int = 0  # packets the switch sent to it
    back: int = 0  # packets it sent back
    handled: int = 0  # forwarded, dropped or punted, as it last said (its control channel)
    dropped: int = 0  # of those, dropped or punted
    lost: int = 0  # sent to programs of this port that went away before handling them, or before one started
    starting: bool = False  # its program is being replaced: what arrives meanwhile is lost, not sent
    program: int = 0  # which of the port's programs runs (replace counts them): a late packet is its sender's
    last: dict[str, Any] = field(default_factory=dict)  # its program's counters as it last said them

    def unaccounted(self) -> int:
        return max(0, self.sent - self.back - self.dropped)

    @property
    def host(self) -> str:  # the switch's end of the veth pair
        return f"nfcsw{self.index}"

    @property
    def nic(self) -> str:  # the server's end
        return f"nfcsrv{self.index}"


class LiveDataPlane:
    """Switch model + server programs, each over a veth pair; ``inject`` packets, read
    ``outputs``.  A sharded deployment runs one server per server port (``server_ports``),
    and ``add_server`` joins another on a new port while packets flow."""

    def __init__(self, binary: Path, switch: Switch, server_ports: int | Sequence[int], lcores: str = "0",
                 replicated: Collection[str] = (), memory_mb: int = 512) -> None:
        """``replicated``: the tables each server holds whole (``replicated_tables``): their
        entry counts are not summed over the servers; ``memory_mb``: each server program's
        memory (EAL ``-m``)."""
        self.binary = binary
        self.replicated = set(replicated)
        self.switch = switch
        self.lcores = lcores
        self.memory_mb = memory_mb
        self.netns = f"nfc-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}"  # each server's: -<index>
        self.outputs: dict[int, list[bytes]] = {}
        self.drops: Counter[str] = Counter()
        self._retired: list[dict[str, Any]] = []  # the last counters of programs replaced
        self.links: dict[int, _Link] = {}  # switch port -> its server
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._made: list[str] = []  # the namespaces to delete
        # each port's control socket, the same for the programs that replace one another there
        # (a controller's channel reconnects to it: ControlChannel.reconnect)
        self._sockets = tempfile.TemporaryDirectory(prefix="nfc-live-")
        try:
            for port in [server_ports] if isinstance(server_ports, int) else server_ports:
                self.add_server(port)
        except BaseException:
            self.close()
            raise

    @property
    def servers(self) -> list[ServerProcess]:
        return [link.server for link in self.links.values() if link.server is not None]

    @property
    def server(self) -> ServerProcess | None:
        """The first server (a deployment with one)."""
        return self.servers[0] if self.servers else None

    def add_server(self, port: int) -> ServerProcess:
        """A server program on a new veth pair behind switch port ``port``."""
        if port in self.links:
            raise LiveError(f"switch port {port} already leads to a server")
        link = _Link(port, len(self.links), f"{self.netns}-{len(self.links)}")
        self.links[port] = link
        _ip("netns", "add", link.netns)
        self._made.append(link.netns)
        _ip("link", "add", link.host, "type", "veth", "peer", "name", link.nic, netns=link.netns)
        for dev in (link.host, link.nic):
            with contextlib.suppress(OSError):  # no IPv6 chatter on the link
                subprocess.run(["ip", "netns", "exec", link.netns, "sysctl", "-qw",
                                f"net.ipv6.conf.{dev}.disable_ipv6=1"], capture_output=True)
            _ip("link", "set", dev, "mtu", "9000", "up", netns=link.netns)
        link.sock = _raw_socket_in(link.netns, link.host)
        link.sock.settimeout(0.2)
        link.server = self._start(link)
        threading.Thread(target=self._from_server, args=(link,), daemon=True).start()
        return link.server

    def _start(self, link: _Link) -> ServerProcess:
        return ServerProcess(self.binary, [f"net_af_packet0,iface={link.nic},qpairs=1"], netns=link.netns,
                             eal=eal_args(self.lcores, self.memory_mb),
                             control=Path(self._sockets.name) / f"control-{link.port}.sock")

    def replace(self, port: int) -> ServerProcess:
        """A fresh server program behind ``port`` (the old one stopped if it still runs): a
        failed server replaced.  What the old one never handled, what it handled but never
        reached the switch (the kernel drops what a closing af_packet socket had not sent),
        and what the switch sends to the port until the new one runs, count as ``lost``; its
        drops, punts and forwarded packets stay in ``counters``."""
        link = self.links[port]
        assert link.server is not None
        with self._lock:
            link.starting = True  # from here on nothing it would handle is sent to it
        link.server.control.close()
        final = link.server.stop()  # a program still running prints its counters on the way out
        if "forwarded" in final:  # what it handled is known: wait (a little) for what it sent back
            self._handled(link, final)
            deadline = time.monotonic() + 2.0
            while link.back < final["forwarded"] and time.monotonic() < deadline:
                time.sleep(0.01)
        with self._lock:
            link.lost += link.unaccounted()  # sent to it, neither back nor dropped there
            self._retired.append(final if "forwarded" in final else link.last)
            link.sent = link.back = link.handled = link.dropped = 0
            link.program += 1
            link.last = {}
        try:
            link.server = self._start(link)
        finally:
            with self._lock:
                link.starting = False
        return link.server

    # ---- the switch side -------------------------------------------------------------------

    def _deliver(self, outcome: Any) -> None:
        link = self.links.get(outcome.port) if outcome.kind == "forward" else None
        if link is not None:
            assert link.sock is not None
            with self._lock:
                if link.starting:  # no program reads the veth yet (the kernel drops it)
                    link.lost += 1
                    return
                link.sent += 1
                link.sock.send(outcome.data)  # under the lock: counted for the program that gets it
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

    def _from_server(self, link: _Link) -> None:
        assert link.sock is not None
        while not self._stop.is_set():
            try:
                data, addr = link.sock.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            with self._lock:
                program = link.program
            try:
                self._deliver(self.switch.inject(link.port, data))
            finally:  # counted once delivered: ``settle`` must not end while it is on its way out;
                with self._lock:  # not for the program replacing its sender (its counts start at 0)
                    if link.program == program:
                        link.back += 1

    def _poll(self, link: _Link) -> dict[str, Any] | None:
        """A server's counters (what it handled kept for when it is gone); None if it is gone."""
        assert link.server is not None
        if link.server.proc.poll() is not None:
            return None
        try:
            c = link.server.control.counters()
        except (OSError, RuntimeApiError):
            return None
        self._handled(link, c)
        return c

    def _handled(self, link: _Link, c: dict[str, Any]) -> None:
        with self._lock:
            link.last = c
            link.dropped = sum(c["drops"].values()) + sum(c.get("punts", {}).values())
            link.handled = c["forwarded"] + link.dropped

    def settle(self, timeout: float = 30.0) -> bool:
        """Wait until every packet sent to a running server came back or was dropped there
        (what was sent to a server that is gone is ``lost``: ``counters``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = True
            for link in list(self.links.values()):
                c = self._poll(link)
                with self._lock:
                    if c is not None and not (link.handled >= link.sent and link.back >= c["forwarded"]):
                        done = False
            if done:
                return True
            time.sleep(0.05)
        return False

    def take(self, port: int) -> list[bytes]:
        with self._lock:
            return self.outputs.pop(port, [])

    def counters(self) -> dict[str, Any]:
        """As ``nfc run``'s, with ``servers`` (several): per server port what the switch sent,
        what came back, whether its program runs, and ``lost``: sent to a program that went
        away (failed, replaced) and neither sent back nor counted as dropped by it before
        (its last counters, read at every ``settle`` and ``counters``)."""
        links = dict(self.links)  # a server may join meanwhile
        programs = {port: link.server for port, link in links.items()}
        polled = {port: self._poll(link) for port, link in links.items()}
        with self._lock:
            # a program replaced since it was polled is in _retired now, with its final counters
            parts = [c for port, c in polled.items() if c is not None and links[port].server is programs[port]]
            # what replaced programs, and programs that died (as they last said), dropped and
            # forwarded; not the entries they held
            gone = [*self._retired, *(link.last for port, link in links.items() if polled[port] is None)]
            gone = [{k: v for k, v in c.items() if k != "tables"} for c in gone]
        server = merge_counters(parts + gone, self.replicated)
        with self._lock:
            drops = self.drops + Counter({f"server:{k}": v for k, v in server.get("drops", {}).items()})
            drops += Counter({f"punt:{k}": v for k, v in server.get("punts", {}).items()})
            out: dict[str, Any] = {
                "drops": dict(sorted(drops.items())),
                "egress_packets": {str(p): len(v) for p, v in sorted(self.outputs.items())},
                "server": {"forwarded": server.get("forwarded", 0), "tables": server.get("tables", {})}}
            if len(links) > 1:
                out["servers"] = [{"port": port, "sent": link.sent, "back": link.back,
                                   "running": polled[port] is not None,
                                   "lost": link.lost + (0 if polled[port] is not None else link.unaccounted())}
                                  for port, link in links.items()]
            return out

    # ---- teardown --------------------------------------------------------------------------

    def close(self) -> None:
        self._stop.set()
        for link in self.links.values():
            if link.server is not None:
                link.server.control.close()
                link.server.stop()
            if link.sock is not None:
                link.sock.close()
        while self._made:  # deleting a namespace deletes its veths
            with contextlib.suppress(LiveError):
                _ip("netns", "del", self._made.pop())
        self._sockets.cleanup()

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
