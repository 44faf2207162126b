"""The server programs of a sharded deployment (``shard by``) as one control channel.

Each server runs the same program.  Its control-plane tables are replicated: every write goes
to every server, in the deployment's order, so the first refuses a bad write before another
has taken it (all servers validate alike); a server failing later (it died) leaves the servers
apart until ``Runtime.reconcile`` repairs them from the goal state.  A table whose key holds the
shard keys (plan.json ``shard_fields``) is split instead: each entry goes to the server that
gets its packets — the server its bucket (``ShardInfo.bucket_of``) is routed to, which the
runtime changes when it moves buckets (runtime/steering.py) — and a write that one server
refuses is taken back from the servers that took their part.  Its data-plane state, and
what the packets do to registers and counters, is its shard's: a state table's dump is the
union of the servers', counters and hits are summed, and a register cell is read from the
server that changed it (``docs/runtime.md``, "Sharded servers").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, TypeVar

from compiler.manifest import Plan
from runtime.control import ControlChannel, Hits
from runtime.errors import ChannelError, InvalidEntry, RuntimeApiError

__all__ = ["ServerFleet", "merge_counters", "replicated_tables"]

T = TypeVar("T")


class ServerFleet:
    """Several ``ControlChannel``s with the interface of one (``Runtime(server=...)``)."""

    def __init__(self, channels: Sequence[ControlChannel], plan: Plan | None = None) -> None:
        """``channels`` in the deployment's order (server i starts with share i of
        ``plan.shard``); ``add`` joins more."""
        if not channels:
            raise ChannelError("a server fleet needs at least one server program")
        self.shard = plan.shard if plan is not None else None
        if self.shard is not None and len(self.shard.shares) != len(channels):
            raise ChannelError(f"the build shards over {len(self.shard.shares)} servers, not {len(channels)}: "
                               "connect each, in the deployment's order")
        # table -> (the key fields that are the shard keys, every key field's width)
        self.split = {t.name: (t.shard_fields, tuple(k.width for k in t.keys))
                      for t in (plan.tables if plan is not None and self.shard is not None else ()) if t.shard_fields}
        self.replicated = replicated_tables(plan) if plan is not None else {n for n, t in channels[0].tables.items()
                                                                            if not t.state}
        first = channels[0]
        for other in channels[1:]:
            self._same(other, first)
        self.channels = list(channels)
        self.ports = self.shard.ports if self.shard is not None else [0] * len(channels)
        self.program = first.program
        self.tables = first.tables
        self.objects = first.objects
        self.written: dict[tuple[str, int], int] = {}  # register cells this fleet wrote: their value
        self.monotonic = {o.name for o in plan.objects if o.monotonic} if plan is not None else set()
        # bucket -> the server that takes it (runtime/steering.py moves buckets)
        self.route = [self.shard.home(b) for b in range(self.shard.buckets)] if self.shard is not None else [0]
        self.down: set[int] = set()  # servers retired: no longer asked anything
        self.last_counters: dict[int, dict[str, Any]] = {}  # server -> its counters at the last read

    @staticmethod
    def _same(other: ControlChannel, first: ControlChannel) -> None:
        if other.program != first.program or other.tables != first.tables or other.objects != first.objects:
            raise ChannelError(f"the server programs differ: {first.path} runs {first.program}, "
                               f"{other.path} runs {other.program}")

    def add(self, channel: ControlChannel, port: int) -> int:
        """A server joins on switch port ``port``, a declared server port whose server left
        (removed or failed: the deployment declares the most servers it may run); it gets
        no bucket until the runtime moves some to it (``Runtime.add_server``).  Its index."""
        self._same(channel, self.channels[0])
        declared = self.shard.ports if self.shard is not None else []
        if port not in declared:  # the switch parses what comes back on these ports as from a server
            raise InvalidEntry(f"a server joins on a declared server port "
                               f"({', '.join(map(str, declared))}), not {port}")
        serving = [i for i in self.serving if self.ports[i] == port]
        if serving:
            raise InvalidEntry(f"port {port} already leads to server {serving[0]}")
        self.channels.append(channel)
        self.ports.append(port)
        return len(self.channels) - 1

    @property
    def serving(self) -> list[int]:
        """The servers not retired, in order."""
        return [i for i in range(len(self.channels)) if i not in self.down]

    def buckets_of(self, server: int) -> list[int]:
        return [b for b, s in enumerate(self.route) if s == server]

    def bucket(self, table: str, record: Sequence[int]) -> int:
        """The bucket of a split table's record (a record too short: bucket 0's)."""
        fields, widths = self.split[table]
        if self.shard is None or len(record) <= max(fields):
            return 0
        return self.shard.bucket_of([(record[i], widths[i]) for i in fields])

    def close(self) -> None:
        for ch in self.channels:
            ch.close()

    @property
    def live(self) -> list[ControlChannel]:
        return [ch for i, ch in enumerate(self.channels) if i not in self.down]

    def alive(self) -> list[bool]:
        """Per server: does it answer (a HELLO over its control channel)?  A retired one: no."""
        out = []
        for i, ch in enumerate(self.channels):
            try:
                out.append(i not in self.down and ch.ping())
            except RuntimeApiError:
                out.append(False)
        return out

    def retire(self, server: int) -> None:
        """Server ``server`` is gone (or removed): it is asked nothing from now on; the buckets
        routed to it must be moved (runtime/steering.py) before it holds none."""
        if not 0 <= server < len(self.channels):
            raise InvalidEntry(f"retire server {server}: servers are 0..{len(self.channels) - 1}")
        self.down.add(server)

    def _each(self, op: str, call: Callable[[ControlChannel], T]) -> list[T]:
        out: list[T] = []
        for i, ch in enumerate(self.live):
            try:
                out.append(call(ch))
            except ChannelError as e:
                if i == 0:
                    raise
                raise ChannelError(f"{op}: server {self.channels.index(ch)} ({ch.path}) failed after the servers "
                                   "before it took it, so the servers now differ (Runtime.reconcile repairs them): "
                                   f"{e}") from e
        return out

    def _owners(self, table: str, records: Sequence[Sequence[int]]) -> dict[int, list[int]] | None:
        """A split table's records by the server that owns them (their positions, in order)."""
        split = self.split.get(table)
        if split is None or self.shard is None:
            return None
        out: dict[int, list[int]] = {}
        for n, r in enumerate(records):  # a record too short is the owner's to refuse
            out.setdefault(self.route[self.bucket(table, r)], []).append(n)
        return out

    def parts(self, table: str, records: Sequence[Sequence[int]]) -> list[tuple[ControlChannel, list[int]]]:
        """Each server with the records (positions) it should hold of ``table``: all of them,
        or of a split table its own (runtime/reconcile.py repairs each server on its own)."""
        owners = self._owners(table, records)
        if owners is None:
            return [(ch, list(range(len(records)))) for ch in self.live]
        return [(ch, owners.get(i, [])) for i, ch in enumerate(self.channels) if i not in self.down]

    def write(self, op: str, table: str, records: Sequence[Sequence[int]], chunk: int = 65536) -> None:
        owners = self._owners(table, records)
        if owners is None:
            self._each(f"{op} {table}", lambda ch: ch.write(op, table, records, chunk))
            return
        key_words = self.tables[table].key_words if table in self.tables else 0
        done: list[tuple[ControlChannel, list[Sequence[int]], list[tuple[int, ...]]]] = []
        try:
            for owner in sorted(owners):
                ch, part = self.channels[owner], [records[n] for n in owners[owner]]
                old = ch.read(table, [r[:key_words] for r in part]) if op != "add" else []
                ch.write(op, table, part, chunk)
                done.append((ch, part, old))
        except RuntimeApiError as refused:
            for ch, part, old in reversed(done):  # the other servers' parts, taken back
                try:
                    if op == "add":
                        ch.write("delete", table, [r[:key_words] for r in part])
                    else:
                        ch.write("add" if op == "delete" else "modify", table,
                                 [[*r[:key_words], *v] for r, v in zip(part, old, strict=True)])
                except RuntimeApiError as e:
                    raise ChannelError(f"{op} {table}: refused ({refused}), and taking back the part server "
                                       f"{self.channels.index(ch)} ({ch.path}) had taken failed ({e}): the servers "
                                       "now differ from the goal state (Runtime.reconcile repairs them)") from refused
            raise

    def read(self, table: str, keys: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        """Control-plane tables are alike on every server: the first answers; a split table's
        entry, the server that owns it."""
        owners = self._owners(table, keys)
        if owners is None:
            return self.live[0].read(table, keys)
        out: list[tuple[int, ...]] = [() for _ in keys]
        for owner, at in owners.items():
            for n, values in zip(at, self.channels[owner].read(table, [keys[n] for n in at]), strict=True):
                out[n] = values
        return out

    def dump(self, table: str) -> list[tuple[int, ...]]:
        """A control-plane table: the first server's; data-plane state: every server's entries
        (a key two servers hold is listed once, from the first that holds it)."""
        t = self.channels[0]._table(table)
        if table in self.split:  # each holds its own share
            return [r for rows in self._each(f"dump {table}", lambda ch: ch.dump(table)) for r in rows]
        if not t.state:
            return self.live[0].dump(table)
        seen: dict[tuple[int, ...], tuple[int, ...]] = {}
        for rows in self._each(f"dump {table}", lambda ch: ch.dump(table)):
            for r in rows:
                seen.setdefault(r[:t.key_words], r)
        return list(seen.values())

    def hits(self, table: str) -> Hits:
        parts = self._each(f"hits {table}", lambda ch: ch.hits(table))
        return Hits(sum((h.counts for h in parts), Counter()), sum(h.not_kept for h in parts),
                    sum(h.lost_in_logs for h in parts))

    # A switch-cached state's entry lives on the server whose shard made it: each server is
    # asked, and the one that holds it answers (the cache manager; ControlChannel.pin).

    def pin(self, table: str, keys: Sequence[Sequence[int]]) -> list[tuple[int, ...] | None]:
        """All or nothing, as on one server: a server's refusal unpins what those before it
        pinned (not what they had pinned already)."""
        parts: list[tuple[ControlChannel, list[tuple[tuple[int, ...] | None, bool]]]] = []
        try:
            for ch in self.live:
                parts.append((ch, ch.pin_new(table, keys)))
        except RuntimeApiError:
            for ch, got in parts:
                with suppress(RuntimeApiError):
                    ch.unpin(table, [k for k, (_v, fresh) in zip(keys, got, strict=True) if fresh])
            raise
        return [next((got[n][0] for _ch, got in parts if got[n][0] is not None), None) for n in range(len(keys))]

    def unpin(self, table: str, keys: Sequence[Sequence[int]]) -> int:
        return sum(self._each(f"unpin {table}", lambda ch: ch.unpin(table, keys)))

    def touch(self, table: str, hits: Sequence[tuple[Sequence[int], int]]) -> int:
        return sum(self._each(f"touch {table}", lambda ch: ch.touch(table, hits)))

    def overdue(self, table: str) -> list[tuple[int, ...]]:
        return list(dict.fromkeys(k for part in self._each(f"overdue {table}", lambda ch: ch.overdue(table))
                                  for k in part))

    def object_read(self, name: str, indices: Sequence[int]) -> list[tuple[int, ...]]:
        """Counters: summed over the servers.  Meters: configured alike (the first answers).
        Registers: a cell is what the control plane last wrote (0 from the start), unless a
        packet changed it on a server (its shard's): then that server's value; changed on two
        servers, it has no single value (an error naming each) — unless the register is
        ``monotonic``: then the highest (a moved cell's new owner starts beyond its old one)."""
        o = self.channels[0]._object(name)
        parts = self._each(f"read {name}", lambda ch: ch.object_read(name, indices))
        if o.kind == "counter":
            return [tuple(map(sum, zip(*cells, strict=True))) for cells in zip(*parts, strict=True)]
        if o.kind == "meter":
            return parts[0]
        if name in self.monotonic:
            return [max(cells) for cells in zip(*parts, strict=True)]
        out = []
        for index, cells in zip(indices, zip(*parts, strict=True), strict=True):
            base = (self.written.get((name, index), 0),)
            changed = {c for c in cells if c != base}
            if len(changed) > 1:
                raise InvalidEntry(f"register {name}[{index}] was changed differently on several servers "
                                   f"({', '.join(str(c[0]) for c in cells)}): read it from each "
                                   "(ServerFleet.channels[i].object_read)")
            out.append(changed.pop() if changed else base)
        return out

    def object_write(self, name: str, records: Sequence[Sequence[int]]) -> None:
        self._each(f"write {name}", lambda ch: ch.object_write(name, records))
        if self.channels[0]._object(name).kind == "register":
            self.written.update(((name, r[0]), r[1]) for r in records)

    def clear(self, table: str) -> int:
        counts = self._each(f"clear {table}", lambda ch: ch.clear(table))
        return sum(counts) if table in self.split or self.channels[0]._table(table).state else max(counts)

    def start(self) -> None:
        self._each("start", lambda ch: ch.start())

    def counters(self) -> dict[str, Any]:
        """The servers' counters merged; each server's kept (``last_counters``): what a server
        that dies held is known as of the last read."""
        parts = self._each("counters", lambda ch: ch.counters())
        self.last_counters.update(zip(self.serving, parts, strict=True))
        return merge_counters(parts, self.replicated)

    def state_entries(self, server: int) -> dict[str, int]:
        """Per state table, the entries ``server`` held at the last ``counters()`` read."""
        tables = self.last_counters.get(server, {}).get("tables", {})
        return {t: int(c.get("entries", 0)) for t, c in tables.items() if t in self.tables and self.tables[t].state}


def replicated_tables(plan: Plan) -> set[str]:
    """The server tables every server of a fleet holds whole: control-plane tables not split."""
    return {t.name for t in plan.tables if not t.state and not t.shard_fields}


def merge_counters(parts: Sequence[dict[str, Any]], replicated: set[str]) -> dict[str, Any]:
    """Several servers' counters as one: numbers summed, except a replicated table's entries
    (each server holds them all) and the longest state-copy slice, which are maxima."""

    def merge(values: Sequence[Any], path: tuple[str, ...]) -> Any:
        if all(isinstance(v, dict) for v in values):
            keys = dict.fromkeys(k for v in values for k in v)
            return {k: merge([v[k] for v in values if k in v], (*path, k)) for k in keys}
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            most = path[-1:] == ("max_ns",) or (len(path) == 3 and path[0] == "tables" and path[1] in replicated
                                                and path[2] == "entries")
            return max(values) if most else sum(values)
        return values[0]

    return merge(list(parts), ()) if parts else {}
