"""The switch model runs the generated P4 (parsed back from the build folder) and must agree,
packet for packet, with the split reference semantics (the IR interpreter running the switch
part as placed), for every example, both architectures (TNA and the v1model twin), random
packets from each parse graph (truncated, garbage, bad checksums) and random table contents.
Packets the switch sends to a server come back through the IR's server part and are compared
again on their way out.  A mutation of the printed P4 (one constant off by one) is caught."""

from __future__ import annotations

import os

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
    needle = "(PortId_t)meta.nfc_egress[8:0]"
    assert needle in text
    (out / "switch/tna.p4").write_text(text.replace(needle, "(PortId_t)(meta.nfc_egress[8:0] ^ 9w1)"))
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
