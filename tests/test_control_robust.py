"""The server program's control channel against careless and hostile clients (issue 17), on
the real DPDK program built with ASan + UBSan: DUMP of data-plane state that the forwarding
lcore inserts, expires and frees every millisecond; clients that send half a header, trickle
a request or never read their reply, none of which may hold up another client; and peers who
may not use the channel.  Deadlines are shortened with --control-timeout-ms."""

from __future__ import annotations

import grp
import ipaddress
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from runtime.control import OP, REP, REQ, ControlChannel, ControlRefused
from runtime.server_proc import ServerProcess, eal_args
from tests.conftest import HAVE_DPDK, ROOT

pytestmark = pytest.mark.skipif(not HAVE_DPDK, reason="DPDK (libdpdk-dev) missing: python3 build.py setup installs it")

# A data-plane state table whose entries expire after 1 ms, so that a returning source finds
# its entry expired (deleted and freed there and then) and inserts it anew; and a
# control-plane table the tests fill through the channel.
SOURCE = """
import "std/headers.nfp";

packet { eth: ethernet; ipv4: ipv4; }

parser p {
  state start {
    extract eth;
    transition select(eth.ethertype) { ETH_IPV4: ip; default: drop(not_ipv4); }
  }
  state ip { extract ipv4; transition accept; }
}

state flows {
  key { ipv4.src: exact; }
  value { packets: bit<32>; }
  size = 64K;
  timeout = 1ms;
}

table routes {
  key { ipv4.dst: exact; }
  value { port: bit<16>; }
  size = 256K;
}

stage track {
  lookup flows {
    hit(f) { insert flows { packets = f.packets + 1; }; }
    miss { insert flows { packets = 1; }; }
  }
  lookup routes {
    hit(r) { forward(r.port); }
    miss { forward(0); }
  }
}

ports all = [0..1];
pipeline main { ports = all; parser = p; stages = [track]; traffic = 100%; }
target srv = dpdk_server { cores = 1; }
deployment d { switch = tofino1; servers = [srv]; server_ports = [2]; rate = 1Mpps; }
"""

TIMEOUT = 0.8  # s: --control-timeout-ms of every program started here
FAST = 0.2  # s: a request of a client that nobody holds up is answered within this
SOURCES = [f"10.0.{i // 250}.{i % 250}" for i in range(2000)]


@pytest.fixture(scope="module")
def nf_san(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("churn")
    (out / "churn.nfp").write_text(SOURCE)
    r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", str(out / "churn.nfp"), "--target", "dpdk",
                        "-o", str(out / "build")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run(["make", "-C", str(out / "build/server"), "nf-san"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return out / "build/server/nf-san"


@pytest.fixture(autouse=True)
def asan_aborts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")


def _flags(*extra: str) -> list[str]:
    return ["--control-timeout-ms", str(int(TIMEOUT * 1000)), *extra]


def _server(binary: Path, *extra: str, vdev: str = "net_null0") -> ServerProcess:
    return ServerProcess(binary, [vdev], extra=_flags(*extra))


def _connect(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(path))
    return s


def _latency(path: Path) -> float:
    """Seconds a fresh client takes to connect (HELLO) and read the counters."""
    start = time.monotonic()
    with ControlChannel(path, timeout=5) as ch:
        ch.counters()
    return time.monotonic() - start


def _drain(s: socket.socket) -> tuple[bytes, float]:
    """Everything s receives until the server closes it, and when that was (monotonic)."""
    got = bytearray()
    while chunk := s.recv(1 << 16):
        got += chunk
    return bytes(got), time.monotonic()


def _assert_clean_exit(srv: ServerProcess) -> None:
    assert srv.proc.returncode == 0, srv.stderr[-3000:]
    assert "AddressSanitizer" not in srv.stderr and "runtime error" not in srv.stderr, srv.stderr[-3000:]


# ---- DUMP of data-plane state ------------------------------------------------------------------


def test_dump_of_state_expiring_every_millisecond_reads_no_freed_entry(nf_san: Path, tmp_path: Path) -> None:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import RawPcapWriter

    pcap = tmp_path / "in.pcap"
    with RawPcapWriter(str(pcap), linktype=1) as w:
        for src in SOURCES:
            w.write(bytes(Ether() / IP(src=src, dst="10.9.9.9") / UDP()))
    sources = {int(ipaddress.IPv4Address(s)) for s in SOURCES}
    replay = f"net_pcap0,rx_pcap={pcap},tx_pcap=/dev/null,infinite_rx=1"  # the same 2000 packets, forever
    with _server(nf_san, vdev=replay) as srv:
        ch = srv.control
        forwarded = ch.counters()["forwarded"]
        dumps, seen, end = 0, 0, time.monotonic() + 3
        while time.monotonic() < end:
            for source, packets in ch.dump("flows"):
                assert source in sources and packets >= 1
                seen += 1
            dumps += 1
        assert ch.counters()["forwarded"] > forwarded  # the lcore inserted and expired all along
        assert srv.proc.poll() is None
    _assert_clean_exit(srv)
    assert dumps >= 20 and seen > 0


# ---- clients that do not hold up others --------------------------------------------------------


def test_half_sent_header_neither_delays_others_nor_stays_connected(nf_san: Path) -> None:
    with _server(nf_san) as srv:
        slow = _connect(srv.socket)
        slow.sendall(REQ.pack(b"NFCQ", 1, OP["hello"], 0, 0, 0)[:5])
        sent = time.monotonic()
        time.sleep(0.05)  # the server has read the 5 bytes
        assert _latency(srv.socket) < FAST
        got, closed = _drain(slow)
        assert got == b"" and TIMEOUT - 0.05 <= closed - sent <= TIMEOUT + 1.0
        assert _latency(srv.socket) < FAST
    _assert_clean_exit(srv)


def test_trickling_client_is_closed_at_its_deadline_however_steady(nf_san: Path) -> None:
    with _server(nf_san) as srv:
        t = srv.control.tables["routes"]
        request = REQ.pack(b"NFCQ", 1, OP["add"], t.index, 100, 1600) + bytes(1600)
        trickle = _connect(srv.socket)
        start, closed, worst = time.monotonic(), None, 0.0
        for byte in request:  # one byte every 50 ms: the whole request would take 80 s
            try:
                trickle.send(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = time.monotonic() - start
                break
            worst = max(worst, _latency(srv.socket))
            time.sleep(0.05)
            if time.monotonic() - start > TIMEOUT + 2:
                break
        assert closed is not None and closed <= TIMEOUT + 0.5
        assert worst < FAST
        assert srv.control.counters()["tables"]["routes"]["entries"] == 0  # the partial ADD did nothing
    _assert_clean_exit(srv)


def test_client_not_reading_a_huge_dump_blocks_nobody_and_is_closed(nf_san: Path) -> None:
    routes = [(i, i & 0xFFFF) for i in range(200_000)]
    with _server(nf_san) as srv:
        t = srv.control.tables["routes"]
        srv.control.write("add", "routes", [list(r) for r in routes], chunk=len(routes))
        hog = _connect(srv.socket)  # DUMP of as many entries as one reply takes, never read
        hog.sendall(REQ.pack(b"NFCQ", 1, OP["dump"], t.index, 0, 8) + struct.pack("<Q", 0))
        asked = time.monotonic()
        time.sleep(0.1)
        assert _latency(srv.socket) < FAST
        with ControlChannel(srv.socket, timeout=5) as reader:  # a reading client gets every entry
            assert sorted(reader.dump("routes")) == routes
        time.sleep(max(0.0, asked + TIMEOUT + 0.2 - time.monotonic()))
        got, _closed = _drain(hog)  # what the socket buffers held when the server closed it
        _magic, _v, status, _op, _index, length = REP.unpack(got[:REP.size])
        assert status == 0 and REP.size < len(got) < REP.size + length
    _assert_clean_exit(srv)


# ---- who may connect ---------------------------------------------------------------------------


def _other_uid() -> int:
    return 65534 if os.geteuid() != 65534 else 65533


@contextmanager
def _unconnected_server(binary: Path, *extra: str) -> Iterator[Path]:
    """The program serving its channel with no client (ServerProcess connects at once), its
    socket in a directory anyone may enter; yields the socket's path."""
    folder = Path(tempfile.mkdtemp(prefix="nfc-ctl-"))
    folder.chmod(0o711)
    sock = folder / "control.sock"
    proc = subprocess.Popen([str(binary), *eal_args(), "--vdev=net_null0", "--", "--live", "--control", str(sock),
                             *_flags(*extra)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 30
        while not sock.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        assert sock.exists(), proc.communicate()[1][-3000:] if proc.poll() is not None else "no socket"
        yield sock
        assert proc.poll() is None  # still serving
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
        sock.unlink(missing_ok=True)
        folder.rmdir()
    assert proc.returncode == 0 and "AddressSanitizer" not in err, err[-3000:]


def test_control_socket_is_owner_only(nf_san: Path) -> None:
    with _server(nf_san) as srv:
        mode = os.stat(srv.socket).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        assert os.stat(srv.socket).st_uid == os.geteuid()
        assert srv.control.counters()["forwarded"] >= 0  # its owner is served


def test_peer_whose_uid_is_not_allowed_is_refused(nf_san: Path) -> None:
    with _unconnected_server(nf_san, "--control-allow-uid", str(_other_uid())) as sock:
        s = _connect(sock)  # the refusal comes unasked, then the end of the stream
        reply, _closed = _drain(s)
        _magic, _v, status, _op, _index, length = REP.unpack(reply[:REP.size])
        assert status == 11 and f"uid {os.geteuid()}".encode() in reply[REP.size:REP.size + length]
        with pytest.raises(ControlRefused, match=f"uid {os.geteuid()} may not"):
            ControlChannel(sock, timeout=5)
    start = time.monotonic()
    with pytest.raises(ControlRefused):  # ServerProcess gives up at once instead of retrying
        ServerProcess(nf_san, ["net_null0"], extra=_flags("--control-allow-uid", str(_other_uid())))
    assert time.monotonic() - start < 15


@pytest.mark.skipif(os.geteuid() != 0, reason="runs a client as another user")
def test_allowed_uid_is_served_where_this_uid_is_refused(nf_san: Path) -> None:
    other = _other_uid()
    client = ("import socket, struct, sys\n"
              "s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(sys.argv[1])\n"
              "s.sendall(struct.pack('<4sBBHII', b'NFCQ', 1, 1, 0, 0, 0))\n"
              "print(s.recv(16)[5])\n")
    with _unconnected_server(nf_san, "--control-allow-uid", str(other)) as sock:
        sock.chmod(0o666)  # past the file's mode: only the server's own check is left
        with pytest.raises(ControlRefused):
            ControlChannel(sock, timeout=5)
        r = subprocess.run(["/usr/bin/python3", "-c", client, str(sock)], user=other, group=other,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr  # status OK


def test_members_of_the_control_group_are_served_on_a_group_socket(nf_san: Path) -> None:
    group = grp.getgrgid(os.getegid()).gr_name
    with _server(nf_san, "--control-allow-uid", str(_other_uid()), "--control-group", group) as srv:
        st = os.stat(srv.socket)
        assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == os.getegid()
        assert srv.control.counters()["forwarded"] >= 0  # not by uid: by the group
    _assert_clean_exit(srv)


def test_a_control_path_that_is_a_regular_file_is_not_deleted(nf_san: Path, tmp_path: Path) -> None:
    """--control pointing at an existing file (a mistyped path) is refused, the file kept;
    it was unlinked before bind."""
    precious = tmp_path / "notes.txt"
    precious.write_text("keep me")
    r = subprocess.run([str(nf_san), *eal_args(), "--vdev=net_null0", "--", "--live", "--control", str(precious)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "exists and is not a socket" in r.stderr, r.stderr[-2000:]
    assert precious.read_text() == "keep me"
