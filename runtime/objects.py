"""Registers, counters and meters through the runtime API: ``rt.register(name)``,
``rt.counter(name)``, ``rt.meter(name)``, each on the side ``plan.json`` says runs the stages
that use it (``objects``): the server program's control channel (OBJ_READ / OBJ_WRITE,
docs/control.md) or the switch's P4Runtime endpoint (``CounterEntry``, ``MeterEntry``).

Meter rates are RFC 2698's: CIR and PIR in bytes per second, CBS and PBS in bytes; a meter
index is green for every packet until its rates are set, and again after ``reset``.  Every
call checks its arguments first (index in range, a value within the register's width, rates
a trTCM runs: CIR > 0, PIR >= CIR, CBS > 0, PBS > 0, each below 2^40) and raises
:class:`InvalidEntry` having changed nothing.  A bulk write the device refuses half-way is
undone (the old values are read first and written back)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compiler.manifest import ObjectInfo, ObjectPlacement
from runtime.errors import ChannelError, InvalidEntry, RuntimeApiError

if TYPE_CHECKING:
    from runtime.api import Runtime

__all__ = ["Counter", "CounterValue", "Meter", "MeterRates", "Register"]

_CHUNK = 1 << 16  # meter indices read per request when a whole meter is compared with the goal state
_LIMIT = 1 << 40  # rates and bursts: 1 TB/s is beyond every port; rte_meter's arithmetic stays exact


@dataclass(frozen=True)
class MeterRates:
    """A trTCM's rates (bytes per second) and bursts (bytes), RFC 2698 §2."""

    cir: int
    cbs: int
    pir: int
    pbs: int

    def check(self, what: str) -> None:
        ok = all(isinstance(v, int) and 0 < v < _LIMIT for v in (self.cir, self.cbs, self.pir, self.pbs))
        if not ok or self.pir < self.cir:
            raise InvalidEntry(f"{what}: rates need 0 < cir <= pir and cbs, pbs > 0 (integers below 2^40), "
                               f"not {self}")


@dataclass(frozen=True)
class CounterValue:
    packets: int
    bytes: int


class _Object:
    kind = ""

    def __init__(self, rt: Runtime, info: ObjectInfo) -> None:
        self.rt = rt
        self.info = info

    @property
    def name(self) -> str:
        return self.info.name

    def _sides(self) -> list[_Side]:
        """The sides that keep this object (both: each has a copy)."""
        pl = self.info.placement
        if pl is ObjectPlacement.UNUSED:
            raise InvalidEntry(f"{self.kind} {self.name} ({self.info.source}) is used by no stage: no side keeps it")
        out: list[_Side] = []
        for label in self._side_names():
            side = self._side(label)
            if side is None:
                how = "a P4Runtime endpoint" if label == "switch" else "a server control socket"
                raise ChannelError(f"{self.kind} {self.name} is on the {pl.value}: connect {how}")
            out.append(side)
        return out

    def _side_names(self) -> list[str]:
        """The sides ``placement`` names, switch first."""
        return [n for n in ("switch", "server") if n in self.info.placement.value]

    def _side(self, label: str) -> _Side | None:
        """One side's access to the object (None: that side is not connected)."""
        if label == "switch":
            sw = self.rt.switch
            return None if sw is None else _Side(lambda idx: sw.object_read(self.kind, self.name, idx),
                                                 lambda recs: _first_error(sw.object_write(self.kind, self.name, recs)))
        srv = self.rt.server
        return None if srv is None else _Side(lambda idx: srv.object_read(self.name, idx),
                                              lambda recs: srv.object_write(self.name, recs))

    def _indices(self, indices: Sequence[int]) -> list[int]:
        for i in indices:
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < self.info.size:
                raise InvalidEntry(f"{self.kind} {self.name}: index {i!r} is outside 0..{self.info.size - 1}")
        return list(indices)

    def _read(self, indices: Sequence[int]) -> list[list[tuple[int, ...]]]:
        """Per side, per index: the words the side reads back."""
        idx = self._indices(indices)
        return [side.read(idx) for side in self._sides()]

    def _write(self, records: Sequence[tuple[int, ...]]) -> None:
        """All or nothing: when a side refuses, it and the sides written before it get their
        old values back."""
        done: list[tuple[_Side, list[tuple[int, ...]]]] = []
        idx = [r[0] for r in records]
        try:
            for side in self._sides():
                done.append((side, [(i, *self._as_written(w)) for i, w in zip(idx, side.read(idx), strict=True)]))
                side.write(records)
        except RuntimeApiError:
            for side, old in reversed(done):
                side.write(old)
            raise

    @staticmethod
    def _as_written(words: tuple[int, ...]) -> tuple[int, ...]:
        """What a read returned, as a write takes it back."""
        return words


@dataclass(frozen=True)
class _Side:
    read: Callable[[list[int]], list[tuple[int, ...]]]
    write: Callable[[Sequence[tuple[int, ...]]], None]


def _first_error(errors: list[RuntimeApiError | None]) -> None:
    err = next((e for e in errors if e is not None), None)
    if err is not None:  # the updates before it stuck: the caller puts the old values back
        raise err


class Register(_Object):
    """``register r: bit<W>[N]``: read and write index by index."""

    kind = "register"

    def read(self, index: int) -> int:
        return self.read_many([index])[0]

    def read_many(self, indices: Sequence[int]) -> list[int]:
        (side,) = self._read(indices) if self.info.placement is not ObjectPlacement.BOTH else self._both()
        return [w[0] for w in side]

    def write(self, index: int, value: int) -> None:
        self.write_many({index: value})

    def write_many(self, values: dict[int, int]) -> None:
        self._indices(list(values))
        for i, v in values.items():
            if not isinstance(v, int) or not 0 <= v < 1 << self.info.width:
                raise InvalidEntry(f"register {self.name}[{i}]: {v!r} is not a number of at most "
                                   f"{self.info.width} bits")
        if self.info.placement is ObjectPlacement.BOTH:
            self._both()
        self._write([(i, v) for i, v in values.items()])

    def _both(self) -> list[list[tuple[int, ...]]]:
        raise InvalidEntry(f"register {self.name} is used on the switch and on the server: each keeps a copy "
                           "of its own, and neither is the register")


class Counter(_Object):
    """``counter c[N]``: packets and bytes per index (both sides' counts added, when stages on
    both sides count)."""

    kind = "counter"

    def read(self, index: int) -> CounterValue:
        return self.read_many([index])[0]

    def read_many(self, indices: Sequence[int]) -> list[CounterValue]:
        sides = self._read(indices)
        return [CounterValue(sum(s[k][0] for s in sides), sum(s[k][1] for s in sides)) for k in range(len(indices))]

    def reset(self, index: int) -> None:
        self._write([(self._indices([index])[0], 0, 0)])


class Meter(_Object):
    """``meter m[N]``: an RFC 2698 trTCM per index, green until its rates are set."""

    kind = "meter"

    def set(self, index: int, rates: MeterRates) -> None:
        self.set_many({index: rates})

    def set_many(self, rates: dict[int, MeterRates]) -> None:
        self._indices(list(rates))
        for i, r in rates.items():
            if not isinstance(r, MeterRates):
                raise InvalidEntry(f"meter {self.name}[{i}]: give MeterRates(cir, cbs, pir, pbs), not {r!r}")
            r.check(f"meter {self.name}[{i}]")
        with self.rt.writing:  # the write and its record, one step for a recovery (Runtime.writing)
            self._write([(i, r.cir, r.cbs, r.pir, r.pbs) for i, r in rates.items()])
            self._remember({i: (r.cir, r.cbs, r.pir, r.pbs) for i, r in rates.items()})

    def reset(self, index: int) -> None:
        """Back to unconfigured: every packet green."""
        with self.rt.writing:
            self._write([(self._indices([index])[0], 0, 0, 0, 0)])
            self._remember({index: None})

    def _remember(self, rates: dict[int, tuple[int, int, int, int] | None]) -> None:
        """A meter's configuration is goal state: ``reconcile`` sets it again after a restart."""
        if self.rt.goal is not None:
            self.rt.goal.set_meters(self.name, rates)

    def repair(self, sides: Collection[str] = ("server", "switch")) -> dict[str, int]:
        """Every index of each connected side of ``sides`` that keeps this meter brought to
        the goal state's rates (unconfigured where the goal has none); per side, the indices
        written."""
        assert self.rt.goal is not None
        want = self.rt.goal.meters(self.name)
        out: dict[str, int] = {}
        for label in [n for n in self._side_names() if n in sides]:
            side = self._side(label)
            if side is None:
                continue
            out[label] = 0
            for start in range(0, self.info.size, _CHUNK):  # a read of every index, a chunk at a time
                part = list(range(start, min(start + _CHUNK, self.info.size)))
                fix = [(i, *want.get(i, (0, 0, 0, 0))) for i, w in zip(part, side.read(part), strict=True)
                       if (tuple(w[1:5]) if w[0] else None) != want.get(i)]
                if fix:
                    side.write(fix)
                out[label] += len(fix)
        return out

    def read(self, index: int) -> MeterRates | None:
        """The rates set (None: unconfigured).  Both sides keep a copy when stages on both use
        the meter: they are set together, and the server's is returned."""
        words = self._read([index])[-1][0]
        return MeterRates(words[1], words[2], words[3], words[4]) if words[0] else None

    @staticmethod
    def _as_written(words: tuple[int, ...]) -> tuple[int, ...]:
        return words[1:] if words[0] else (0, 0, 0, 0)
