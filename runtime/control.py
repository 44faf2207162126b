"""Client of the server program's control channel (protocol v1: targets/dpdk/runtime/nfc_ctl.h,
docs/control.md): a UNIX stream socket, one reply per request, little-endian framing.

Records are lists of integers in the table's ``.nfp`` order (key fields, an LPM table's
prefix length, then values).  Every failure raises a typed :class:`runtime.errors` error
carrying the record at fault; ADD/MODIFY/DELETE messages are all-or-nothing on the server.
A server that does not let this process's user in answers the connection with one REFUSED
reply and closes it: :class:`ControlRefused`.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import (
    ChannelError,
    EntryExists,
    EntryNotFound,
    InvalidEntry,
    RuntimeApiError,
    TableFull,
)

__all__ = ["OP", "ControlChannel", "ControlRefused", "Hits", "ServerObject", "ServerTable"]

VERSION = 1
REQ = struct.Struct("<4sBBHII")
REP = struct.Struct("<4sBBHII")
OP = {"hello": 1, "add": 2, "modify": 3, "delete": 4, "read": 5, "dump": 6, "counters": 7, "clear": 8, "start": 9,
      "hits": 10, "obj_read": 11, "obj_write": 12, "pin": 13, "unpin": 14, "touch": 15, "overdue": 16,
      "windows": 17, "window_merge": 18}
OBJECT_WORDS = {"register": 1, "counter": 2, "meter": 5}  # per index in an OBJ_READ reply
MAX_RECORDS = 1 << 20


class ControlRefused(ChannelError):
    """The server program does not let this process's user (uid, groups) use its control
    channel: REFUSED, sent as the connection is accepted (docs/control.md, "Who may connect")."""


_ERRORS: dict[int, type[RuntimeApiError]] = {
    1: ChannelError, 2: ChannelError, 3: InvalidEntry, 4: InvalidEntry, 5: InvalidEntry, 6: EntryExists,
    7: EntryNotFound, 8: TableFull, 9: TableFull, 10: InvalidEntry, 11: ControlRefused, 12: ChannelError,
}


@dataclass(frozen=True)
class ServerTable:
    """A table as the running program describes it (HELLO)."""

    index: int
    name: str
    keys: tuple[int, ...]  # key field widths
    values: tuple[int, ...]
    lpm: int  # the LPM key field, -1: none
    state: bool
    capacity: int
    tracked: bool = False  # cached on the switch: the server samples its hits (HITS)
    match: tuple[str, ...] = ()  # each key field's match kind
    acl: bool = False  # a ternary or range field: records carry each non-exact field's argument and a priority

    @property
    def key_words(self) -> int:
        """Fields of a record's key: the key fields, then an LPM table's prefix length, or a
        classified table's prefix lengths, masks and high bounds and its priority."""
        return len(self.key_widths())

    def key_widths(self) -> list[int]:
        if self.acl:
            args = [64 if m == "lpm" else w for w, m in zip(self.keys, self.match, strict=True) if m != "exact"]
            return [*self.keys, *args, 64]
        return [*self.keys, *([64] if self.lpm >= 0 else [])]

    def widths(self, values: bool) -> list[int]:
        """The widths of a record's fields (a prefix length or priority a word of its own)."""
        return [*self.key_widths(), *(self.values if values else [])]

    def to_words(self, record: Sequence[int], values: bool) -> list[int]:
        """A record of .nfp fields as the channel carries it: a field of w bits in ⌈w/64⌉
        64-bit words, least significant first (docs/control.md)."""
        out: list[int] = []
        for i, (v, w) in enumerate(zip(record, self.widths(values), strict=True)):
            n = _words(w)
            if not isinstance(v, int) or v < 0 or v >> (64 * n):  # not shown: it may be a key
                raise InvalidEntry(f"table {self.name}: field {i} of a record is not a number of at most {w} bits")
            out += [(v >> (64 * i)) & _WORD for i in range(n)]
        return out

    def from_words(self, words: Sequence[int], widths: Sequence[int]) -> tuple[int, ...]:
        """The fields of ``widths`` from their words (to_words's inverse)."""
        out: list[int] = []
        at = 0
        for w in widths:
            n = _words(w)
            out.append(sum(words[at + i] << (64 * i) for i in range(n)))
            at += n
        return tuple(out)

    def words(self, widths: Sequence[int]) -> int:
        return sum(_words(w) for w in widths)


_WORD = (1 << 64) - 1


def _words(width: int) -> int:
    return (width + 63) // 64


@dataclass(frozen=True)
class ServerObject:
    """A register, counter or meter as the running program describes it (HELLO)."""

    index: int
    name: str
    kind: str  # register | counter | meter
    size: int
    width: int  # a register's bits


@dataclass(frozen=True)
class Hits:
    """HITS: per key (its key fields; an LPM table's looked-up address, not a prefix), the
    server's hits; ``not_kept``: hits of keys that did not fit the counts; ``lost_in_logs``:
    samples of every table overwritten before the control thread drained them, since the
    program started (a rate too high for the logs)."""

    counts: Counter[tuple[int, ...]]
    not_kept: int
    lost_in_logs: int


class ControlChannel:
    """One connection to a running server program."""

    def __init__(self, path: str | Path, timeout: float = 60.0) -> None:
        self.path = str(path)
        self.timeout = timeout
        self._turn = threading.RLock()  # one request and its reply at a time (raw), or a reconnection
        self._open()

    def _open(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        try:
            self.sock.connect(self.path)
        except OSError as e:
            self.sock.close()
            raise ChannelError(f"cannot connect to the server program's control socket {self.path}: {e}") from e
        try:
            hello = json.loads(self._call("hello"))
        except RuntimeApiError:
            self.sock.close()
            raise
        if hello.get("version") != VERSION:
            self.sock.close()
            raise ChannelError(f"the server program speaks control protocol {hello.get('version')}, not {VERSION}")
        self.program: str = hello["program"]
        self.tables = {t["name"]: ServerTable(i, t["name"], tuple(t["keys"]), tuple(t["values"]), t["lpm"],
                                              bool(t["state"]), t["capacity"], bool(t.get("tracked", 0)),
                                              tuple(t.get("match", ())), bool(t.get("acl", 0)))
                       for i, t in enumerate(hello["tables"])}
        self.objects = {o["name"]: ServerObject(i, o["name"], o["kind"], o["size"], o["width"])
                        for i, o in enumerate(hello.get("objects", []))}

    def close(self) -> None:
        self.sock.close()

    def reconnect(self) -> None:
        """A new connection to the same socket: the program there may be another (it
        restarted), so its tables are learnt again; it must be built from the same ``.nfp``
        (``Runtime`` checks the tables once, ``Runtime.recover`` again).  A ChannelError
        while nothing answers there."""
        with self._turn:
            self.sock.close()
            self._open()

    def __enter__(self) -> ControlChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- framing -----------------------------------------------------------------------------

    def _recv(self, sock: socket.socket, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = sock.recv(n - len(buf))
            except OSError as e:
                raise ChannelError(f"control socket: {e}") from e
            if not chunk:
                raise ChannelError("the server program closed the control connection")
            buf += chunk
        return bytes(buf)

    def raw(self, header: bytes, body: bytes = b"") -> tuple[int, int, bytes]:
        """Send a request as given (tests use it to send malformed ones); (status, index, body).
        A reply the server sent before closing (a refusal) is read even if the send failed.
        One request at a time: threads sharing the channel (a controller and the live data
        plane's counter reads) take turns."""
        with self._turn:
            sock = self.sock
            try:
                sock.sendall(header + body)
            except OSError as e:
                try:
                    return self._reply(sock)
                except ChannelError:
                    raise ChannelError(f"control socket: {e}") from e
            return self._reply(sock)

    def _reply(self, sock: socket.socket) -> tuple[int, int, bytes]:
        magic, version, status, _op, index, length = REP.unpack(self._recv(sock, REP.size))
        if magic != b"NFCR" or version != VERSION:
            raise ChannelError("not a control channel reply")
        return status, index, self._recv(sock, length)

    def _request(self, op: str, table: int = 0, count: int = 0, body: bytes = b"", what: str = "") -> tuple[int, bytes]:
        """One request; (index, body) of an OK reply, else the typed error of its status."""
        status, index, reply = self.raw(REQ.pack(b"NFCQ", VERSION, OP[op], table, count, len(body)), body)
        if status != 0:
            err = _ERRORS.get(status, RuntimeApiError)
            raise err(f"{op}{what}: record {index}: {reply.decode(errors='replace')}", index=index)
        return index, reply

    def _call(self, op: str, table: int = 0, count: int = 0, body: bytes = b"", what: str = "") -> bytes:
        return self._request(op, table, count, body, what)[1]

    def _table(self, name: str) -> ServerTable:
        t = self.tables.get(name)
        if t is None:
            raise InvalidEntry(f"the server program has no table {name}")
        return t

    # ---- operations --------------------------------------------------------------------------

    def write(self, op: str, table: str, records: Sequence[Sequence[int]], chunk: int = 65536) -> None:
        """``op`` = add/modify/delete; all-or-nothing per message of at most ``chunk`` records
        (callers wanting all-or-nothing over more records send one message)."""
        t = self._table(table)
        with_values = op != "delete"
        width = t.key_words + (len(t.values) if with_values else 0)
        for start in range(0, len(records), min(chunk, MAX_RECORDS)):
            part = records[start:start + chunk]
            flat: list[int] = []
            for r in part:
                if len(r) != width:
                    raise InvalidEntry(f"{op} {table}: a record has {len(r)} fields, the table takes {width}")
                flat += t.to_words(r, with_values)
            body = struct.pack(f"<{len(flat)}Q", *flat)
            self._call(op, t.index, len(part), body, f" {table}")

    def read(self, table: str, keys: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        t = self._table(table)
        flat: list[int] = []
        for r in keys:
            if len(r) != t.key_words:
                raise InvalidEntry(f"read {table}: a key has {len(r)} fields, the table takes {t.key_words}")
            flat += t.to_words(r, False)
        body = self._call("read", t.index, len(keys), struct.pack(f"<{len(flat)}Q", *flat), f" {table}")
        vals = struct.unpack(f"<{len(body) // 8}Q", body)
        n = t.words(t.values)
        return [t.from_words(vals[i * n:(i + 1) * n], t.values) for i in range(len(keys))]

    def dump(self, table: str) -> list[tuple[int, ...]]:
        """Every entry: key words then values."""
        t = self._table(table)
        widths = t.widths(True)
        stride = t.words(widths)
        out: list[tuple[int, ...]] = []
        resume = 0
        while True:
            body = self._call("dump", t.index, 65536, struct.pack("<Q", resume), f" {table}")
            words = struct.unpack(f"<{len(body) // 8}Q", body)
            resume = words[0]
            out += [t.from_words(words[1 + i * stride:1 + (i + 1) * stride], widths)
                    for i in range((len(words) - 1) // stride)]
            if resume == 0:
                return out

    def hits(self, table: str) -> Hits:
        """The hits of a switch-cached table's entries on the server since the last call (the
        switch's misses, sampled per lcore: docs/control.md, HITS); reset by the call."""
        t = self._table(table)
        n, body = self._request("hits", t.index, what=f" {table}")
        words = struct.unpack(f"<{len(body) // 8}Q", body)
        stride = t.words(t.keys) + 1
        counts = Counter({t.from_words(words[2 + i * stride:1 + (i + 1) * stride], t.keys): words[1 + (i + 1) * stride]
                          for i in range(n)})
        return Hits(counts, words[0], words[1])

    # ---- a switch-cached data-plane state (the cache manager; docs/control.md, PIN) ----------

    def _keys_body(self, op: str, t: ServerTable, keys: Sequence[Sequence[int]],
                   extra: Sequence[int] | None = None) -> bytes:
        flat: list[int] = []
        for n, r in enumerate(keys):
            if len(r) != len(t.keys):
                raise InvalidEntry(f"{op} {t.name}: a key has {len(r)} fields, the table takes {len(t.keys)}")
            flat += t.to_words(r, False)
            if extra is not None:
                flat.append(extra[n])
        return struct.pack(f"<{len(flat)}Q", *flat)

    def pin(self, table: str, keys: Sequence[Sequence[int]]) -> list[tuple[int, ...] | None]:
        """Pin the live entries of ``keys`` (the switch is about to hold them: they do not
        expire on the server until unpinned, nor do the entries their last server hit
        refreshed); per key its values, or None: no live entry (nothing pinned).  All or
        nothing.  A pin is a flag: pinning a pinned entry again changes nothing."""
        return [values for values, _fresh in self.pin_new(table, keys)]

    def pin_new(self, table: str, keys: Sequence[Sequence[int]]) -> list[tuple[tuple[int, ...] | None, bool]]:
        """``pin``, and per key whether this call pinned it (not pinned already): what an undo unpins."""
        t = self._table(table)
        body = self._call("pin", t.index, len(keys), self._keys_body("pin", t, keys), f" {table}")
        words = struct.unpack(f"<{len(body) // 8}Q", body)
        n = 1 + t.words(t.values)
        return [(t.from_words(words[i * n + 1:(i + 1) * n], t.values) if words[i * n] else None, words[i * n] == 1)
                for i in range(len(keys))]

    def unpin(self, table: str, keys: Sequence[Sequence[int]]) -> int:
        """Undo a pin of each key (the switch no longer holds it); how many were pinned."""
        t = self._table(table)
        n, _ = self._request("unpin", t.index, len(keys), self._keys_body("unpin", t, keys), f" {table}")
        return n

    def touch(self, table: str, hits: Sequence[tuple[Sequence[int], int]]) -> int:
        """Switch hits: per key, ns since its last hit on the switch; the server restarts the
        timers a hit there would have (the entry's, and those its links name) as of that
        moment.  How many keys had a live or pinned entry."""
        t = self._table(table)
        body = self._keys_body("touch", t, [k for k, _ in hits], [max(0, int(age)) for _, age in hits])
        n, _ = self._request("touch", t.index, len(hits), body, f" {table}")
        return n

    def overdue(self, table: str) -> list[tuple[int, ...]]:
        """The keys of pinned entries whose timers have run out: the switch must let them go."""
        t = self._table(table)
        n, body = self._request("overdue", t.index, what=f" {table}")
        words = struct.unpack(f"<{len(body) // 8}Q", body)
        k = t.words(t.keys)
        return [t.from_words(words[i * k:(i + 1) * k], t.keys) for i in range(n)]

    def windows(self) -> list[tuple[int, int, int]]:
        """Every anti-replay window of the program's ESP: (SA number, top, bitmap: bit i says
        top - i was seen); none when it does no ESP."""
        out: list[tuple[int, int, int]] = []
        resume = 0
        while True:
            words = struct.unpack_from("<Q", body := self._call("windows", 0, 0, struct.pack("<Q", resume)))
            resume = words[0]
            rest = struct.unpack(f"<{len(body) // 8 - 1}Q", body[8:])
            out += [(rest[i], rest[i + 1], rest[i + 2]) for i in range(0, len(rest), 3)]
            if resume == 0:
                return out

    def window_merge(self, windows: Sequence[tuple[int, int, int]]) -> None:
        """Merge other servers' windows (``windows()``'s records) into this one's: a number
        seen in either is seen here after (runtime/carry.py)."""
        for i in range(0, len(windows), 1 << 16):
            part = windows[i:i + (1 << 16)]
            if any(not 0 <= v <= _WORD for w in part for v in w):
                raise InvalidEntry("window_merge: a record is (SA number, top, bitmap) of 64 bits each")
            flat = [v for w in part for v in w]
            self._call("window_merge", 0, len(part), struct.pack(f"<{len(flat)}Q", *flat))

    def _object(self, name: str) -> ServerObject:
        o = self.objects.get(name)
        if o is None:
            raise InvalidEntry(f"the server program has no register, counter or meter {name}")
        return o

    def object_read(self, name: str, indices: Sequence[int]) -> list[tuple[int, ...]]:
        """Per index: a register's value; a counter's (packets, bytes); a meter's (configured,
        cir, cbs, pir, pbs), rates in bytes per second and bursts in bytes."""
        o = self._object(name)
        if any(not isinstance(i, int) or not 0 <= i < o.size for i in indices):
            raise InvalidEntry(f"{o.kind} {name}: an index outside 0..{o.size - 1}")
        body = self._call("obj_read", o.index, len(indices), struct.pack(f"<{len(indices)}Q", *indices), f" {name}")
        n = OBJECT_WORDS[o.kind]
        words = struct.unpack(f"<{len(body) // 8}Q", body)
        return [tuple(words[i * n:(i + 1) * n]) for i in range(len(indices))]

    def object_write(self, name: str, records: Sequence[Sequence[int]]) -> None:
        """Records of (index, a register's value / a counter's packets, bytes / a meter's cir,
        cbs, pir, pbs; all four 0: unconfigured); all or nothing."""
        o = self._object(name)
        width = OBJECT_WORDS[o.kind] - (o.kind == "meter") + 1
        flat: list[int] = []
        for r in records:
            if len(r) != width or any(not isinstance(v, int) or not 0 <= v <= _WORD for v in r):
                raise InvalidEntry(f"{o.kind} {name}: a record is {width} numbers of 64 bits, not {r!r}")
            flat += r
        self._call("obj_write", o.index, len(records), struct.pack(f"<{len(flat)}Q", *flat), f" {name}")

    def clear(self, table: str) -> int:
        """Delete every entry of a control-plane table; how many there were."""
        return self._request("clear", self._table(table).index, what=f" {table}")[0]

    def ping(self) -> bool:
        """The program answers (HELLO); a ChannelError when it does not."""
        self._call("hello")
        return True

    def start(self) -> None:
        """Start forwarding (a program started with --wait)."""
        self._call("start")

    def counters(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self._call("counters"))
        return result
