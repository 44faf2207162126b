"""A sharded deployment under traffic (issue 16): the IPsec gateway's two GPNs as two DPDK
programs behind the switch model, each on a veth pair of its own (runtime/live.py), and the
runtime moving buckets while the tenant sends.  The ESP on the wire is read back with scapy.

* GPN 1 is killed mid-stream: the liveness round moves its buckets (tunnel 11) to GPN 0 with
  their outbound SA from the goal state; the counters say how many packets went to the dead
  GPN unhandled, exactly the tunnel-11 packets that did not come out, no more than were sent
  to it around the failure; tunnel 9 loses nothing.
* ``sa_seq`` is ``monotonic``: the dead GPN's count is unknown, so tunnel 11's slot is used up
  on GPN 0 (its packets dropped ``sa_seq_exhausted``, never sent with a number GPN 1 may have
  sent) until the control plane rekeys it.
* A replacement GPN joins on port 33 while packets flow: it gets the SAs, then its buckets
  back, make-before-break, and no packet of either tunnel is lost; tunnel 11's sequence slot
  goes along, so every packet of its SA, encrypted on either GPN, decrypts with scapy under a
  number of its own (no GCM nonce twice).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from itertools import pairwise

import pytest
from scapy.layers.inet import IP
from scapy.layers.ipsec import ESP
from scapy.layers.l2 import Ether

from compiler.manifest import load_plan
from runtime import carry
from runtime.api import Runtime
from runtime.entries import load_entries
from runtime.fleet import ServerFleet, replicated_tables
from runtime.goal import GoalStore
from runtime.live import LiveDataPlane, pace
from tests.support import LIVE, P4RuntimeSwitch, build_with_server

pytestmark = LIVE

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
        from tests.support import ipsec as esp

        self.sent: dict[int, list[float]] = {9: [], 11: []}
        packets = [esp.tenant(9 if i % 2 else 11, i % 250 + 1) for i in range(count)]

        def send(data: bytes) -> None:
            live.inject(esp.VNET_PORT, data)
            self.sent[data[14 + 18]].append(time.monotonic())  # the tunnel: 192.168.<tunnel>.x

        self.thread = threading.Thread(target=pace, args=(packets, send, pps))
        self.thread.start()

    def join(self) -> None:
        self.thread.join()


REKEYED = {"spi": 0x2003, "key": bytes(range(200, 216)), "salt": bytes.fromhex("5eed5eed"), "slot": 12}


def _esp_out(live: LiveDataPlane) -> list[Ether]:
    from tests.support import ipsec as esp

    return [Ether(f) for f in live.take(esp.INTERNET_PORT)]


def _by_tunnel(frames: list[Ether]) -> Counter[int]:
    tunnel = {spi: t for t, spi in SPI_OUT.items()} | {REKEYED["spi"]: 11}
    return Counter(tunnel[f[ESP].spi] for f in frames)


def _out_by_tunnel(live: LiveDataPlane) -> Counter[int]:
    return _by_tunnel(_esp_out(live))


def test_a_gpn_killed_under_traffic_loses_only_its_in_flight_packets_and_a_new_one_takes_them_back(ipsec, tmp_path):
    from tests.support import ipsec as esp

    plan = load_plan(ipsec)
    sw = P4RuntimeSwitch(ipsec)
    try:
        with LiveDataPlane(ipsec / "server/nf", sw.p4rt, GPN_PORTS, replicated=replicated_tables(plan)) as live:
            fleet = ServerFleet([s.control for s in live.servers], plan)
            rt = Runtime(ipsec, switch=sw.client, server=fleet, goal=GoalStore(tmp_path / "goal.sqlite"))
            (tmp_path / "e.json").write_text(json.dumps(esp.entries()))
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
            assert move.lost == ("replay_check state",) and move.must_rekey == {"sa_seq": [11]} and move.overrun == {}
            gpn0, dead = counters["servers"]
            assert gpn0["running"] and not dead["running"]
            lost, used_up = dead["lost"], counters["drops"].get("server:sa_seq_exhausted", 0)
            assert out[9] == len(tenant.sent[9]) == 400  # GPN 0's tunnel: nothing lost
            # what GPN 1 did not send is lost (exactly what did not come out); what came to GPN 0 after
            # the move is dropped: GPN 1's last number died with it
            assert out[11] + lost + used_up == len(tenant.sent[11]) == 400, counters
            around = sum(killed - 0.05 <= t <= moved for t in tenant.sent[11])  # sent to GPN 1 around the failure
            assert lost <= around, (lost, around, moved - killed)
            # GPN 0 took tunnel 11 when the switch steered it there, inside the liveness round
            assert 0 < sum(t > moved for t in tenant.sent[11]) <= used_up <= sum(t > killed for t in tenant.sent[11])

            # IKE rekeys tunnel 11 (docs/examples.md: the new SA's slot zeroed, then the tunnel pointed at it)
            rt.register("sa_seq").write(REKEYED["slot"], 0)
            sa11 = rt.table("outbound_sa").read(meta_tunnel=11)
            rt.table("outbound_sa").modify(**{**sa11, "meta_tunnel": 11, "spi": REKEYED["spi"], "seq_index": 12,
                                              "key": int.from_bytes(REKEYED["key"], "big"),
                                              "salt": int.from_bytes(REKEYED["salt"], "big")})

            # a replacement GPN on port 33 takes tunnel 11 back while the tenant sends: nothing lost
            fresh = live.replace(33)
            tenant = Tenant(live, 600)
            time.sleep(0.2)
            joined = rt.add_server(fresh.control, 33)
            tenant.join()
            assert live.settle(), live.counters()
            assert joined.buckets == {2: 128} and joined.copied == {"outbound_sa": 1}
            # GPN 0's windows (none: this test sends no inbound ESP) merged into GPN 2's, nothing lost
            assert joined.carried == {"sa_seq": 1, "replay_check state": 0}
            assert joined.must_rekey == {} and joined.overrun == {}
            assert joined.lost == ()
            frames = _esp_out(live)
            out = _by_tunnel(frames)
            assert (out[9], out[11]) == (300, 300), (out, live.counters())
            # the rekeyed SA's packets, from GPN 0 and then GPN 2: each number once, each decrypts
            sa = esp.scapy_sa(REKEYED["spi"], REKEYED["key"], REKEYED["salt"], esp.GATEWAY_VIP, esp.PEER)
            seqs = sorted(f[ESP].seq for f in frames if f[ESP].spi == REKEYED["spi"])
            for f in frames:
                if f[ESP].spi == REKEYED["spi"]:
                    assert sa.decrypt(f[IP].copy())[IP].dst.startswith("192.168.11.")
            assert len(set(seqs)) == len(seqs) == 300 and seqs[0] == 1
            jumps = [b - a for a, b in pairwise(seqs) if b - a != 1]
            # GPN 2 went on from GPN 0's number at the move + the margin; GPN 0 sent a few more after that
            # read, before the switch steered away, inside the margin (a jump of MARGIN + 1 less those)
            assert len(jumps) == 1 and carry.MARGIN - 300 < jumps[0] <= carry.MARGIN + 1, jumps
            assert live.counters()["servers"][1]["sent"] > 0  # the new GPN carries tunnel 11 again
            assert [r[0] for r in fresh.control.dump("outbound_sa")] == [11]
            rt.goal.close()

            # GPN 0 restarted in place under traffic (no fail-over): what reaches port 32 while it is
            # replaced is lost, the new program (no entries yet) drops the rest of tunnel 9's, and
            # the data plane still settles; tunnel 11 (GPN 2 on port 33) loses nothing
            def server_drops(counters: dict) -> Counter[str]:
                return Counter({r: n for r, n in counters["drops"].items() if r.startswith("server:")})

            before = server_drops(live.counters())
            assert before["server:sa_seq_exhausted"] > 0  # GPN 0's from the fail-over above
            tenant = Tenant(live, 400)
            time.sleep(0.1)
            live.replace(32)
            tenant.join()
            assert live.settle(), live.counters()
            counters = live.counters()
            out = _out_by_tunnel(live)
            gpn0 = counters["servers"][0]
            after = server_drops(counters)  # the replaced program's drops are still counted
            assert after["server:sa_seq_exhausted"] >= before["server:sa_seq_exhausted"], (before, after)
            dropped = after.total() - before.total()
            assert out[11] == len(tenant.sent[11]) == 200
            assert out[9] + gpn0["lost"] + dropped == len(tenant.sent[9]) == 200, (out, counters)
    finally:
        sw.close()


def test_a_moved_tunnels_replay_window_goes_along(ipsec, tmp_path):
    """The peer's ESP for tunnel 11 reaches GPN 1, which accepts numbers 1..5; GPN 1 leaves
    (``remove_server``), its windows merged into GPN 0's; number 3 sent again is dropped
    ``replayed`` on GPN 0, and 6 is accepted (RFC 4303 §3.4.3). A fresh window would take 3."""
    from tests.support import ipsec as esp

    plan = load_plan(ipsec)
    sw = P4RuntimeSwitch(ipsec)
    try:
        with LiveDataPlane(ipsec / "server/nf", sw.p4rt, GPN_PORTS, replicated=replicated_tables(plan)) as live:
            rt = Runtime(ipsec, switch=sw.client, server=ServerFleet([s.control for s in live.servers], plan))
            (tmp_path / "e.json").write_text(json.dumps(esp.entries()))
            rt.load(load_entries(tmp_path / "e.json"))
            sa = 1  # esp.SAS[1]: tunnel 11, on GPN 1
            inner = {seq: bytes(IP(src="192.168.11.9", dst="10.8.0.1", id=seq) / (b"in%d" % seq))
                     for seq in range(1, 7)}
            for seq in range(1, 6):
                live.inject(esp.INTERNET_PORT, esp.inbound(sa, seq, inner[seq]))
            assert live.settle(), live.counters()
            got = sorted(bytes(Ether(f)[IP]) for f in live.take(esp.VNET_PORT))
            assert got == sorted(inner[s] for s in range(1, 6))
            assert live.counters()["servers"][1]["back"] == 5  # GPN 1 decrypted them
            report = rt.remove_server(1)
            assert report.buckets == {0: 128} and report.lost == ()
            assert report.carried["replay_check state"] >= 1 and report.carried["sa_seq"] == 1
            for seq in (3, 6):
                live.inject(esp.INTERNET_PORT, esp.inbound(sa, seq, inner[seq]))
            assert live.settle(), live.counters()
            counters = live.counters()
            assert [bytes(Ether(f)[IP]) for f in live.take(esp.VNET_PORT)] == [inner[6]], counters
            assert counters["drops"].get("server:replayed") == 1 and counters["servers"][0]["back"] == 1, counters
    finally:
        sw.close()
