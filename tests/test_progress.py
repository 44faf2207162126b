"""Progress a person can follow on every long step (issue 47, item 7): the partitioner reports
the time spent and the best placement so far while it places; ``nfc run`` says on stderr what it
does as it goes, and ends with a summary table on stdout (the counters' JSON line behind
``--json``).  Expected numbers come from the inputs (the pcaps written here, the counters
given), never from the output being checked; no test asserts a duration."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from dataclasses import replace

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.utils import rdpcap, wrpcap

import compiler.partition_progress as partition_progress
from compiler.manifest import TablePlacement
from compiler.partition_exact import solve_exact
from compiler.partition_progress import PlaceProgress, reporting
from compiler.pipeline import PASSES, Compilation, compile_program
from compiler.place_problem import objectives, problem_of
from lang import Diagnostics, SourceMap, load
from nfc._build_dir import open_placed
from nfc.run import summary
from tests.bigprog import knapsack, synthetic
from tests.support import GW_IP, L3_HEAD, VPN_ENTRIES, build_example, needs_dpdk, nfc_cli, write

# "      placing: 0.4 s of 1.5 s, exact model (Z3 Optimize); best so far (greedy start): 7 of 8 stages on the
# switch, server 6.2 ns/packet, 589,708 cached entries, 12 MAU stages"
_PLACEMENT = r"(\d+) of (\d+) stages on the switch, server [\d.]+ ns/packet, (?:[\d,]+ cached entries, )?\d+ MAU stages"
_TICK = re.compile(r"      placing: (\d+\.\d) s of ([\d.]+) s, ([^;]+); best so far (?:none yet|\(([^)]+)\): "
                   + _PLACEMENT + ")$")


def _ticks(lines: list[str]) -> list[re.Match[str]]:
    return [m for m in map(_TICK.match, lines) if m is not None]


def _wait_for(lines: list[str], n: int) -> None:
    """Until ``lines`` holds ``n`` lines (a timer thread adds them), failing after 20 s."""
    deadline = time.monotonic() + 20
    while len(lines) < n:
        assert time.monotonic() < deadline, lines
        time.sleep(0.01)


# ---- the partitioner ------------------------------------------------------------------------


def test_a_long_placement_reports_its_time_and_best_placement_so_far(tmp_path, monkeypatch):
    """synthetic(8) goes to the exact model (a few seconds, cut at 1.5 s here); with reports every
    50 ms the build's progress has lines, between the partition pass's own, each with the time
    spent against the limit, the step and the best placement so far, its stages out of the 8."""
    monkeypatch.setattr(partition_progress, "PROGRESS_EVERY_S", 0.05)
    diags = Diagnostics()
    lines: list[str] = []
    compile_program(load(write(tmp_path, synthetic(8)), diags, SourceMap()), "tofino+dpdk", diags,
                    progress=lines.append, place_timeout_s=1.5)
    step = next(i for i, p in enumerate(PASSES, 1) if p.name == "partition")
    start = lines.index(f"[{step}/{len(PASSES)}] {PASSES[step - 1].what} ...")
    end = lines.index(f"[{step + 1}/{len(PASSES)}] {PASSES[step].what} ...")
    placing = [i for i, line in enumerate(lines) if "placing:" in line]
    assert placing and start < min(placing) and max(placing) < end, lines  # inside the partition pass
    ticks = _ticks([lines[i] for i in placing])
    assert ticks, lines
    for m in ticks:
        assert m.group(2) == "1.5" and m.group(3)
        if m.group(4) is not None:  # a placement was found: its stages out of the program's
            assert int(m.group(5)) <= int(m.group(6)) == 8
    assert [float(m.group(1)) for m in ticks] == sorted(float(m.group(1)) for m in ticks)


def test_no_listener_no_report(monkeypatch):
    """Without a listener (``compile_program(progress=None)``, ``partition`` called alone) the
    partitioner starts no timer and describes no placement; inside ``reporting(None)`` neither."""
    monkeypatch.setattr(partition_progress, "PROGRESS_EVERY_S", 0.01)
    for quiet in (PlaceProgress(10.0), reporting_none()):
        with quiet:
            assert not quiet.active
            quiet.offer((1, 0, 0, 1), lambda: pytest.fail("described without a listener"), "greedy start")
            assert not any(t.name == "nfc-place-progress" for t in threading.enumerate())


def reporting_none() -> PlaceProgress:
    """A placement's progress inside ``reporting(None)`` (compile_program without ``progress``)
    nested in a block with a listener."""
    with reporting(lambda line: pytest.fail(f"reported without a listener: {line}")), reporting(None):
        return PlaceProgress(10.0)


def test_a_better_placement_after_the_first_report_gets_a_line(monkeypatch):
    """After the first periodic line, a placement with a lower server cost is reported at once;
    a worse one is not, and the next periodic line still shows the best."""
    lines: list[str] = []
    monkeypatch.setattr(partition_progress, "PROGRESS_EVERY_S", 0.05)
    with PlaceProgress(60.0, lines.append) as progress:
        progress.step("exact model (Z3 Optimize)")
        progress.offer((900, 0, 0, 4), lambda: "6 of 8 stages on the switch, server 9 ns/packet, 4 MAU stages",
                       "greedy start")
        _wait_for(lines, 1)
        progress.offer((630, 0, 0, 11), lambda: "7 of 8 stages on the switch, server 6.3 ns/packet, 11 MAU stages",
                       "Z3 Optimize")
        progress.offer((700, 0, 0, 2), lambda: "worse", "layout model")
        better = [line for line in lines if "better placement" in line]
        assert better and better[0].endswith("better placement (Z3 Optimize): 7 of 8 stages on the switch, "
                                             "server 6.3 ns/packet, 11 MAU stages"), lines
        n = len(lines)
        _wait_for(lines, n + 1)
    assert "worse" not in "\n".join(lines)
    last = _ticks(lines)[-1]
    assert last.group(3) == "exact model (Z3 Optimize)" and last.group(4) == "Z3 Optimize", lines


def test_the_exact_model_tells_of_the_models_it_finds_on_the_way(tmp_path):
    """knapsack(5): the greedy start's trap costs more than the optimum; Z3's callback hears of
    models on the way, their server cost never rising, the last one at the optimum's."""
    diags = Diagnostics()
    c = Compilation(load(write(tmp_path, knapsack(5)), diags, SourceMap()), "tofino+dpdk")
    for p in PASSES[:[p.name for p in PASSES].index("partition")]:
        c = p.run(c, diags)
    problem = problem_of(c.need_program(), c.need_targets())
    heard = []
    r = solve_exact(problem, 30_000, heard.append)
    assert r.status == "optimal" and heard and r.layout is not None
    optimum = objectives(problem, r.layout)[0]
    lowering = [m.objectives[0] for m in heard]
    assert min(lowering) == optimum
    assert all(0 <= m.on_switch <= 8 for m in heard)


# ---- nfc run's summary -------------------------------------------------------------------------


def _rows(text: str, head: str) -> dict[str, list[str]]:
    """The rows of the table under the line starting with ``head``: first cell -> the others."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        first, *rest = line.split()
        rows[first] = rest
    return rows


def test_the_summary_lays_out_every_counter(tmp_path):
    """Counters as runtime/run.py returns them, with the parts only some runs have (punts,
    several servers, cache managers): every number appears in its table, columns aligned."""
    plan, _ = open_placed(build_example("examples/vpn_gateway.nfp", "tofino+dpdk"))
    # as if overlay_routes had a switch cache of 1,024 entries in front of it
    plan = replace(plan, tables=tuple(replace(t, placement=TablePlacement.CACHED, switch_entries=1024)
                                      if t.name == "overlay_routes" else t for t in plan.tables))
    counters = {"drops": {"punt:to_cpu": 2, "server:no_overlay_route": 1, "switch:unknown_vni": 3},
                "egress_packets": {"21": 1200, "4": 1},
                "server": {"forwarded": 1201, "tables": {"overlay_routes": {"entries": 100000, "hits": 1200,
                                                                            "misses": 1}}},
                "servers": [{"port": 32, "received": 700, "forwarded": 700},
                            {"port": 33, "received": 502, "forwarded": 501}],
                "cache_managers": {"overlay_routes": {"promoted": 5, "evicted": 2, "failed_steps": 0}}}
    text = summary(counters, Counter({1: 1203, 17: 3}), plan, tmp_path / "cap")
    assert _rows(text, "port") == {"1": ["1,203", "0"], "4": ["0", "1"], "17": ["3", "0"], "21": ["0", "1,200"],
                                   "all": ["1,206", "1,201"]}
    assert _rows(text, "dropped") == {"server:no_overlay_route": ["1"], "switch:unknown_vni": ["3"]}
    assert _rows(text, "punted") == {"punt:to_cpu": ["2"]}
    assert _rows(text, "server table") == {"overlay_routes": ["100,000", "1,200", "1", "1,024", "entries"]}
    assert _rows(text, "server port") == {"32": ["700", "700"], "33": ["502", "501"]}
    assert _rows(text, "cache manager") == {"overlay_routes": ["5", "2", "0"]}
    assert f"capture: {tmp_path / 'cap'} (port-4.pcap, port-21.pcap, counters.json)" in text
    port_table = text.split("\n\n")[0].splitlines()
    assert len({len(line) for line in port_table}) == 1, port_table  # right-aligned: one width


def test_the_summary_without_drops_says_so(tmp_path):
    plan, _ = open_placed(build_example("examples/vpn_gateway.nfp", "tofino+dpdk"))
    text = summary({"drops": {}, "egress_packets": {}, "server": {"forwarded": 0, "tables": {}}}, Counter({1: 2}),
                   plan, tmp_path)
    assert "dropped: none" in text and _rows(text, "port") == {"1": ["2", "0"], "all": ["2", "0"]}


@needs_dpdk
def test_nfc_run_tells_what_it_does_and_ends_with_the_table(tmp_path):
    """The VPN gateway on the switch model and the DPDK program: stderr follows the run (the
    server program started, the switch model's pass over each input, what went to the server
    and came back); stdout's table has each port's packets in and out as the pcaps hold them
    and the drops; ``--json`` prints what counters.json holds."""
    out = build_example("examples/vpn_gateway.nfp", "tofino+dpdk")
    (tmp_path / "entries.json").write_text(json.dumps(VPN_ENTRIES))
    routed = (Ether() / Dot1AD(vlan=5) / Dot1Q(vlan=42) / IP(src="192.168.200.1", dst="192.168.42.17")
              / UDP(sport=7, dport=9) / b"to the cloud")
    unrouted = Ether() / Dot1AD(vlan=5) / Dot1Q(vlan=42) / IP(dst="192.168.42.200") / b"no such VM"
    wrpcap(str(tmp_path / "customer.pcap"), [routed] * 3 + [unrouted])
    inner = Ether(src="00:00:00:00:00:0a", dst="00:00:00:00:00:0b") / IP(dst="10.1.1.1") / b"hi"
    wrpcap(str(tmp_path / "cloud.pcap"), [Ether() / IP(dst=GW_IP) / UDP(dport=4789) / VXLAN(vni=3007) / inner,
                                          Ether() / IP(dst=GW_IP) / UDP(dport=4789) / VXLAN(vni=9) / inner])
    cap = tmp_path / "cap"
    args = ["run", str(out), "--entries", str(tmp_path / "entries.json"), "--inject", f"1={tmp_path / 'customer.pcap'}",
            "--inject", f"17={tmp_path / 'cloud.pcap'}", "--capture", str(cap)]
    r = nfc_cli(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    err = r.stderr.splitlines()
    assert any(re.fullmatch(r"server program started for server port \d+ \(pid \d+, DPDK on net_pcap\)", x)
               for x in err), err
    assert "switch model: 4 packets from port 1 (customer.pcap): 4 to the server, 0 out, 0 dropped" in err, err
    assert "switch model: 2 packets from port 17 (cloud.pcap): 0 to the server, 1 out, 1 dropped" in err, err
    assert any(re.fullmatch(r"sent 4 packets to the server on port \d+, 3 came back", x) for x in err), err
    assert "entries: loading 3 entries ..." in err
    ports = _rows(r.stdout, "port")
    want_in = {1: 4, 17: 2}
    got_out = {int(p.stem.split("-")[1]): len(rdpcap(str(p))) for p in cap.glob("port-*.pcap")}
    assert got_out == {21: 3, 4: 1}
    for port in want_in.keys() | got_out.keys():
        assert ports[str(port)] == [str(want_in.get(port, 0)), str(got_out.get(port, 0))], r.stdout
    assert ports["all"] == ["6", "4"]
    assert _rows(r.stdout, "dropped") == {"server:no_overlay_route": ["1"], "switch:unknown_vni": ["1"]}
    assert _rows(r.stdout, "server table")["overlay_routes"] == ["1", "3", "1"]
    assert f"capture: {cap} (port-4.pcap, port-21.pcap, counters.json)" in r.stdout
    r = nfc_cli(*args, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout) == json.loads((cap / "counters.json").read_text())
    assert len(r.stdout.splitlines()) == 1


def test_a_switch_alone_run_reports_without_a_server(tmp_path):
    """A build for the switch alone runs in the switch model only (no DPDK): the progress line
    of its pass over the input, nothing about a server, and the table."""
    src = write(tmp_path, L3_HEAD + "stage work { ipv4.ttl = ipv4.ttl - 1; forward(2); }\n"
                "deployment d { switch = tofino1; rate = 1Mpps; }\n")
    r = nfc_cli("build", src, "--target", "tofino", "--no-verify", "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    wrpcap(str(tmp_path / "in.pcap"), [Ether() / IP(dst="10.0.0.1") / UDP()] * 2 + [Ether(type=0x86DD) / b"v6"])
    cap = tmp_path / "cap"
    r = nfc_cli("run", str(tmp_path / "out"), "--inject", f"1={tmp_path / 'in.pcap'}", "--capture", str(cap))
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert lines == ["switch model: 3 packets from port 1 (in.pcap): 2 out, 1 dropped"], lines
    assert _rows(r.stdout, "port") == {"1": ["3", "0"], "2": ["0", "2"], "all": ["3", "2"]}
    assert _rows(r.stdout, "dropped") == {"switch:not_ipv4": ["1"]}
    assert "server" not in r.stdout and f"capture: {cap} (port-2.pcap, counters.json)" in r.stdout
