"""Reference-interpreter throughput, against scapy dissecting the same packets in the same run.

The interpreter is the semantics, not a data plane: this tracks that differential tests
stay affordable.  Ratio = interpreter packets/s ÷ scapy dissections/s (higher is better).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether  # noqa: E402

from compiler.interp import Entry, Interpreter, Match  # noqa: E402
from compiler.lower import lower  # noqa: E402
from lang import Diagnostics, SourceMap, load  # noqa: E402

N = 2000


def rate(fn, items) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    for x in items:
        fn(x)
    return len(items) / (time.perf_counter() - t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="one run of each instead of the median of 3")
    runs = 1 if ap.parse_args().quick else 3
    prog = lower(load(str(ROOT / "examples/vpn_gateway.nfp"), Diagnostics(), SourceMap()))
    it = Interpreter(prog)
    for i in range(256):
        it.tables["overlay_routes"].insert(Entry((Match(7), Match(42), Match(0xC0A80100 + i)),
                                                 {"host_ip": 0xAC100505, "vni": 5000}))
    it.tables["underlay_routes"].insert(Entry((Match(0xAC100000, 16),), {"port": 20, "next_hop_mac": 1}))
    pkts = [bytes(Ether() / Dot1AD(vlan=7) / Dot1Q(vlan=42) / IP(src="10.0.0.1", dst=f"192.168.1.{i % 256}")
                  / UDP() / (b"x" * 64)) for i in range(N)]
    interp = statistics.median(rate(lambda p: it.process(p, 1), pkts) for _ in range(runs))
    scapy = statistics.median(rate(Ether, pkts) for _ in range(runs))
    print(f"interpreter: {interp:,.0f} packets/s; scapy dissection: {scapy:,.0f} packets/s; "
          f"ratio {interp / scapy:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
