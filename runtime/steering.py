"""A sharded deployment's buckets moved between servers (issue 16): a server added, removed or
failed.  The switch program sends each bucket of the shard selector (``ShardInfo.bucket_of``)
to its home server's port unless its steering tables (one per bridge, ``nfc_steer<cut>``,
targets/p4/lower.py) say another; ``steer`` writes those, all in one P4Runtime batch.

``move`` changes which server takes some buckets, make-before-break, so that at every moment a
packet is forwarded as the whole table says and no packet of a bucket that does not move is
touched:

1. the new owner gets the moving buckets' entries of every split table (from the goal state,
   or from the old owner's dump when there is no goal), while the old owner keeps them;
2. the switch steers the buckets to the new owner (one batch);
3. the fleet routes the buckets' writes there, and the old owner's copies are deleted.

``monotonic`` registers (a sequence number that is a nonce) are carried forward between steps
1 and 2 and checked after step 3 (runtime/carry.py): the moved cells start on the new owner
beyond the old owner's last value, or used up when that is unknown (``Move.must_rekey``); the
anti-replay windows are merged into the new owners' then and again after the drain.
Whatever else a server held that packets wrote — state tables, other registers, meters'
buckets, port pools, a dead server's windows — does not move: a move names it (``Move.lost``): the moved
buckets' flows start afresh on their new server (the old one failed, or keeps a stale copy).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runtime import carry
from runtime.control import ControlChannel
from runtime.errors import ChannelError, EntryExists, EntryNotFound, InvalidEntry, RuntimeApiError
from runtime.fleet import ServerFleet
from runtime.p4runtime import Match, SwitchUpdate
from runtime.reconcile import goal_entries

if TYPE_CHECKING:
    from runtime.api import Runtime

__all__ = ["Move", "SteeringPartlyApplied", "add_server", "adopt_steering", "balance", "check_servers",
           "fail_over", "move", "rebalance", "remove_server", "steer", "steer_all"]


@dataclass
class Move:
    """What moving buckets took: per server that gained buckets, how many; per split table,
    the entries copied to the new owners; the state left behind."""

    buckets: dict[int, int] = field(default_factory=dict)  # server -> buckets it took
    copied: dict[str, int] = field(default_factory=dict)  # split table -> entries copied
    moved: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)  # split table -> the keys moved
    dead: int | None = None  # a fail-over: the server that stopped answering
    lost: tuple[str, ...] = ()  # the data-plane state that stayed behind (tables, registers, meters)
    # monotonic register -> cells carried forward; the replay windows' state -> windows merged (runtime/carry.py)
    carried: dict[str, int] = field(default_factory=dict)
    must_rekey: dict[str, list[int]] = field(default_factory=dict)  # register -> cells used up (runtime/carry.py)
    overrun: dict[str, list[int]] = field(default_factory=dict)  # register -> cells whose numbers repeated: rekey now
    stale: dict[int, int] = field(default_factory=dict)  # old owner -> copies it could not delete (it died)
    lost_entries: dict[str, int] = field(default_factory=dict)  # a fail-over: the dead server's state entries
    seconds: float = 0.0

    @property
    def to(self) -> tuple[int, ...]:
        return tuple(sorted(self.buckets))


class SteeringPartlyApplied(ChannelError):
    """A steering batch the switch applied in part and that could not be taken back."""


DRAIN_S = 0.05  # the old owners keep moved entries this long after the steering flipped


def _fleet(rt: Runtime) -> ServerFleet:
    if not isinstance(rt.server, ServerFleet) or rt.plan.shard is None:
        raise ChannelError("moving buckets needs the sharded deployment's servers as one ServerFleet (shard by)")
    return rt.server


def steer(rt: Runtime, buckets: Mapping[int, int | None]) -> None:
    """Send each bucket's packets to a server's port (None: back to its home server's), in
    one P4Runtime batch; a batch the switch applied in part is taken back, so a failure
    changes nothing."""
    if rt.switch is None:
        raise ChannelError("steering is the switch's: connect its P4Runtime endpoint")
    shard = rt.plan.shard
    if shard is None:
        raise InvalidEntry("steer: the build is not sharded (no shard by)")
    ports = _ports(rt)
    for bucket, server in buckets.items():
        if not 0 <= bucket < shard.buckets or (server is not None and not 0 <= server < len(ports)):
            raise InvalidEntry(f"steer bucket {bucket} to server {server}: the build has {shard.buckets} buckets "
                               f"and {len(ports)} servers")
    tables = [t for t, info in rt.switch.names["tables"].items() if info.get("steering")]
    have = {t: {m["bucket"][0]: v["port"] for m, v, _p in rt.switch.read(t)} for t in tables}  # one read each
    updates, undo = [], []
    for b, server in buckets.items():
        match: dict[str, Match] = {"bucket": (b, None)}
        home = server is None or ports[server] == shard.shares[shard.home(b)].port
        for t in tables:
            old = have[t].get(b)
            if home and old is not None:  # back to its own port: the steering tables forget it
                updates.append(SwitchUpdate("delete", t, match, {}))
                undo.append(SwitchUpdate("add", t, match, {"port": old}))
            elif not home and server is not None and old != ports[server]:
                updates.append(SwitchUpdate("add" if old is None else "modify", t, match, {"port": ports[server]}))
                undo.append(SwitchUpdate("delete", t, match, {}) if old is None else
                            SwitchUpdate("modify", t, match, {"port": old}))
    errors = rt.switch.write(updates) if updates else []
    failed = [e for e in errors if e is not None]
    if not failed:  # remembered: a switch that restarts gets them back (Runtime.recover)
        for b, server in buckets.items():
            if server is None or ports[server] == shard.shares[shard.home(b)].port:
                rt.steering.pop(b, None)
            else:
                rt.steering[b] = server
    if failed:
        done = [u for u, e in zip(undo, errors, strict=True) if e is None]
        try:
            undone = rt.switch.write(done) if done else []
        except RuntimeApiError as e:
            undone = [e]
        if any(e is not None for e in undone):
            raise SteeringPartlyApplied(f"steering refused ({failed[0]}), and taking back what the switch applied "
                                        "failed: some buckets are steered, some not (adopt_steering reads which)")
        raise failed[0]


def _ports(rt: Runtime) -> list[int]:
    """Each server's switch port: a fleet's (servers may have joined), else the plan's."""
    if isinstance(rt.server, ServerFleet):
        return rt.server.ports
    return rt.plan.shard.ports if rt.plan.shard is not None else []


def adopt_steering(rt: Runtime) -> None:
    """Route each bucket of the fleet to the server the switch's steering tables send it to
    (a bucket they do not name: its home): a runtime that restarted picks up the moves an
    earlier one made.  A bucket steered to a port no serving server of the fleet has, or that
    the bridges' tables steer differently (a batch applied in part), is steered home again."""
    fleet = _fleet(rt)
    assert rt.switch is not None and rt.plan.shard is not None
    shard = rt.plan.shard
    tables = [t for t, info in rt.switch.names["tables"].items() if info.get("steering")]
    steered = [{m["bucket"][0]: v["port"] for m, v, _p in rt.switch.read(t)} for t in tables]
    astray: dict[int, int | None] = {}
    for b in range(shard.buckets):
        ports = {one.get(b) for one in steered}
        port = ports.pop() if len(ports) == 1 else -1  # -1: the bridges' tables disagree
        owners = [i for i in fleet.serving if fleet.ports[i] == port]
        fleet.route[b] = owners[0] if owners else shard.home(b)
        if port is not None and owners:
            rt.steering[b] = owners[0]
        else:  # home, or steered home again below
            rt.steering.pop(b, None)
        if port is not None and not owners:  # steered where no server of this fleet is: home again
            astray[b] = None
    if astray:
        steer(rt, astray)


def steer_all(rt: Runtime, server: int = 0) -> None:
    """Every bucket to one server: a sharded build run with one server program, which the
    runtime gave every entry (one control channel, not a fleet)."""
    if rt.plan.shard is not None:
        steer(rt, dict.fromkeys(range(rt.plan.shard.buckets), server))


def move(rt: Runtime, moves: Mapping[int, int], drain_s: float = DRAIN_S, margin: int = carry.MARGIN) -> Move:
    """Buckets to new servers (bucket -> server), make-before-break (the module's doc);
    ``drain_s``: how long the old owners keep their copies after the switch steered away (the
    packets already on their way to them); ``margin``: the numbers a monotonic cell's new owner
    leaves for the packets its old owner may still send (runtime/carry.py)."""
    fleet = _fleet(rt)
    start = time.monotonic()
    n = len(fleet.channels)
    for b, s in moves.items():
        if not 0 <= b < len(fleet.route) or not 0 <= s < n or s in fleet.down:
            raise InvalidEntry(f"move bucket {b} to server {s}: buckets are 0..{len(fleet.route) - 1}, servers "
                               f"0..{n - 1} and serving ({', '.join(map(str, sorted(fleet.down))) or 'none'} retired)")
    moves = {b: s for b, s in moves.items() if fleet.route[b] != s}
    report = Move()
    if not moves:
        return report
    gone = {fleet.route[b] for b in moves} & fleet.down
    if gone and fleet.split and rt.goal is None:
        raise ChannelError(f"server {min(gone)} is gone: its entries of split tables come from the goal state "
                           "(connect with goal=PATH)")
    old = {b: fleet.route[b] for b in moves}
    made: list[tuple[int, str, list[list[int]]]] = []  # server, table, the copies it got
    try:
        for table in fleet.split:
            for to, records in _entries(rt, fleet, table, moves).items():
                if records:
                    _put(fleet.channels[to], table, records, fleet.tables[table].key_words)
                    made.append((to, table, records))
                    report.copied[table] = report.copied.get(table, 0) + len(records)
                    report.moved.setdefault(table, []).extend(tuple(r[:fleet.tables[table].key_words])
                                                              for r in records)
        carried = carry.forward(fleet, rt.plan, moves, old, _records(made), margin)
        steer(rt, moves)  # all or nothing, or SteeringPartlyApplied
    except RuntimeApiError as e:
        if isinstance(e, SteeringPartlyApplied):
            adopt_steering(rt)  # where the switch sends each bucket now: those copies stay
        for to, table, records in reversed(made):  # the new owners' copies, taken back
            keep = {b for b, s in moves.items() if fleet.route[b] == s}
            _drop(fleet.channels[to], table, [r[:fleet.tables[table].key_words] for r in records
                                              if fleet.bucket(table, r) not in keep])
        raise
    for b, s in moves.items():
        fleet.route[b] = s
        report.buckets[s] = report.buckets.get(s, 0) + 1
    if (made or carried.starts or carried.windows) and drain_s > 0:
        time.sleep(drain_s)
    for _to, table, records in made:  # the old owners' copies, where they still answer
        by_old: dict[int, list[list[int]]] = {}
        for r in records:
            by_old.setdefault(old[fleet.bucket(table, r)], []).append(r[:fleet.tables[table].key_words])
        for server, keys in by_old.items():
            if server not in fleet.down and not _drop(fleet.channels[server], table, keys):
                report.stale[server] = report.stale.get(server, 0) + len(keys)
    checked = carry.check(fleet, carried, rt.plan)
    report.carried, report.must_rekey, report.overrun = carried.count(), checked.must_rekey, checked.overrun
    state = rt.plan.shard.state if rt.plan.shard is not None else ()
    report.lost = tuple(s for s in state if s not in report.carried)
    report.seconds = time.monotonic() - start
    return report


def _records(made: Sequence[tuple[int, str, list[list[int]]]]) -> dict[str, list[list[int]]]:
    out: dict[str, list[list[int]]] = {}
    for _to, table, records in made:
        out.setdefault(table, []).extend(records)
    return out


def _put(ch: ControlChannel, table: str, records: list[list[int]], key_words: int) -> None:
    """The records on ``ch``: added, or, where it already holds a key (a copy left by an
    earlier move that failed), modified to these values."""
    try:
        ch.write("add", table, records, chunk=1 << 20)
    except EntryExists:
        held = {tuple(r[:key_words]) for r in ch.dump(table)}
        for op, part in (("add", [r for r in records if tuple(r[:key_words]) not in held]),
                         ("modify", [r for r in records if tuple(r[:key_words]) in held])):
            if part:
                ch.write(op, table, part, chunk=1 << 20)


def _drop(ch: ControlChannel, table: str, keys: list[list[int]]) -> bool:
    """Delete what ``ch`` holds of ``keys`` (a key it lacks is fine); False if it could not
    (it stopped answering)."""
    try:
        try:
            ch.write("delete", table, keys, chunk=1 << 20)
        except EntryNotFound:
            held = {tuple(r[:len(keys[0])]) for r in ch.dump(table)} if keys else set()
            part = [k for k in keys if tuple(k) in held]
            if part:
                ch.write("delete", table, part, chunk=1 << 20)
    except RuntimeApiError:
        return False
    return True


def _entries(rt: Runtime, fleet: ServerFleet, table: str, moves: Mapping[int, int]) -> dict[int, list[list[int]]]:
    """The split table's records of the moving buckets, by their new owner: from the goal
    state when there is one (the truth, and all there is of a dead server's), else from the
    old owners' dumps."""
    if rt.goal is not None:
        s = rt.schemas[table]
        records = [e.server_record(s) for e in goal_entries(rt, s).values()]
    else:  # each old owner's own entries (not copies an earlier move left behind)
        owners = {fleet.route[b] for b in moves}
        records = [list(r) for o in sorted(owners) for r in fleet.channels[o].dump(table)
                   if fleet.route[fleet.bucket(table, r)] == o]
    out: dict[int, list[list[int]]] = {}
    for r in records:
        to = moves.get(fleet.bucket(table, r))
        if to is not None:
            out.setdefault(to, []).append(r)
    return out


def balance(route: Sequence[int], servers: Sequence[int]) -> dict[int, int]:
    """The fewest bucket moves that leave ``servers`` with as even a number of buckets as can
    be (each ⌊B/S⌋ or ⌈B/S⌉): a bucket stays where it is while its server is under quota."""
    if not servers or len(set(servers)) != len(servers):
        raise InvalidEntry(f"rebalance over {list(servers)}: at least one server, each once")
    held = {s: [b for b, r in enumerate(route) if r == s] for s in servers}
    fullest = sorted(servers, key=lambda s: -len(held[s]))  # the larger quotas to those holding most
    quota = {s: len(route) // len(servers) + (i < len(route) % len(servers)) for i, s in enumerate(fullest)}
    extra = [b for b, r in enumerate(route) if r not in quota]  # on servers leaving
    for s in servers:
        extra += held[s][quota[s]:]
    extra.sort()
    moves: dict[int, int] = {}
    for s in servers:
        while len(held[s]) < quota[s] and extra:
            b = extra.pop(0)
            held[s].append(b)
            moves[b] = s
    return moves


def rebalance(rt: Runtime, servers: Sequence[int] | None = None) -> Move:
    """Spread the buckets evenly over ``servers`` (default: every server still serving)."""
    fleet = _fleet(rt)
    targets = fleet.serving if servers is None else list(servers)
    bad = [s for s in targets if s not in fleet.serving]
    if bad:
        raise InvalidEntry(f"rebalance over server {bad[0]}: it is not serving (serving: {fleet.serving})")
    return move(rt, balance(fleet.route, targets))


def add_server(rt: Runtime, channel: ControlChannel, port: int) -> Move:
    """A server program joins on switch port ``port``: it gets the replicated tables' entries,
    the meters' rates and the register cells the control plane wrote (from a serving server
    and the fleet), then its even part of the buckets (with their split-table entries),
    make-before-break."""
    fleet = _fleet(rt)
    if not fleet.serving:
        raise InvalidEntry("add a server: no server is serving to copy the replicated tables from (reconcile "
                           "a fresh fleet from the goal state instead)")
    source = fleet.live[0]
    new = fleet.add(channel, port)
    try:
        for table, t in fleet.tables.items():
            if table not in fleet.split and not t.state:
                rows = source.dump(table)
                if rows:
                    channel.write("add", table, [list(r) for r in rows], chunk=1 << 20)
        for name, o in fleet.objects.items():
            if o.kind == "meter":  # (configured, cir, cbs, pir, pbs) -> (index, cir, cbs, pir, pbs)
                cells = source.object_read(name, list(range(o.size)))
                records = [[i, *c[1:]] for i, c in enumerate(cells) if c[0]]
            else:  # counters count this server's packets from 0; registers: what the control plane wrote
                records = [[i, v] for (n, i), v in fleet.written.items() if n == name] if o.kind == "register" else []
            if records:
                channel.object_write(name, records)
    except RuntimeApiError:
        fleet.retire(new)
        raise
    return rebalance(rt)


def remove_server(rt: Runtime, server: int) -> Move:
    """A server leaves while still serving: its buckets move to the others first."""
    fleet = _fleet(rt)
    report = rebalance(rt, [s for s in fleet.serving if s != server])
    fleet.retire(server)
    return report


def fail_over(rt: Runtime, dead: int, to: Sequence[int] | None = None) -> Move:
    """Server ``dead`` stopped answering: it is retired, and its buckets are spread over ``to``
    (default: every server still serving), their split-table entries from the goal state; the
    per-flow state it held (its state tables' entries at the last ``counters()`` read) is
    counted as lost (``Move.lost_entries``)."""
    fleet = _fleet(rt)
    if not 0 <= dead < len(fleet.channels):
        raise InvalidEntry(f"fail over server {dead}: servers are 0..{len(fleet.channels) - 1}")
    takers = [s for s in fleet.serving if s != dead] if to is None else list(to)
    mine = fleet.buckets_of(dead)
    if (mine or to is not None) and (not takers or len(set(takers)) != len(takers)
                                     or any(s == dead or s not in fleet.serving for s in takers)):
        raise InvalidEntry(f"fail over server {dead} to {takers}: one or more other servers still serving, "
                           f"each once (serving: {fleet.serving})")
    was_down = dead in fleet.down
    fleet.retire(dead)
    try:
        report = move(rt, {b: takers[i % len(takers)] for i, b in enumerate(mine)})
    except RuntimeApiError:
        if not was_down:
            fleet.down.discard(dead)  # not moved: the fleet asks it as before
        raise
    report.dead = dead
    report.lost_entries = fleet.state_entries(dead)
    return report


def check_servers(rt: Runtime) -> list[Move]:
    """One liveness round (call it from the control loop, every second say): each server that
    stopped answering is retired, and its buckets, if it has any, spread over the live servers
    (``fail_over``); what each move took.  A fail-over that fails does not stop the others'
    (the first error is raised after them); no live server left: nothing moved."""
    fleet = rt.server
    if not isinstance(fleet, ServerFleet) or rt.plan.shard is None:
        return []
    alive = fleet.alive()
    moves = []
    failed: list[RuntimeApiError] = []
    for dead, up in enumerate(alive):
        if up or dead in fleet.down:
            continue
        takers = [s for s, a in enumerate(alive) if a and s not in fleet.down]
        if not fleet.buckets_of(dead):
            fleet.retire(dead)  # nothing to move; asked nothing more (a write would fail on it)
        elif takers:
            try:
                moves.append(fail_over(rt, dead, takers))
            except RuntimeApiError as e:  # the next dead server still gets its round
                failed.append(e)
    if failed:
        raise failed[0]
    return moves
