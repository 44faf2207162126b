"""Server program benchmark (issue 5): per-packet nanoseconds of the generated VPN gateway
server part (bridge in, overlay lookup, bridge out) against a bare rte_hash_lookup_data
loop over the same table and keys, both measured in the same run by nf-bench (no NIC I/O
on these machines).  Ratio = bare lookup ns / nfc ns (1.0 = as fast as the lookup alone).

    .venv/bin/python bench/bench_dpdk.py            # 1 and 1M entries
    .venv/bin/python bench/bench_dpdk.py --full     # also 16M (needs ~3 GB and a few minutes)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether  # noqa: E402
from scapy.utils import RawPcapWriter  # noqa: E402

from compiler.pipeline import compile_program  # noqa: E402
from lang import Diagnostics, SourceMap, load  # noqa: E402
from targets.switchmodel import SwitchModel  # noqa: E402

EAL = ["--no-huge", "--no-pci", "--no-shconf", "--no-telemetry", "--log-level=warning", "-l", "0"]


def route(i: int) -> tuple[int, int, int]:
    """The i-th overlay route's (customer, overlay, VM address)."""
    return 1 + i % 4000, 1 + (i // 4000) % 4000, 0xC0A80000 + i


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--iters", type=int, default=2_000_000)
    args = ap.parse_args()
    sizes = [1, 1_000_000] + ([16_000_000] if args.full else [])
    with tempfile.TemporaryDirectory(prefix="nfc-bench-") as tmp:
        out = Path(tmp) / "vpn"
        subprocess.run([sys.executable, "-m", "nfc.cli", "build", "examples/vpn_gateway.nfp", "-o", str(out)],
                       check=True, cwd=ROOT, capture_output=True)
        cap = max(sizes)
        subprocess.run(["make", "-C", str(out / "server"), "nf-bench",
                        f"CFLAGS=-O2 -march=native -DNFC_TABLE_CAP={cap}u"], check=True, capture_output=True)
        d = Diagnostics()
        c = compile_program(load(str(ROOT / "examples/vpn_gateway.nfp"), d, SourceMap()), "tofino+dpdk", d)
        switch = SwitchModel(c.need_program(), c.placement, c.bridges, c.need_targets().server_ports)  # type: ignore[arg-type]
        print(f"{'entries':>10} {'nfc ns/pkt':>11} {'bare lookup ns':>15} {'ratio':>6}")
        for n in sizes:
            entries = Path(tmp) / f"e{n}.txt"
            with entries.open("w") as f:
                for i in range(n):
                    cu, ov, vm = route(i)
                    f.write(f"overlay_routes {cu} {ov} {vm} : {0xAC100000 + i % 65536} {i % 2**24}\n")
            with RawPcapWriter(str(Path(tmp) / "p.pcap"), linktype=1) as w:
                for k in range(1024):
                    cu, ov, vm = route((k * 7919) % n)
                    pkt = (Ether() / Dot1AD(vlan=cu) / Dot1Q(vlan=ov)
                           / IP(dst=".".join(str(vm >> s & 255) for s in (24, 16, 8, 0))) / UDP() / (b"x" * 18))
                    w.write(switch.process(bytes(pkt), 1).data)
            mem = str(max(256, n // 4000))
            r = subprocess.run([str(out / "server/nf-bench"), *EAL, "-m", mem, "--", "--entries", str(entries),
                                "--packets", str(Path(tmp) / "p.pcap"), "--table", "overlay_routes",
                                "--iters", str(args.iters)], capture_output=True, text=True, timeout=1800)
            if r.returncode != 0:
                print(f"{n:>10} failed: {r.stderr.strip()[-300:]}")
                continue
            res = json.loads(r.stdout.strip().splitlines()[-1])
            print(f"{n:>10} {res['nfc_ns']:>11.1f} {res['bare_lookup_ns']:>15.1f} "
                  f"{res['bare_lookup_ns'] / res['nfc_ns']:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
