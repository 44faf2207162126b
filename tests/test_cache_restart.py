"""A restart noticed by the cache managers themselves (issue 14 item 5): the switch model
behind its P4Runtime server restarted empty on the same port, the generated server program
restarted empty on the same control socket, entries gone from the switch behind the
runtime's back.  ``Managers`` (with the runtime's goal state) reconnects what went down and
reconciles, without being told; what each side holds is read back from it and compared
with the entries the test wrote."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from emulator.switchmodel import SwitchModel
from emulator.switchmodel.server import P4RuntimeServer, serve
from runtime.api import Runtime
from runtime.cache_manager import CacheLost, CacheManager, IdleLimits, Managers
from runtime.errors import ChannelError
from runtime.goal import GoalStore
from runtime.p4runtime import SwitchClient, SwitchUpdate
from runtime.server_proc import ServerProcess
from runtime.steering import steer_all
from tests.support import DPDK, ROOT, build_with_server, nfc_cli, run_make

pytestmark = DPDK

PROGRAM = ROOT / "tests/corpus/host_cache.nfp"
HOSTS = {0x0A000000 + i: 100 + i for i in range(20)}  # host -> port
ACL = {0xC0000200 + i: 1 for i in range(5)}  # a table the switch holds whole


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("restart") / "out"
    r = nfc_cli("build", str(PROGRAM.relative_to(ROOT)), "-o", str(out), "--no-verify")
    assert r.returncode == 0, r.stderr
    assert run_make(out / "server").returncode == 0
    return out


class Sides:
    """The switch model behind P4Runtime on a fixed port and the server program on a fixed
    control socket, each restartable there, empty."""

    def __init__(self, out: Path, tmp: Path) -> None:
        self.out, self.socket = out, tmp / "control.sock"
        self.names = json.loads((out / "switch/name_map.json").read_text())
        self.grpc, self.port = self._serve("127.0.0.1:0")
        self.switch = SwitchClient(f"127.0.0.1:{self.port}", self.names, "tna")
        self.server = ServerProcess(out / "server/nf", ["net_null0"], control=self.socket)

    def _serve(self, address: str) -> tuple[Any, int]:
        self.model = SwitchModel.from_build(self.out)
        return serve(P4RuntimeServer(self.model, self.names, "tna"), address)

    def restart_switch(self, down: float = 0.0) -> None:
        self.grpc.stop(0).wait()
        time.sleep(down)
        self.grpc, _ = self._serve(f"127.0.0.1:{self.port}")  # a new model: empty

    def restart_server(self, down: float = 0.0) -> None:
        self.server.stop()
        time.sleep(down)
        self.server = ServerProcess(self.out / "server/nf", ["net_null0"], control=self.socket)  # empty

    def close(self) -> None:
        self.switch.close()
        self.grpc.stop(0)
        self.server.stop()


@contextmanager
def _managed(built: Path, tmp_path: Path, goal: bool = True,
             **managers: Any) -> Iterator[tuple[Sides, Runtime, Managers]]:
    """Both sides, a runtime with a goal state (unless not ``goal``) that added every host
    and ACL entry (a 6-entry cache, full: every eviction step reads it whole), and its
    managers running."""
    sides = Sides(built, tmp_path)
    rt = Runtime(built, switch=sides.switch, server=sides.server.control,
                 goal=GoalStore(tmp_path / "goal.sqlite") if goal else None)
    try:
        rt.caches["hosts"].capacity = 6
        rt.table("hosts").add_many([{"ipv4_dst": h, "port": p} for h, p in HOSTS.items()])
        rt.table("acl").add_many([{"ipv4_src": a, "ok": v} for a, v in ACL.items()])
        manager = CacheManager(rt, "hosts", IdleLimits(((0.95, 1000.0),)))  # nothing idles out meanwhile
        with Managers({"hosts": manager}, **{"step_s": 0.01, "evict_s": 0.05, "retry_s": 0.05, **managers}) as m:
            yield sides, rt, m
    finally:
        if rt.goal is not None:
            rt.goal.close()
        sides.close()


def _until(done: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _cache(switch: SwitchClient) -> dict[int, int]:
    return {m["ipv4_dst"][0]: v["port"] for m, v, _p in switch.read("hosts")}


def _server_hosts(sides: Sides) -> dict[int, int]:
    return {h: p for h, p in sides.server.control.dump("hosts")}


def test_a_switch_restarted_empty_gets_its_cache_and_tables_back_from_the_managers(built, tmp_path):
    with _managed(built, tmp_path) as (sides, rt, managers):
        assert rt.schemas["acl"].on_switch and not rt.schemas["acl"].on_server
        before = _cache(sides.switch)
        assert len(before) == 6 and all(HOSTS[h] == p for h, p in before.items())
        sides.restart_switch()  # nothing tells the runtime: the managers notice
        _until(lambda: bool(managers.recoveries), "the restarted switch was not noticed")
        repair = managers.recoveries[0]
        assert (repair["hosts"]["switch"].added, repair["acl"]["switch"].added) == (6, len(ACL))
        assert "server" not in repair["hosts"]  # the server did not restart: not looked at
        assert _cache(sides.switch) == before
        assert {m["ipv4_src"][0]: v["ok"] for m, v, _p in sides.switch.read("acl")} == ACL
        assert not sides.switch.lost and managers.failed is None


def test_a_server_restarted_empty_gets_its_table_back_and_the_cache_stays_what_it_was(built, tmp_path):
    with _managed(built, tmp_path) as (sides, _rt, managers):
        before = _cache(sides.switch)
        sides.restart_server()  # empty (the repair below added every host)
        _until(lambda: bool(managers.recoveries), "the restarted server was not noticed")
        repair = managers.recoveries[0]
        assert repair["hosts"]["server"].added == len(HOSTS) and "switch" not in repair["acl"]
        assert _server_hosts(sides) == HOSTS
        assert _cache(sides.switch) == before


def test_entries_gone_from_the_switch_behind_the_runtimes_back_are_put_back(built, tmp_path):
    with _managed(built, tmp_path) as (sides, _rt, managers):
        before = _cache(sides.switch)
        gone = sorted(before)[:2]
        assert all(e is None for e in sides.switch.write(
            [SwitchUpdate("delete", "hosts", {"ipv4_dst": (h, None)}, {}) for h in gone]))
        _until(lambda: bool(managers.recoveries), "the lost entries were not noticed")
        assert isinstance(managers.last_error["hosts"], CacheLost)
        assert managers.recoveries[0]["hosts"]["switch"].added == 2
        assert _cache(sides.switch) == before


def test_both_sides_down_and_back_one_after_the_other_are_both_repaired(built, tmp_path):
    """The switch comes back first: an attempt reconnects it and then fails on the server,
    which is still down; the switch is not forgotten: the attempt that succeeds once the
    server is back repairs both."""
    with _managed(built, tmp_path) as (sides, _rt, managers):
        before = _cache(sides.switch)
        sides.server.stop()
        sides.restart_switch()
        _until(lambda: managers.errors["recover"] >= 2, "no attempt failed while the server was down")
        assert not managers.recoveries
        sides.restart_server()
        _until(lambda: bool(managers.recoveries), "not repaired once both were back")
        repair = managers.recoveries[0]
        assert (repair["hosts"]["server"].added, repair["hosts"]["switch"].added) == (len(HOSTS), 6)
        assert repair["acl"]["switch"].added == len(ACL)
        assert _cache(sides.switch) == before and _server_hosts(sides) == HOSTS


def test_without_goal_state_entries_the_switch_lost_are_written_again_from_the_server(built, tmp_path):
    with _managed(built, tmp_path, goal=False) as (sides, _rt, managers):
        manager = managers.managers["hosts"]
        before = _cache(sides.switch)
        gone = sorted(before)[:2]
        assert all(e is None for e in sides.switch.write(
            [SwitchUpdate("delete", "hosts", {"ipv4_dst": (h, None)}, {}) for h in gone]))
        _until(lambda: manager.put_back == 2, "the lost entries were not written again")
        assert _cache(sides.switch) == before and not managers.recoveries and managers.errors["hosts"] == 0


@contextmanager
def _sides_and_runtime(out: Path, tmp_path: Path) -> Iterator[tuple[Sides, Runtime]]:
    """Both sides, and a runtime with a goal state connected to them (no managers)."""
    sides = Sides(out, tmp_path)
    rt = Runtime(out, switch=sides.switch, server=sides.server.control, goal=GoalStore(tmp_path / "goal.sqlite"))
    try:
        yield sides, rt
    finally:
        assert rt.goal is not None
        rt.goal.close()
        sides.close()


@contextmanager
def _held_eviction_step(manager: CacheManager, switch: SwitchClient) -> Iterator[list[object]]:
    """An eviction step of ``manager`` in a thread of its own, its read of every cached
    entry's idle time answered by the switch and then held until the block ends; yields the
    list its outcome (its report, or what it raised) is in once the block has ended."""
    entered, release = threading.Event(), threading.Event()
    outcome: list[object] = []
    read = switch.idle

    def held(*args: Any, **kw: Any) -> Any:
        out = list(read(*args, **kw))  # the read as the switch answered it, before the block's doing
        entered.set()
        release.wait(30)
        return out

    def step() -> None:
        try:
            outcome.append(manager.evict_step())
        except Exception as e:  # the test looks at it
            outcome.append(e)

    switch.idle = held  # type: ignore[method-assign]
    stepping = threading.Thread(target=step)
    stepping.start()
    try:
        assert entered.wait(10)
        yield outcome
    finally:
        release.set()
        stepping.join(30)
        switch.idle = read  # type: ignore[method-assign]


def test_an_entry_cached_while_a_read_was_on_its_way_is_not_taken_for_lost(built, tmp_path):
    """An operator's add cached after an eviction step's read was sent is not in that read:
    the read of it made under the lock finds it, so no restart is assumed."""
    with _sides_and_runtime(built, tmp_path) as (sides, rt):
        rt.caches["hosts"].capacity = 7
        rt.table("hosts").add_many([{"ipv4_dst": h, "port": p} for h, p in list(HOSTS.items())[:6]])
        manager = CacheManager(rt, "hosts", IdleLimits(((0.5, 1000.0),)))  # 6 of 7: every idle time read
        with _held_eviction_step(manager, sides.switch) as outcome:
            host = list(HOSTS)[6]
            rt.table("hosts").add(ipv4_dst=host, port=HOSTS[host])  # room: cached at once
            assert host in _cache(sides.switch)
        assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome


def test_a_switch_restarted_under_a_sharded_build_gets_its_steering_back(tmp_path):
    """The CGN shards its subscribers over six boxes; this one was given every bucket
    (steering entries on the switch, which are not goal state).  A switch that restarts
    loses them: ``recover`` steers again what this runtime steered."""
    out = build_with_server("examples/cgnat.nfp", tmp_path / "cgn")
    with _sides_and_runtime(out, tmp_path) as (sides, rt):
        steer_all(rt)
        tables = [t for t, info in sides.switch.names["tables"].items() if info.get("steering")]

        def steering() -> dict[str, dict[int, int]]:
            return {t: {m["bucket"][0]: v["port"] for m, v, _p in sides.switch.read(t)} for t in tables}

        before = steering()
        assert tables and all(before.values())
        sides.restart_switch()
        _until(lambda: sides.switch.lost, "the stream did not end")
        deadline = time.monotonic() + 20
        while True:
            try:
                assert rt.recover() is not None
                break
            except ChannelError:  # the new switch not answering yet
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert steering() == before


def test_an_eviction_read_made_before_a_repaired_restart_evicts_nothing(built, tmp_path):
    """Its idle times are of the switch before the repair: dropped, even when the other
    thread (here: a promotion step) took notice of the repair first."""
    with _sides_and_runtime(built, tmp_path) as (sides, rt):
        rt.caches["hosts"].capacity = 6
        rt.table("hosts").add_many([{"ipv4_dst": h, "port": p} for h, p in HOSTS.items()])
        manager = CacheManager(rt, "hosts", IdleLimits(((0.5, 0.0),)))  # every cached entry idle past the limit
        with _held_eviction_step(manager, sides.switch) as outcome:
            rt.reconcile()  # a repair (nothing to do here, but the managers must start afresh)
            manager.promote_step()  # the promotion thread sees it first
        assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
        assert outcome[0].evicted == 0 and len(_cache(sides.switch)) == 6  # type: ignore[union-attr]
