"""The switch model runs the generated P4 (parsed back from the build folder) and must agree,
packet for packet, with the split reference semantics (the IR interpreter running the switch
part as placed), for every example, both architectures (TNA and the v1model twin), random
packets from each parse graph (truncated, garbage, bad checksums) and random table contents.
Packets the switch sends to a server come back through the IR's server part and are compared
again on their way out.  A mutation of the printed P4 (one constant off by one) is caught."""

from __future__ import annotations

import os
import re

import pytest

from compiler.interp import Outcome, TableError
from emulator.switchmodel import SwitchModel, SwitchReference
from emulator.switchmodel.server_ref import ServerReference
from tests.fuzz import Fuzzer
from tests.support import ROOT, build_example, compile_file, copy_build

EXAMPLES = ["bluebird_tor", "cgnat", "dsr_router", "ipsec_gateway", "vpn_gateway"]
N = 1500 if os.environ.get("NFC_SLOW") else 250


@pytest.fixture(scope="module", params=EXAMPLES)
def built(request, tmp_path_factory):
    out = build_example(request.param, "tofino+dpdk", "--no-verify")
    return out, compile_file(str(ROOT / f"examples/{request.param}.nfp"))


def _same(a: Outcome, b: Outcome) -> bool:
    return (a.kind, a.port, a.data, a.reason) == (b.kind, b.port, b.data, b.reason)


def _fill(c, model: SwitchModel, ref: SwitchReference, server: ServerReference | None, fz: Fuzzer) -> None:
    for name, t in c.program.tables.items():
        if t.is_state:
            continue
        rows = fz.entries(t, 12)
        if server is not None:
            for e in rows:
                server.tables[name].insert(e)
        if name not in model.tables:
            continue
        for e in rows[: len(rows) // 2 if t.hints.cache else len(rows)]:
            try:
                ref.tables[name].insert(e)
            except TableError:
                with pytest.raises(TableError):
                    model.tables[name].insert(e)
                continue
            model.tables[name].insert(e)


@pytest.mark.parametrize("arch", ["tna", "v1model"])
def test_generated_p4_agrees_with_the_reference(built, arch):
    out, c = built
    model = SwitchModel.from_build(out, arch)
    ref = SwitchReference(c.program, c.placement, c.bridges, c.targets.server_ports)
    ports = c.targets.server_ports
    server = ServerReference(c.program, c.placement, c.bridges, ports[0]) if ports and c.bridges else None
    fz = Fuzzer(c.program, seed=hash(out.name) & 0xFFFF)
    _fill(c, model, ref, server, fz)
    seen: set[str] = set()
    for i in range(N):
        pl = fz.rnd.choice(c.program.pipelines)
        data, port = fz.packet(pl), fz.port(pl)
        if i % 50 == 0:
            data, port = fz.rnd.randbytes(fz.rnd.randint(0, 60)), fz.rnd.choice([*ports, port, 200])
        a, b = ref.process(data, port), model.process(data, port)
        assert _same(a, b), f"packet {i} on port {port}: {data.hex()}\nreference {a}\nP4 model  {b}"
        seen.add(a.kind + ":" + (a.reason or str(a.port)))
        if server is not None and a.kind == "forward" and a.port in ports:
            back = server.process(a.data)
            if back.kind == "forward":
                a2, b2 = ref.process(back.data, ports[0]), model.process(back.data, ports[0])
                assert _same(a2, b2), f"packet {i} back from the server: {back.data.hex()}\nreference {a2}\nP4 {b2}"
                seen.add("back:" + a2.kind)
    assert len(seen) >= 4, f"the random packets reach too few outcomes: {sorted(seen)}"


def test_a_mutated_program_is_caught(tmp_path):
    """Send every forwarded packet one port off in the printed TNA program (a one-token edit
    of the file on disk): the comparison must fail, so the model really runs that file."""
    out = copy_build(build_example("examples/vpn_gateway.nfp", "tofino+dpdk", "--no-verify"), tmp_path / "vpn")
    c = compile_file(str(ROOT / "examples/vpn_gateway.nfp"))
    text = (out / "switch/tna.p4").read_text()
    # every forward's port (not the CPU port's punts): a field of the chosen port, sliced to 9 bits
    mutated, n = re.subn(r"\(PortId_t\)(meta\.\w+)\[8:0\]", r"(PortId_t)(\1[8:0] ^ 9w1)", text)
    assert n > 0
    (out / "switch/tna.p4").write_text(mutated)
    model = SwitchModel.from_build(out, "tna")
    ref = SwitchReference(c.program, c.placement, c.bridges, c.targets.server_ports)
    fz = Fuzzer(c.program, seed=5)
    _fill(c, model, ref, None, fz)
    differ = forwarded = 0
    for _ in range(N):
        pl = fz.rnd.choice(c.program.pipelines)
        data, port = fz.packet(pl), fz.port(pl)
        a = ref.process(data, port)
        forwarded += a.kind == "forward"
        differ += not _same(a, model.process(data, port))
    assert forwarded > 0 and differ == forwarded


def _ones_sum(data: bytes) -> int:
    s = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


@pytest.mark.parametrize("arch", ["tna", "v1model"])
def test_cgnat_l4_checksums_are_scapys_and_a_zero_udp_sum_leaves_as_all_ones(arch):
    """On TNA the TCP/UDP/ICMP checksum updates of cgnat's rewrite stages are left to the
    ingress deparser's checksum engine (in the ALUs their sums span stages, which the Tofino
    back end refuses); v1model computes them in the ingress.  Either way scapy, recomputing
    the rewritten packet's checksum from scratch, must agree; a UDP sum of zero is sent as
    0xffff (RFC 768) and a UDP checksum of zero (none) stays zero."""
    from scapy.layers.inet import ICMP, IP, TCP, UDP
    from scapy.layers.l2 import Ether

    from compiler.interp import Entry, Match

    model = SwitchModel.from_build(build_example("cgnat", "tofino+dpdk", "--no-verify"), arch)
    src, ext_ip, ext_port, dst = 0x0A000005, 0xC6336401, 40000, "203.0.113.9"
    model.tables["subnet_to_external"].insert(Entry((Match(0x0A000000, 8),), {"ext_ip": ext_ip}))
    model.tables["upstream_routes"].insert(Entry((Match(0, 0),), {"port": 25, "next_hop_mac": 0x020000000099}))
    for proto, port in ((6, 1111), (17, 2222), (1, 3333)):
        model.tables["nat_out"].insert(Entry((Match(src), Match(port), Match(proto)), {"ext_port": ext_port}))

    def run(l4: object) -> object:
        pkt = Ether(dst="02:00:00:00:00:01", src="02:00:00:00:00:02") / IP(src="10.0.0.5", dst=dst, ttl=9) / l4
        out = model.process(bytes(pkt), 3)
        assert (out.kind, out.port) == ("forward", 25), out
        return Ether(out.data)

    def scapy_checksum(got: object, layer: type) -> int:
        again = got.copy()
        del again[layer].chksum
        return Ether(bytes(again))[layer].chksum

    tcp = run(TCP(sport=1111, dport=80, flags="S") / b"payload!")
    assert (tcp[IP].src, tcp[TCP].sport) == ("198.51.100.1", ext_port)
    assert tcp[TCP].chksum == scapy_checksum(tcp, TCP)
    icmp = run(ICMP(type=8, id=3333, seq=7) / b"ping")
    assert icmp[ICMP].id == ext_port and icmp[ICMP].chksum == scapy_checksum(icmp, ICMP)
    assert run(UDP(sport=2222, dport=53, chksum=0) / b"q")[UDP].chksum == 0  # no checksum stays none
    # a UDP packet whose rewritten sum is zero: the payload word makes the pseudo-header and
    # header sum to 0xffff after the rewrite, so the computed checksum 0 must leave as 0xffff
    base = UDP(sport=ext_port, dport=53, len=8 + 2, chksum=0)
    pseudo = bytes(IP(src="198.51.100.1", dst=dst, proto=17))[12:20] + bytes([0, 17]) + (10).to_bytes(2, "big")
    word = (0xFFFF - _ones_sum(pseudo + bytes(base))) & 0xFFFF
    zero = run(UDP(sport=2222, dport=53) / word.to_bytes(2, "big"))
    assert _ones_sum(bytes(IP(src="198.51.100.1", dst=dst, proto=17))[12:20] + bytes([0, 17]) + (10).to_bytes(2, "big")
                     + bytes(zero[UDP])[:6] + bytes(zero[UDP])[8:]) == 0xFFFF
    assert zero[UDP].chksum == 0xFFFF
