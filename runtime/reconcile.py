"""After a restart of the switch, the server program or the runtime: compare what each data
plane holds with the goal state (:mod:`runtime.goal`) and repair the difference, table by
table (issue 14, item 5).

* A server table (alone or behind a switch cache) is dumped (control channel DUMP) and
  brought to the goal: missing entries added, stale ones modified, extra ones deleted.
* A switch table is read whole (P4Runtime Read) and repaired the same way.
* A switch cache is brought to what the cache policy holds, with the goal's values: extra
  entries deleted first, shortest prefix first, then missing ones added, longest first, each
  prefix length one write (``switch_order``), so no moment hijacks a prefix's traffic.  A
  runtime that restarted has an empty policy: it adopts the cache entries the switch still
  holds that keep the LPM invariant (every server prefix inside a cached one is cached) and
  drops the rest, instead of emptying the cache.

The server is repaired before the switch cache that is in front of it (an entry on the
server before it is cached).  An entry a server lacks that names a cell of a ``monotonic``
register (``cells_from``: the IPsec gateway's outbound SA and its ``sa_seq`` slot) is taken to
have been lost with the server's state (a restarted program starts every cell at 0): before
the entry is added, its cell there is set to 2^w − 1, used up until the control plane rekeys
(RFC 4303 §3.3.3: a sender whose counter was reset needs a new SA), and ``Repair.used_up``
names it.  Each meter's indices are set to the rates the goal holds (and
reset where it holds none), on each side that keeps the meter.  Data-plane state (state
tables, registers, counters) is not in the goal: the data plane writes it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from compiler.manifest import ObjectInfo, ObjectPlacement
from runtime.cache import CacheDecision, CachePolicy, Key, switch_order
from runtime.carry import monotonic_registers, write_cells
from runtime.control import ControlChannel
from runtime.fleet import ServerFleet
from runtime.goal import GoalEntry

if TYPE_CHECKING:
    from runtime.api import Runtime, TableSchema, _Entry

__all__ = ["Repair", "goal_entries", "reconcile"]


@dataclass
class Repair:
    """What one side of one table needed: entries added, modified and deleted."""

    added: int = 0
    modified: int = 0
    deleted: int = 0
    used_up: dict[str, list[int]] = field(default_factory=dict)  # monotonic register -> cells set to the top

    def __bool__(self) -> bool:
        return bool(self.added or self.modified or self.deleted)


GoalKey = tuple[tuple[tuple[int, int | None], ...], int]  # the key fields, the priority


def reconcile(rt: Runtime, sides: Collection[str] = ("server", "switch")) -> dict[str, dict[str, Repair]]:
    """Repair every table of ``rt`` against its goal store, on ``sides`` (those that
    restarted); per table, per side, what was done."""
    assert rt.goal is not None
    out: dict[str, dict[str, Repair]] = {}
    for s in rt.schemas.values():
        if s.state:
            continue
        goal = {(key, prio): vals for key, prio, vals in rt.goal.entries(s.name, len(s.keys), len(s.values))}
        entries = _entries(s, goal)
        done: dict[str, Repair] = {}
        if s.on_server and rt.server is not None and "server" in sides:
            done["server"] = _server(rt, s, entries)
        if rt.switch is not None and "switch" in sides:
            if s.cached:
                done["switch"] = _cache(rt, s, entries)
            elif s.on_switch and not s.on_server:
                done["switch"] = _switch(rt, s, goal, entries)
        out[s.name] = done
    for o in rt.plan.objects:  # meter rates are goal state too (runtime/goal.py)
        if o.kind == "meter" and o.placement is not ObjectPlacement.UNUSED:
            out[o.name] = {side: Repair(modified=n) for side, n in rt.meter(o.name).repair(sides).items()}
    return out


def goal_entries(rt: Runtime, s: TableSchema) -> dict[GoalKey, _Entry]:
    """The goal state's entries of one table."""
    assert rt.goal is not None
    return _entries(s, {(key, prio): vals for key, prio, vals in rt.goal.entries(s.name, len(s.keys),
                                                                                  len(s.values))})


def _entries(s: TableSchema, goal: dict[GoalKey, tuple[int, ...]]) -> dict[GoalKey, _Entry]:
    from runtime.api import _Entry

    return {gk: _Entry(dict(zip([k.name for k in s.keys], gk[0], strict=True)),
                       dict(zip([v.name for v in s.values], vals, strict=True)), gk[1])
            for gk, vals in goal.items()}


def _server(rt: Runtime, s: TableSchema, entries: dict[GoalKey, _Entry]) -> Repair:
    """Each server program on its own (a sharded deployment's: runtime/fleet.py), so that one
    that restarted empty is repaired though the others hold everything."""
    assert rt.server is not None
    want = {tuple(e.server_record(s, False)): e for e in entries.values()}
    keys = list(want)
    names = [v.name for v in s.values]
    cells = [(o, s.record_key_fields + names.index(f)) for o in monotonic_registers(rt.plan)
             for t, f in o.cells_from if t == s.name]
    r = Repair()
    for ch, mine in (rt.server.parts(s.name, keys) if isinstance(rt.server, ServerFleet)
                     else [(rt.server, range(len(keys)))]):
        one = _server_one(ch, s, {keys[n]: want[keys[n]] for n in mine}, cells)
        r.added, r.modified, r.deleted = r.added + one.added, r.modified + one.modified, r.deleted + one.deleted
        for name, used in one.used_up.items():
            r.used_up[name] = sorted({*r.used_up.get(name, ()), *used})
    return r


def _server_one(ch: ControlChannel, s: TableSchema, want: dict[tuple[int, ...], _Entry],
                cells: list[tuple[ObjectInfo, int]]) -> Repair:
    width = s.record_key_fields
    have = {tuple(r[:width]): tuple(r[width:]) for r in ch.dump(s.name)}
    r = Repair()
    extra = [k for k in have if k not in want]
    if extra:
        ch.write("delete", s.name, [list(k) for k in extra], chunk=1 << 20)
        r.deleted = len(extra)
    add = [e.server_record(s) for k, e in want.items() if k not in have]
    stale = [rec for k, e in want.items() if k in have and have[k] != tuple((rec := e.server_record(s))[width:])]
    for o, at in cells:  # the lost entries' cells: used up before the entries are back (the module's doc)
        lost = sorted({rec[at] for rec in add if rec[at] < o.size})
        if lost:
            write_cells(ch, o.name, dict.fromkeys(lost, (1 << o.width) - 1))
            r.used_up[o.name] = lost
    for op, recs in (("add", add), ("modify", stale)):
        if recs:
            ch.write(op, s.name, recs, chunk=1 << 20)
    r.added, r.modified = len(add), len(stale)
    return r


def _switch(rt: Runtime, s: TableSchema, goal: dict[GoalKey, tuple[int, ...]],
            entries: dict[GoalKey, _Entry]) -> Repair:
    """A table on the switch alone: its whole content to the goal."""
    assert rt.switch is not None
    have = {(tuple(m[k.name] for k in s.keys), p): tuple(v[f.name] for f in s.values)
            for m, v, p in rt.switch.read(s.name)}
    r = Repair(added=sum(k not in have for k in goal), deleted=sum(k not in goal for k in have),
               modified=sum(k in have and have[k] != v for k, v in goal.items()))
    for op, batch in (("delete", [_named(s, k) for k in have if k not in goal]),
                      ("add", [entries[k] for k in goal if k not in have]),
                      ("modify", [entries[k] for k, v in goal.items() if k in have and have[k] != v])):
        if batch:
            rt._switch(s, op, batch)
    return r


def _named(s: TableSchema, gk: GoalKey) -> _Entry:
    from runtime.api import _Entry

    return _Entry(dict(zip([k.name for k in s.keys], gk[0], strict=True)), {}, gk[1])


def _cache(rt: Runtime, s: TableSchema, entries: dict[GoalKey, _Entry]) -> Repair:
    """A switch cache to what the policy holds (adopting what the switch has, if the policy
    is new), with the goal's values."""
    assert rt.switch is not None
    by_key = {e.key(s): e for e in entries.values()}
    on_switch: dict[Key, tuple[int, ...]] = {}
    for m, v, p in rt.switch.read(s.name):
        e = _named(s, (tuple(m[k.name] for k in s.keys), p))
        on_switch[e.key(s)] = tuple(v[f.name] for f in s.values)
    policy = rt.caches[s.name]
    if policy.served != len(by_key) or (policy.lpm is not None and any(k not in by_key for k in policy.prefixes())):
        # the runtime restarted (or its goal was edited): start from the goal
        policy = rt.caches[s.name] = _adopt(policy.empty(), by_key, on_switch)
    want = {k for k in policy.cached if k in by_key}
    stale = [k for k in want if k in on_switch and on_switch[k] != tuple(by_key[k].values[f.name] for f in s.values)]
    evict = [k for k in on_switch if k not in want]
    install = [k for k in want if k not in on_switch]
    deletes, adds = switch_order([CacheDecision(install=install, evict=evict)], s.lpm is not None)
    for keys in deletes:
        rt._switch(s, "delete", [_key_entry(s, k) for k in keys])
    for keys in adds:
        rt._switch(s, "add", [by_key[k] for k in keys])
    if stale:
        rt._switch(s, "modify", [by_key[k] for k in stale])
    return Repair(added=len(install), modified=len(stale), deleted=len(evict))


def _key_entry(s: TableSchema, key: Key) -> _Entry:
    from runtime.api import _from_key

    return _from_key(s, key)


def _adopt(policy: CachePolicy, server: dict[Key, _Entry], on_switch: Iterable[Key]) -> CachePolicy:
    """A new policy serving ``server`` and caching what of ``on_switch`` it may: entries of
    the table, up to the capacity, longest prefix first, each only if every server prefix
    inside it is cached already (else it would hijack)."""
    for key in server:
        policy.serve(key)
    keep = sorted((k for k in on_switch if k in server), key=lambda k: -k[-1] if policy.lpm is not None else 0)
    for key in keep:
        policy.promote(key)
    return policy


def goal_entry(s: TableSchema, e: _Entry) -> GoalEntry:
    """An entry as the goal store keeps it."""
    return tuple(e.match[k.name] for k in s.keys), e.priority, tuple(e.values.get(v.name, 0) for v in s.values)
