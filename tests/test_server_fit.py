"""Server resources are enforced (issue 12, item 6): a placement the servers cannot carry at
the deployment's rate is E081 at the table, stage or deployment, naming the resource; with
``--allow-overcommit`` it builds with warning W081.  The report shows every margin."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import tempfile
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.manifest import ServerResource, load_plan
from compiler.pipeline import compile_program
from compiler.profiles import load_profiles
from compiler.resources import server_bytes
from lang import Diagnostics, SourceMap, load
from tests.support import L3_HEAD, MEMORY_SIZES, ROOT, compile_file, nfc_cli, write_sized

CORPUS = ROOT / "tests" / "corpus"

# corpus file -> (line:col of what the error names, the message's start: what and which resource, plan resource)
CASES = {
    "server_memory": ("30:1", "table 'flows' does not fit in server memory", ServerResource.MEMORY),
    "server_cores": ("69:1", "stage 'route' does not fit the server cores", ServerResource.CORES),
    "server_link": ("64:1", "deployment 'd' does not fit the switch-server links", ServerResource.LINK),
}


def _costs() -> dict[str, float]:
    """The server profile's cost figures (ns), which bench/bench_cost.py re-measures."""
    costs: dict[str, float] = tomllib.loads((ROOT / "stdlib" / "targets" / "dpdk_server.toml").read_text())["cost"]
    return costs


def _nfc(*args: str) -> subprocess.CompletedProcess[str]:
    return nfc_cli(*args)


@pytest.mark.parametrize("case", sorted(CASES))
def test_corpus_file_says_what_it_shows(case: str) -> None:
    first = (CORPUS / f"{case}.nfp").read_text().splitlines()[0]
    assert first.startswith(f"// {case}:")


@pytest.mark.parametrize("case", sorted(CASES))
def test_infeasible_server_deployment_is_E081(case: str, tmp_path: Path) -> None:
    where, message, _ = CASES[case]
    r = _nfc("build", f"tests/corpus/{case}.nfp", "-o", str(tmp_path / "out"), "--no-verify")
    assert r.returncode == 1, r.stderr
    head = re.search(rf"^tests/corpus/{case}\.nfp:(\d+:\d+): error\[E081\]: (.*)$", r.stderr, re.M)
    assert head is not None, r.stderr
    assert head.group(1) == where and head.group(2).startswith(message + ": "), head.group(0)
    assert "= note: needed" in r.stderr and "available" in r.stderr  # the explain line: needed vs available
    assert "--allow-overcommit" in r.stderr
    assert r.stderr.rstrip().endswith("1 error") and "Traceback" not in r.stderr
    assert not (tmp_path / "out" / "plan.json").exists()


@pytest.mark.parametrize("case", sorted(CASES))
def test_allow_overcommit_builds_with_a_warning(case: str, tmp_path: Path) -> None:
    where, message, resource = CASES[case]
    out = tmp_path / "out"
    r = _nfc("build", f"tests/corpus/{case}.nfp", "-o", str(out), "--no-verify", "--allow-overcommit")
    assert r.returncode == 0, r.stderr
    assert f"tests/corpus/{case}.nfp:{where}: warning[W081]: {message}: " in r.stderr
    assert "error" not in r.stderr
    server = load_plan(out).server_resources
    assert server is not None and server.overcommitted == (resource,)
    assert "OVER-COMMITTED (--allow-overcommit)" in (out / "report.txt").read_text()


def test_notes_say_what_would_fit(tmp_path: Path) -> None:
    r = _nfc("build", "tests/corpus/server_memory.nfp", "-o", str(tmp_path / "out"), "--no-verify")
    # The DPDK runtime's layout (docs/partitioner.md): 4,000,000,000 entries of a 32-bit key (16
    # bytes) loaded in one step need 4e9 + 4e9/7 + 1 = 4,571,428,572 slots, the capacity they get
    # (more than rte_hash's 2^30: W087 says no server holds it; the figure is what the layout would
    # take): 2^33 / 8 = 2^30 buckets of 64 bytes (64 GiB), 4,571,428,573 key slots of 32 bytes
    # (136.24 GiB), a ring of 2^33 4-byte slots (32 GiB), and a record of the two 64-bit values,
    # two words and malloc's 16 bytes, 48 bytes per entry (178.81 GiB)
    assert "warning[W087]: table 'flows' holds at most 939,524,095 entries on a box server" in r.stderr
    assert "the server tables need 411.1 GiB, a box server has 64.0 GiB" in r.stderr
    # 660,206,120 entries take a capacity of 754,521,281 (buckets for 2^30: 8 GiB, a ring of 2^30
    # slots: 4 GiB), 754,521,282 key slots of 32 bytes and 48 bytes a record: 68,719,476,672
    # bytes, 64 short of 64 GiB; one entry more adds a record and a key slot (80)
    assert "table 'flows' would fit with size <= 660206120 entries" in r.stderr
    assert "'memory = 412GiB;' in target 'box'" in r.stderr
    r = _nfc("build", "tests/corpus/server_cores.nfp", "-o", str(tmp_path / "out"), "--no-verify")
    assert "costliest: stage 'route'" in r.stderr and "stage 'classify'" in r.stderr
    # the rate that fits is the offered one scaled by cores available / cores needed
    needed = float(re.search(r"the server part needs ([\d.]+) cores, the deployment has 2", r.stderr).group(1))
    fits = float(re.search(r"it would fit at a rate <= ([\d.]+) Mpps", r.stderr).group(1))
    # 60 Mpps x the server profile's ns/packet (docs/server.md, "Cost model"): I/O + bridge, two 16M-entry
    # lookups, the second once more alone (its key meta.tenant is written by the first stage, and the register
    # write keeps the packets in order), 11 statements (5 assignments, 1 subtraction, forward and its port
    # check (a comparison, a drop), 2 drops on a miss)
    c = _costs()
    ns = c["io"] + c["bridge"] + 3 * c["exact_16m"] + c["relookup"] + 11 * c["stmt"]
    # (the rate from the unrounded cores: the message rounds them to two places)
    assert needed == pytest.approx(60 * ns / 1000, abs=0.01) and fits == pytest.approx(2000 / ns, abs=0.02)
    assert "deployment 'd' offers 60 Mpps to 1 x small" in r.stderr  # the related span: the rate
    r = _nfc("build", "tests/corpus/server_link.nfp", "-o", str(tmp_path / "out"), "--no-verify")
    assert "61.44 Gbit/s, they carry 10 Gbit/s (1 x box)" in r.stderr
    assert "or add 'cache = true;' to table 'hosts' (stage 'route')" in r.stderr


def test_server_only_build_checks_the_servers_nics(tmp_path: Path) -> None:
    """--target dpdk: every packet arrives on the servers, so the link is their NICs; the
    vpn gateway's 15 Mpps of 512-byte packets (61.44 Gbit/s) exceed its one 40G server."""
    r = _nfc("build", "examples/vpn_gateway.nfp", "--target", "dpdk", "-o", str(tmp_path / "out"), "--no-verify")
    assert r.returncode == 1
    assert re.search(r"^examples/vpn_gateway\.nfp:\d+:1: error\[E081\]: deployment 'pe' does not fit the servers' "
                     r"NICs: .*every packet reaches a server: 61\.44 Gbit/s", r.stderr, re.M), r.stderr
    assert "put a switch in front (--target tofino+dpdk)" in r.stderr


def _load(path: Path, target: str = "tofino+dpdk"):
    diags = Diagnostics()
    return compile_program(load(str(path), diags, SourceMap()), target, diags, allow_overcommit=True)


@pytest.mark.parametrize("example", sorted(p.stem for p in (ROOT / "examples").glob("*.nfp")))
def test_examples_fit_their_deployment_and_parts_add_up(example: str) -> None:
    c = _load(ROOT / "examples" / f"{example}.nfp")
    load_ = c.server_load
    assert load_ is not None
    for m in load_.margins:
        assert m.fits, (example, m.resource)
        assert sum(p.amount for p in m.parts) == pytest.approx(m.needed, rel=1e-9, abs=1e-9), (example, m.resource)


def test_report_shows_every_margin(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = _nfc("build", "examples/vpn_gateway.nfp", "-o", str(out), "--no-verify")
    assert r.returncode == 0, r.stderr
    report = (out / "report.txt").read_text()
    margins = report[report.index("margins at 15 Mpps offered"):].splitlines()
    rows = {re.split(r"\s{2,}", line.strip())[0]: re.split(r"\s{2,}", line.strip())[1:] for line in margins[3:10]}
    assert rows["tofino1 MAU stages"] == ["7", "12", "5 (42%)"]
    assert rows["tofino1 MAU stages with control code"] == ["11", "12", "1 (8%)"]  # compiled: 11 (real_p4.md)
    assert rows["tofino1 SRAM blocks"] == ["68", "960", "892 (93%)"]
    assert rows["tofino1 TCAM blocks"] == ["125", "288", "163 (57%)"]
    # overlay_routes, 16M = 16,000,000 entries of a 16-byte key and inline values
    # (docs/partitioner.md), loaded in one step: 16M + 16M/7 + 1 = 18,285,715 slots, the capacity
    # they get: 2^25 / 8 = 2^22 buckets of 64 bytes (256 MiB), 18,285,716 key slots of 32 bytes
    # (558.04 MiB), a ring of 2^25 4-byte slots (128 MiB): 942.0 MiB
    assert rows["server memory (each pe_server)"] == ["942.0 MiB", "64.0 GiB", "63.1 GiB (99%)"]
    # half the 15 Mpps (customer -> cloud) x the profile's ns/packet of overlay_route on the server: I/O +
    # bridge, the 16M-entry lookup once (its key meta.customer is written by a switch stage and arrives in
    # the bridge, before the burst's bulk lookup: no re-lookup; docs/server.md, "Cost model"), 3 statements,
    # and 4 of the frame-length check (the verify, its '<=' and '-', std.packet_length)
    c = _costs()
    cores = 7.5 * (c["io"] + c["bridge"] + c["exact_16m"] + 7 * c["stmt"]) / 1000
    assert rows["server cores (1 x pe_server)"] == [f"{cores:.2f}", "18.00", f"{18 - cores:.2f} ({1 - cores / 18:.0%})"]
    assert rows["switch-server links (1 x pe_server)"] == ["30.72 Gbit/s", "40.00 Gbit/s", "9.28 Gbit/s (23%)"]
    plan = json.loads((out / "plan.json").read_text())
    assert plan["resources"]["server"]["overcommitted"] == []



@functools.cache
def _dpdk_tables() -> dict[str, Any]:
    """The tables of tests/support's MEMORY_PROGRAM, each of one kind the server lays out."""
    with tempfile.TemporaryDirectory() as tmp:
        return dict(compile_file(str(write_sized(Path(tmp), "model", MEMORY_SIZES)), "dpdk").program.tables)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["hosts", "pairs", "routes", "acl", "flows"]), st.integers(0, 2**32), st.integers(1, 2**31))
def test_a_tables_server_memory_never_falls_as_its_size_grows(name: str, size: int, more: int) -> None:
    """check-server-fit's 'would fit with size <=' searches the sizes by halves, which needs the
    memory of a table to grow with its size (capacities with room below 7/8 full, at least 8,
    a state table's cap)."""
    spec = load_profiles()["dpdk_server"]
    t = _dpdk_tables()[name]
    assert server_bytes(replace(t, size=size), spec) <= server_bytes(replace(t, size=size + more), spec)


@pytest.mark.parametrize("size, warned", [("1Mi", False), ("1048577", True), ("4M", True)])
def test_a_state_table_bigger_than_the_server_holds_is_a_warning(size: str, warned: bool, tmp_path: Path) -> None:
    """W087: the DPDK server makes a data-plane state table at min(size, 2^20) entries (its
    forwarding cores insert and cannot grow it: NFC_TABLE_CAP, the profile's state_max), so a
    bigger size is a table that refuses flows the program's author counted on."""
    src = tmp_path / "conn.nfp"
    src.write_text(L3_HEAD + f"state flows {{ key {{ ipv4.src: exact; }} value {{ n: bit<8>; }} size = {size}; "
                   "timeout = 1s; }\nstage work { lookup flows { hit(f) { forward(1); } miss { "
                   "insert flows { n = 1; } forward(2); } } }\n")
    r = _nfc("build", str(src), "--target", "dpdk", "-o", str(tmp_path / "out"), "--no-verify")
    assert r.returncode == 0, r.stderr
    if not warned:
        assert "W087" not in r.stderr and "warning" not in r.stderr, r.stderr
        return
    n = 1048577 if size == "1048577" else 4_000_000
    assert (f"conn.nfp:9:1: warning[W087]: state table 'flows' holds at most 1,048,576 entries on a dpdk_server "
            f"server, not the {n:,} its size asks for") in r.stderr, r.stderr
    assert "declare 'size = 1048576;'" in r.stderr
