"""The CGN's port pools on the server (targets/dpdk/runtime/nfc_state.c) against the reference
semantics of compiler/interp/state.py, on the real clock, under ASan + UBSan: alloc_port gives
the lowest port >= 1024 nothing holds; an entry of the state that says ``holds_ports`` holds
its port until it expires, each refresh extending it; a port given out that no entry took
stays taken.  The generated CGN calls these (examples/cgnat.nfp: ``holds_ports`` on nat_in,
``refresh nat_in;`` on outbound hits); tests/test_examples_vs_seeds.py checks the example's
behaviour against seed 002 §3 with the reference."""

from __future__ import annotations

import pytest

from tests.support import DPDK, ROOT, TABLES_RUNTIME, run_harness, sanitized_harness

pytestmark = DPDK


@pytest.fixture(scope="module")
def steps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[int]]:
    out = tmp_path_factory.mktemp("ports") / "ports_check"
    harness = sanitized_harness(ROOT / "tests/c/ports_check.c",
                                TABLES_RUNTIME, out)
    r = run_harness(harness, "0")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    return {line.split()[1]: [int(x) for x in line.split()[2:]] for line in r.stdout.splitlines()
            if line.startswith("step ")}


def test_the_port_of_an_expired_entry_is_given_out_again(steps):
    first, unheld, again, inserted = steps["expire"]
    assert (first, unheld, inserted) == (1024, 1025, 0)
    assert again == 1024  # its entry expired; 1025, given out and never held, stays taken


def test_a_refreshed_entry_keeps_its_port_until_refreshes_stop(steps):
    live, reallocated, after = steps["refresh"]
    assert live == 1 and reallocated == 0  # 15 refreshes 8 ms apart, timeout 40 ms: never free
    assert after == 1024  # 80 ms after the last refresh it is


def test_a_whole_pool_is_given_out_in_order_and_an_expired_port_inside_it_comes_back(steps):
    in_order, full, still, back, none = steps["full"]
    assert in_order == 1 and full == 0
    assert (still, back, none) == (0, 40000, 0)  # held for 10 ms, then free; nothing else


def test_every_address_has_a_pool_of_its_own(steps):
    assert steps["addresses"] == [300]


def test_an_entry_loaded_from_the_entries_file_holds_the_port_its_key_names(steps):
    """nfc_state_loaded reads the address and port fields from the line's key words, past a
    128-bit field that takes two: the port is held, so alloc_port gives the next one."""
    assert steps["loaded"] == [1, 1025]
