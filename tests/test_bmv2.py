"""The v1model twin on bmv2's ``simple_switch`` against the switch model, for every example:
the same random table entries (the fuzzer's, as tests/test_p4_model.py fills them) and the
same random packets from each pipeline's parse graph, byte for byte per egress port.  The
switch model runs the printed program through nfc's own P4 executor; bmv2 runs what p4c's
bmv2 back end compiled from the same file, so the two share nothing but the P4 text.

p4c and bmv2 are not in the package registries: tools/real-p4/build.sh builds them, and
without them on PATH these tests skip (CI does not build them)."""

from __future__ import annotations

from collections import Counter

import pytest

from compiler.interp import TableError
from emulator.switchmodel import SwitchModel
from tests.fuzz import Fuzzer
from tests.support import ROOT, build_example, compile_file, learn_entries
from tests.support.bmv2 import needs_bmv2, run_simple_switch

pytestmark = needs_bmv2

EXAMPLES = ["bluebird_tor", "cgnat", "dsr_router", "ipsec_gateway", "vpn_gateway"]
N = 200  # packets per example


@pytest.mark.parametrize("example", EXAMPLES)
def test_simple_switch_forwards_as_the_switch_model(example, tmp_path):
    out = build_example(example, "tofino+dpdk", "--no-verify")
    c = compile_file(str(ROOT / f"examples/{example}.nfp"))
    model = SwitchModel.from_build(out, "v1model")
    fz = Fuzzer(c.program, seed=sum(map(ord, example)))
    inputs: dict[int, list[bytes]] = {}
    for _ in range(N):
        pl = fz.rnd.choice(c.program.pipelines)
        inputs.setdefault(fz.port(pl), []).append(fz.packet(pl))
    # random entries, and entries for half the keys the packets look up and miss (the spec's)
    tables = {name: fz.entries(t, 12) for name, t in c.program.tables.items()
              if not t.is_state and name in model.tables}
    learn_entries(c, fz, tables, inputs)
    for name, rows in tables.items():
        for e in rows:
            try:
                model.tables[name].insert(e)
            except TableError:  # an entry the table refuses (a duplicate key) is in neither
                continue
    want: dict[int, Counter[bytes]] = {}  # what the device sends out of each port, punts included
    for port, frames in inputs.items():
        for data in frames:
            r = model.executor.process(data, port, 0.0)
            if r.port is not None:
                want.setdefault(r.port, Counter())[r.data] += 1
    assert sum(n for p, c in want.items() if p != model.cpu_port for n in c.values()) >= 10, \
        f"the packets reach too little of the program: {want.keys()}"
    expected = sum(n for c in want.values() for n in c.values())
    got = run_simple_switch(out, model, inputs, want, tmp_path / "bmv2", expected)
    assert got == want, {port: (got.get(port, Counter()) - want.get(port, Counter()),
                                want.get(port, Counter()) - got.get(port, Counter())) for port in {*got, *want}}
