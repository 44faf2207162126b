"""``monotonic`` registers carried forward when buckets move between servers (runtime/steering.py).

A monotonic register's cell only goes forward: the IPsec gateway's ``sa_seq`` is an SA's
sequence number and AES-GCM nonce, and a tunnel moved to another GPN must not send a number
its old GPN sent (RFC 4303 §3.3.3; a GCM nonce used twice under one key gives the key away).
Before the switch steers the buckets away (``forward``), each cell they take along — the
moved entries' values of the plan's ``cells_from`` fields (the compiler refuses, E061, a
sharded build whose servers index a monotonic register otherwise) — is written on its new
owner as

    min(max(old owner's value, new owner's value) + margin, 2^w - 1)

so that the new owner starts beyond every number the old one sent or will send in the
``margin`` packets it may still take before the steering flips and its queue drains.  The
cells written are not in use on the new owner yet (its packets of those entries come after
the flip), so the write cannot race the data plane's read-modify-write.  A cell whose old
owner is dead (a fail-over) cannot be read: its start is 2^w − 1, which the program treats
as used up (the IPsec gateway drops ``sa_seq_exhausted``) until the control plane rekeys
(docs/examples.md; ``Move.must_rekey``).

After the drain (``check``), the old owner's last value is read again.  One past the new
owner's start means the old owner sent more than ``margin`` packets after the first read, so
numbers the new owner sends repeat some it sent: ``Move.overrun`` names those cells, which
the control plane must rekey at once.  This is detected, not prevented: the new owner is
live by then, and a write to a cell in use could be lost in, or wrap, the data plane's
read-modify-write.  The default margin (2^16) is 6 ms of one SA at 11 Mpps, the most one core
encrypted here (AES-GCM at 64 B, docs/server.md), against a read-to-flip of one P4Runtime write
(1-2.5 ms, docs/runtime.md): a control plane on faster cores or with slower switch writes
passes a larger margin.

The anti-replay windows go along too (``replay_check``'s state, shared by ``replay_check_esn``
and ``esn_high``): every window of each old owner is merged into the new owner's (WINDOW_MERGE:
a number seen by either counts as seen) before the steering flips, and again after the drain.
Merging every window, not only the moved tunnels' (the inbound SAs are not split, so which SA
number is whose is not known here), is safe: a number marked seen was received by the
gateway.  A dead old owner's windows died with it: its moved SAs' windows start from what the
new owner holds (``Move.lost`` keeps naming them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from compiler.manifest import ObjectInfo, ObjectPlacement, Plan
from runtime.control import ControlChannel
from runtime.errors import InvalidEntry, RuntimeApiError
from runtime.fleet import ServerFleet

__all__ = ["MARGIN", "WINDOW_STATE", "Carried", "Checked", "check", "forward", "monotonic_registers", "write_cells"]

MARGIN = 1 << 16  # numbers left between the old owner's last read and the new owner's start
_CHUNK = 1 << 14  # cells per OBJ_READ / OBJ_WRITE
# plan.json targets.shard.state's names of the windows' state (stdlib/ops.nfp's externs that share them)
WINDOW_STATE = frozenset({"replay_check state", "replay_check_esn state", "esn_high state"})


@dataclass
class Carried:
    """The cells one move carried forward: per register, (old owner, new owner) -> cell -> the
    new owner's start."""

    starts: dict[str, dict[tuple[int, int], dict[int, int]]] = field(default_factory=dict)
    windows: dict[tuple[int, int], int] = field(default_factory=dict)  # (old, new owner) -> windows merged
    window_state: tuple[str, ...] = ()  # the plan's names of the windows' state
    windows_lost: bool = False  # an old owner was dead, or died: its windows could not all be merged

    def count(self) -> dict[str, int]:
        """Per register, the cells carried; per name of the windows' state, the windows merged
        (unless some could not be)."""
        windows = {} if self.windows_lost else dict.fromkeys(self.window_state, sum(self.windows.values()))
        return {r: sum(len(c) for c in by.values()) for r, by in self.starts.items()} | windows


def monotonic_registers(plan: Plan) -> list[ObjectInfo]:
    return [o for o in plan.objects if o.monotonic and o.placement in (ObjectPlacement.SERVER, ObjectPlacement.BOTH)]


def forward(fleet: ServerFleet, plan: Plan, moves: Mapping[int, int], old: Mapping[int, int],
            moved: Mapping[str, Sequence[Sequence[int]]], margin: int = MARGIN) -> Carried:
    """Each cell the moving buckets take along, started on its new owner beyond its old owner's
    value (the module's doc); ``moved``: per split table, the moved entries' records (key
    fields, then values)."""
    if not isinstance(margin, int) or margin < 1:
        raise InvalidEntry(f"margin {margin!r}: at least 1 (the numbers left for the old owner's last packets)")
    carried = Carried(window_state=tuple(s for s in plan.shard.state if s in WINDOW_STATE) if plan.shard else ())
    if carried.window_state:
        for pair in {(old[b], to) for b, to in moves.items()}:
            _merge(fleet, pair, carried)
    for o in monotonic_registers(plan):
        top = (1 << o.width) - 1
        pairs = _cells(fleet, plan, o, moves, old, moved)
        starts = carried.starts.setdefault(o.name, {})
        for (frm, to), cell_set in pairs.items():
            cells = sorted(cell_set)
            before = dict(zip(cells, _read(fleet.channels[to], o.name, cells), strict=True))
            if frm in fleet.down:
                start = dict.fromkeys(cells, top)
            else:
                was = _read(fleet.channels[frm], o.name, cells)
                start = {c: min(max(v, before[c]) + margin, top) for c, v in zip(cells, was, strict=True)}
            write_cells(fleet.channels[to], o.name, {c: v for c, v in start.items() if v > before[c]})
            starts[(frm, to)] = start
    return carried


@dataclass
class Checked:
    """What ``check`` found, per register: the cells used up on their new owner (started at
    2^w − 1: the old owner dead, or its value within the margin of the top), and the cells
    whose old owner sent past the new owner's start (numbers repeated, or unknown: it died
    after ``forward``)."""

    must_rekey: dict[str, list[int]]
    overrun: dict[str, list[int]]


def check(fleet: ServerFleet, carried: Carried, plan: Plan) -> Checked:
    """After the drain: the windows merged again, and each carried cell's old owner read again
    (the module's doc).  Raises nothing: a server that stopped answering counts as dead."""
    used: dict[str, list[int]] = {}
    over: dict[str, list[int]] = {}
    for pair in list(carried.windows):
        try:
            _merge(fleet, pair, carried)
        except RuntimeApiError:
            carried.windows_lost = True
    for name, by in carried.starts.items():
        info = plan.object(name)
        assert info is not None
        top = (1 << info.width) - 1
        for (frm, _to), start in by.items():
            cells = sorted(start)
            used.setdefault(name, []).extend(c for c in cells if start[c] == top)
            try:  # a dead old owner's cells started at the top: nothing to compare
                last = _read(fleet.channels[frm], name, cells) if frm not in fleet.down else [0] * len(cells)
            except RuntimeApiError:
                last = [top] * len(cells)  # it died since forward: what it sent after the first read is unknown
            # the new owner's first number is start + 1: the old one's last may be start, not more
            over.setdefault(name, []).extend(c for c, v in zip(cells, last, strict=True) if v > start[c] < top)
    return Checked({n: sorted(set(c)) for n, c in used.items() if c}, {n: sorted(set(c)) for n, c in over.items() if c})


def _merge(fleet: ServerFleet, pair: tuple[int, int], carried: Carried) -> None:
    frm, to = pair
    if frm in fleet.down:
        carried.windows_lost = True
        return
    windows = fleet.channels[frm].windows()
    if to not in fleet.down:
        fleet.channels[to].window_merge(windows)
    carried.windows[pair] = len(windows)


def _cells(fleet: ServerFleet, plan: Plan, o: ObjectInfo, moves: Mapping[int, int], old: Mapping[int, int],
           moved: Mapping[str, Sequence[Sequence[int]]]) -> dict[tuple[int, int], set[int]]:
    """(old owner, new owner) -> the cells its moved buckets take along."""
    out: dict[tuple[int, int], set[int]] = {}
    for table, fld in o.cells_from:
        s = plan.table(table)
        at = fleet.tables[table].key_words + [v.name for v in s.values].index(fld)
        for r in moved.get(table, ()):
            b = fleet.bucket(table, r)
            if b in moves and 0 <= r[at] < o.size:
                out.setdefault((old[b], moves[b]), set()).add(r[at])
    return out


def _read(ch: ControlChannel, name: str, cells: Sequence[int]) -> list[int]:
    return [v[0] for i in range(0, len(cells), _CHUNK) for v in ch.object_read(name, cells[i:i + _CHUNK])]


def write_cells(ch: ControlChannel, name: str, values: Mapping[int, int]) -> None:
    """Register cells (cell -> value) on one server, in chunks."""
    records = [[c, v] for c, v in sorted(values.items())]
    for i in range(0, len(records), _CHUNK):
        ch.object_write(name, records[i:i + _CHUNK])
