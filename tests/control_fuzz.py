"""Control-channel fuzzing of the generated server program under ASan + UBSan (issue 17).

A session starts the program (``nf-san``, live, forwarding a pcap of fuzzer frames over and
over) and sends it a series of random steps over its control socket (protocol v1,
``targets/dpdk/runtime/nfc_ctl.h``, docs/control.md):

* well-framed requests of every op, to every table, a state table and no table: records
  with keys present and absent, LPM keys with host bits, fields and prefixes past their
  width, the same key twice, counts and lengths that disagree, counts past the limit,
  DUMP positions anywhere, unknown ops;
* malformed frames: bad magic, another version, a length past the limit or not a whole
  number of words, random bytes; frames cut short and abandoned or left hanging;
* several clients whose requests arrive interleaved, a few bytes at a time.

The oracle is the protocol as documented, kept as a model of every control-plane table:
each well-framed request gets one well-formed reply whose status (and record index) is the
one the model predicts, a malformed frame gets BAD_REQUEST and the connection closes; an OK
write changes the table as the model says and a failed one changes nothing (a DUMP of the
table equals the model after every write); READ and DUMP return what the model holds; a
fresh client is served after any of it; and the program stays up and ends (SIGINT) with
exit status 0 and no sanitizer report.

``session(...)`` runs a number of steps (CI: ``tests/test_control_fuzz.py``); ``main(minutes,
seed, out_dir)`` runs sessions until time is up, minimises each new failure to the fewest
steps that still fail it (delta debugging, a fresh program per try) and saves them under
``out_dir`` (``steps.json``, a README with ``python -m tests.control_fuzz --replay DIR``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import socket
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runtime.control import OBJECT_WORDS, OP, REP, REQ, ControlChannel
from runtime.server_proc import ServerProcess
from tests.fuzz import Fuzzer
from tests.packet_fuzz import (
    TAG,
    Case,
    NotBuilt,
    build_case,
    ddmin,
    sanitizer_excerpt,
    sanitizer_options,
    sanitizer_signature,
    tail,
    write_pcap,
)

__all__ = ["Model", "Step", "TableModel", "main", "predict", "replay", "run_session", "session_steps"]

MAX_BODY = 64 << 20  # nfc_ctl.h
MAX_COUNT = 1 << 20
TIMEOUT_MS = 500  # --control-timeout-ms: abandoned frames are closed this soon
OK, BAD_REQUEST, BAD_OP, NO_TABLE, READ_ONLY, OUT_OF_RANGE, EXISTS, NOT_FOUND, NO_MEMORY, BUSY, DUPLICATE = \
    0, 1, 2, 3, 4, 5, 6, 7, 9, 12, 10
WRITES = (OP["add"], OP["modify"], OP["delete"])
EXAMPLES = ("cgnat", "dsr_router", "vpn_gateway")  # built with --target dpdk: every table on the server


# ---- the model of the documented protocol ------------------------------------------------------


class Failure(Exception):
    """What went wrong; ``signature`` is the same for the same fault."""

    def __init__(self, signature: str, detail: str = "") -> None:
        super().__init__(signature)
        self.signature = signature
        self.detail = detail


@dataclass
class TableModel:
    """A table as HELLO describes it, and (control-plane tables) the entries it must hold."""

    index: int
    name: str
    keys: tuple[int, ...]
    values: tuple[int, ...]
    lpm: int
    state: bool
    tracked: bool = False  # HITS answers for it (cached on a switch; never with --target dpdk)
    entries: dict[tuple[int, ...], tuple[int, ...]] = field(default_factory=dict)

    @property
    def key_words(self) -> int:
        return len(self.keys) + (self.lpm >= 0)

    def stride(self, op: int) -> int:
        return self.key_words + (len(self.values) if op in (OP["add"], OP["modify"]) else 0)

    def canonical(self, words: Sequence[int]) -> tuple[int, ...] | None:
        """The key as the table stores it (an LPM field masked to its prefix); None: a field
        or the prefix length is past its width (OUT_OF_RANGE)."""
        key = list(words[:self.key_words])
        if any(v >= 1 << w for v, w in zip(key, self.keys, strict=False)):
            return None
        if self.lpm >= 0:
            w, plen = self.keys[self.lpm], key[-1]
            if plen > w:
                return None
            key[self.lpm] &= ((1 << w) - 1) ^ ((1 << (w - plen)) - 1)
        return tuple(key)

    def values_fit(self, words: Sequence[int]) -> bool:
        return all(v < 1 << w for v, w in zip(words, self.values, strict=True))


@dataclass(frozen=True)
class Expect:
    status: int
    indices: frozenset[int] | None = None  # the record index the reply may name; None: any
    closes: bool = False  # the server closes the connection after this reply
    also: frozenset[int] = frozenset()  # other statuses the documents leave open (no body, no index checked)


class Model:
    """Every table of one program; ``predict`` says what a request must get, ``apply`` what an
    OK write does."""

    def __init__(self, hello: Sequence[dict[str, Any]], objects: Sequence[dict[str, Any]] = ()) -> None:
        """``hello``: the tables of the HELLO reply, in order (a request names one by its index);
        ``objects``: its registers, counters and meters (OBJ_READ / OBJ_WRITE name one by index)."""
        self.hello = tuple(hello)
        self.objects = tuple(objects)
        self.tables = [TableModel(i, str(t["name"]), tuple(t["keys"]), tuple(t["values"]), int(t["lpm"]),
                                  bool(t["state"]), bool(t.get("tracked", 0))) for i, t in enumerate(hello)]

    @staticmethod
    def of(ch: ControlChannel) -> Model:
        """The model of the program ``ch`` is connected to, from a HELLO of its own."""
        status, _index, body = ch.raw(request(OP["hello"], 0, 0))
        if status != OK:
            raise Failure(f"HELLO status {status}", body.decode(errors="replace"))
        hello = json.loads(body)
        return Model(hello["tables"], hello.get("objects", ()))

    def empty(self) -> Model:
        return Model(self.hello, self.objects)

    def control(self) -> list[TableModel]:
        return [t for t in self.tables if not t.state]


def parse_request(data: bytes) -> tuple[tuple[bytes, int, int, int, int, int], list[int]]:
    head = REQ.unpack(data[:REQ.size])
    body = data[REQ.size:]
    return head, list(struct.unpack(f"<{len(body) // 8}Q", body[:len(body) // 8 * 8]))


def framing_ok(head: tuple[bytes, int, int, int, int, int]) -> bool:
    magic, version, _op, _table, _count, length = head
    return magic == b"NFCQ" and version == 1 and length <= MAX_BODY and length % 8 == 0


def predict(model: Model, data: bytes) -> Expect:
    """The reply a whole, well-framed-or-not request must get (docs/control.md)."""
    head, words = parse_request(data)
    _magic, _version, op, table, count, length = head
    if not framing_ok(head):
        return Expect(BAD_REQUEST, closes=True)
    if op in (OP["hello"], OP["counters"], OP["start"]):
        return Expect(OK, frozenset({0}))
    if op == OP["hits"]:  # the body is not read
        return Expect(OK) if table < len(model.tables) and model.tables[table].tracked else Expect(NO_TABLE)
    if op in (OP["obj_read"], OP["obj_write"]):
        return _object_op(model, op, table, count, length, words)
    if op in (OP["windows"], OP["window_merge"]):
        return _windows_op(op, count, length, words)
    if not OP["add"] <= op <= OP["clear"]:
        return Expect(BAD_OP)
    if table >= len(model.tables):
        return Expect(NO_TABLE)
    t = model.tables[table]
    if op == OP["dump"]:  # BUSY: the forwarding lcore did not take a state copy in time; a position no
        # reply gives (2^32 and over) may be refused
        far = len(words) > 0 and words[0] >> 32 != 0
        return Expect(OK, also=frozenset({BUSY} if t.state else set()) | ({OUT_OF_RANGE} if far else set()))
    if t.state:
        return Expect(READ_ONLY)
    stride = 0 if op == OP["clear"] else t.stride(op)
    if count > MAX_COUNT or count * stride * 8 != length:
        return Expect(BAD_REQUEST)
    if op == OP["clear"]:
        return Expect(OK, frozenset({len(t.entries)}))
    records = [words[i * stride:(i + 1) * stride] for i in range(count)]
    return _records(t, op, records)


def _windows_op(op: int, count: int, length: int, words: list[int]) -> Expect:
    """WINDOWS / WINDOW_MERGE of a program without ESP (the fuzzed examples): no windows to
    list, none that can be made."""
    if op == OP["windows"]:
        return Expect(OUT_OF_RANGE) if words and words[0] >> 32 else Expect(OK, frozenset({0}))
    if count > MAX_COUNT or count * 24 != length:
        return Expect(BAD_REQUEST)
    if count == 0:
        return Expect(OK, frozenset({0}))
    return Expect(OUT_OF_RANGE if words[0] >> 32 else NO_MEMORY, frozenset({0}))


def _object_op(model: Model, op: int, table: int, count: int, length: int, words: list[int]) -> Expect:
    """OBJ_READ (u64 indices) and OBJ_WRITE (index, then a register's value / a counter's
    packets, bytes / a meter's cir, cbs, pir, pbs): every record checked before any is written."""
    if table >= len(model.objects):
        return Expect(NO_TABLE)
    o = model.objects[table]
    stride = 1 if op == OP["obj_read"] else 1 + OBJECT_WORDS[o["kind"]] - (o["kind"] == "meter")
    if count > MAX_COUNT or count * stride * 8 != length:
        return Expect(BAD_REQUEST)
    for i in range(count):
        r = words[i * stride:(i + 1) * stride]
        if r[0] >= o["size"] or (op == OP["obj_write"] and not _object_record_ok(o, r[1:])):
            return Expect(OUT_OF_RANGE, frozenset({i}))
    return Expect(OK, frozenset({count}))


def _object_record_ok(o: dict[str, Any], v: list[int]) -> bool:
    """docs/control.md: a register value within its width; meter rates all zero (reset) or
    0 < cir <= pir, cbs and pbs > 0, each below 2^40."""
    if o["kind"] == "register":
        return o["width"] >= 64 or v[0] >> o["width"] == 0
    if o["kind"] == "counter" or not any(v):
        return True
    cir, cbs, pir, pbs = v
    return 0 < cir <= pir < 1 << 40 and 0 < cbs < 1 << 40 and 0 < pbs < 1 << 40


def _records(t: TableModel, op: int, records: list[list[int]]) -> Expect:
    """ADD/MODIFY/DELETE/READ: every record checked in order (width, then presence), then
    (writes) no key twice; the first failure names its record."""
    keys = []
    for i, r in enumerate(records):
        key = t.canonical(r)
        if key is None or (op in (OP["add"], OP["modify"]) and not t.values_fit(r[t.key_words:])):
            return Expect(OUT_OF_RANGE, frozenset({i}))
        if op == OP["add"] and key in t.entries:
            return Expect(EXISTS, frozenset({i}))
        if op != OP["add"] and key not in t.entries:
            return Expect(NOT_FOUND, frozenset({i}))
        keys.append(key)
    twice = {k for k in keys if keys.count(k) > 1}
    if twice and op != OP["read"]:
        return Expect(DUPLICATE, frozenset(i for i, k in enumerate(keys) if k in twice))
    return Expect(OK, frozenset({len(records)}))


def apply(model: Model, data: bytes) -> None:
    """An OK write (or CLEAR) of ``data`` on the model."""
    (_m, _v, op, table, count, _length), words = parse_request(data)
    t = model.tables[table]
    if op == OP["clear"]:
        t.entries.clear()
        return
    stride = t.stride(op)
    for i in range(count):
        r = words[i * stride:(i + 1) * stride]
        key = t.canonical(r)
        assert key is not None
        if op == OP["delete"]:
            del t.entries[key]
        else:
            t.entries[key] = tuple(r[t.key_words:])


# ---- steps --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """What one step sends.  ``single``: ``frames[0]`` on the reused connection (a fresh one
    if ``fresh``) and its reply read; ``partial``: ``frames[0]`` (less than a request) on a new
    connection, then closed (or, ``linger``, left for the server's deadline); ``interleaved``:
    ``frames`` on as many new connections, sent in pieces in the order of ``cuts`` (client,
    bytes), then every reply read."""

    kind: str
    frames: tuple[bytes, ...]
    fresh: bool = False
    linger: bool = False
    cuts: tuple[tuple[int, int], ...] = ()

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "frames": [f.hex() for f in self.frames], "cuts": [list(c) for c in self.cuts]}

    @staticmethod
    def from_json(d: dict[str, object]) -> Step:
        frames = d["frames"]
        cuts = d["cuts"]
        assert isinstance(frames, list) and isinstance(cuts, list)
        return Step(str(d["kind"]), tuple(bytes.fromhex(f) for f in frames), bool(d["fresh"]), bool(d["linger"]),
                    tuple((int(c), int(n)) for c, n in cuts))


def request(op: int, table: int, count: int, words: Sequence[int] = (), version: int = 1, magic: bytes = b"NFCQ",
            length: int | None = None) -> bytes:
    body = struct.pack(f"<{len(words)}Q", *words)
    return REQ.pack(magic, version, op & 0xFF, table & 0xFFFF, count & 0xFFFFFFFF,
                    len(body) if length is None else length) + body


class Generator:
    """Random steps against the tables of ``model`` (its entries steer keys toward hits)."""

    def __init__(self, model: Model, rnd: random.Random) -> None:
        self.model = model
        self.rnd = rnd

    def step(self) -> Step:
        kind = self.rnd.choices(["write", "read", "dump", "misc", "count", "framing", "partial", "interleaved"],
                                [35, 10, 10, 10, 8, 9, 9, 9])[0]
        if kind == "interleaved":
            frames = tuple(self._interleavable() for _ in range(self.rnd.randint(2, 5)))
            return Step("interleaved", frames, cuts=self._cuts(frames))
        if kind == "partial":
            frame = self._frame(self.rnd.choice(["write", "read", "misc"]))
            return Step("partial", (frame[:self.rnd.randrange(1, len(frame))],), linger=self.rnd.random() < 0.5)
        frame = self._frame(kind)
        return Step("single", (frame,), fresh=kind == "framing" or self.rnd.random() < 0.1)

    def _frame(self, kind: str) -> bytes:
        rnd, ts = self.rnd, self.model.control()
        t = rnd.choice(ts) if ts else self.model.tables[0]
        if kind == "write":
            op = rnd.choice(WRITES)
            return self._records(op, t, rnd.choice([1, 1, 2, 3, 8, 40, 1 if rnd.random() < 0.9 else 500]))
        if kind == "read":
            return self._records(OP["read"], t, rnd.choice([0, 1, 2, 8]))
        if kind == "dump":
            pos = rnd.choice([0, 0, 1, rnd.getrandbits(32), rnd.getrandbits(64), (1 << 32) - 1])
            table = rnd.choice(self.model.tables).index
            return request(OP["dump"], table, rnd.choice([0, 1, 3, (1 << 32) - 1]), [pos] * rnd.choice([0, 1, 1, 3]))
        if kind == "misc":
            return self._misc(t)
        if kind == "count":
            return self._bad_count(t)
        return self._bad_frame()

    def _misc(self, t: TableModel) -> bytes:
        rnd = self.rnd
        state = [x for x in self.model.tables if x.state]
        return self._one([
            lambda: request(OP["hello"], 0, 0), lambda: request(OP["counters"], rnd.getrandbits(16), 0),
            lambda: request(OP["start"], 0, 0), lambda: request(OP["clear"], t.index, 0),
            lambda: request(rnd.choice([0, 10, 11, 200, 255]), t.index, 1, [1]),
            lambda: request(rnd.choice(WRITES), rnd.choice([len(self.model.tables), 0xFFFF]), 1, [1, 2]),
            lambda: self._records(rnd.choice([*WRITES, OP["read"]]), rnd.choice(state) if state else t, 1),
        ])

    def _bad_count(self, t: TableModel) -> bytes:
        rnd, op = self.rnd, self.rnd.choice([*WRITES, OP["read"]])
        stride = t.stride(op)
        return self._one([
            lambda: request(op, t.index, 2, [1] * stride),  # two records, one in the body
            lambda: request(op, t.index, 1, [1] * (stride + rnd.choice([-1, 1]))),  # a record of the wrong width
            lambda: request(op, t.index, (1 << 32) - 1, []),
            lambda: request(op, t.index, MAX_COUNT + 1, []),
            lambda: request(OP["clear"], t.index, rnd.getrandbits(32), [0] * rnd.choice([0, 1])),
        ])

    def _one(self, options: Sequence[Callable[[], bytes]]) -> bytes:
        """One of ``options``, picked at random, made."""
        return self.rnd.choice(options)()

    def _bad_frame(self) -> bytes:
        rnd = self.rnd
        return self._one([
            lambda: request(OP["hello"], 0, 0, magic=rnd.choice([b"NFCR", b"\0\0\0\0", rnd.randbytes(4)])),
            lambda: request(OP["counters"], 0, 0, version=rnd.choice([0, 2, 255])),
            lambda: request(OP["add"], 0, 1, length=rnd.choice([MAX_BODY + 8, 0xFFFFFFF8, 0xFFFFFFFF])),
            lambda: request(OP["add"], 0, 1, [0, 0], length=rnd.choice([1, 7, 12])) + b"\0" * 12,
            lambda: b"\0\0\0\0" + rnd.randbytes(rnd.randint(12, 64)),
        ])

    def _records(self, op: int, t: TableModel, count: int) -> bytes:
        stride = t.stride(op)
        records: list[list[int]] = []
        for _ in range(count):
            r = self._key(t, records) + [self._value(w) for w in t.values][:stride - t.key_words]
            records.append(r)
        return request(op, t.index, count, [w for r in records for w in r])

    def _key(self, t: TableModel, earlier: list[list[int]]) -> list[int]:
        rnd = self.rnd
        pick = rnd.random()
        if earlier and pick < 0.05:  # the same key twice in a message
            return list(rnd.choice(earlier)[:t.key_words])
        if t.entries and pick < 0.55:
            key = list(rnd.choice(sorted(t.entries)))
            if t.lpm >= 0 and rnd.random() < 0.3:  # host bits under the prefix: the same entry
                w, plen = t.keys[t.lpm], key[-1]
                key[t.lpm] |= rnd.getrandbits(w - plen) if w > plen else 0
            return key
        key = [self._value(w) for w in t.keys]
        if t.lpm >= 0:
            key.append(rnd.choice([0, t.keys[t.lpm] // 2, t.keys[t.lpm] - 1, t.keys[t.lpm], rnd.randint(0, 32)]))
        if rnd.random() < 0.05:  # a field or the prefix length past its width
            i = rnd.randrange(len(key))
            width = t.keys[i] if i < len(t.keys) else t.keys[t.lpm]
            key[i] = rnd.choice([1 << width, (1 << 64) - 1, width + 1])
        return key

    def _value(self, width: int) -> int:
        rnd = self.rnd
        if rnd.random() < 0.03:
            return rnd.choice([1 << width, (1 << 64) - 1])
        return rnd.choice([0, 1, (1 << width) - 1, rnd.getrandbits(width)])

    def _interleavable(self) -> bytes:
        """A request whose effect does not depend on the others of its round: reads, DUMPs,
        HELLO, COUNTERS, unknown ops, and ADDs of random keys (absent, all but surely)."""
        rnd = self.rnd
        ts = self.model.control()
        if ts and rnd.random() < 0.4:
            t = rnd.choice(ts)
            key = [rnd.getrandbits(w) for w in t.keys] + ([t.keys[t.lpm]] if t.lpm >= 0 else [])
            return request(OP["add"], t.index, 1, key + [rnd.getrandbits(w) for w in t.values])
        table = rnd.choice(self.model.tables)
        return self._one([
            lambda: self._frame("read"), lambda: self._frame("dump"), lambda: request(OP["hello"], 0, 0),
            lambda: request(OP["counters"], 0, 0), lambda: request(rnd.choice([0, 10, 255]), table.index, 0),
            lambda: request(OP["windows"], 0, 0, [rnd.choice([0, 1, 1 << 32])]),
            lambda: request(OP["window_merge"], 0, rnd.choice([0, 1, 2]),
                            [rnd.choice([0, 7, 1 << 32]), rnd.getrandbits(64), rnd.getrandbits(64)]),
        ])

    def _cuts(self, frames: tuple[bytes, ...]) -> tuple[tuple[int, int], ...]:
        left = [len(f) for f in frames]
        cuts = []
        while any(left):
            c = self.rnd.choice([i for i, n in enumerate(left) if n])
            n = min(left[c], self.rnd.choice([1, 3, 8, 16, 64]))
            cuts.append((c, n))
            left[c] -= n
        return tuple(cuts)


def session_steps(model: Model, seed: int, count: int) -> list[Step]:
    """``count`` random steps.  They are made up front against ``model``'s shape (no entries
    yet), so a subset replays the same bytes; predictions come from the model as it runs."""
    shadow = model.empty()
    gen = Generator(shadow, random.Random(seed))
    steps = []
    for _ in range(count):
        s = gen.step()
        steps.append(s)
        for frame in s.frames:  # keep the shadow's keys in step with what OK writes would add
            if s.kind != "partial" and len(frame) >= REQ.size and predict(shadow, frame).status == OK \
                    and parse_request(frame)[0][2] in (*WRITES, OP["clear"]):
                apply(shadow, frame)
    return steps


# ---- running a session --------------------------------------------------------------------------


class Conn:
    def __init__(self, path: Path, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))

    def send(self, data: bytes) -> bool:
        """False if the server closed the connection first."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except TimeoutError as e:
                raise Failure("no reply to a whole request", f"waited {self.sock.gettimeout()} s") from e
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def reply(self) -> tuple[int, int, int, bytes] | None:
        """(status, op, index, body), None at the end of the stream."""
        head = self.recv_exact(REP.size)
        if head is None:
            return None
        magic, version, status, op, index, length = REP.unpack(head)
        if magic != b"NFCR" or version != 1:
            raise Failure("malformed reply", head.hex())
        body = self.recv_exact(length)
        if body is None:
            raise Failure("reply cut short", f"{length} body bytes announced")
        return status, op, index, body

    def closed(self) -> bool:
        """The server has closed this connection (nothing more to read, or a reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


class Session:
    """One program and the steps run against it (see the module's docstring for the oracle)."""

    def __init__(self, srv: ServerProcess) -> None:
        self.srv = srv
        self.model = Model.of(srv.control)
        self.main: Conn | None = None
        self.lingering: list[Conn] = []
        self.statuses: Counter[int] = Counter()  # of the replies checked

    def run(self, step: Step) -> None:
        if step.kind == "single":
            self._single(step.frames[0], step.fresh)
        elif step.kind == "partial":
            c = Conn(self.srv.socket)
            c.send(step.frames[0])
            (self.lingering.append if step.linger else lambda x: x.close())(c)
            if len(self.lingering) > 20:
                self.lingering.pop(0).close()
        else:
            self._interleaved(step)
        if self.srv.proc.poll() is not None:
            raise Failure("server exited", f"exit status {self.srv.proc.returncode}")

    def _single(self, frame: bytes, fresh: bool) -> None:
        if fresh or self.main is None:
            if self.main is not None:
                self.main.close()
            self.main = Conn(self.srv.socket, timeout=30)
        conn = self.main
        want = predict(self.model, frame)
        conn.send(frame)
        self._answer(conn, frame, want)
        if want.closes:
            if not conn.closed():
                raise Failure("connection open after BAD_REQUEST framing")
            conn.close()
            self.main = None
        self._after(frame, want)

    def _answer(self, conn: Conn, frame: bytes, want: Expect) -> None:
        got = conn.reply()
        op = REQ.unpack(frame[:REQ.size])[2]
        if got is None:
            raise Failure(f"no reply to op {op}", frame[:64].hex())
        status, rop, index, body = got
        self.statuses[status] += 1
        if status in want.also and rop == op:
            return
        if status != want.status or rop != op:
            raise Failure(f"op {op} status {status}, not {want.status}",
                          f"request {frame[:96].hex()}\nreply {body[:200]!r}")
        if status == OK and want.indices is not None and index not in want.indices:
            raise Failure(f"op {op} index {index}, not {sorted(want.indices)}")
        if status != OK and want.indices is not None and index not in want.indices:
            raise Failure(f"op {op} status {status} names record {index}, not {sorted(want.indices)}")
        if status == OK:
            self._body(frame, index, body)

    def _body(self, frame: bytes, index: int, body: bytes) -> None:
        (_m, _v, op, table, count, _length), words = parse_request(frame)
        if op == OP["read"]:
            t = self.model.tables[table]
            got = struct.unpack(f"<{len(body) // 8}Q", body)
            n = len(t.values)
            want = [t.entries[t.canonical(words[i * t.key_words:(i + 1) * t.key_words]) or ()] for i in range(count)]
            if [tuple(got[i * n:(i + 1) * n]) for i in range(count)] != want:
                raise Failure("READ returned other values than were written")
        elif op == OP["dump"]:
            t = self.model.tables[table]
            stride = t.key_words + len(t.values)
            if len(body) != 8 + index * stride * 8:
                raise Failure("DUMP reply length disagrees with its record count")
            recs = struct.unpack(f"<{len(body) // 8}Q", body)[1:]
            for i in range(index if not t.state else 0):
                r = recs[i * stride:(i + 1) * stride]
                if t.entries.get(tuple(r[:t.key_words])) != tuple(r[t.key_words:]):
                    raise Failure("DUMP returned an entry that was never written")

    def _after(self, frame: bytes, want: Expect) -> None:
        """An OK write is applied to the model; after any write the table must equal it."""
        head, _words = parse_request(frame)
        op, table = head[2], head[3]
        if not framing_ok(head) or op not in (*WRITES, OP["clear"]) or table >= len(self.model.tables):
            return
        t = self.model.tables[table]
        if t.state:
            return
        if want.status == OK:
            apply(self.model, frame)
        dumped = dict((r[:t.key_words], r[t.key_words:]) for r in self.srv.control.dump(t.name))
        if dumped != t.entries:
            what = "an OK" if want.status == OK else "a failed"
            raise Failure(f"{what} {['', '', 'ADD', 'MODIFY', 'DELETE', '', '', '', 'CLEAR'][op]} left the table "
                          "other than documented", f"{len(dumped)} entries, the model {len(t.entries)}")

    def _interleaved(self, step: Step) -> None:
        """Statuses are predicted before the round; replies are checked against the tables after
        it (its ADDs, of keys no other request of the round touches, may be served first)."""
        conns = [Conn(self.srv.socket, timeout=30) for _ in step.frames]
        wants = [predict(self.model, f) for f in step.frames]
        for frame, want in zip(step.frames, wants, strict=True):
            if want.status == OK and REQ.unpack(frame[:REQ.size])[2] == OP["add"]:
                apply(self.model, frame)
        sent = [0] * len(conns)
        for c, n in step.cuts:
            conns[c].send(step.frames[c][sent[c]:sent[c] + n])
            sent[c] += n
        for conn, frame, want in zip(conns, step.frames, wants, strict=True):
            self._answer(conn, frame, want)
            conn.close()

    def alive(self) -> None:
        """A fresh client is served: HELLO (by connecting) and COUNTERS."""
        c = Conn(self.srv.socket)
        c.send(request(OP["counters"], 0, 0))
        got = c.reply()
        c.close()
        if got is None or got[0] != OK:
            raise Failure("a fresh client is not served", repr(got))

    def close(self) -> None:
        for c in [*self.lingering, *([self.main] if self.main else [])]:
            c.close()


def _traffic(case: Case, folder: Path, seed: int) -> Path:
    """A pcap of fuzzer frames, each after its logical port (nf --tagged), replayed forever."""
    prog = case.placed.program
    fz = Fuzzer(prog, seed)
    frames = []
    for _ in range(200):
        pl = fz.rnd.choice(prog.pipelines)
        frames.append(TAG.pack(fz.port(pl)) + fz.packet(pl))
    path = folder / "traffic.pcap"
    write_pcap(path, frames)
    return path


@dataclass
class Outcome:
    """How a session went: its first failure (None: none), and the statuses of the replies checked."""

    failure: Failure | None
    statuses: Counter[int]


def run_session(case: Case, steps: Sequence[Step], work: Path, seed: int = 0) -> Outcome:
    """The steps against a fresh nf-san forwarding traffic."""
    work.mkdir(parents=True, exist_ok=True)
    vdev = f"net_pcap0,rx_pcap={_traffic(case, work, seed)},tx_pcap=/dev/null,infinite_rx=1"
    with sanitizer_options():
        srv = ServerProcess(case.binary, [vdev], extra=["--tagged", "--control-timeout-ms", str(TIMEOUT_MS)])
    failure: Failure | None = None
    session: Session | None = None
    i = 0
    try:
        session = Session(srv)
        for i, step in enumerate(steps):
            session.run(step)
            if i % 25 == 24:
                session.alive()
        session.alive()
    except Failure as f:
        failure = Failure(f.signature, f"at step {i} of {len(steps)} ({steps[i].kind})\n{f.detail}")
    except OSError as e:
        failure = Failure(f"socket error {type(e).__name__}", str(e))
    finally:
        if session is not None:
            session.close()
        srv.control.close()
        srv.stop()
    report = sanitizer_signature(srv.stderr)
    if report:
        failure = Failure(report, sanitizer_excerpt(srv.stderr))
    elif srv.proc.returncode != 0:
        failure = Failure(f"server exit {srv.proc.returncode}", tail(srv.stderr))
    return Outcome(failure, session.statuses if session is not None else Counter())


# ---- long mode ----------------------------------------------------------------------------------


def model_of(case: Case, work: Path) -> Model:
    """The program's tables (HELLO), from a short run of it."""
    work.mkdir(parents=True, exist_ok=True)
    srv = ServerProcess(case.binary, ["net_null0"])
    try:
        return Model.of(srv.control)
    finally:
        srv.control.close()
        srv.stop()


def minimise(case: Case, steps: list[Step], signature: str, work: Path, seconds: float, seed: int) -> list[Step]:
    deadline = time.monotonic() + seconds

    def fails(sub: list[Step]) -> bool:
        f = run_session(case, sub, work, seed).failure
        return f is not None and f.signature == signature
    return ddmin(steps, fails, deadline)


def save(out_dir: Path, case: Case, seed: int, steps: Sequence[Step], failure: Failure) -> Path:
    folder = out_dir / f"{case.example}.{case.target.replace('+', '-')}-" \
                       f"{hashlib.sha256(failure.signature.encode()).hexdigest()[:10]}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "steps.json").write_text(json.dumps({"example": case.example, "target": case.target, "seed": seed,
                                                   "signature": failure.signature,
                                                   "steps": [s.to_json() for s in steps]}, indent=1) + "\n")
    (folder / "README").write_text(f"{failure.signature}\n\n{case.label}, seed {seed}: {len(steps)} step(s) in "
                                   f"steps.json (the bytes each connection sends).\n"
                                   f"replay: .venv/bin/python -m tests.control_fuzz --replay {folder}\n\n"
                                   f"{failure.detail}\n")
    return folder


def replay(folder: Path) -> Failure | None:
    saved = json.loads((folder / "steps.json").read_text())
    with tempfile.TemporaryDirectory(prefix="nfc-replay-") as tmp:
        case = build_case(saved["example"], saved["target"], Path(tmp))
        steps = [Step.from_json(s) for s in saved["steps"]]
        return run_session(case, steps, Path(tmp) / "run", saved["seed"]).failure


@dataclass
class Summary:
    inputs: int = 0
    sessions: int = 0
    seconds: float = 0.0
    failures: dict[str, tuple[str, Path | None]] = field(default_factory=dict)

    def report(self) -> str:
        lines = [f"{self.inputs} inputs in {self.seconds:.0f} s: {self.sessions} sessions "
                 f"({self.inputs * 60 / max(self.seconds, 1):.0f} inputs/min)",
                 f"{len(self.failures)} distinct failures"]
        return "\n".join(lines + [f"  {sig}  [{label}]" + (f" -> {saved}" if saved else "")
                                  for sig, (label, saved) in sorted(self.failures.items())])


def fuzz(cases: Sequence[tuple[Case, Model]], seed: int, work: Path, deadline: float, steps: int = 300,
         out_dir: Path | None = None, minimise_s: float = 180.0, summary: Summary | None = None,
         progress: Callable[[str], None] = print) -> Summary:
    summary = summary or Summary()
    started = time.monotonic()
    n = 0
    while n < len(cases) or time.monotonic() < deadline:
        case, model = cases[n % len(cases)]
        s = seed + n
        plan = session_steps(model, s, steps)
        failure = run_session(case, plan, work, s).failure
        summary.sessions += 1
        summary.inputs += sum(len(st.frames) for st in plan)
        if failure is not None and failure.signature not in summary.failures:
            progress(f"{case.label}, seed {s}: {failure.signature}")
            saved = None
            if out_dir is not None:
                small = minimise(case, plan, failure.signature, work, minimise_s, s)
                saved = save(out_dir, case, s, small, failure)
            summary.failures[failure.signature] = (case.label, saved)
        n += 1
    summary.seconds += time.monotonic() - started
    return summary


def main(minutes: float, seed: int = 0, out_dir: str | Path = "build/fuzz/control_fuzz") -> int:
    """Sessions for ``minutes`` (the builds included) on every example that builds for
    ``--target dpdk``; each failure minimised and saved to ``out_dir``; exit status 1 if any."""
    deadline = time.monotonic() + minutes * 60
    started = time.monotonic()
    summary = Summary()
    with tempfile.TemporaryDirectory(prefix="nfc-control-fuzz-") as tmp:
        cases = []
        for example in EXAMPLES:
            try:
                case = build_case(example, "dpdk", Path(tmp))
            except NotBuilt as e:
                print(f"skipped {example} --target dpdk: {e}")
                continue
            cases.append((case, model_of(case, Path(tmp) / "hello")))
        summary.seconds = time.monotonic() - started
        fuzz(cases, seed, Path(tmp) / "run", deadline, out_dir=Path(out_dir), summary=summary,
             progress=lambda s: print(s, flush=True))
    print(summary.report(), flush=True)
    return 1 if summary.failures else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="build/fuzz/control_fuzz")
    ap.add_argument("--replay", type=Path, help="run a saved reproducer again (exit 1 if it still fails)")
    a = ap.parse_args()
    if a.replay is not None:
        f = replay(a.replay)
        print(f.signature if f else "passes", f.detail if f else "", sep="\n")
        sys.exit(1 if f else 0)
    sys.exit(main(a.minutes, a.seed, a.out))
