"""The goal state in Redis (issue 16, item 6): a store gateways share, so that a restarted
agent converges by ``reconcile`` with nothing replayed.  A real ``redis-server`` (Debian's,
installed by ``build.py setup``) runs on a unix socket of the test's own.

* the Redis store keeps what the SQLite one keeps, and refuses what it refuses;
* two agents with the same namespace share one goal, other namespaces do not see it;
* an agent restarted with 100,000 entries in the store brings a fresh server program to them:
  afterwards a diff of the store against the server's dump is empty;
* ``nfc run --goal unix://...``: tests/test_nfc_run.py.
"""

from __future__ import annotations

import pytest

from runtime.api import Runtime
from runtime.goal import GoalError, GoalStore, open_goal
from runtime.goal_redis import RedisGoalStore
from runtime.server_proc import ServerProcess
from tests.support import build_with_server, needs_dpdk, needs_redis

pytestmark = needs_redis


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


@needs_dpdk
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

