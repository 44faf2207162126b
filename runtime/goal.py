"""The runtime's goal state: every entry the operator's writes have put in each table, kept in
a SQLite file (Python's ``sqlite3``) so that it outlives the switch, the server program and
the runtime itself.  ``Runtime.reconcile`` compares what each data plane holds with it after
a restart and repairs the difference (issue 14, item 5; Bluebird's lesson, seed 003 §5: the
controller holds the truth the switch is rebuilt from).

One row per entry: the table, its key (each key field's value and prefix length or mask, in
``.nfp`` order, as JSON), its priority and its values (JSON, ``.nfp`` order).  One row per
configured meter index: the meter, the index and its RFC 2698 rates (an index reset is no row:
unconfigured).  Counters and registers are not goal state: the data plane writes them.  Values marked
``secret`` are stored as they are (the file is the truth the data planes are rebuilt from):
the file is owner-only.  A write's
entries are one transaction; the runtime records a write once both data planes took it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

__all__ = ["Goal", "GoalEntry", "GoalError", "GoalStore", "checked_entry", "open_goal"]

GoalEntry = tuple[tuple[tuple[int, int | None], ...], int, tuple[int, ...]]  # key, priority, values


class GoalError(ValueError):
    """The goal file holds something this program's runtime did not write (or the goal store
    cannot be reached)."""


class Goal(Protocol):
    """What the runtime asks of a goal store: this SQLite one, or a shared one
    (runtime/goal_redis.py)."""

    def close(self) -> None: ...
    def apply(self, table: str, op: str, entries: Sequence[GoalEntry]) -> None: ...
    def entries(self, table: str, keys: int, values: int) -> Iterator[GoalEntry]: ...
    def set_meters(self, name: str, rates: dict[int, tuple[int, int, int, int] | None]) -> None: ...
    def meters(self, name: str) -> dict[int, tuple[int, int, int, int]]: ...
    def count(self, table: str) -> int: ...


def open_goal(where: str | Path, program: str) -> Goal:
    """A ``redis://`` or ``unix://`` URL: the goal state in that Redis, under ``nfc:<program>``
    (``?prefix=NAME`` for another namespace: gateways that share it keep one goal); anything
    else: a SQLite file."""
    text = str(where)
    if text.startswith(("redis://", "rediss://", "unix://")):
        from runtime.goal_redis import RedisGoalStore

        return RedisGoalStore(text, f"nfc:{program}")
    return GoalStore(where)


def checked_entry(where: str, table: str, key: str, prio: object, vals: str, keys: int, values: int) -> GoalEntry:
    """One stored entry (its key and values as JSON), checked to have the ``keys`` key fields
    and ``values`` values the table has now: a goal of another program, or of the program
    before an edit of the table, is a GoalError naming the table, not a wrong write."""
    try:
        k = tuple((int(v), None if m is None else int(m)) for v, m in json.loads(key))
        vs = tuple(int(v) for v in json.loads(vals))
        entry = (k, int(str(prio)), vs)
    except (ValueError, TypeError):  # JSONDecodeError is a ValueError; its text may quote a key
        raise GoalError(f"{where}: table {table}: an entry that is not one this runtime wrote "
                        "(its text is not shown: values may be keys)") from None
    if len(k) != keys or len(vs) != values:
        raise GoalError(f"{where}: table {table}: an entry of {len(k)} key fields and {len(vs)} "
                        f"values, the table has {keys} and {values} (the goal state of another "
                        f"program or of an earlier version of this one)")
    return entry


class GoalStore:
    def __init__(self, path: str | Path) -> None:
        """The file is made owner-only (mode 0600): it holds every entry's values, SA keys among
        them (and SQLite's journal beside it is made with the file's mode)."""
        self.path = Path(path)
        if not self.path.exists():
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.chmod(self.path, 0o600)  # one made before keys were kept in it, too
        # one connection for the runtime's threads (a cache manager recovers from a restart in
        # its own), used by one at a time
        self.db = sqlite3.connect(self.path, check_same_thread=False)
        self._turn = threading.RLock()
        self.db.execute("CREATE TABLE IF NOT EXISTS entries (tbl TEXT NOT NULL, key TEXT NOT NULL, "
                        "priority INTEGER NOT NULL, vals TEXT NOT NULL, PRIMARY KEY (tbl, key, priority))")
        self.db.execute("CREATE TABLE IF NOT EXISTS meters (name TEXT NOT NULL, idx INTEGER NOT NULL, "
                        "cir INTEGER NOT NULL, cbs INTEGER NOT NULL, pir INTEGER NOT NULL, pbs INTEGER NOT NULL, "
                        "PRIMARY KEY (name, idx))")
        self.db.commit()

    def close(self) -> None:
        with self._turn:
            self.db.close()

    def apply(self, table: str, op: str, entries: Sequence[GoalEntry]) -> None:
        """Record a write the data planes took: ``add`` / ``modify`` set the entries, ``delete``
        removes them (their values ignored)."""
        rows = [(table, json.dumps(key), prio, json.dumps(vals)) for key, prio, vals in entries]
        with self._turn, self.db:
            if op == "delete":
                self.db.executemany("DELETE FROM entries WHERE tbl = ? AND key = ? AND priority = ?",
                                    [r[:3] for r in rows])
            else:
                self.db.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?)", rows)

    def entries(self, table: str, keys: int, values: int) -> Iterator[GoalEntry]:
        """The entries of ``table``, each checked to have the ``keys`` key fields and ``values``
        values the table has now (a goal file of another program, or of the program before
        an edit of the table, is a GoalError naming the table, not a wrong write)."""
        with self._turn:
            rows = self.db.execute("SELECT key, priority, vals FROM entries WHERE tbl = ?", (table,)).fetchall()
        for key, prio, vals in rows:
            yield checked_entry(str(self.path), table, key, prio, vals, keys, values)

    def set_meters(self, name: str, rates: dict[int, tuple[int, int, int, int] | None]) -> None:
        """Record meter indices the data planes took: their (cir, cbs, pir, pbs), or None: reset."""
        with self._turn, self.db:
            self.db.executemany("DELETE FROM meters WHERE name = ? AND idx = ?", [(name, i) for i in rates])
            self.db.executemany("INSERT INTO meters VALUES (?, ?, ?, ?, ?, ?)",
                                [(name, i, *r) for i, r in rates.items() if r is not None])

    def meters(self, name: str) -> dict[int, tuple[int, int, int, int]]:
        """The configured indices of meter ``name`` and their rates."""
        out: dict[int, tuple[int, int, int, int]] = {}
        with self._turn:
            rows = self.db.execute("SELECT idx, cir, cbs, pir, pbs FROM meters WHERE name = ?", (name,)).fetchall()
        for row in rows:
            try:
                i, cir, cbs, pir, pbs = (int(v) for v in row)
            except (ValueError, TypeError):
                raise GoalError(f"{self.path}: meter {name}: a row that is not one this runtime wrote") from None
            out[i] = (cir, cbs, pir, pbs)
        return out

    def count(self, table: str) -> int:
        with self._turn:
            return int(self.db.execute("SELECT COUNT(*) FROM entries WHERE tbl = ?", (table,)).fetchone()[0])
