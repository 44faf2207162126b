"""The typed runtime API behind each NF's generated package (``OUT/python/<nf>/``): one object
per logical table, in ``.nfp`` names, that validates its arguments and puts each entry where
``plan.json`` placed the table — P4Runtime writes to the switch, the control channel to the
server, both for a switch cache in front of a server table (the server holds the full table,
:mod:`runtime.cache` picks what the switch caches).

A call is atomic from the caller's view: if either side refuses, what the other side did is
undone and a typed :mod:`runtime.errors` error is raised.  For a cached table the order keeps
the data path consistent meanwhile: an entry reaches the server before the switch cache, and
leaves the switch cache before the server.
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.manifest import FieldInfo, ObjectInfo, TableInfo, load_plan
from runtime.cache import CacheDecision, CachePolicy, switch_order
from runtime.control import ControlChannel
from runtime.entries import EntriesError, EntrySpec, parse_value
from runtime.errors import ChannelError, EntryNotFound, InvalidEntry, RuntimeApiError
from runtime.fleet import ServerFleet
from runtime.goal import Goal, open_goal
from runtime.objects import Counter, Meter, Register
from runtime.p4runtime import ClientTls, SwitchClient, SwitchUpdate
from runtime.reconcile import Repair, goal_entry, reconcile
from runtime.steering import (
    Move,
    add_server,
    adopt_steering,
    check_servers,
    fail_over,
    move,
    rebalance,
    remove_server,
    steer,
)

__all__ = ["Field", "Runtime", "Table", "TableSchema", "Value", "check_entry"]

Value = int | str  # an integer, dotted IPv4, colon MAC, hex string; LPM keys also "a.b.c.d/len" or (value, len)


Field = FieldInfo  # a key or value field of a table, as plan.json describes it
TableSchema = TableInfo  # a table as plan.json describes it: fields, placement, switch entries


@dataclass(frozen=True)
class _Entry:
    match: dict[str, tuple[int, int | None]]
    values: dict[str, int] = field(repr=False)  # values may be keys: never in a repr
    priority: int = 0

    def server_record(self, s: TableSchema, with_values: bool = True) -> list[int]:
        """The control channel's record (docs/control.md): key values, then an LPM table's prefix
        length, or a classified table's argument of each non-exact field (prefix length, mask,
        high bound; omitted ones whole) and the priority; then the values."""
        rec = [self.match[k.name][0] for k in s.keys]
        if s.classified:
            for k in s.keys:
                value, arg = self.match[k.name]
                if k.match != "exact":
                    rec.append(arg if arg is not None else
                               k.width if k.match == "lpm" else (1 << k.width) - 1 if k.match == "ternary" else value)
            rec.append(self.priority)
        elif s.lpm is not None:
            rec.append(self.match[s.keys[s.lpm].name][1] or 0)
        return rec + ([self.values[v.name] for v in s.values] if with_values else [])

    def key(self, s: TableSchema) -> tuple[int, ...]:
        return tuple(self.server_record(s, with_values=False))


def _from_key(s: TableSchema, key: tuple[int, ...], values: Mapping[str, int] | None = None) -> _Entry:
    """The entry of a cache policy's key (the key fields; an LPM table's prefix length last)."""
    match: dict[str, tuple[int, int | None]] = {f.name: (key[i], None) for i, f in enumerate(s.keys)}
    if s.lpm is not None:  # an LPM key's prefix length travels in its LPM field
        match[s.keys[s.lpm].name] = (key[s.lpm], key[-1])
    return _Entry(match, dict(values or {}), 0)


def _check(s: TableSchema, fields: Mapping[str, Any], with_values: bool, priority: int = 0) -> _Entry:
    if len(fields) != len(s.keys) + (len(s.values) if with_values else 0):
        _names(s, fields, with_values)
    match: dict[str, tuple[int, int | None]] = {}
    values: dict[str, int] = {}
    f: Field | None = None
    try:  # what the check of one field refuses is InvalidEntry naming the table and the field
        for f in s.keys:
            match[f.name] = _key(f, fields[f.name])
        for f in s.values if with_values else ():
            values[f.name] = _value(f, fields[f.name])
    except KeyError:
        _names(s, fields, with_values)
        raise
    except (EntriesError, ValueError, TypeError) as e:
        assert f is not None
        if f.secret:  # a key: the message says what is wrong, not what was given (nor chains it)
            raise InvalidEntry(f"{s.name}.{f.name}: not a number of at most {f.width} bits "
                               "(a secret value: not shown)") from None
        raise InvalidEntry(f"{s.name}.{f.name}: {e}") from e
    return _Entry(match, values, priority)


def _names(s: TableSchema, fields: Mapping[str, Any], with_values: bool) -> None:
    """InvalidEntry unless ``fields`` names exactly the table's key (and value) fields."""
    names = {k.name for k in s.keys} | ({v.name for v in s.values} if with_values else set())
    unknown = sorted(set(fields) - names)
    missing = sorted(names - set(fields))
    if unknown or missing:
        raise InvalidEntry(f"{s.name}: " + "; ".join(
            ([f"unknown field(s) {', '.join(unknown)}"] if unknown else []) +
            ([f"missing field(s) {', '.join(missing)}"] if missing else [])))


def _value(v: Field, raw: Any) -> int:
    value = parse_value(raw, v.width)
    if not 0 <= value < 1 << v.width:
        raise ValueError(f"{value} does not fit in {v.width} bits")
    return value


def _key(k: Field, raw: Any) -> tuple[int, int | None]:
    arg: int | None = None
    if k.match == "lpm":
        if isinstance(raw, tuple):
            raw, arg = raw
        elif isinstance(raw, str) and "/" in raw:
            raw, plen = raw.split("/")
            arg = int(plen)
        else:
            arg = k.width
        if not 0 <= arg <= k.width:
            raise ValueError(f"prefix length {arg} out of 0..{k.width}")
    elif k.match in ("ternary", "range"):
        raw, second = raw if isinstance(raw, tuple) else (raw, None)
        arg = None if second is None else parse_value(second, k.width)
    value = parse_value(raw, k.width)
    if not 0 <= value < 1 << k.width or (arg is not None and k.match != "lpm" and not 0 <= arg < 1 << k.width):
        raise ValueError(f"{raw} does not fit in {k.width} bits")
    if k.match == "lpm" and arg is not None:  # host bits beyond the prefix are not part of the key
        value &= ((1 << k.width) - 1) ^ ((1 << (k.width - arg)) - 1)
    return value, arg


def _fields(spec: EntrySpec) -> dict[str, Any]:
    """An entries-file entry as the keyword arguments of a call (an LPM key ``(value, length)``)."""
    return {k: (v, a) if a is not None else v for k, (v, a) in spec.match.items()} | spec.values


def _by_table(entries: Iterable[EntrySpec]) -> dict[str, list[tuple[dict[str, Any], int]]]:
    """Entries given as data, as the keyword arguments and priority of a call, per table."""
    by_table: dict[str, list[tuple[dict[str, Any], int]]] = {}
    for e in entries:
        by_table.setdefault(e.table, []).append((_fields(e), e.priority))
    return by_table


def check_entry(s: TableSchema, spec: EntrySpec) -> EntrySpec:
    """An entries-file entry of table ``s`` checked as a call to the runtime API is (fields
    exactly the table's, values and addresses of the fields' widths, InvalidEntry naming the
    table and field otherwise) and in canonical form (an LPM value without host bits); for a
    writer that puts entries in place without the API (``nfc switch-model --entries``)."""
    e = _check(s, _fields(spec), True, spec.priority)
    return EntrySpec(s.name, e.match, e.values, e.priority)


class Runtime:
    """The control plane of one built NF (``OUT``): switch, server, or both."""

    def __init__(self, out: str | Path, *, switch: SwitchClient | None = None,
                 server: ControlChannel | ServerFleet | None = None, goal: Goal | None = None) -> None:
        """``goal``: where the runtime records every write the data planes took, for
        ``reconcile`` after a restart (none: nothing is recorded)."""
        self.out = Path(out)
        self.goal = goal
        self.idle_notify: dict[str, int] = {}  # cached table -> idle_timeout_ns its switch entries get (a manager's)
        self.plan = load_plan(self.out)
        self.schemas = {t.name: t for t in self.plan.tables}
        self.switch = switch
        self.server = server
        if server is not None:
            self._check_server(server)
        self.caches = {n: CachePolicy(s.switch_entries, s.lpm, s.keys[s.lpm].width if s.lpm is not None else 0,
                                      [k.width for k in s.keys])
                       for n, s in self.schemas.items() if s.cached}
        # per switch cache: its policy and its writes, one writer at a time (the runtime's own
        # writes to the table, a cache manager's steps, reconcile)
        self.cache_locks = {n: threading.RLock() for n in self.caches}
        self.steering: dict[int, int] = {}  # a sharded build's buckets steered away from home: bucket -> server
        # a write to the data planes with its record in the goal state, steering, a reconcile:
        # one at a time (taken before any cache lock), so a recovery never sees one half done
        self.writing = threading.RLock()
        self.restarts: collections.Counter[str] = collections.Counter()  # per side: restarts repaired (reconciles)
        self._pending: set[str] = set()  # sides reconnected but not reconciled yet (recover)
        if switch is not None and isinstance(server, ServerFleet) and self.plan.shard is not None:
            adopt_steering(self)  # a controller restarted: the buckets go where the switch sends them
        self._tables()

    def _check_server(self, server: ControlChannel | ServerFleet) -> None:
        for name, s in self.schemas.items():
            st = server.tables.get(name) if s.on_server else None
            if s.on_server and (st is None or st.keys != tuple(k.width for k in s.keys)
                                or st.values != tuple(v.width for v in s.values)):
                raise ChannelError(f"the server program does not match {self.out}/plan.json (table {name}): "
                                   "was it built from another .nfp?")

    def _tables(self) -> None:
        """The generated subclass makes one typed attribute per table here."""

    @classmethod
    def connect(cls, out: str | Path, *, p4runtime: str | None = None,
                control: str | Path | Sequence[str | Path] | None = None,
                arch: str = "tna", tls: ClientTls | None = None, goal: str | Path | None = None) -> Runtime:
        """Connect to a switch's P4Runtime endpoint and/or a server program's control socket
        (a list: the servers of a sharded deployment, as one ``ServerFleet``); with ``tls``, to
        the switch over TLS (mutual TLS when it holds a client certificate); with ``goal``,
        keep the goal state in that SQLite file (made if new) or Redis URL (runtime/goal.py
        ``open_goal``)."""
        out = Path(out)
        switch = None
        if p4runtime is not None:
            names = json.loads(load_plan(out).path(out, "name_map").read_text())
            switch = SwitchClient(p4runtime, names, arch, tls=tls)
        elif tls is not None:
            raise ChannelError("tls= is for the switch's P4Runtime endpoint: give p4runtime= too")
        server: ControlChannel | ServerFleet | None = None
        if isinstance(control, str | Path):
            server = ControlChannel(control)
        elif control is not None:
            channels: list[ControlChannel] = []
            try:
                for path in control:
                    channels.append(ControlChannel(path))
                server = ServerFleet(channels, load_plan(out))
            except RuntimeApiError:
                for ch in channels:
                    ch.close()
                raise
        store = open_goal(goal, Path(load_plan(out).source).stem) if goal is not None else None
        return cls(out, switch=switch, server=server, goal=store)

    def close(self) -> None:
        if self.switch is not None:
            self.switch.close()
        if self.server is not None:
            self.server.close()
        if self.goal is not None:
            self.goal.close()

    def reconcile(self) -> dict[str, dict[str, Repair]]:
        """After the switch, the server program or this runtime restarted: bring each table on
        each side to the goal state (runtime/reconcile.py); per table and side, what it took."""
        if self.goal is None:
            raise ChannelError("reconcile needs the goal state: connect with goal=PATH")
        with self.writing, self.holding_caches():
            repair = reconcile(self)
            self.restarts.update(("server", "switch"))
            return repair

    @contextmanager
    def holding_caches(self) -> Iterator[None]:
        """Every switch cache's lock (``cache_locks``), always taken in the same order."""
        with ExitStack() as held:
            for name in sorted(self.cache_locks):
                held.enter_context(self.cache_locks[name])
            yield

    def recover(self, lost: bool = False) -> dict[str, dict[str, Repair]] | None:
        """After a side restarted by itself: reconnect each side whose channel is down (the
        switch's stream channel ended, the server program does not answer on its control
        socket: it restarted, or went away) and, if one was (or ``lost``: entries are known
        to be missing from the switch), bring those sides to the goal state (``reconcile``;
        a switch cache is the switch's side); what that took, or None when every side was
        up and nothing was lost.  A ChannelError while a side still does not answer (call
        again later): a side reconnected by a call that then failed is reconciled by the
        next.  ``restarts`` counts the sides repaired (cache managers look at it)."""
        if self.goal is None:
            raise ChannelError("recovering from a restart needs the goal state: connect with goal=PATH")
        with self.writing, self.holding_caches():
            pending = self._pending
            if lost:
                pending.add("switch")
            if self.switch is not None and self.switch.lost:
                pending.add("switch")
                self.switch.reconnect()
            channels = self.server.live if isinstance(self.server, ServerFleet) else \
                [self.server] if self.server is not None else []
            for ch in channels:
                try:
                    ch.ping()
                except ChannelError:
                    pending.add("server")
                    ch.reconnect()
            if "server" in pending:  # the program answering there must be this build's
                for ch in channels:
                    try:
                        self._check_server(ch)
                    except ChannelError:
                        ch.close()  # nothing is written to another program meanwhile: reconnected next time
                        raise
            if not pending:
                return None
            repair = reconcile(self, pending)
            if "switch" in pending and self.steering:  # not goal state: what this runtime steered
                steer(self, dict(self.steering))
            self.restarts.update(pending)
            self._pending = set()
            return repair

    # ---- a sharded deployment's servers (runtime/steering.py) ----------------------------------

    def steer(self, bucket: int, server: int | None) -> None:
        """Send the shard selector's bucket ``bucket`` to server ``server``'s port (None: its
        home server's), on the switch alone; ``move`` also moves its entries."""
        with self.writing:
            steer(self, {bucket: server})

    def move(self, moves: Mapping[int, int]) -> Move:
        """Buckets to other servers (bucket -> server), entries first, make-before-break."""
        with self.writing:
            return move(self, moves)

    def rebalance(self, servers: Sequence[int] | None = None) -> Move:
        """Spread the buckets evenly over ``servers`` (default: all serving), fewest moves."""
        with self.writing:
            return rebalance(self, servers)

    def add_server(self, channel: ControlChannel, port: int) -> Move:
        """A server program joins on switch port ``port`` and takes its even part of the buckets."""
        with self.writing:
            return add_server(self, channel, port)

    def remove_server(self, server: int) -> Move:
        """A serving server leaves: its buckets move to the others first."""
        with self.writing:
            return remove_server(self, server)

    def check_servers(self) -> list[Move]:
        """A liveness round: a dead server's buckets are spread over the live ones."""
        with self.writing:
            return check_servers(self)

    def fail_over(self, dead: int, to: Sequence[int] | None = None) -> Move:
        """Server ``dead`` stopped answering: its buckets and their split-table entries (from
        the goal state) go to ``to`` (default: every live server); its state is reported lost."""
        with self.writing:
            return fail_over(self, dead, to)

    def table(self, name: str) -> Table:
        if name not in self.schemas:
            raise InvalidEntry(f"no table {name} (tables: {', '.join(sorted(self.schemas))})")
        return Table(self, name)

    def _object(self, name: str, kind: str) -> ObjectInfo:
        info = self.plan.object(name)
        if info is None or info.kind != kind:
            have = sorted(o.name for o in self.plan.objects if o.kind == kind)
            raise InvalidEntry(f"no {kind} {name} ({kind}s: {', '.join(have) or 'none'})")
        return info

    def register(self, name: str) -> Register:
        """A ``register`` of the program: read and written where its stages run."""
        return Register(self, self._object(name, "register"))

    def counter(self, name: str) -> Counter:
        """A ``counter`` of the program: packets and bytes per index."""
        return Counter(self, self._object(name, "counter"))

    def meter(self, name: str) -> Meter:
        """A ``meter`` of the program: its rates set, reset and read per index."""
        return Meter(self, self._object(name, "meter"))

    def load(self, entries: Iterable[EntrySpec]) -> int:
        """Add entries given as data (an entries file), table by table; all or nothing per table."""
        return sum(self.table(t).add_many([r for r, _ in rows], [p for _, p in rows])
                   for t, rows in _by_table(entries).items())

    def intend(self, entries: Iterable[EntrySpec]) -> int:
        """Record entries given as data in the goal state, each replacing the goal's entry of its
        key (checked as ``load`` checks them; all or nothing per table), without writing the
        data planes: ``reconcile`` puts them there.  A run restarted with its goal file and
        the same entries file then finds them there, not added twice."""
        if self.goal is None:
            raise ChannelError("intend needs the goal state: connect with goal=PATH")
        n = 0
        for t, rows in _by_table(entries).items():
            s = self.table(t).schema
            checked = [_check(s, row, True, prio) for row, prio in rows]
            self._counted_cells(s, checked)
            with self.writing:
                self.goal.apply(s.name, "add", [goal_entry(s, e) for e in checked])
            n += len(checked)
        return n

    # ---- the two sides -----------------------------------------------------------------------

    def _need(self, side: str, s: TableSchema, state: bool = False) -> Any:
        """The client of one side for entries of ``s`` (``state``: the cache glue of
        data-plane state, which the runtime API does not write otherwise)."""
        client = self.switch if side == "switch" else self.server
        if client is None:
            raise ChannelError(f"table {s.name} is on the {side} ({s.placement.value}): connect a "
                               f"{'P4Runtime endpoint' if side == 'switch' else 'server control socket'}")
        if s.state and not state:
            raise InvalidEntry(f"table {s.name} is data-plane state ({s.source}): the data plane writes it")
        return client

    def _server(self, s: TableSchema, op: str, entries: Sequence[_Entry]) -> None:
        self._need("server", s).write(op, s.name, [e.server_record(s, op != "delete") for e in entries],
                                      chunk=1 << 20)

    def _switch(self, s: TableSchema, op: str, entries: Sequence[_Entry]) -> None:
        """All or nothing: the updates that went through are reverted if one failed."""
        client: SwitchClient = self._need("switch", s, state=s.cached)
        old: dict[tuple[tuple[int, int | None], ...], dict[str, int]] = {}
        if op != "add":  # the undo values: a read of exactly the entries written, O(batch) not O(table)
            keys = [(e.match, e.priority) for e in entries]
            old = {tuple(m[k.name] for k in s.keys): v for m, v, _p in client.read(s.name, keys)}
        notify = self.idle_notify.get(s.name, 0)
        ups = [SwitchUpdate(op, s.name, e.match, e.values, e.priority, notify) for e in entries]
        errors = client.write(ups)
        bad = next((i for i, err in enumerate(errors) if err is not None), None)
        if bad is None:
            return
        undo = {"add": "delete", "delete": "add", "modify": "modify"}[op]
        client.write([SwitchUpdate(undo, u.table, u.match, old.get(tuple(u.match[k.name] for k in s.keys), u.values),
                                   u.priority) for u, err in zip(ups, errors, strict=True) if err is None])
        err = errors[bad]
        assert err is not None
        err.index = bad
        raise err

    def _cache(self, s: TableSchema, decisions: Sequence[CacheDecision], by_key: Mapping[tuple[int, ...], _Entry],
               evicted: Mapping[tuple[int, ...], _Entry]) -> None:
        """Evict then install what the cache policy decided, in the order ``switch_order`` gives
        (a key both installed and evicted by the batch is not written)."""
        deletes, adds = switch_order(decisions, s.lpm is not None)
        for keys in deletes:
            self._switch(s, "delete", [evicted[k] for k in keys])
        for keys in adds:
            self._switch(s, "add", [by_key[k] for k in keys])

    def apply_cache(self, name: str, decisions: Sequence[CacheDecision]) -> None:
        """Write to the switch what the cache manager moved in the table's policy (which holds
        it already): evictions, then the promoted entries with their values as the server has
        them.  On a refusal the policy forgets the decisions; each write is all or nothing, but
        the writes sent before the refused one stay (as for every write to a cached table)."""
        with self.cache_locks[name]:
            self._apply_cache(self.schemas[name], decisions)

    def switch_lacks(self, name: str, keys: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """Those of a switch cache's ``keys`` (``CachePolicy`` keys) the switch does not hold:
        a read of exactly them."""
        s = self.schemas[name]
        entries = [_from_key(s, k) for k in keys]
        there = {_Entry(m, {}, p).key(s) for m, _v, p in self._need("switch", s, state=True).read(
            name, [(e.match, e.priority) for e in entries])}
        return [k for k in keys if k not in there]

    def _apply_cache(self, s: TableSchema, decisions: Sequence[CacheDecision]) -> None:
        name = s.name
        if s.state:
            self._cache_state(s, decisions)
            return
        installs = [k for d in decisions for k in d.install]
        values = self._need("server", s).read(name, installs) if installs else []
        by_key = {k: _from_key(s, k, dict(zip([v.name for v in s.values], vals, strict=True)))
                  for k, vals in zip(installs, values, strict=True)}
        evicted = {k: _from_key(s, k) for d in decisions for k in d.evict}
        try:
            self._cache(s, decisions, by_key, evicted)
        except RuntimeApiError:
            for d in reversed(decisions):
                self.caches[name].revert(d)
            raise

    def _cache_state(self, s: TableSchema, decisions: Sequence[CacheDecision]) -> None:
        """``apply_cache`` of data-plane state: the entries to cache are pinned on the server
        first (they then do not expire there while the switch holds them; their values come
        with the pins), and those evicted are unpinned once off the switch.  A key whose entry
        expired meanwhile is not cached (the policy forgets it)."""
        policy, server = self.caches[s.name], self._need("server", s, state=True)
        deletes, adds = switch_order(decisions, False)
        out = [k for keys in deletes for k in keys]
        into = [k for keys in adds for k in keys]
        try:
            pinned = server.pin(s.name, into) if into else []  # all or nothing
        except RuntimeApiError:
            for d in reversed(decisions):
                policy.revert(d)
            raise
        names = [v.name for v in s.values]
        held = [k for k, vals in zip(into, pinned, strict=True) if vals is not None]
        entries = [_from_key(s, k, dict(zip(names, vals, strict=True))) for k, vals in zip(into, pinned, strict=True)
                   if vals is not None]
        expired = [k for k, vals in zip(into, pinned, strict=True) if vals is None]
        if expired:
            policy.revert(CacheDecision(install=expired))
        try:
            if out:
                self._switch(s, "delete", [_from_key(s, k) for k in out])
        except RuntimeApiError:
            with suppress(RuntimeApiError):  # the switch's refusal is the error to see
                server.unpin(s.name, held)
            for d in reversed(decisions):
                policy.revert(d)
            raise
        if out:
            server.unpin(s.name, out)
        try:
            if entries:
                self._switch(s, "add", entries)
        except RuntimeApiError:
            with suppress(RuntimeApiError):
                server.unpin(s.name, held)
            policy.revert(CacheDecision(install=held))
            raise

    def write(self, s: TableSchema, op: str, entries: Sequence[_Entry]) -> None:
        """Put entries where the plan says (all or nothing); then record them in the goal state."""
        if not entries:
            return
        if op != "delete":
            self._counted_cells(s, entries)
        with self.writing:
            self._write(s, op, entries)
            if self.goal is not None:
                self.goal.apply(s.name, op, [goal_entry(s, e) for e in entries])

    def _counted_cells(self, s: TableSchema, entries: Sequence[_Entry]) -> None:
        """InvalidEntry unless every value that names a cell of a ``monotonic`` register (plan.json
        ``cells_from``: an outbound SA's ``seq_index``) is one of its cells: out of range, the data
        plane reads 0 and stores nothing, so such an SA would send number 1 again and again."""
        for o in self.plan.objects:
            for t, f in o.cells_from if o.monotonic else ():
                bad = next((i for i, e in enumerate(entries) if t == s.name and e.values.get(f, 0) >= o.size), None)
                if bad is not None:
                    raise InvalidEntry(f"{s.name}.{f}: {entries[bad].values[f]} is not a cell of monotonic register "
                                       f"{o.name} (0..{o.size - 1})", index=bad)

    def _write(self, s: TableSchema, op: str, entries: Sequence[_Entry]) -> None:
        if not s.on_server:
            self._switch(s, op, entries)
            return
        if not s.cached:
            if s.on_switch:  # on both sides (not produced by the partitioner today): server first, undo on failure
                self._server(s, op, entries)
                try:
                    self._switch(s, op, entries)
                except RuntimeApiError:
                    self._server_undo(s, op, entries)
                    raise
            else:
                self._server(s, op, entries)
            return
        self._cached(s, op, entries)

    def _server_undo(self, s: TableSchema, op: str, entries: Sequence[_Entry], old: Sequence[_Entry] = ()) -> None:
        if op == "add":
            self._server(s, "delete", entries)
        elif old:
            self._server(s, "add" if op == "delete" else "modify", old)

    def _cached(self, s: TableSchema, op: str, entries: Sequence[_Entry]) -> None:
        with self.cache_locks[s.name]:
            self._cached_held(s, op, entries)

    def _cached_held(self, s: TableSchema, op: str, entries: Sequence[_Entry]) -> None:
        policy = self.caches[s.name]
        keys = [e.key(s) for e in entries]
        server = self._need("server", s)
        old = [] if op == "add" else [_Entry(e.match, dict(zip([v.name for v in s.values], vals, strict=True)),
                                             e.priority)
                                      for e, vals in zip(entries, server.read(s.name, keys), strict=True)]
        if op == "delete":  # out of the cache first, then off the server
            cached = [e for e, k in zip(entries, keys, strict=True) if k in policy.cached]
            self._switch(s, "delete", cached)
            try:
                self._server(s, "delete", entries)
            except RuntimeApiError:
                self._switch(s, "add", [o for o in old if o.key(s) in policy.cached])
                raise
            for k in keys:
                policy.on_delete(k)
            return
        self._server(s, op, entries)  # onto the server first, then into the cache
        try:
            if op == "modify":
                self._switch(s, "modify", [e for e, k in zip(entries, keys, strict=True) if k in policy.cached])
                return
            decisions = [policy.on_add(k) for k in keys]
            by_key = dict(zip(keys, entries, strict=True))
            evicted = {k: _from_key(s, k) for d in decisions for k in d.evict}
            try:
                self._cache(s, decisions, by_key, evicted)
            except RuntimeApiError:
                for d, k in zip(reversed(decisions), reversed(keys), strict=True):
                    policy.undo(d, k, added=True)
                raise
        except RuntimeApiError:
            self._server_undo(s, op, entries, old)
            raise


class Table:
    """One logical table; the generated package subclasses it with typed methods."""

    def __init__(self, runtime: Runtime, name: str) -> None:
        self._rt = runtime
        self.schema = runtime.schemas[name]

    def _apply(self, op: str, fields: Mapping[str, Any], priority: int = 0) -> None:
        self._rt.write(self.schema, op, [_check(self.schema, fields, op != "delete", priority)])

    def add(self, **fields: Any) -> None:
        self._apply("add", fields)

    def modify(self, **fields: Any) -> None:
        self._apply("modify", fields)

    def delete(self, **keys: Any) -> None:
        self._apply("delete", keys)

    def add_many(self, rows: Iterable[Mapping[str, Any]], priorities: Sequence[int] | None = None) -> int:
        """Bulk add, all or nothing; an error's ``index`` is the row at fault.  ``priorities``:
        one per row, for tables with ternary or range keys (the higher wins, P4Runtime §9.1)."""
        entries = []
        for i, row in enumerate(rows):
            try:
                entries.append(_check(self.schema, row, True, priorities[i] if priorities is not None else 0))
            except InvalidEntry as e:
                e.index = i
                raise
        self._rt.write(self.schema, "add", entries)
        return len(entries)

    def delete_many(self, rows: Iterable[Mapping[str, Any]], priorities: Sequence[int] | None = None) -> int:
        """Bulk delete, all or nothing; ``priorities``: one per row, for tables with ternary or
        range keys (the priority is part of an entry's identity)."""
        entries = [_check(self.schema, {k.name: row[k.name] for k in self.schema.keys if k.name in row}, False,
                          priorities[i] if priorities is not None else 0) for i, row in enumerate(rows)]
        self._rt.write(self.schema, "delete", entries)
        return len(entries)

    def read(self, **keys: Any) -> dict[str, int]:
        """The values of one entry (from the server's full table when there is one)."""
        return self.read_entry(keys)

    def read_entry(self, keys: Mapping[str, Any], priority: int = 0) -> dict[str, int]:
        """The values of the entry of ``keys`` and, in a table with ternary or range keys,
        ``priority``."""
        e = _check(self.schema, keys, False, priority)
        if self.schema.on_server:
            vals = self._rt._need("server", self.schema).read(self.schema.name, [e.key(self.schema)])[0]
            return dict(zip([v.name for v in self.schema.values], vals, strict=True))
        client: SwitchClient = self._rt._need("switch", self.schema)
        want = tuple(e.match[k.name] for k in self.schema.keys)
        for m, v, _p in client.read(self.schema.name, [(e.match, e.priority)]):  # a query of that key, not a scan
            if tuple(m[k.name] for k in self.schema.keys) == want:
                return v
        raise EntryNotFound(f"{self.schema.name}: no entry {keys}")

    def cached(self) -> int:
        """How many entries the switch cache holds (cached tables)."""
        policy = self._rt.caches.get(self.schema.name)
        return len(policy.cached) if policy else 0
