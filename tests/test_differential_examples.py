"""Every example on every target combination, one verdict: random packets from each
pipeline's parse graph (tests/fuzz.py: truncated, garbage, bad checksums, keys that hit) and
random table contents go through

* the reference interpreter running the whole, unsplit program (the spec), and
* ``nfc run`` on the build for ``tofino+dpdk``, ``tofino2+dpdk`` (the switch model executing
  the printed TNA program, the compiled DPDK program for the server part, joined by the bridge
  headers), ``dpdk`` alone (the DPDK program on its logical ports) or ``tofino`` alone (the
  switch model);

outputs must agree per egress port (as multisets: ``nfc run`` interleaves the input ports)
and drops by reason; ``nfc verify`` proves the same build.  ``tests/test_differential.py``
does the same for the VPN gateway with hand-shaped packets and the DPDK program alone;
``tests/test_p4_model.py`` compares the P4 executor with the split reference packet by packet."""

from __future__ import annotations

import os
import re

import pytest

from tests.support import (
    DPDK,
    ROOT,
    build_example,
    nfc_cli,
)
from tests.support.differential import agree

pytestmark = DPDK

N = 1200 if os.environ.get("NFC_SLOW") else 300  # packets per example on tofino+dpdk, a third on the others
EXAMPLES = ["bluebird_tor", "cgnat", "dsr_router", "vpn_gateway", "ipsec_gateway"]
WITH_SERVER = ["tofino+dpdk", "tofino2+dpdk", "dpdk"]
ALL_COMBOS = (*WITH_SERVER, "tofino")
# at their deployment's rate every packet on the servers' own NICs exceeds them (E081): build with --allow-overcommit
OVERCOMMITTED = {("vpn_gateway", "dpdk"), ("cgnat", "dpdk")}


def _cases() -> list[object]:
    return [(e, t) for t in WITH_SERVER for e in EXAMPLES]


@pytest.mark.parametrize(("example", "target"), _cases())
def test_spec_and_nfc_run_agree(example, target, tmp_path):
    over = ["--allow-overcommit"] if (example, target) in OVERCOMMITTED else []
    out = build_example(example, target, "--no-verify", *over, server=True)
    r = nfc_cli("verify", str(out))
    assert r.returncode == 0 and "proved equal" in r.stderr, r.stdout + r.stderr
    agree(example, ROOT / f"examples/{example}.nfp", out, tmp_path, N if target == "tofino+dpdk" else N // 3)


# tests/corpus programs and the combinations each builds for (the others are refused with a named
# E071/E080/E100, see tests/test_c_warnings.py); all_switch and switch_registers fit a Tofino alone
CORPUS = {"all_switch": ALL_COMBOS, "accepted_oddities": ("tofino+dpdk", "dpdk"), "flow_state": ("tofino+dpdk", "dpdk"),
          "hash13": ("tofino+dpdk", "dpdk"), "lpm_routes": ("tofino+dpdk", "dpdk"),
          "acl_ternary": ("tofino+dpdk", "dpdk"), "acl_lpm": ("tofino+dpdk", "dpdk"),
          "counters_meters": ("tofino+dpdk", "dpdk"), "egress_before_cut": WITH_SERVER,
          "unused_parts": ("tofino+dpdk", "dpdk"), "frame_length": ("tofino+dpdk", "dpdk"),
          "host_cache": ("tofino+dpdk", "dpdk"), "wide_fields": ("tofino+dpdk", "dpdk"), "esp_esn": ("dpdk",),
          "switch_registers": ALL_COMBOS}


@pytest.mark.parametrize(("program", "target"), [(p, t) for p, ts in CORPUS.items() for t in ts])
def test_corpus_programs_agree_on_every_combination_they_build_for(program, target, tmp_path):
    src = ROOT / f"tests/corpus/{program}.nfp"
    out = build_example(f"tests/corpus/{program}.nfp", target, "--no-verify", server=target != "tofino")
    r = nfc_cli("verify", str(out))
    assert r.returncode == 0 and "proved equal" in r.stderr, r.stdout + r.stderr
    agree(program, src, out, tmp_path, N)


@pytest.mark.parametrize("example", EXAMPLES)
def test_switch_alone_names_what_does_not_fit(example, tmp_path):
    """No example fits a Tofino alone (tables of millions of entries, ESP, data-plane inserts):
    the build says which stage and why, at its source line."""
    r = nfc_cli("build", f"examples/{example}.nfp", "-o", str(tmp_path / "build"), "--target", "tofino")
    assert r.returncode == 1
    assert re.search(rf"^examples/{example}\.nfp:\d+:\d+: error\[E0(80|71)\]: .*stage '\w+'", r.stderr, re.M), r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
