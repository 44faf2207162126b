"""The goal state in Redis (issue 16, item 6): a store gateways share, so that a restarted
agent converges by ``reconcile`` with nothing replayed.  A real ``redis-server`` (Debian's,
installed by ``build.py setup``) runs on a unix socket of the test's own.

* the Redis store keeps what the SQLite one keeps, and refuses what it refuses;
* two agents with the same namespace share one goal, other namespaces do not see it;
* an agent restarted with 100,000 entries in the store brings a fresh server program to them:
  afterwards a diff of the store against the server's dump is empty;
* ``nfc run --goal unix://...`` runs twice, the second time with no entries given.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.utils import rdpcap, wrpcap

from runtime.api import Runtime
from runtime.goal import GoalError, GoalStore, open_goal
from runtime.goal_redis import RedisGoalStore
from runtime.server_proc import ServerProcess
from tests.conftest import HAVE_DPDK, ROOT, build_with_server, expected_vxlan

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server missing: python3 build.py setup installs it (Debian redis-server)")


@pytest.fixture
def redis_url(tmp_path):
    sock = tmp_path / "redis.sock"
    proc = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
                             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if sock.exists():
                break
            time.sleep(0.05)
        assert sock.exists(), "redis-server did not open its socket"
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(params=["sqlite", "redis"])
def store(request, tmp_path):
    if request.param == "sqlite":
        s = GoalStore(tmp_path / "goal.sqlite")
    else:
        s = RedisGoalStore(request.getfixturevalue("redis_url"), "nfc:t")
    yield s
    s.close()


def test_a_store_keeps_entries_and_meter_rates_as_written(store):
    store.apply("routes", "add", [(((10, 8),), 0, (1, 2)), (((11, None),), 5, (3, 4))])
    store.apply("routes", "modify", [(((10, 8),), 0, (7, 7))])
    store.apply("routes", "add", [(((12, 8),), 0, (9, 9))])
    store.apply("routes", "delete", [(((12, 8),), 0, ())])
    assert sorted(store.entries("routes", 1, 2)) == [(((10, 8),), 0, (7, 7)), (((11, None),), 5, (3, 4))]
    assert store.count("routes") == 2 and store.count("other") == 0
    store.set_meters("rate", {3: (1, 2, 3, 4), 5: (5, 6, 7, 8)})
    store.set_meters("rate", {5: None})
    assert store.meters("rate") == {3: (1, 2, 3, 4)}
    with pytest.raises(GoalError, match="table routes: an entry of 1 key fields and 2 values, the table has 2 and 2"):
        list(store.entries("routes", 2, 2))  # the goal of another program, or of the program before an edit


def test_gateways_with_one_namespace_share_a_goal_and_others_do_not(redis_url):
    a, b = RedisGoalStore(redis_url, "nfc:dsr"), RedisGoalStore(redis_url + "?prefix=nfc:dsr", "ignored")
    c = open_goal(redis_url, "cgnat")
    a.apply("t", "add", [(((1, None),), 0, (2,))])
    assert list(b.entries("t", 1, 1)) == [(((1, None),), 0, (2,))]
    assert isinstance(c, RedisGoalStore) and c.count("t") == 0
    for s in (a, b, c):
        s.close()


def test_a_store_that_cannot_be_reached_is_a_goal_error(tmp_path):
    with pytest.raises(GoalError, match="the goal store unix://"):
        open_goal(f"unix://{tmp_path / 'nobody.sock'}", "t")


@pytest.mark.skipif(not HAVE_DPDK, reason="DPDK (libdpdk-dev) missing: python3 build.py setup installs it")
def test_a_restarted_agent_brings_a_fresh_server_to_100k_entries_from_the_store(redis_url, tmp_path):
    out = build_with_server("examples/ipsec_gateway.nfp", tmp_path / "ipsec", "--target", "dpdk")
    n = 100_000
    rows = [{"esp_spi": 0x10000 + i, "key": i * 7919, "salt": i, "sa_index": i, "vnet_port": 16 + i % 16,
             "vnet_mac": 0x020000000000 + i} for i in range(n)]
    nf = out / "server/nf"
    with ServerProcess(nf, ["net_null0"]) as srv:
        rt = Runtime.connect(out, control=srv.socket, goal=redis_url)
        assert rt.table("inbound_sa").add_many(rows) == n
        rt.close()
    with ServerProcess(nf, ["net_null0"]) as srv:  # the agent and the server restart; the store keeps all
        assert srv.control.dump("inbound_sa") == []
        rt = Runtime.connect(out, control=srv.socket, goal=redis_url)
        assert rt.reconcile()["inbound_sa"]["server"].added == n
        assert rt.goal is not None
        goal = {(k[0][0],): v for k, _p, v in rt.goal.entries("inbound_sa", 1, 5)}
        held = {r[:1]: r[1:] for r in srv.control.dump("inbound_sa")}
        assert len(goal) == n and held == goal  # the diff of the store against the device is empty
        assert not rt.reconcile()["inbound_sa"]["server"]  # and nothing is left to do
        rt.close()


@pytest.mark.skipif(not HAVE_DPDK, reason="DPDK (libdpdk-dev) missing: python3 build.py setup installs it")
def test_nfc_run_keeps_its_goal_in_redis(redis_url, tmp_path):
    out = tmp_path / "vpn"
    r = subprocess.run([sys.executable, "-m", "nfc.cli", "build", "examples/vpn_gateway.nfp", "-o", str(out),
                        "--target", "dpdk", "--no-verify", "--allow-overcommit"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    entries = {"overlay_routes": [{"match": {"meta_customer": 5, "meta_overlay": 42, "vm_ip": "192.168.42.17"},
                                   "values": {"host_ip": "172.16.5.17", "vni": 5042}}],
               "underlay_routes": [{"match": {"outer_ipv4_dst": "172.16.0.0/16"},
                                    "values": {"port": 21, "next_hop_mac": "02:00:00:00:00:99"}}]}
    (tmp_path / "entries.json").write_text(json.dumps(entries))
    customer = (Ether(src="00:00:00:00:00:01", dst="00:00:00:00:00:02") / Dot1AD(vlan=5) / Dot1Q(vlan=42)
                / IP(src="192.168.200.1", dst="192.168.42.17") / UDP(sport=7, dport=9) / b"to the cloud")
    wrpcap(str(tmp_path / "customer.pcap"), [customer])
    cap: Path = tmp_path / "cap"

    def run(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "nfc.cli", "run", str(out), "--inject",
                               f"3={tmp_path / 'customer.pcap'}", "--capture", str(cap), *more],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)

    want = [expected_vxlan(customer, "172.16.5.17", 5042)]
    r = run("--entries", str(tmp_path / "entries.json"), "--goal", redis_url)
    assert r.returncode == 0, r.stderr[-3000:]
    r = run("--goal", redis_url)  # no entries given: the store's
    assert r.returncode == 0, r.stderr[-3000:]
    assert [bytes(p) for p in rdpcap(str(cap / "port-21.pcap"))] == want
