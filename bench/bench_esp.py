"""ESP per core against DPDK's own ipsec-secgw (issue 15): bench/esp.nfp built with ``--target
dpdk`` beside ``dpdk-ipsec-secgw`` built from Debian's dpdk-doc sources, on the same crypto PMD
(crypto_aesni_gcm, the CPU-crypto path nfc uses), vdevs, SA (AES-128-GCM tunnel mode), packets
and core, in interleaved rounds.

    .venv/bin/python bench/bench_esp.py                  # encap and decap at 64, 512, 1400 B
    .venv/bin/python bench/bench_esp.py --quick          # one round, 64 B
    .venv/bin/python bench/bench_esp.py --json out.json
    .venv/bin/python bench/bench_esp.py --suite cbc      # AES-128-CBC + HMAC-SHA1-96 on crypto_aesni_mb

``--suite cbc`` measures bench/esp_cbc.nfp (esp_encrypt_cbc / esp_decrypt_cbc) against
ipsec-secgw's SAs ``cipher_algo aes-128-cbc auth_algo sha1-hmac``, both on crypto_aesni_mb.

Rows: encapsulation (plain IPv4/UDP frames of the size in, ESP out) and decapsulation (ESP
frames whose inner packet is of the size in, the inner packet out), both with one SA.  Input:
net_pcap replaying 1,024 frames from memory (``infinite_rx=1``); output: net_null.  The figure
is Mpps per CPU-second of the forwarding thread (schedstat; packets its output port sent, read
over each program's telemetry socket), with Gbit/s of the plain frames (the size in the row,
FCS included); wall-clock beside it.  Programs: ``nfc`` (bench/esp.nfp; no anti-replay window:
the capture's sequence numbers repeat; a burst's encryptions in one CPU-crypto call per SA run),
``nfc_per_packet`` (the same program compiled with ``-DNFC_ESP_PER_PACKET``: each encryption
at once, the baseline of that batching), ``secgw`` (its SA ``type cpu-crypto``, ``-l``: librte_ipsec
with synchronous crypto, as nfc does it), ``secgw_lookaside`` (its default path: crypto ops
enqueued to the PMD).  ipsec-secgw needs one patch to start on a vdev: it demands the RX
checksum offload, which net_pcap does not have and its data path does not use
(``_drop_rx_checksum``).  docs/server.md ("ESP against ipsec-secgw") shows the table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._dpdk_proc import Program, Running, Window, settle, start, stop_all, thread_name  # noqa: E402

SECGW_SRC = Path("/usr/share/dpdk/examples")  # Debian's dpdk-doc
KEY, SALT = bytes([0xDE, 0xAD, 0xBE, 0xEF] * 4), bytes([0xCA, 0xFE, 0xBA, 0xBE])
AUTH = bytes(range(0x40, 0x54))  # HMAC-SHA1's 160-bit key (--suite cbc)
SPI_OUT, SPI_IN = 7, 8
TUNNEL_LOCAL, TUNNEL_PEER = "172.16.1.1", "172.16.2.1"
ORDER = ("nfc", "nfc_per_packet", "secgw", "secgw_lookaside")
FRAMES = 1024
MAX_NOT_FORWARDED = 0.01


def log(msg: str) -> None:
    print(f"[bench_esp {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Suite:
    """One ESP suite: nfc's program and SA values, ipsec-secgw's SA algorithms, scapy's, the PMD."""

    nfp: str
    vdev: str
    secgw_algo: str  # ipsec-secgw's sa ... words before "mode"
    scapy: dict[str, Any]
    keys: str  # the SA's key material in nfc's entries file (after the SPI outbound)


def _hex(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


SUITES = {
    "gcm": Suite("bench/esp.nfp", "crypto_aesni_gcm0", f"aead_algo aes-128-gcm aead_key {_hex(KEY + SALT)}",
                 {"crypt_algo": "AES-GCM", "crypt_key": KEY + SALT},
                 f"{int.from_bytes(KEY, 'big'):#x} {int.from_bytes(SALT, 'big'):#x}"),
    "cbc": Suite("bench/esp_cbc.nfp", "crypto_aesni_mb0",
                 f"cipher_algo aes-128-cbc cipher_key {_hex(KEY)} auth_algo sha1-hmac auth_key {_hex(AUTH)}",
                 {"crypt_algo": "AES-CBC", "crypt_key": KEY, "auth_algo": "HMAC-SHA1-96", "auth_key": AUTH},
                 f"{int.from_bytes(KEY, 'big'):#x} {int.from_bytes(AUTH[:4], 'big'):#x} "
                 f"{int.from_bytes(AUTH[4:], 'big'):#x}"),
}
SUITE = SUITES["gcm"]  # main() sets it from --suite


# ---- building -----------------------------------------------------------------------------------

def _drop_rx_checksum(src: Path) -> None:
    """ipsec-secgw's port_init requires RTE_ETH_RX_OFFLOAD_CHECKSUM, which no vdev offers; ask
    only for what the port has (its data path never reads the checksum flags)."""
    path = src / "ipsec-secgw.c"
    text = path.read_text()
    anchor = "\t/* Check that all required capabilities are supported */"
    if anchor not in text:
        raise RuntimeError(f"{path}: the place to patch is gone (DPDK changed): {anchor.strip()}")
    patch = "\tlocal_port_conf.rxmode.offloads &= ~(RTE_ETH_RX_OFFLOAD_CHECKSUM & ~dev_info.rx_offload_capa);\n"
    path.write_text(text.replace(anchor, patch + anchor, 1))


def build_secgw(tmp: Path) -> Path:
    if not (SECGW_SRC / "ipsec-secgw").is_dir():
        raise RuntimeError(f"no {SECGW_SRC}/ipsec-secgw: python3 build.py setup installs dpdk-doc")
    src = tmp / "secgw" / "ipsec-secgw"
    shutil.copytree(SECGW_SRC / "ipsec-secgw", src)
    shutil.copytree(SECGW_SRC / "common", tmp / "secgw" / "common")
    _drop_rx_checksum(src)
    r = subprocess.run(["make", "-C", str(src)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ipsec-secgw did not build:\n{r.stderr[-2000:]}")
    return src / "build" / "ipsec-secgw"


def build_nfc(out: Path) -> Path:
    r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", str(ROOT / SUITE.nfp), "--target", "dpdk",
                        "-o", str(out), "--no-verify"], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"{SUITE.nfp} did not build:\n{r.stderr[-2000:]}")
    r = subprocess.run(["make", "-C", str(out / "server"), "-j2"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{SUITE.nfp}'s server did not compile:\n{r.stderr[-2000:]}")
    return out / "server" / "nf"


def build_nfc_per_packet(out: Path) -> Path:
    """The same program with each encryption run at once (-DNFC_ESP_PER_PACKET): the baseline of
    the burst's encryptions batched into one CPU-crypto call per SA run."""
    base = build_nfc(out)
    flags = "CFLAGS=-O2 -march=native -DNFC_ESP_PER_PACKET=1"
    r = subprocess.run(["make", "-B", "-C", str(out / "server"), "-j2", flags], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{SUITE.nfp}'s per-packet server did not compile:\n{r.stderr[-2000:]}")
    return base.rename(base.with_name("nf-per-packet"))


# ---- workload -----------------------------------------------------------------------------------

def frames(size: int) -> tuple[list[bytes], list[bytes]]:
    """FRAMES plain frames of ``size`` bytes on the wire (FCS included: 4 fewer captured), and the
    ESP frames (SPI_IN, sequence numbers 1..FRAMES) whose inner packets are those frames'."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.ipsec import ESP, SecurityAssociation
    from scapy.layers.l2 import Ether

    def plain(src: str, dst: str, i: int) -> Any:
        p = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src=src, dst=dst) / \
            UDP(sport=1024 + i % 1000, dport=5001)
        return p / (b"\0" * (size - 4 - len(p)))

    out = [bytes(plain(f"192.168.1.{1 + i % 250}", f"192.168.2.{1 + i % 250}", i)) for i in range(FRAMES)]
    sa = SecurityAssociation(ESP, spi=SPI_IN, **SUITE.scapy,  # type: ignore[no-untyped-call]
                             tunnel_header=IP(src=TUNNEL_PEER, dst=TUNNEL_LOCAL))
    esp = [bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") /
                 sa.encrypt(plain(f"192.168.2.{1 + i % 250}", f"192.168.1.{1 + i % 250}", i)[IP]))
           for i in range(FRAMES)]
    return out, esp


def write_pcap(path: Path, data: list[bytes]) -> None:
    from scapy.utils import RawPcapWriter

    with RawPcapWriter(str(path), linktype=1) as w:
        for d in data:
            w.write(d)


def _ip(s: str) -> int:
    a, b, c, d = (int(x) for x in s.split("."))
    return a << 24 | b << 16 | c << 8 | d


def nfc_entries(path: Path) -> None:
    """The program's SAs (the entries file: C numbers), the same as ipsec-secgw's."""
    path.write_text(f"outbound_sa 0 : {SPI_OUT} {SUITE.keys} {_ip(TUNNEL_LOCAL):#x} {_ip(TUNNEL_PEER):#x} 1 "
                    "0x0200000000bb\n"
                    f"inbound_sa {SPI_IN} : {SUITE.keys} 1 0x0200000000aa\n")


def secgw_config(path: Path, cpu_crypto: bool) -> None:
    """Port 0: the plain side; port 1: the ESP side (``-u 0x2``)."""
    kind = " type cpu-crypto" if cpu_crypto else ""
    path.write_text(
        f"sp ipv4 out esp protect {SPI_OUT} pri 1 dst 192.168.2.0/24 sport 0:65535 dport 0:65535\n"
        f"sp ipv4 in esp protect {SPI_IN} pri 1 dst 192.168.1.0/24 sport 0:65535 dport 0:65535\n"
        f"sa out {SPI_OUT} {SUITE.secgw_algo} mode ipv4-tunnel src {TUNNEL_LOCAL} "
        f"dst {TUNNEL_PEER}{kind}\n"
        f"sa in {SPI_IN} {SUITE.secgw_algo} mode ipv4-tunnel src {TUNNEL_PEER} "
        f"dst {TUNNEL_LOCAL}{kind}\n"
        "rt ipv4 dst 172.16.2.0/24 port 1\n"
        "rt ipv4 dst 192.168.1.0/24 port 0\n"
        "neigh port 0 02:00:00:00:00:aa\n"
        "neigh port 1 02:00:00:00:00:bb\n")


# ---- programs -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    direction: str  # "encap" | "decap"
    size: int

    @property
    def key(self) -> str:
        return f"{self.direction}{self.size}"


def _eal(prefix: str, core: int) -> list[str]:
    return ["-l", str(core), "--no-huge", "-m", "1024", "--no-pci", f"--file-prefix={prefix}", "--log-level=warning",
            f"--vdev={SUITE.vdev}"]


def programs(row: Row, binaries: dict[str, Path], pcap: Path, files: dict[str, Path], core: int, tag: str
             ) -> list[Program]:
    """nfc reads on DPDK port 0 and sends on port 1 (for decap, port 0 is its logical port 2);
    ipsec-secgw's plain side is port 0, its ESP side port 1: encap reads port 0, decap port 1."""
    replay, sink = f"rx_pcap={pcap},infinite_rx=1", "no-rx=1"
    out = []
    for name in ("nfc", "nfc_per_packet"):
        if name not in binaries:
            continue
        prefix = f"{tag}-{name}-{row.key}"
        ports = ["--ports", "2,1"] if row.direction == "decap" else []
        out.append(Program(name, (str(binaries[name]), *_eal(prefix, core), f"--vdev=net_pcap0,{replay}",
                                  f"--vdev=net_null1,{sink}", "--", "--live", "--entries", str(files["entries"]),
                                  *ports), prefix))
    for name, cfg, lib in (("secgw", files["secgw_cpu"], ["-l"]), ("secgw_lookaside", files["secgw_none"], [])):
        if "secgw" not in binaries:
            continue
        prefix = f"{tag}-{name}-{row.key}"
        vdevs = [f"--vdev=net_pcap0,{replay}", f"--vdev=net_null1,{sink}"] if row.direction == "encap" else \
            [f"--vdev=net_null0,{sink}", f"--vdev=net_pcap1,{replay}"]
        rx, tx = (0, 1) if row.direction == "encap" else (1, 0)
        out.append(Program(name, (str(binaries["secgw"]), *_eal(prefix, core), *vdevs, "--", "-p", "0x3", "-u", "0x2",
                                  "-P", *lib, "--config", f"(0,0,{core}),(1,0,{core})", "-f", str(cfg)),
                           prefix, rx_port=rx, tx_port=tx))
    return out


# ---- measuring ----------------------------------------------------------------------------------

@dataclass
class Result:
    windows: list[Window] = field(default_factory=list)
    error: str | None = None
    thread: str = ""
    offered: int = 0
    forwarded: int = 0

    def median(self, attr: str) -> float | None:
        return statistics.median(getattr(w, attr) for w in self.windows) if self.windows else None

    def lost(self) -> float:
        return max(0.0, 1 - self.forwarded / self.offered) if self.offered else 1.0


def measure_row(row: Row, progs: list[Program], tmp: Path, args: argparse.Namespace) -> dict[str, Result]:
    results = {p.name: Result() for p in progs}
    runs = start(progs, tmp)
    try:
        failed = settle(runs, args.core, args.start_timeout)
        for p in progs:
            results[p.name].error = failed.get(p.prefix)
        running: dict[str, Running] = {r.program.name: r for r in runs.values()}
        for r in range(args.rounds):
            for name in ORDER:
                if name in running:
                    w = running[name].measure(args.warmup, args.window)
                    res = results[name]
                    res.windows.append(w)
                    res.thread = thread_name(running[name].proc.pid, w.thread)
                    last = running[name].last
                    if last is not None:
                        res.offered, res.forwarded = last.offered, last.forwarded
            log(f"  {row.key} round {r + 1}/{args.rounds}, Mpps per CPU-s: " + ", ".join(
                f"{n} {results[n].windows[-1].mpps_cpu:.2f}" for n in ORDER if n in running))
    finally:
        stop_all(runs.values())
    return results


def fig(x: float | None) -> str:
    return f"{x:.2f}" if x is not None else "—"


def report(rows: dict[Row, dict[str, Result]], problems: list[str], args: argparse.Namespace) -> None:
    print("| row, frame | nfc Mpps/CPU-s | Gbit/s | nfc per packet | batched / per packet | secgw cpu-crypto "
          "| nfc / secgw | secgw lookaside | nfc / lookaside |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row, res in rows.items():
        n, pp, s, lk = (res.get(k, Result()).median("mpps_cpu") for k in ORDER)
        gbit = n * row.size * 8 / 1000 if n is not None else None
        print(f"| {row.direction}, {row.size} B | {fig(n)} | {fig(gbit)} | {fig(pp)} | "
              f"{fig(n / pp) if n and pp else '—'} | {fig(s)} | "
              f"{fig(n / s) if n and s else '—'} | {fig(lk)} | {fig(n / lk) if n and lk else '—'} |")
    print("\nwall-clock Mpps: " + "; ".join(
        f"{row.key}: " + ", ".join(f"{k} {fig(res[k].median('mpps_wall'))}" for k in ORDER if k in res)
        for row, res in rows.items()))
    for p in problems:
        print(f"problem: {p}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "suite": args.suite, "rounds": args.rounds, "window_s": args.window,
            "rows": {row.key: {k: {"mpps_cpu": r.median("mpps_cpu"), "mpps_wall": r.median("mpps_wall"),
                                   "error": r.error, "thread": r.thread, "not_forwarded": r.lost(),
                                   "windows": [{"forwarded": w.forwarded, "cpu_s": w.cpu_s, "wall_s": w.wall_s}
                                               for w in r.windows]}
                               for k, r in res.items()} for row, res in rows.items()}}, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--quick", action="store_true", help="one round, 64 B")
    ap.add_argument("--window", type=float, default=1.0, help="seconds measured per program per round")
    ap.add_argument("--warmup", type=float, default=0.3, help="seconds after resuming before the window")
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[64, 512, 1400])
    ap.add_argument("--core", type=int, default=1, help="the core every program forwards on")
    ap.add_argument("--start-timeout", type=float, default=60.0)
    ap.add_argument("--json", help="also write every window to this file")
    ap.add_argument("--suite", choices=sorted(SUITES), default="gcm",
                    help="gcm: AES-128-GCM on crypto_aesni_gcm (default); cbc: AES-128-CBC + HMAC-SHA1-96 on "
                         "crypto_aesni_mb")
    args = ap.parse_args()
    global SUITE
    SUITE = SUITES[args.suite]
    if args.quick:
        args.rounds, args.sizes = 1, [64]
    problems: list[str] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nfc-bench-esp-")))
        binaries: dict[str, Path] = {}
        for name, build in (("nfc_per_packet", lambda: build_nfc_per_packet(tmp / "nfc_pp")),
                            ("nfc", lambda: build_nfc(tmp / "nfc")), ("secgw", lambda: build_secgw(tmp))):
            try:
                binaries[name] = build()
            except RuntimeError as e:
                problems.append(str(e))
        files = {"entries": tmp / "entries.txt", "secgw_cpu": tmp / "secgw_cpu.cfg", "secgw_none": tmp / "secgw.cfg"}
        nfc_entries(files["entries"])
        secgw_config(files["secgw_cpu"], True)
        secgw_config(files["secgw_none"], False)
        rows: dict[Row, dict[str, Result]] = {}
        tag = f"besp{int(time.time()) % 100000}"
        for size in args.sizes:
            plain, esp = frames(size)
            for direction, data in (("encap", plain), ("decap", esp)):
                row = Row(direction, size)
                pcap = tmp / f"{row.key}.pcap"
                write_pcap(pcap, data)
                log(f"{row.key}: {len(data[0])} B captured per input frame")
                rows[row] = measure_row(row, programs(row, binaries, pcap, files, args.core, tag), tmp, args)
                for name, res in rows[row].items():
                    if res.error:
                        problems.append(f"{row.key}: {name} did not run: {res.error.strip()[-600:]}")
                    elif res.lost() > MAX_NOT_FORWARDED:
                        problems.append(f"{row.key}: {name} did not forward {res.lost():.1%} of what it was offered")
        report(rows, problems, args)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
