"""A sharded deployment under traffic (issue 16): the IPsec gateway's two GPNs as two DPDK
programs behind the switch model, each on a veth pair of its own (runtime/live.py), and the
runtime moving buckets while the tenant sends.  The ESP on the wire is read back with scapy.

* GPN 1 is killed mid-stream: the liveness round moves its buckets (tunnel 11) to GPN 0 with
  their outbound SA from the goal state; the counters say how many packets went to the dead
  GPN unhandled, exactly the tunnel-11 packets that did not come out, no more than were sent
  to it around the failure; tunnel 9 loses nothing.
* A replacement GPN joins on port 33 while packets flow: it gets the SAs, then its buckets
  back, make-before-break, and no packet of either tunnel is lost.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from scapy.layers.ipsec import ESP
from scapy.layers.l2 import Ether

from compiler.manifest import load_plan
from runtime.api import Runtime
from runtime.entries import load_entries
from runtime.fleet import ServerFleet, replicated_tables
from runtime.goal import GoalStore
from runtime.live import LiveDataPlane, pace
from tests.conftest import HAVE_DPDK, P4RuntimeSwitch, build_with_server

pytestmark = pytest.mark.skipif(not HAVE_DPDK or os.geteuid() != 0 or not Path("/usr/sbin/ip").exists(),
                                reason="needs DPDK, root and iproute2 (network namespaces, veth pairs)")

GPN_PORTS = [32, 33]
SPI_OUT = {9: 0x2001, 11: 0x2002}  # tests/test_esp_server.py's SAs: tunnel 9 on GPN 0, 11 on GPN 1


@pytest.fixture(scope="module")
def ipsec(tmp_path_factory):
    return build_with_server("examples/ipsec_gateway.nfp", tmp_path_factory.mktemp("ipsec") / "out",
                             "--target", "tofino+dpdk")


class Tenant:
    """Tenant packets of tunnels 9 and 11 in turn, at about ``pps`` (``pace``), from a thread;
    when each tunnel's were sent."""

    def __init__(self, live: LiveDataPlane, count: int, pps: float = 1000.0) -> None:
        from tests import test_esp_server as esp

        self.sent: dict[int, list[float]] = {9: [], 11: []}
        packets = [esp._tenant(9 if i % 2 else 11, i % 250 + 1) for i in range(count)]

        def send(data: bytes) -> None:
            live.inject(esp.VNET_PORT, data)
            self.sent[data[14 + 18]].append(time.monotonic())  # the tunnel: 192.168.<tunnel>.x

        self.thread = threading.Thread(target=pace, args=(packets, send, pps))
        self.thread.start()

    def join(self) -> None:
        self.thread.join()


def _out_by_tunnel(live: LiveDataPlane) -> Counter[int]:
    from tests import test_esp_server as esp

    tunnel = {spi: t for t, spi in SPI_OUT.items()}
    return Counter(tunnel[Ether(f)[ESP].spi] for f in live.take(esp.INTERNET_PORT))


def test_a_gpn_killed_under_traffic_loses_only_its_in_flight_packets_and_a_new_one_takes_them_back(ipsec, tmp_path):
    from tests import test_esp_server as esp

    plan = load_plan(ipsec)
    sw = P4RuntimeSwitch(ipsec)
    try:
        with LiveDataPlane(ipsec / "server/nf", sw.p4rt, GPN_PORTS, replicated=replicated_tables(plan)) as live:
            fleet = ServerFleet([s.control for s in live.servers], plan)
            rt = Runtime(ipsec, switch=sw.client, server=fleet, goal=GoalStore(tmp_path / "goal.sqlite"))
            (tmp_path / "e.json").write_text(json.dumps(esp._entries()))
            rt.load(load_entries(tmp_path / "e.json"))

            tenant = Tenant(live, 800)
            time.sleep(0.25)
            killed = time.monotonic()
            gpn1 = live.links[33].server
            assert gpn1 is not None
            os.killpg(gpn1.proc.pid, signal.SIGKILL)  # GPN 1 fails
            moves = []
            deadline = time.monotonic() + 10
            while not moves:  # the controller's liveness loop
                assert time.monotonic() < deadline, "the dead GPN was not noticed in 10 s"
                moves = rt.check_servers()
            moved = time.monotonic()
            tenant.join()
            assert live.settle(), live.counters()
            counters = live.counters()
            out = _out_by_tunnel(live)
            (move,) = moves
            assert (move.dead, move.to, move.copied) == (1, (0,), {"outbound_sa": 1})
            assert move.lost == ("sa_seq", "replay_check state")
            gpn0, dead = counters["servers"]
            assert gpn0["running"] and not dead["running"]
            lost = dead["lost"]
            assert out[9] == len(tenant.sent[9]) == 400  # GPN 0's tunnel: nothing lost
            assert out[11] + lost == len(tenant.sent[11]) == 400  # the lost ones: exactly what did not come out
            around = sum(killed - 0.05 <= t <= moved for t in tenant.sent[11])  # sent to GPN 1 around the failure
            assert lost <= around, (lost, around, moved - killed)

            # a replacement GPN on port 33 takes tunnel 11 back while the tenant sends: nothing lost
            fresh = live.replace(33)
            tenant = Tenant(live, 600)
            time.sleep(0.2)
            joined = rt.add_server(fresh.control, 33)
            tenant.join()
            assert live.settle(), live.counters()
            assert joined.buckets == {2: 128} and joined.copied == {"outbound_sa": 1}
            out = _out_by_tunnel(live)
            assert (out[9], out[11]) == (300, 300), (out, live.counters())
            assert live.counters()["servers"][1]["sent"] > 0  # the new GPN carries tunnel 11 again
            assert [r[0] for r in fresh.control.dump("outbound_sa")] == [11]
            rt.goal.close()

            # GPN 0 restarted in place under traffic (no fail-over): what reaches port 32 while it is
            # replaced is lost, the new program (no entries yet) drops the rest of tunnel 9's, and
            # the data plane still settles; tunnel 11 (GPN 2 on port 33) loses nothing
            tenant = Tenant(live, 400)
            time.sleep(0.1)
            live.replace(32)
            tenant.join()
            assert live.settle(), live.counters()
            counters = live.counters()
            out = _out_by_tunnel(live)
            gpn0 = counters["servers"][0]
            dropped = sum(n for reason, n in counters["drops"].items() if reason.startswith("server:"))
            assert out[11] == len(tenant.sent[11]) == 200
            assert out[9] + gpn0["lost"] + dropped == len(tenant.sent[9]) == 200, (out, counters)
    finally:
        sw.close()
