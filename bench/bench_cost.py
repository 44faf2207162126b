"""The server cost model measured from the generated code (issue 13, item 3).

    .venv/bin/python bench/bench_cost.py --write    # calibrate, write the profile's figures and the table
    .venv/bin/python bench/bench_cost.py            # the same, writing neither (--json PATH: the table)
    .venv/bin/python bench/bench_cost.py --quick    # one round
    .venv/bin/python bench/bench_cost.py --only insert --base TREE   # a program, this tree against TREE's

Calibration: small ``.nfp`` programs, one per operation kind the generator emits (Ethernet + IPv4
parse and forward; the same with extra field assignments; a CRC-16; two pushes; six headers parsed; one
exact lookup at 1K and 1M entries, and at 1M with its key written by an earlier stage; one LPM
lookup at 1K and 1M routes, at 1M with its key written by an earlier stage, and behind a VRF
field; the two re-keyed ones both with a register write, which keeps the burst packet by packet,
and without, run stage by stage: docs/server.md, "Stage by stage"; one classifier of ternary
addresses and a protocol range at 1K and 16K rules; a state insert per packet), each built with
``nfc build --target dpdk`` and run on the same core and vdevs as
bench/bench_l3fwd.py runs its programs (net_pcap replaying 4,096 flows of 64-byte frames, output
to net_null), in interleaved rounds; the figure is nanoseconds per packet per CPU-second of the
forwarding thread (medians).  The model's prediction is linear in its costs (the partitioner's
``crossing_ns`` and ``stage_cost_ns`` with one cost at 1 and the rest at 0 give a program's
terms), so the costs are fitted to all the programs at once by least squares (``fit``):
``io_vdev`` (this vdev's I/O; the profile's ``io``, a NIC's, is what placement uses and stays),
``parse``, ``stmt``, ``push``, ``hash``, ``exact_1m``, ``lpm``, ``relookup``, ``relookup_lpm``,
``ternary``, ``ternary_16k`` and ``insert``.  ``--write`` puts them in stdlib/targets/dpdk_server.toml with the
measured figure, the date and this command in the comment above each.

Validation: the examples whose server program the same vdevs can feed (bench/l3fwd.nfp and the
DSR router with bench/_l3fwd_work.py's routes and frames; both pipelines of the VPN gateway with
examples/demo_run.py's tenant) run in the same rounds; their predicted ns/packet (the
partitioner's ``server_ns`` of the pipeline the frames take, with the profile as written and
``io_vdev`` for ``io``) is put beside the measured one, printed and written to
bench/results/cost_table.json with the share of packets not forwarded.  docs/server.md, "Cost
model", shows the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _l3fwd_work as work  # noqa: E402
from bench._dpdk_proc import Program, Window, settle, start, stop_all  # noqa: E402
from bench.bench_l3fwd import build_nfc as build_l3fwd_style  # noqa: E402
from bench.bench_l3fwd import exit_counters  # noqa: E402
from compiler import ir  # noqa: E402
from compiler.pipeline import compile_program  # noqa: E402
from compiler.place_problem import crossing_ns, stage_cost_ns  # noqa: E402
from compiler.profiles import TargetSpec  # noqa: E402
from lang import Diagnostics, SourceMap, load  # noqa: E402

PROFILE = ROOT / "stdlib" / "targets" / "dpdk_server.toml"
RESULTS = ROOT / "bench" / "results" / "cost_table.json"
COMMAND = ".venv/bin/python bench/bench_cost.py --write"
COST_KEYS = ("io", "parse", "stmt", "push", "relookup", "relookup_lpm", "exact_1m", "exact_16m", "lpm", "ternary",
             "ternary_16k", "crypto", "crypto_per_byte", "hash", "insert", "bridge")
MEMORY_MB = 1024
# rte_hash_lookup_bulk_data at 16M entries over 1M (../shared/notes/dpdk-here.md: 22.9 / 18.9 ns):
# exact_16m is exact_1m times this, 16M entries being too many to load here
RTE_HASH_16M_OVER_1M = 22.9 / 18.9
# The examples this benchmark cannot feed yet, and why (in the table as "not measured").
NOT_MEASURED = {
    "examples/bluebird_tor.nfp": "its server part does not build with --target dpdk (E100: fields wider than 64 "
                                 "bits, its IPv6 routes); with a switch it is the cache-miss path, which needs "
                                 "bridged packets from the switch model, not raw frames on a vdev",
    "examples/cgnat.nfp": "its cost is a state insert per new flow: it needs a flow-churn workload (net_pcap "
                          "replays the same 4,096 flows, which after one pass are all known)",
    "examples/ipsec_gateway.nfp": "its server part does not build with --target dpdk (E100: fields wider than "
                                  "64 bits); ESP also needs a crypto device (aesni_gcm vdev) and the SA entries",
}

# ---- the profile's [cost] comments ---------------------------------------------------------------------

_ASSIGN = re.compile(r"^(?P<key>[a-z_0-9]+)\s*=\s*(?P<value>[-0-9.eE+]+)\s*$")


def read_costs(text: str) -> dict[str, tuple[float, list[str]]]:
    """The [cost] section of a profile: each key's value and the comment lines just above it
    (without their ``# ``)."""
    out: dict[str, tuple[float, list[str]]] = {}
    section, comments = "", list[str]()
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            section, comments = stripped, []
        elif stripped.startswith("#"):
            comments.append(stripped.lstrip("#").strip())
        elif section == "[cost]" and (m := _ASSIGN.match(stripped)):
            out[m["key"]] = (float(m["value"]), comments)
            comments = []
        else:
            comments = []
    return out


def write_costs(text: str, new: dict[str, tuple[float, str]]) -> str:
    """``text`` with each key of ``new`` in its [cost] section set to the value, and the comment
    lines just above it replaced by the one given.  Every other line is kept as it was; a key the
    section lacks is an error (the profile's structure is the model's, not the benchmark's)."""
    out: list[str] = []
    pending: list[str] = []  # comment lines not yet known to belong to a key being rewritten
    section, done = "", set()
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(line)
            continue
        if stripped.startswith("["):
            section = stripped
        m = _ASSIGN.match(stripped)
        if section == "[cost]" and m and m["key"] in new:
            value, comment = new[m["key"]]
            out += [f"# {line}" for line in textwrap.wrap(comment, 98)] + [f"{m['key']} = {float(value)}"]
            done.add(m["key"])
        else:
            out += [*pending, line]
        pending = []
    missing = set(new) - done
    if missing:
        raise ValueError(f"no such keys in [cost]: {sorted(missing)}")
    return "\n".join(out + pending) + "\n"


# ---- the model's terms -----------------------------------------------------------------------------------


def compiled(nfp: Path) -> tuple[ir.Program, TargetSpec, dict[str, bool]]:
    """``nfp`` compiled for ``--target dpdk``: the program, its server profile and, per pipeline,
    whether any of its stages is on the server."""
    diags = Diagnostics()
    c = compile_program(load(str(nfp), diags, SourceMap()), "dpdk", diags, allow_overcommit=True)
    srv = c.need_targets().server
    assert srv is not None and c.placement is not None
    return c.need_program(), srv, {p: ns > 0 for p, ns in c.placement.server_ns.items()}


def terms(nfp: Path, pipeline: str) -> dict[str, float]:
    """The partitioner's server ns/packet of ``pipeline`` as a linear form in the profile's costs
    (it is linear in them): each cost key's coefficient, from ``crossing_ns`` and ``stage_cost_ns``
    with that cost at 1 and the others at 0 (partition._placement adds them)."""
    prog, srv, on_server = compiled(nfp)
    if not on_server[pipeline]:
        return {}
    pipe = next(p for p in prog.pipelines if p.name == pipeline)
    out = {}
    for key in COST_KEYS:
        unit = dataclasses.replace(srv, cost={k: float(k == key) for k in COST_KEYS})
        out[key] = crossing_ns(prog, pipe, unit) + sum(stage_cost_ns(prog, prog.stages[s], unit) for s in pipe.stages)
    return {k: v for k, v in out.items() if v}


def predict(form: dict[str, float], costs: dict[str, float]) -> float:
    return sum(coef * costs[k] for k, coef in form.items())


# ---- the programs --------------------------------------------------------------------------------------

_HEAD = """import "std/headers.nfp";
packet { outer_eth: ethernet; outer_ipv4: ipv4; eth: ethernet; ipv4: ipv4; }
const ROUTER_MAC: bit<48> = 02:00:00:00:00:01;
parser l3 {
  state start { extract eth; transition select(eth.ethertype) { ETH_IPV4: ip; default: drop(not_ipv4); } }
  state ip { extract ipv4; transition accept; }
}
ports all = [0..15];
pipeline forward { ports = all; parser = l3; stages = [work]; traffic = 100%; }
"""
_ASSIGNMENTS = """  ipv4.ttl = ipv4.ttl - 1;
  ipv4.dscp = 1;
  ipv4.ecn = 0;
  ipv4.identification = ipv4.identification + 1;
  ipv4.flags = 0;
  ipv4.frag_offset = 0;
  eth.dst = 02:00:00:00:00:02;
  eth.src = ROUTER_MAC;
"""
_PARSE6 = """import "std/headers.nfp";
packet { outer_eth: ethernet; outer_ipv4: ipv4; outer_udp: udp; vxlan: vxlan; eth: ethernet; ipv4: ipv4; }
parser tunnel {
  state start { extract outer_eth; transition select(outer_eth.ethertype) { ETH_IPV4: oip; default: drop(a); } }
  state oip { extract outer_ipv4; transition select(outer_ipv4.protocol) { IP_UDP: oudp; default: drop(b); } }
  state oudp { extract outer_udp; transition select(outer_udp.dport) { UDP_VXLAN: vx; default: drop(c); } }
  state vx { extract vxlan; transition inner; }
  state inner { extract eth; transition select(eth.ethertype) { ETH_IPV4: ip; default: drop(d); } }
  state ip { extract ipv4; transition accept; }
}
ports all = [0..15];
pipeline forward { ports = all; parser = tunnel; stages = [work]; traffic = 100%; }
stage work { forward(1); }
"""
_ENCAP = """stage work {
  push outer_eth { src = ROUTER_MAC; ethertype = ETH_IPV4; }
  push outer_ipv4 { version = 4; ihl = 5; total_len = ipv4.total_len + 20; ttl = 64; protocol = 4; dst = ipv4.src; }
  forward(1);
}
"""
_VRF_LPM = """table vrf_routes { key { ipv4.protocol: exact; ipv4.dst: lpm; } value { port: bit<16>; } size = 1M; }
stage work { lookup vrf_routes { hit(r) { forward(r.port); } miss { drop(no_route); } } }
"""
# the key is written by an earlier stage: the burst's bulk lookup saw the key as it arrived.
# The key an earlier stage wrote differs per packet at arrival too (the destination, one more
# after the rewrite; the entries are those of the rewritten one): the burst's lookup of the
# arrival key is a whole wasted lookup, as the VPN gateway's (meta.customer and meta.overlay
# written, ipv4.dst as it came), not one per run of equal keys (a metadata key alone is 0 in
# every packet as it arrives: nfc_prefetch looks the run up once, which made it free).
# The register write keeps the packets in order (compiler/analysis.py, order_free): the server
# runs the burst packet by packet, so the key the first stage wrote is looked up alone.  Without
# it (the _STAGED programs) the burst runs stage by stage and the lookup is in bulk at its stage.
_IN_ORDER = "register in_order: bit<32>[1];\n"
_STAGED = """table hosts { key { ipv4.dst: exact; } value { port: bit<16>; } size = 1M; }
stage rekey { ipv4.dst = ipv4.dst + 1; }
stage work { lookup hosts { hit(r) { forward(r.port); } miss { drop(no_host); } } }
"""
_REKEYED = _IN_ORDER + _STAGED.replace("stage rekey { ", "stage rekey { in_order[0] = ipv4.dst; ")
# (The LPM one still looks up meta.k, 0 as every packet arrives: the burst's walk of it stays in
# cache, so relookup_lpm is measured without a whole wasted walk.  A rewritten destination would
# have to leave its route for the walk to miss, and then it would need routes of its own.)
_STAGED_LPM = """metadata { k: bit<32>; }
table routes { key { meta.k: lpm; } value { port: bit<16>; next_hop_mac: bit<48>; } size = 1M; }
stage rekey { meta.k = ipv4.dst; }
stage work { lookup routes { hit(r) { forward(r.port); } miss { drop(no_route); } } }
"""
_REKEYED_LPM = _IN_ORDER + _STAGED_LPM.replace("stage rekey { ", "stage rekey { in_order[0] = ipv4.dst; ")
# A firewall-like classifier (rte_acl, nfc_acl.h): ternary source and destination, a protocol range
# (acl_entries writes its rules).
_TERNARY = """table rules {
  key { ipv4.src: ternary; ipv4.dst: ternary; ipv4.protocol: range; }
  value { port: bit<16>; }
  size = %s;
}
stage work { lookup rules { hit(r) { forward(r.port); } miss { drop(no_rule); } } }
"""
# A state insert per packet: each flow comes back after the 4,095 others (~0.3 ms), long after its
# entry expired, so its lookup finds the entry stale, removes it (nfc_state_expire) and inserts a
# new one: what a table of short flows pays per new flow once it is full of expired ones.
_INSERT = """state flows { key { ipv4.src: exact; ipv4.dst: exact; } value { n: bit<8>; } size = 64K; timeout = 1us; }
stage work { lookup flows { hit(f) { forward(1); } miss { insert flows { n = 1; } forward(1); } } }
"""
_EXACT = """table hosts { key { ipv4.dst: exact; } value { port: bit<16>; } size = %s; }
stage work { lookup hosts { hit(r) { forward(r.port); } miss { drop(no_host); } } }
"""


def calibration_sources() -> dict[str, str]:
    """The calibration programs' text, by name: parse + forward, the same with the assignments, a hash,
    one exact lookup (1K, 1M entries; 1M with its key written by an earlier stage, in a burst run
    packet by packet and in one run stage by stage), one LPM lookup (bench/l3fwd.nfp: 1K, 1M
    routes; 1M with its key written by an earlier stage, both ways)."""
    l3fwd = (ROOT / "bench" / "l3fwd.nfp").read_text()
    two = _HEAD.replace("stages = [work]", "stages = [rekey, work]")
    return {"parse_forward": _HEAD + "stage work { forward(1); }\n",
            "assignments": _HEAD + "stage work {\n" + _ASSIGNMENTS + "  forward(1);\n}\n",
            "encap": _HEAD + _ENCAP, "parse_6": _PARSE6, "vrf_lpm_1m": _HEAD + _VRF_LPM,
            "hash": _HEAD + "stage work {\n  ipv4.identification = crc16(ipv4.src, ipv4.dst, ipv4.protocol);\n"
                            "  forward(1);\n}\n",
            "exact_1k": _HEAD + _EXACT % "1K", "exact_1m": _HEAD + _EXACT % "1M",
            "exact_1m_rekeyed": two + _REKEYED, "lpm_1m_rekeyed": two + _REKEYED_LPM,
            "exact_1m_rekeyed_staged": two + _STAGED, "lpm_1m_rekeyed_staged": two + _STAGED_LPM,
            "lpm_1k": l3fwd.replace("size = 1M;", "size = 1K;"), "lpm_1m": l3fwd,
            "ternary_1k": _HEAD + _TERNARY % "1K", "ternary_16k": _HEAD + _TERNARY % "16K", "insert": _HEAD + _INSERT}


@dataclass(frozen=True, slots=True)
class Case:
    """A program run in the rounds: its source, the pipeline its frames take, the entries it loads
    and the frames it is fed; ``example``: an example's row of the table (else calibration)."""

    name: str
    nfp: Path
    pipeline: str
    entries: Path
    pcap: Path
    example: bool = False
    ports: tuple[int, int] | None = None  # the logical ports of DPDK ports 0 and 1 (the server's --ports)
    tree: Path = ROOT  # the checkout whose nfc builds it (--base: another)


def exact_entries(keys: list[int], n: int, path: Path) -> None:
    """``hosts`` entries for every key of ``keys`` and more up to ``n`` (distinct, deterministic)."""
    seen, extra = set(keys), 0x0B000000
    with path.open("w") as f:
        for k in keys:
            f.write(f"hosts {k:#x} : {work.OUT_PORT}\n")
        while len(seen) < n:
            extra += 1
            if extra not in seen:
                seen.add(extra)
                f.write(f"hosts {extra:#x} : {work.OUT_PORT}\n")


def acl_entries(routes: list[work.Route], path: Path) -> None:
    """``rules`` entries, one per route of ``routes``: its prefix as the destination's value and mask;
    the source TEST-NET-1's /24 (where work.frame's flows come from), a /16 around it or any; the
    protocol UDP, TCP or UDP, any; the priority the prefix's length (the longest prefix wins, as the
    LPM would), and a catch-all rule below them all, so that every frame is classified by rules of
    several shapes and none is dropped."""
    sources = ("0xc0000200&&&0xffffff00", "0xc0000000&&&0xffff0000", "0&&&0")
    protocols = ("17..17", "6..17", "0..255")
    with path.open("w") as f:
        for i, r in enumerate(routes):
            mask = (0xFFFFFFFF << (32 - r.length)) & 0xFFFFFFFF
            f.write(f"rules {sources[i % 3]} {r.network:#x}&&&{mask:#x} {protocols[i // 3 % 3]} @{r.length + 1} "
                    f": {work.OUT_PORT}\n")
        f.write(f"rules 0&&&0 0&&&0 0..255 @1 : {work.OUT_PORT}\n")


def cases(tmp: Path) -> list[Case]:
    """Every program of the run with its files written in ``tmp``."""
    routes = {n: work.route_set(n) for n in (1000, 16_000, 1_000_000)}
    frames = {n: [work.frame(d, i) for i, d in enumerate(work.flow_destinations(r))] for n, r in routes.items()}
    for n, fr in frames.items():
        if n == 16_000:  # the ternary one's flows, to hosts of its rules' prefixes
            work.write_pcap(tmp / "flows16k.pcap", fr)
            acl_entries(routes[n], tmp / "acl16k.txt")
            continue
        work.write_pcap(tmp / f"flows{n}.pcap", fr)
        work.nfc_entries(routes[n], tmp / f"routes{n}.txt")
    work.dsr_entries(routes[1_000_000], tmp / "dsr.txt")
    work.write_pcap(tmp / "dsr.pcap", [work.dsr_frame(f, i) for i, f in enumerate(frames[1_000_000])])
    keys = work.flow_destinations(routes[1000])
    exact_entries(keys, 1000, tmp / "exact1k.txt")
    exact_entries(keys, 1_000_000, tmp / "exact1m.txt")
    exact_entries([(k + 1) & 0xFFFFFFFF for k in keys], 1_000_000, tmp / "exact1m_next.txt")  # _REKEYED's
    acl_entries(routes[1000], tmp / "acl1k.txt")
    (tmp / "none.txt").write_text("")
    with (tmp / "vrf1m.txt").open("w") as f:
        for r in routes[1_000_000]:
            f.write(f"vrf_routes 17 {r.network:#x}/{r.length} : {work.OUT_PORT}\n")
    files = {"parse_forward": "none.txt", "assignments": "none.txt", "encap": "none.txt", "parse_6": "none.txt",
             "hash": "none.txt",
             "vrf_lpm_1m": "vrf1m.txt",
             "exact_1k": "exact1k.txt",
             "exact_1m": "exact1m.txt", "exact_1m_rekeyed": "exact1m_next.txt",
             "exact_1m_rekeyed_staged": "exact1m_next.txt", "lpm_1k": "routes1000.txt",
             "lpm_1m": "routes1000000.txt", "lpm_1m_rekeyed": "routes1000000.txt",
             "lpm_1m_rekeyed_staged": "routes1000000.txt", "ternary_1k": "acl1k.txt", "ternary_16k": "acl16k.txt",
             "insert": "none.txt"}
    out = []
    for name, text in calibration_sources().items():
        (tmp / f"{name}.nfp").write_text(text)
        pcap = ("dsr.pcap" if name == "parse_6" else "flows1000000.pcap" if "lpm_1m" in name
                else "flows16k.pcap" if name == "ternary_16k" else "flows1000.pcap")
        out.append(Case(name, tmp / f"{name}.nfp", "forward", tmp / files[name], tmp / pcap))
    out.append(Case("bench/l3fwd.nfp, 1M routes", ROOT / "bench" / "l3fwd.nfp", "forward",
                    tmp / "routes1000000.txt", tmp / "flows1000000.pcap", example=True))
    out.append(Case("examples/dsr_router.nfp, 1M routes", ROOT / "examples" / "dsr_router.nfp", "access_to_vpc",
                    tmp / "dsr.txt", tmp / "dsr.pcap", example=True))
    return out + vpn_cases(tmp, work.flow_destinations(routes[1000]))


VPN_HOST, VPN_VNI, VPN_S, VPN_C = 0xAC100505, 5000, 7, 42  # examples/demo_run.py's tenant and host


def vpn_cases(tmp: Path, vms: list[int]) -> list[Case]:
    """The VPN gateway's two pipelines with examples/demo_run.py's entries and packets, one flow
    per VM of ``vms`` (each with its overlay route; 1M overlay routes loaded in all)."""
    pad = bytes(18)
    customer = [bytes(Ether(dst="02:00:0a:ff:00:01") / Dot1AD(vlan=VPN_S) / Dot1Q(vlan=VPN_C)
                      / IP(src="192.168.9.1", dst=str(IPv4Address(vm))) / UDP(sport=1024 + i % 60000, dport=80)
                      / pad) for i, vm in enumerate(vms)]
    inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(dst="192.168.9.1") / pad
    cloud = [bytes(Ether() / IP(src=str(IPv4Address(VPN_HOST)), dst="10.255.0.1")
                   / UDP(sport=49152 + i % 16384, dport=4789) / VXLAN(vni=VPN_VNI) / inner) for i in range(len(vms))]
    work.write_pcap(tmp / "vpn_customer.pcap", customer)
    work.write_pcap(tmp / "vpn_cloud.pcap", cloud)
    with (tmp / "vpn.txt").open("w") as f:
        f.write("underlay_routes 0xac100000/16 : 21 0x020000000099\n")
        f.write(f"vni_to_qinq {VPN_VNI} : {VPN_S} {VPN_C} 3\n")
        for vm in [*vms, *range(0x0B000001, 0x0B000001 + 1_000_000 - len(vms))]:
            f.write(f"overlay_routes {VPN_S} {VPN_C} {vm:#x} : {VPN_HOST:#x} {VPN_VNI}\n")
    nfp = ROOT / "examples" / "vpn_gateway.nfp"
    return [Case("examples/vpn_gateway.nfp, 1M VMs", nfp, "customer_to_cloud", tmp / "vpn.txt",
                 tmp / "vpn_customer.pcap", True, (1, 21)),
            Case("examples/vpn_gateway.nfp, 1 VNI", nfp, "cloud_to_customer", tmp / "vpn.txt",
                 tmp / "vpn_cloud.pcap", True, (17, 3))]


# ---- measuring ---------------------------------------------------------------------------------------


def build_nfc(nfp: Path, out: Path, tree: Path = ROOT) -> Path:
    """bench_l3fwd's build with ``--allow-overcommit`` (the VPN gateway and the CGN do not fit
    their deployment's NICs on servers alone; their cost per packet is what is measured here)."""
    return build_l3fwd_style(nfp, out, "--allow-overcommit", "--no-verify", tree=tree)


def program(case: Case, binary: Path, core: int, prefix: str) -> Program:
    return Program(case.name, (str(binary), "-l", str(core), "--no-huge", "-m", str(MEMORY_MB), "--no-pci",
                               f"--file-prefix={prefix}", "--log-level=warning",
                               f"--vdev=net_pcap0,rx_pcap={case.pcap},infinite_rx=1", "--vdev=net_null1,no-rx=1",
                               "--", "--live", "--entries", str(case.entries),
                               *(["--ports", ",".join(map(str, case.ports))] if case.ports else [])), prefix)


@dataclass
class Measured:
    """A case's windows, its share of offered packets not forwarded, its drop counters."""

    windows: list[Window] = dataclasses.field(default_factory=list)
    not_forwarded: float = 1.0
    drops: dict[str, int] = dataclasses.field(default_factory=dict)
    error: str | None = None

    def ns(self) -> float | None:
        """Median nanoseconds of forwarding-thread CPU per forwarded packet."""
        per = [w.cpu_s * 1e9 / w.forwarded for w in self.windows if w.forwarded]
        return statistics.median(per) if per else None


def measure(cs: list[Case], tmp: Path, args: argparse.Namespace,
            log: Callable[[str], None]) -> dict[str, Measured]:
    """Build every case, start them all, then ``args.rounds`` interleaved rounds of a window each."""
    out = {c.name: Measured() for c in cs}
    progs: dict[str, Program] = {}
    for i, c in enumerate(cs):
        log(f"building {c.name}")
        try:
            progs[c.name] = program(c, build_nfc(c.nfp, tmp / f"build{i}", c.tree), args.core,
                                    f"nfcc{os.getpid()}-{i}")
        except RuntimeError as e:
            out[c.name].error = str(e)
    runs = start(list(progs.values()), tmp)
    try:
        for prefix, why in settle(runs, args.core, args.start_timeout).items():
            out[next(n for n, p in progs.items() if p.prefix == prefix)].error = why
        running = {r.program.name: r for r in runs.values()}
        for rnd in range(args.rounds):
            for name, r in running.items():
                out[name].windows.append(r.measure(args.warmup, args.window))
            log(f"round {rnd + 1}/{args.rounds}: " + ", ".join(f"{n} {out[n].ns() or 0:.1f}" for n in running))
        for name, r in running.items():
            t = r.last
            out[name].not_forwarded = max(0.0, 1 - t.forwarded / t.offered) if t and t.offered else 1.0
    finally:
        every = list(runs.values())
        for r, text in zip(every, stop_all(every), strict=True):
            out[r.program.name].drops = (exit_counters(text) or {}).get("drops", {})
    return out


# ---- the costs and the table ---------------------------------------------------------------------------


def least_squares(keys: tuple[str, ...], points: list[tuple[dict[str, float], float]],
                  costs: dict[str, float]) -> dict[str, float]:
    """The values of the costs ``keys`` that fit the programs ``points`` (each one's prediction form
    and measured ns) best in the least-squares sense, the other costs being ``costs``: the normal
    equations, solved by Gaussian elimination (a handful of unknowns)."""
    rows = [([form.get(k, 0.0) for k in keys], ns - sum(c * costs[k] for k, c in form.items() if k not in keys))
            for form, ns in points]
    n = len(keys)
    a = [[sum(r[i] * r[j] for r, _ in rows) for j in range(n)] + [sum(r[i] * y for r, y in rows)] for i in range(n)]
    scale = max((abs(a[i][i]) for i in range(n)), default=0.0)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) <= 1e-12 * scale:
            raise ValueError(f"the programs do not determine {keys[col]}")
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
    return {k: a[i][n] / a[i][i] for i, k in enumerate(keys)}


# the costs the calibration measures; exact_16m follows exact_1m (RTE_HASH_16M_OVER_1M)
FITTED = ("io", "parse", "stmt", "push", "hash", "exact_1m", "lpm", "relookup", "relookup_lpm", "ternary",
          "ternary_16k", "insert")


def fit(ns: dict[str, float], forms: dict[str, dict[str, float]], costs: dict[str, float]) -> dict[str, float]:
    """``costs`` with the FITTED ones fitted by least squares to every calibration program's ns/packet
    at once, not each solved from one or two programs: a round's noise of 1-2 ns in
    one program (the plain parse alone gave io, two programs 10 statements apart gave stmt) is
    spread over the programs that share its costs.  A cost that only one program pays (``parse``:
    the six-header one, ``ternary``, ``ternary_16k``, ``insert``) is still that program's less the
    others' share: it takes that program's noise whole.  A cost is not negative: within the noise
    an operation whose data stays in cache (a trie of 4,096 flows' routes; a re-lookup) may cost
    no more than the path without it, so the one fitted furthest below 0 is held at 0 and the rest
    fitted again, until none is."""
    out = dict(costs)
    points = []
    for name, form in forms.items():
        f = dict(form)
        f["exact_1m"] = f.get("exact_1m", 0.0) + f.pop("exact_16m", 0.0) * RTE_HASH_16M_OVER_1M
        points.append((f, ns[name]))
    free = list(FITTED)
    while free:  # the most negative held at 0 at a time: the others move once it is
        got = least_squares(tuple(free), points, out | {k: 0.0 for k in free})
        out |= got
        worst = min(free, key=lambda k: got[k])
        if got[worst] >= 0:
            break
        out[worst] = 0.0
        free.remove(worst)
    out["exact_16m"] = out["exact_1m"] * RTE_HASH_16M_OVER_1M
    return out


def on_vdev(costs: dict[str, float]) -> dict[str, float]:
    """``costs`` as the benchmark's programs pay them: ``io`` is the vdev's (``io_vdev``: net_pcap
    copies every frame), not the NIC's that placement and server sizing use."""
    return costs | {"io": costs["io_vdev"]}


def calibrate(ns: dict[str, float], forms: dict[str, dict[str, float]],
              old: dict[str, float]) -> dict[str, tuple[float, str]]:
    """The profile's measured costs from the calibration programs' ns/packet (``fit``), with each
    one's comment naming the programs that weigh most on it (``bridge`` stays: there is no switch
    here to measure it; ``io``, the NIC's, stays too)."""
    costs = fit(ns, forms, on_vdev(old))
    costs["io_vdev"] = costs["io"]
    day = datetime.date.today().isoformat()
    why = {
        "io_vdev": f"parse Ethernet + IPv4 and forward, net_pcap -> net_null: {ns['parse_forward']:.1f} ns/packet "
                   f"per CPU-second, less bridge and the model's statements (the benchmark's I/O, not a NIC's)",
        "stmt": f"{forms['assignments'].get('stmt', 0.0) - forms['parse_forward'].get('stmt', 0.0):g} field "
                f"assignments more: {ns['assignments']:.1f} against {ns['parse_forward']:.1f} ns/packet (checksum "
                f"recomputation included)",
        "push": f"two header pushes (outer Ethernet + IPv4): {ns['encap']:.1f} ns/packet, less io_vdev and "
                f"statements",
        "hash": f"a CRC-16 of 9 bytes (nfc_crc16: eight bytes a step, then one) written into a field: "
                f"{ns['hash']:.1f} ns/packet, less io_vdev and statements",
        "exact_1m": f"one exact lookup (rte_hash, bulk per burst), 1M entries: {ns['exact_1m']:.1f} ns/packet, "
                    f"less io_vdev and statements (1K entries: {ns['exact_1k']:.1f})",
        "relookup": f"one exact lookup, 1M entries, of a key an earlier stage wrote, the burst run packet by "
                    f"packet: {ns['exact_1m_rekeyed']:.1f} ns/packet, less io_vdev, statements and two exact_1m "
                    f"(the burst's wasted one and this one): what a lookup alone, not prefetched, costs more "
                    f"(run stage by stage: {ns['exact_1m_rekeyed_staged']:.1f}, priced as one exact_1m)",
        "relookup_lpm": f"the same for one LPM lookup, 1M BGP-like routes: {ns['lpm_1m_rekeyed']:.1f} ns/packet, less "
                        f"io_vdev, statements and two lpm (stage by stage: {ns['lpm_1m_rekeyed_staged']:.1f})",
        "exact_16m": f"exact_1m times rte_hash's 16M / 1M ratio ({RTE_HASH_16M_OVER_1M:.3f}, "
                     f"../shared/notes/dpdk-here.md): 16M entries are not loaded here",
        "lpm": f"one LPM lookup (nfc_lpm.h trie), 1M BGP-like routes: {ns['lpm_1m']:.1f} ns/packet, less io_vdev "
               f"and statements (1K routes: {ns['lpm_1k']:.1f})",
        "parse": f"per header of the parser's longest path: six headers (VXLAN) {ns['parse_6']:.1f} against two "
                 f"(Ethernet + IPv4) {ns['parse_forward']:.1f} ns/packet",
        "ternary": f"one rte_acl classify (nfc_acl.h: ternary source and destination, a protocol range), 1K rules: "
                   f"{ns['ternary_1k']:.1f} ns/packet, less io_vdev and statements",
        "ternary_16k": f"the same with 16K rules: {ns['ternary_16k']:.1f} ns/packet (a table between 1K and 16K "
                       f"is priced log-interpolated)",
        "insert": f"a data-plane state insert per packet (nfc_state.h; each flow's entry found expired, removed and "
                  f"inserted again): {ns['insert']:.1f} ns/packet, less io_vdev, statements and the lookup",
    }
    fitted = f"fitted by least squares to the {len(forms)} calibration programs"
    how = {k: fitted if k in (*FITTED, "io_vdev") else "derived" for k in why}
    return {k: (round(costs[k], 1), f"{why[k]}; {how[k]}, measured {day}: {COMMAND}") for k in why}


def table_rows(cs: list[Case], got: dict[str, Measured], costs: dict[str, float]) -> list[dict[str, object]]:
    """Predicted (the partitioner's, with ``costs`` and the vdev's I/O) against measured
    ns/packet, per case; ``server_ns`` is the partitioner's own figure (the NIC's I/O)."""
    rows = []
    for c in cs:
        m, form = got[c.name], terms(c.nfp, c.pipeline)
        measured = m.ns()
        predicted = round(predict(form, on_vdev(costs)), 2)
        rows.append({"program": c.name, "example": c.example, "pipeline": c.pipeline, "predicted_ns": predicted,
                     "server_ns": round(predict(form, costs), 2),
                     "measured_ns": round(measured, 2) if measured else None,
                     "error": round(predicted / measured - 1, 4) if measured else None,
                     "not_forwarded": round(m.not_forwarded, 4), "drops": m.drops, "run_error": m.error,
                     "windows": len(m.windows)})
    return rows


def render(rows: list[dict[str, object]]) -> str:
    lines = ["| program | pipeline | predicted ns | measured ns | predicted / measured - 1 | not forwarded |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        err = f"{r['error']:+.1%}" if isinstance(r["error"], float) else "—"
        lines.append(f"| {r['program']} | {r['pipeline']} | {r['predicted_ns']} | {r['measured_ns'] or '—'} | {err} "
                     f"| {r['not_forwarded']:.1%} |")
    return "\n".join(lines)


def profile_costs() -> dict[str, float]:
    return {k: v for k, (v, _) in read_costs(PROFILE.read_text()).items()}


def log(msg: str) -> None:
    print(f"[bench_cost {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def with_base(cs: list[Case], base: Path) -> list[Case]:
    """Each case followed by its twin built by the checkout ``base`` (measured right after it)."""
    return [x for c in cs for x in (c, dataclasses.replace(c, name=f"{c.name} (base)", tree=base))]


def base_ratios(cs: list[Case], got: dict[str, Measured]) -> dict[str, dict[str, float | None]]:
    """Per case, its ns/packet, its base twin's and the ratio (this tree / base: below 1 is faster)."""
    out: dict[str, dict[str, float | None]] = {}
    for c in cs:
        a, b = got[c.name].ns(), got[f"{c.name} (base)"].ns()
        out[c.name] = {"ns": a, "base_ns": b, "ratio": round(a / b, 3) if a and b else None}
    print("\nns/packet per CPU-second, this tree against --base (same rounds):")
    for name, r in out.items():
        print(f"  {name}: {r['ns'] or 0:.1f} against {r['base_ns'] or 0:.1f}: {r['ratio']}")
    return out


def run(args: argparse.Namespace, tmp: Path) -> int:
    every = cases(tmp)
    unknown = set(args.only or ()) - {c.name for c in every}
    if unknown:
        log(f"no such program: {', '.join(sorted(unknown))} (the programs: {', '.join(c.name for c in every)})")
        return 2
    cs = [c for c in every if not args.only or c.name in args.only]
    got = measure(with_base(cs, Path(args.base).resolve()) if args.base else cs, tmp, args, log)
    ns = {c.name: got[c.name].ns() for c in cs}
    calib = {c.name: v for c in cs if not c.example and (v := ns[c.name]) is not None}
    this_run: dict[str, object] = {}
    if set(calib) == set(calibration_sources()):
        new = calibrate(calib, {c.name: terms(c.nfp, c.pipeline) for c in cs if not c.example}, profile_costs())
        print("\nmeasured costs (ns): " + ", ".join(f"{k} {v}" for k, (v, _) in new.items()))
        # how the model does on this machine with its own costs (what --write would record)
        own = profile_costs() | {k: v for k, (v, _) in new.items()}
        this_run = {"costs": own, "rows": table_rows(cs, got, own)}
        print("\nPredicted with this run's costs against measured ns/packet per CPU-second:")
        print(render(this_run["rows"]))  # type: ignore[arg-type]
        if args.write:
            PROFILE.write_text(write_costs(PROFILE.read_text(), new))
            log(f"wrote {PROFILE.relative_to(ROOT)}")
    elif not args.only:
        log("some calibration program did not run: no costs derived")
    rows = table_rows(cs, got, profile_costs())
    print("\nPredicted (the profile as it now is) against measured ns/packet per CPU-second:")
    print(render(rows))
    data = {"command": " ".join(["bench/bench_cost.py", *sys.argv[1:]]), "date": datetime.date.today().isoformat(),
            "rounds": args.rounds, "window_s": args.window, "core": args.core, "costs": profile_costs(), "rows": rows,
            "not_measured": NOT_MEASURED, "this_run": this_run,
            "base": base_ratios(cs, got) if args.base else None}
    out = Path(args.json) if args.json else RESULTS if args.write else None
    if out is not None:  # the recorded table only with the figures it was predicted from (--write)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1) + "\n")
    bad = [r for r in rows if r["measured_ns"] is None or float(str(r["not_forwarded"])) > 0.01]
    for r in bad:
        print(f"ERROR: {r['program']}: not measured or dropping ({r['run_error'] or r['drops']})")
    return 1 if bad else 0


def on_sigterm(*_: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--quick", action="store_true", help="one round")
    ap.add_argument("--window", type=float, default=0.8, help="seconds measured per program per round")
    ap.add_argument("--warmup", type=float, default=0.2, help="seconds after resuming before the window")
    ap.add_argument("--core", type=int, default=1, help="the core every program forwards on")
    ap.add_argument("--start-timeout", type=float, default=300.0)
    ap.add_argument("--write", action="store_true", help="write the measured costs into " + str(PROFILE.name))
    ap.add_argument("--json", help="where the table goes (with --write, by default bench/results/cost_table.json)")
    ap.add_argument("--only", action="append", help="only this program (repeatable; a calibration program's "
                    "name, e.g. insert, or an example's row, e.g. 'bench/l3fwd.nfp, 1M routes'); no costs fitted")
    ap.add_argument("--base", help="also each program as the nfc of this checkout builds it, in the same rounds")
    args = ap.parse_args()
    if args.write and (args.only or args.base):
        ap.error("--write calibrates from every program of this tree: not with --only or --base")
    if args.quick:
        args.rounds = 1
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with tempfile.TemporaryDirectory(prefix="nfc-cost-") as tmp:
            return run(args, Path(tmp))
    except KeyboardInterrupt:
        print("bench_cost: interrupted; every program stopped", flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
