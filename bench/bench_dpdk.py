"""Server program benchmark (issue 5): per-core Mpps of the generated VPN gateway server
part (bridge in, overlay_routes lookup, bridge out) with 1, 1M (and with --full 16M) overlay
entries, 64 B and 512 B customer packets, on a DPDK net_null vdev (net_ring too with --ring),
with and without hugepages, beside baselines measured in the same run (nf-bench,
targets/dpdk/runtime/nfc_bench.c):

* I/O ceiling: an empty rx_burst -> tx_burst loop on the same vdev and core;
* I/O + copy: the same loop copying a valid template packet into every mbuf (net_null's
  packets are garbage, so the nfc run copies the template too: its fair ceiling);
* bare bulk lookup: rte_hash_lookup_bulk_data over the same table and keys, no I/O.

Each figure is the median of 3 runs; before them, the wall time of ``nfc build`` per example.
Updates while forwarding are bench/bench_updates.py's (packets that reach the tables, the
writer on another core than the forwarding lcore).

    .venv/bin/python bench/bench_dpdk.py            # 1 and 1M entries (~1.5 minutes)
    .venv/bin/python bench/bench_dpdk.py --full     # also 16M (needs ~3.5 GB; ~5 minutes)

Hugepages: root reserves them by writing /proc/sys/vm/nr_hugepages (EAL --in-memory) and
the previous value is always written back; without them only the --no-huge rows are run.
Goals (not tests): nfc >= 0.5x the I/O ceiling with 1 entry, >= 0.6x the bulk lookup at 16M
entries.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler.pipeline import compile_program  # noqa: E402
from emulator.switchmodel import SwitchReference  # noqa: E402
from lang import Diagnostics, SourceMap, load  # noqa: E402
from runtime.server_proc import hugepages  # noqa: E402

COMMON = ["--no-pci", "--no-shconf", "--no-telemetry", "--log-level=warning"]
TABLE = "overlay_routes"
M = 1_000_000


def route(i: int) -> tuple[int, int, int]:
    """The i-th overlay route's (customer, overlay, VM address)."""
    return 1 + i % 4000, 1 + (i // 4000) % 4000, 0xC0A80000 + i


def route_record(i: int) -> list[int]:
    return [*route(i), 0xAC100000 + i % 65536, i % 2**24]


def csum(b: bytes) -> int:
    s = int(sum(struct.unpack(f"!{len(b) // 2}H", b)))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def customer_packet(i: int, size: int) -> bytes:
    """A QinQ customer frame of ``size`` bytes (no FCS) to the i-th route's VM: UDP in IPv4."""
    cu, ov, vm = route(i)
    eth = bytes.fromhex("02000000000102000000000288a8") + struct.pack("!HHHH", cu, 0x8100, ov, 0x0800)
    payload = b"x" * (size - len(eth) - 28)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + len(payload), 1, 0, 64, 17, 0, bytes([10, 0, 0, 1]),
                     vm.to_bytes(4, "big"))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return eth + ip + struct.pack("!HHHH", 1234, 4789 + 1, 8 + len(payload), 0) + payload


def write_pcap(path: Path, packets: list[bytes]) -> None:
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for p in packets:
            f.write(struct.pack("<IIII", 0, 0, len(p), len(p)))
            f.write(p)


# ---- nfc build times ---------------------------------------------------------------------------------


def build_times(tmp: Path) -> Path:
    """Build every example for tofino+dpdk, print the wall times; the VPN gateway's build folder."""
    print("nfc build (--target tofino+dpdk) wall time")
    vpn = tmp / "build" / "vpn_gateway"
    for nfp in sorted((ROOT / "examples").glob("*.nfp")):
        out = tmp / "build" / nfp.stem
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", str(nfp.relative_to(ROOT)), "--target",
                            "tofino+dpdk", "-o", str(out)], cwd=ROOT, capture_output=True, text=True)
        dt = time.perf_counter() - t
        status = "ok" if r.returncode == 0 else f"FAILED ({r.returncode}): {r.stderr.strip()[-200:]}"
        print(f"  {nfp.name:<22} {dt:6.2f} s  {status}")
    if not (vpn / "server" / "nf.c").exists():
        raise SystemExit("the VPN gateway did not build")
    return vpn


def make(server: Path, target: str) -> Path:
    """``make target``: one program for every size (overlay_routes is a control-plane table,
    sized from what the entries file loads; NFC_TABLE_CAP bounds data-plane state only)."""
    subprocess.run(["make", "-C", str(server), "-B", "-j2", target], check=True, capture_output=True)
    return server / target


# ---- packets/s --------------------------------------------------------------------------------------


class Workload:
    """Entries files and template packets per table size and packet size (built once)."""

    def __init__(self, tmp: Path, flows: int) -> None:
        self.tmp = tmp
        self.flows = flows
        d = Diagnostics()
        c = compile_program(load(str(ROOT / "examples/vpn_gateway.nfp"), d, SourceMap()), "tofino+dpdk", d)
        self.switch = SwitchReference(c.need_program(), c.placement, c.bridges,  # type: ignore[arg-type]
                                  c.need_targets().server_ports)
        self.entries: dict[int, Path] = {}
        self.packets: dict[tuple[int, int], tuple[Path, int]] = {}

    def entries_file(self, n: int) -> Path:
        if n not in self.entries:
            path = self.tmp / f"entries{n}.txt"
            with path.open("w") as f:
                for i in range(n):
                    cu, ov, vm, v1, v2 = route_record(i)
                    f.write(f"{TABLE} {cu} {ov} {vm} : {v1} {v2}\n")
            self.entries[n] = path
        return self.entries[n]

    def pcap(self, n: int, size: int) -> tuple[Path, int]:
        """min(n, flows) packets to distinct random routes of the n, as the switch sends them to the
        server; (file, length of a packet)."""
        if (n, size) not in self.packets:
            routes = random.Random(n).sample(range(n), min(n, self.flows))
            out: list[bytes] = []
            for i in routes:
                o = self.switch.process(customer_packet(i, size), 1)
                if o.kind != "forward" or o.port not in self.switch.server_ports:
                    raise SystemExit(f"the switch model does not send route {i} to the server: {o}")
                out.append(o.data)
            path = self.tmp / f"p{n}_{size}.pcap"
            write_pcap(path, out)
            self.packets[(n, size)] = (path, len(out[0]))
        return self.packets[(n, size)]


def memory_mb(n: int) -> int:
    return 512 if n <= M else 3072


def run_bench(binary: Path, work: Workload, n: int, size: int, huge: bool, vdev: str, args: argparse.Namespace,
              wrap: tuple[str, ...] = ()) -> dict[str, Any] | str:
    """nf-bench's results (args: lcore, ms, reps, iters), or why there are none; ``wrap``: a
    command nf-bench runs under (bench_instructions.py: valgrind)."""
    pcap, plen = work.pcap(n, size)
    dev = f"net_null0,size={plen}" if vdev == "null" else "net_ring0"
    eal = ["--in-memory" if huge else "--no-huge", "-m", str(memory_mb(n)), *COMMON, "-l", str(args.lcore),
           f"--vdev={dev}"]
    cmd = [*wrap, str(binary), *eal, "--", "--entries", str(work.entries_file(n)), "--packets", str(pcap),
           "--table", TABLE, "--ms", str(args.ms), "--reps", str(args.reps), "--iters", str(args.iters)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return "timed out"
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines or not lines[-1].startswith("{"):
        return f"failed ({r.returncode}): {r.stderr.strip()[-300:]}"
    res: dict[str, Any] = json.loads(lines[-1])
    if res["nfc_forwarded"] != res["nfc_processed"] or res["bulk_hit_ratio"] < 1.0:
        return f"packets not forwarded or keys missing: {lines[-1][:400]}"
    return res


HEADER = (f"{'entries':>9} {'pkt':>4} {'huge':>4} {'vdev':>5} {'I/O ceil':>9} {'I/O+copy':>9} {'nfc':>7} "
          f"{'nfc/ceil':>8} {'nfc/copy':>8} {'bulk lkp':>9} {'nfc/bulk':>8} {'1 lkp':>7} {'nfc ns':>7}")


def row(n: int, size: int, huge: bool, vdev: str, res: dict[str, Any] | str) -> str:
    head = f"{n:>9} {size:>4} {'yes' if huge else 'no':>4} {vdev:>5}"
    if isinstance(res, str):
        return f"{head} {res}"
    m = res["mpps"]
    return (f"{head} {m['io_empty']:>9.2f} {m['io_copy']:>9.2f} {m['nfc']:>7.2f} {m['nfc'] / m['io_empty']:>8.2f} "
            f"{m['nfc'] / m['io_copy']:>8.2f} {m['bulk_lookup']:>9.2f} {m['nfc'] / m['bulk_lookup']:>8.2f} "
            f"{m['lookup']:>7.2f} {res['nfc_ns']:>7.1f}")


def packet_rates(server: Path, work: Workload, args: argparse.Namespace) -> list[tuple[tuple[Any, ...], Any]]:
    sizes = [1, M] + ([16 * M] if args.full else [])
    binary = make(server, "nf-bench")
    vdevs = ["null", "ring"] if args.ring else ["null"]
    results: list[tuple[tuple[Any, ...], Any]] = []
    print(f"\nMpps on lcore {args.lcore} (median of {args.reps} x {args.ms} ms); pkt = customer frame bytes (the "
          f"server gets it 3 B shorter: QinQ tags out, bridge in); min(entries, {args.flows}) distinct flows;"
          "\nnfc = the generated server program's processing incl. the template copy; I/O ceil = empty rx->tx loop;"
          "\nI/O+copy = rx->template copy->tx; bulk lkp = bare rte_hash_lookup_bulk_data (Mkeys/s, no I/O);"
          "\n1 lkp = single rte_hash_lookup_data (Mkeys/s, no I/O); nfc ns = one packet at a time in memory "
          "(no burst prefetch: a latency, not the forwarding loop's cost per packet)")
    print(HEADER)

    def phase(huge: bool) -> None:
        for n in sizes:
            for size in (64, 512):
                for vdev in vdevs:
                    res = run_bench(binary, work, n, size, huge, vdev, args)
                    results.append(((n, size, huge, vdev), res))
                    print(row(n, size, huge, vdev, res), flush=True)

    phase(False)
    need = max(memory_mb(n) for n in sizes) + 256
    with hugepages(need) as got:
        if got:
            phase(True)
        else:
            print(f"hugepages: unavailable (could not reserve {need} MB of 2 MB pages)")
    return results


def goals(results: list[tuple[tuple[Any, ...], Any]]) -> None:
    print("\ngoals (nfc/ceil is against the empty loop; nfc/copy against the loop with the same template copy):")
    for (n, size, huge, vdev), res in results:
        if isinstance(res, str):
            continue
        m = res["mpps"]
        where = f"{n:>9} entries, {size:>3} B, {'huge   ' if huge else 'no-huge'}, {vdev}"
        if n == 1:
            ok = m["nfc"] / m["io_empty"] >= 0.5
            print(f"  {where}: nfc/ceil {m['nfc'] / m['io_empty']:.2f} (nfc/copy {m['nfc'] / m['io_copy']:.2f}) "
                  f">= 0.5: {'met' if ok else 'NOT met'}")
        if n == 16 * M:
            ok = m["nfc"] / m["bulk_lookup"] >= 0.6
            print(f"  {where}: nfc/bulk {m['nfc'] / m['bulk_lookup']:.2f} >= 0.6: {'met' if ok else 'NOT met'}")


def on_sigterm(*_: object) -> None:
    """SIGTERM unwinds like ^C, so the hugepages reserved are given back."""
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="also 16M entries")
    ap.add_argument("--ring", action="store_true", help="also on net_ring")
    ap.add_argument("--flows", type=int, default=65536, help="distinct packets (routes) per table size")
    ap.add_argument("--ms", type=int, default=250, help="milliseconds per measurement")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--lcore", type=int, default=1, help="the core measured (default 1: 0 is where DPDK tests run)")
    ap.add_argument("--iters", type=int, default=1_000_000, help="in-memory ns/packet iterations")
    ap.add_argument("--json", help="also write every nf-bench result to this file")
    ap.add_argument("--skip", action="append", default=[], choices=["build", "rates"])
    ap.add_argument("--quick", action="store_true", help="one repetition of 100 ms each (build.py bench --quick)")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.ms, args.iters = 1, 100, 200_000
    signal.signal(signal.SIGTERM, on_sigterm)
    with tempfile.TemporaryDirectory(prefix="nfc-bench-") as tmpdir:
        tmp = Path(tmpdir)
        t = time.perf_counter()
        if "build" in args.skip:
            vpn = tmp / "build" / "vpn_gateway"
            subprocess.run([sys.executable, "-m", "nfc.cli", "build", "examples/vpn_gateway.nfp", "-o", str(vpn)],
                           check=True, cwd=ROOT, capture_output=True)
        else:
            vpn = build_times(tmp)
        server = vpn / "server"
        if "rates" not in args.skip:
            results = packet_rates(server, Workload(tmp, args.flows), args)
            goals(results)
            if args.json:
                Path(args.json).write_text(json.dumps([{"entries": k[0], "packet": k[1], "huge": k[2], "vdev": k[3],
                                                        "result": r} for k, r in results], indent=1) + "\n")
        print(f"\ntotal {time.perf_counter() - t:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
