"""The goal state in Redis: a store a fleet of gateways can share (issue 16, item 6; SONiC
keeps its APPL_DB there the same way), so that an agent that restarts — on this gateway or
another one given the same namespace — converges by ``Runtime.reconcile`` without the
operator replaying anything.  Same contents and checks as the SQLite store (runtime/goal.py):

* ``<prefix>:entries:<table>``: a hash, field ``[key, priority]`` (JSON) -> the values (JSON);
* ``<prefix>:meters:<meter>``: a hash, field the index -> ``[cir, cbs, pir, pbs]``.

A write's entries are one MULTI/EXEC transaction (other agents see all of it or none).  The
values include ``secret`` ones (SA keys): the store is the truth the data planes are rebuilt
from, so it must be reachable by the agents alone (a unix socket with owner-only mode, or
Redis ACLs and TLS: ``rediss://``).  A store that cannot be reached is a GoalError.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, cast
from urllib.parse import parse_qs, urlencode

import redis

from runtime.goal import GoalEntry, GoalError, checked_entry

__all__ = ["RedisGoalStore"]

_BATCH = 10_000  # fields per HSET/HDEL inside a transaction


class RedisGoalStore:
    def __init__(self, url: str, prefix: str) -> None:
        """``url``: redis://HOST:PORT/DB or unix://PATH?db=N; ``?prefix=NAME`` overrides
        ``prefix`` (the namespace: gateways sharing a goal name the same one)."""
        base, _, query = url.partition("?")  # (urlunsplit would drop unix:// of an empty host)
        params = parse_qs(query)
        self.prefix = params.pop("prefix", [prefix])[0]
        self.where = base + (f"?{urlencode(params, doseq=True)}" if params else "")
        try:
            self.r = redis.Redis.from_url(self.where, socket_timeout=30)
            self.r.ping()
        except (redis.RedisError, ValueError) as e:
            raise GoalError(f"the goal store {self.where}: {e}") from e

    def _key(self, kind: str, name: str) -> str:
        return f"{self.prefix}:{kind}:{name}"

    def close(self) -> None:
        self.r.close()

    def _run(self, what: str, fill: object) -> None:
        try:
            with self.r.pipeline(transaction=True) as pipe:
                fill(pipe)  # type: ignore[operator]
                pipe.execute()
        except redis.RedisError as e:
            raise GoalError(f"the goal store {self.where}: {what}: {e}") from e

    def apply(self, table: str, op: str, entries: Sequence[GoalEntry]) -> None:
        """Record a write the data planes took: ``add`` / ``modify`` set the entries, ``delete``
        removes them."""
        key = self._key("entries", table)
        fields = [(json.dumps([list(map(list, k)), prio]), json.dumps(list(vals))) for k, prio, vals in entries]

        def fill(pipe: redis.client.Pipeline) -> None:
            for start in range(0, len(fields), _BATCH):
                part = fields[start:start + _BATCH]
                if op == "delete":
                    pipe.hdel(key, *(f for f, _ in part))
                else:
                    pipe.hset(key, mapping=dict(part))

        if fields:
            self._run(f"{op} {table}", fill)

    def entries(self, table: str, keys: int, values: int) -> Iterator[GoalEntry]:
        try:
            rows = list(self.r.hscan_iter(self._key("entries", table), count=10_000))
        except redis.RedisError as e:
            raise GoalError(f"the goal store {self.where}: table {table}: {e}") from e
        for field, vals in rows:
            try:
                key, prio = json.loads(field)
            except (ValueError, TypeError):
                raise GoalError(f"{self.where}: table {table}: an entry that is not one this runtime wrote") from None
            yield checked_entry(self.where, table, json.dumps(key), prio, vals.decode(), keys, values)

    def set_meters(self, name: str, rates: dict[int, tuple[int, int, int, int] | None]) -> None:
        key = self._key("meters", name)

        def fill(pipe: redis.client.Pipeline) -> None:
            gone = [str(i) for i, r in rates.items() if r is None]
            if gone:
                pipe.hdel(key, *gone)
            kept: dict[str | bytes, str | bytes] = {str(i): json.dumps(list(r)) for i, r in rates.items()
                                                    if r is not None}
            if kept:
                pipe.hset(key, mapping=cast(Any, kept))

        self._run(f"meter {name}", fill)

    def meters(self, name: str) -> dict[int, tuple[int, int, int, int]]:
        out: dict[int, tuple[int, int, int, int]] = {}
        try:
            rows = self.r.hgetall(self._key("meters", name))
        except redis.RedisError as e:
            raise GoalError(f"the goal store {self.where}: meter {name}: {e}") from e
        for idx, rates in rows.items():
            try:
                cir, cbs, pir, pbs = (int(v) for v in json.loads(rates))
                out[int(idx)] = (cir, cbs, pir, pbs)
            except (ValueError, TypeError):
                raise GoalError(f"{self.where}: meter {name}: a field that is not one this runtime wrote") from None
        return out

    def count(self, table: str) -> int:
        try:
            return int(self.r.hlen(self._key("entries", table)))
        except redis.RedisError as e:
            raise GoalError(f"the goal store {self.where}: table {table}: {e}") from e
