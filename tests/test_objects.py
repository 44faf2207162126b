"""Counters and meters through the runtime API on both sides (issue 15 item 3): the server
program's (--target dpdk: DPDK's rte_meter trTCM, atomic counters, the control channel's
OBJ_READ / OBJ_WRITE) and the switch model's (--target tofino+dpdk: P4Runtime MeterEntry and
CounterEntry).  tests/corpus/counters_meters.nfp counts every packet per ingress port and
meters it per source address; red is dropped as over_rate, yellow marked DSCP 1.

The expected colours are worked out by hand from RFC 2698 §3 (colour-blind): with CBS 250,
PBS 450 and rates too low to refill during the test, 100-byte packets are green, green (C
bucket 250 -> 150 -> 50), yellow, yellow (P bucket 250 -> 150 -> 50), red, red.  Byte counts
are scapy's lengths of the packets sent."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import RawPcapReader, RawPcapWriter

from compiler.manifest import Direction, load_plan
from runtime.api import Runtime
from runtime.control import OP, REQ, VERSION
from runtime.errors import ChannelError, InvalidEntry
from runtime.goal import GoalStore
from runtime.objects import CounterValue, MeterRates
from runtime.server_proc import ServerProcess, eal_args
from tests.support import HAVE_DPDK, P4RuntimeSwitch, build_example, build_with_server, needs_dpdk, nfc_cli

SOURCE = "tests/corpus/counters_meters.nfp"
TAG = struct.Struct(">I")  # nf --tagged: the logical port before each frame
RATES = MeterRates(cir=1, cbs=250, pir=1, pbs=450)
HAND = ["green", "green", "yellow", "yellow", "red", "red"]  # RFC 2698 §3 for six 100-byte packets


def _packet(src: str, dst: str = "10.9.9.9") -> bytes:
    """100 bytes on the wire (Ethernet 14 + IPv4 20 + UDP 8 + 58)."""
    data = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src=src, dst=dst)
                 / UDP(sport=1, dport=2) / (b"x" * 58))
    assert len(data) == 100
    return data


def _colour(out: bytes | None) -> str:
    """What the program did with a packet: dropped (red), DSCP 1 (yellow) or unchanged (green)."""
    if out is None:
        return "red"
    return "yellow" if IP(out[14:]).tos >> 2 == 1 else "green"


# ---- the server program ------------------------------------------------------------------------



@pytest.fixture(scope="module")
def server_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not HAVE_DPDK:
        pytest.skip("DPDK (libdpdk-dev) missing: python3 build.py setup installs it")
    return build_with_server(SOURCE, tmp_path_factory.mktemp("objects") / "out", "--target", "dpdk")


def _serve(out: Path, work: Path, packets: list[tuple[int, bytes]], setup) -> tuple[list[bytes | None], dict]:
    """The program; ``setup(rt)`` through the runtime API; then the packets, one by one in
    order (one forwarding lcore): per packet its output (None: dropped) and the counters."""
    rx, tx = work / "in.pcap", work / "out.pcap"
    with RawPcapWriter(str(rx), linktype=1) as w:
        for port, data in packets:
            w.write(TAG.pack(port) + data)
    with ServerProcess(out / "server/nf", eal=eal_args(), live=True, extra=["--tagged"],
                       attach=[f"net_pcap0,rx_pcap={rx},tx_pcap={tx}"]) as srv:
        rt = Runtime(out, server=srv.control)
        srv.control.write("add", "egress_of", [[0x0A090909, c, 7] for c in range(3)])
        result = setup(rt)
        srv.control.start()
        import time
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            c = srv.control.counters()
            if c["forwarded"] + sum(c["drops"].values()) >= len(packets):
                break
            time.sleep(0.05)
        after = result(rt) if callable(result) else None
        srv.control.close()
    outs = [bytes(d[TAG.size:]) for d, _ in RawPcapReader(str(tx))] if tx.exists() else []
    return outs, after


@needs_dpdk
def test_a_meter_set_through_the_api_colours_packets_as_rfc_2698_says_on_the_server(server_build, tmp_path):
    packets = [(3, _packet("10.0.0.5")) for _ in HAND] + [(4, _packet("10.0.0.6"))]

    def setup(rt):
        m = rt.meter("per_source")
        assert m.read(5) is None  # unconfigured until set
        m.set(5, RATES)
        assert m.read(5) == RATES
        return lambda rt: (rt.counter("per_port").read(3), rt.counter("per_port").read(4),
                           rt.counter("per_port").read(5))

    outs, (port3, port4, port5) = _serve(server_build, tmp_path, packets, setup)
    # the unmetered source (index 6) is green; red packets are not sent
    assert [_colour(o) for o in outs] == [c for c in HAND if c != "red"] + ["green"]
    assert port3 == CounterValue(6, 600) and port4 == CounterValue(1, 100) and port5 == CounterValue(0, 0)


@needs_dpdk
def test_a_reset_meter_is_green_again_and_counters_can_be_zeroed(server_build, tmp_path):
    def setup(rt):
        m = rt.meter("per_source")
        m.set(5, RATES)
        m.reset(5)
        assert m.read(5) is None

        def after(rt):
            c = rt.counter("per_port")
            before = c.read(3)
            c.reset(3)
            return before, c.read(3)
        return after

    outs, (before, zeroed) = _serve(server_build, tmp_path, [(3, _packet("10.0.0.5")) for _ in HAND], setup)
    assert [_colour(o) for o in outs] == ["green"] * len(HAND)
    assert before == CounterValue(len(HAND), 100 * len(HAND)) and zeroed == CounterValue(0, 0)


@needs_dpdk
def test_bad_calls_are_refused_and_change_nothing_on_the_server(server_build, tmp_path):
    def setup(rt):
        m = rt.meter("per_source")
        m.set(7, RATES)
        bad = [MeterRates(0, 250, 1, 450), MeterRates(2, 250, 1, 450), MeterRates(1, 0, 1, 450),
               MeterRates(1, 250, 1, 0), MeterRates(1, 250, 1 << 40, 450)]
        for r in bad:
            with pytest.raises(InvalidEntry):
                m.set(7, r)
        with pytest.raises(InvalidEntry):
            m.set_many({8: RATES, 4000: RATES})  # one index out of range: index 8 is not set either
        with pytest.raises(InvalidEntry):
            rt.counter("per_port").read(64)
        with pytest.raises(InvalidEntry):
            rt.meter("per_port")  # a counter, not a meter
        assert m.read(7) == RATES and m.read(8) is None
        # the channel itself checks every record before writing any (docs/control.md)
        ch = rt.server
        obj = ch.objects["per_source"]
        body = struct.pack("<10Q", 9, 1, 250, 1, 450, 10, 5, 250, 1, 450)  # the second has pir < cir
        status, index, _ = ch.raw(REQ.pack(b"NFCQ", VERSION, OP["obj_write"], obj.index, 2, len(body)), body)
        assert (status, index) == (5, 1)
        assert ch.object_read("per_source", [9, 10]) == [(0, 0, 0, 0, 0)] * 2
        status, _, _ = ch.raw(REQ.pack(b"NFCQ", VERSION, OP["obj_read"], 99, 0, 0))
        assert status == 3  # NO_TABLE: no such object
        return None

    _serve(server_build, tmp_path, [], setup)


@needs_dpdk
def test_hello_lists_the_servers_objects_and_the_plan_places_them(server_build):
    plan = {o["name"]: o for o in __import__("json").loads((server_build / "plan.json").read_text())["objects"]}
    assert plan["per_port"]["placement"] == "server" and plan["per_source"]["placement"] == "server"
    with ServerProcess(server_build / "server/nf", ["net_null0"]) as srv:
        objs = srv.control.objects
        assert {n: (o.kind, o.size) for n, o in objs.items()} == {"per_port": ("counter", 64),
                                                                  "per_source": ("meter", 4000)}


@needs_dpdk
def test_a_restarted_server_gets_its_meter_rates_back_from_the_goal_state(server_build, tmp_path):
    goal = tmp_path / "goal.sqlite"
    with ServerProcess(server_build / "server/nf", ["net_null0"]) as srv:
        rt = Runtime(server_build, server=srv.control, goal=GoalStore(goal))
        m = rt.meter("per_source")
        m.set_many({5: RATES, 6: RATES, 3999: MeterRates(10, 20, 30, 40)})
        m.reset(6)
        rt.close()
    with ServerProcess(server_build / "server/nf", ["net_null0"]) as srv:  # a new program: unconfigured
        rt = Runtime(server_build, server=srv.control, goal=GoalStore(goal))
        m = rt.meter("per_source")
        assert m.read(5) is None
        m.set(7, RATES)  # written around the goal's back: 7 is configured on the server only
        rt.goal.set_meters("per_source", {7: None})
        report = rt.reconcile()
        assert report["per_source"]["server"].modified == 3  # 5 and 3999 set, 7 reset
        assert [m.read(i) for i in (5, 6, 7, 3999)] == [RATES, None, None, MeterRates(10, 20, 30, 40)]
        assert rt.reconcile()["per_source"]["server"].modified == 0
        rt.close()


# ---- the switch model ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def switch_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("objects_sw") / "out"
    r = nfc_cli("build", SOURCE, "-o", str(out), "--no-verify", "--target", "tofino+dpdk")
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("arch", ["tna", "v1model"])
def test_a_meter_set_through_p4runtime_colours_packets_as_rfc_2698_says_on_the_switch(switch_build, arch):
    sw = P4RuntimeSwitch(switch_build, arch)
    try:
        rt = Runtime(switch_build, switch=sw.client)
        m = rt.meter("per_source")
        assert m.read(5) is None
        m.set(5, RATES)
        assert m.read(5) == RATES
        # the switch hands green and yellow packets to the server (egress_of is pinned there) with
        # the colour in the bridge header in front of the packet, where plan.json says it is
        bridge = next(b for b in load_plan(switch_build).bridges if b.direction is Direction.TO_SERVER)
        field = next(f for f in bridge.fields if f.name == "meta.colour")
        got = []
        for k, _ in enumerate(HAND):
            r = sw.model.process(_packet("10.0.0.5"), 3, now=100.0 + k * 1e-3)
            if r.kind == "drop":
                got.append("red")
                continue
            bits = int.from_bytes(r.data[:bridge.bytes], "big")
            got.append(("green", "yellow")[bits >> (bridge.bits - field.offset - field.width) & 3])
        assert got == HAND
        assert rt.counter("per_port").read(3) == CounterValue(6, 600)
        rt.counter("per_port").reset(3)
        assert rt.counter("per_port").read(3) == CounterValue(0, 0)
        m.reset(5)
        assert m.read(5) is None
        r = sw.model.process(_packet("10.0.0.5"), 3, now=200.0)
        assert r.kind == "forward"
        with pytest.raises(InvalidEntry):
            m.set(5, MeterRates(5, 250, 1, 450))
        assert m.read(5) is None
        with pytest.raises(InvalidEntry):
            rt.counter("per_port").read(64)
    finally:
        sw.close()


def test_a_restarted_switch_gets_its_meter_rates_back_and_meters_as_before(switch_build, tmp_path):
    goal = tmp_path / "goal.sqlite"
    sw = P4RuntimeSwitch(switch_build)
    try:
        rt = Runtime(switch_build, switch=sw.client, goal=GoalStore(goal))
        rt.meter("per_source").set(5, RATES)
    finally:
        sw.close()
    sw = P4RuntimeSwitch(switch_build)  # a new switch model: every meter unconfigured
    try:
        rt = Runtime(switch_build, switch=sw.client, goal=GoalStore(goal))
        assert rt.meter("per_source").read(5) is None
        assert rt.reconcile()["per_source"]["switch"].modified == 1
        assert rt.meter("per_source").read(5) == RATES
        got = [sw.model.process(_packet("10.0.0.5"), 3, now=100.0 + k * 1e-3).kind for k in range(len(HAND))]
        assert got == ["forward"] * 4 + ["drop"] * 2  # red is dropped: the rates meter again (RFC 2698 §3)
    finally:
        sw.close()


def test_an_object_on_a_side_not_connected_is_a_typed_error(switch_build):
    rt = Runtime(switch_build)
    with pytest.raises(ChannelError, match="P4Runtime"):
        rt.meter("per_source").read(0)


def test_the_plan_places_each_object_where_the_stages_that_use_it_run(tmp_path):
    """The IPsec gateway (seed 001 §4.3/§4.4): the per-tunnel meters go with the steering
    stages to the switch, the per-SA sequence register with ESP to the server."""
    out = build_example("examples/ipsec_gateway.nfp", "tofino+dpdk", "--no-verify")
    plan = load_plan(out)
    where = {o.name: (o.kind, o.placement.value, o.size) for o in plan.objects}
    assert where == {"tunnel_in_rate": ("meter", "switch", 64000), "tunnel_out_rate": ("meter", "switch", 64000),
                     "sa_seq": ("register", "server", 64000)}
    assert {s.name for s in plan.stages if not s.on_server} >= {"inbound_steer", "outbound_steer"}
