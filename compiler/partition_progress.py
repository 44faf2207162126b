"""The partitioner's progress, for a person waiting on a long placement (issue 47, item 7).

A placement may take the partitioner's whole time limit (``--place-timeout``, 60 s by
default).  While ``partition`` runs, a timer thread reports every ``PROGRESS_EVERY_S``
seconds the time spent, what the search is doing and the best placement found so far; a
placement with a lower server cost found after the first report gets a line of its own.
A placement of a second or two stays as quiet as before (nothing before the first report),
and nothing at all is reported without a listener.

The listener reaches ``partition`` through ``reporting``, which ``compiler/pipeline.py``
wraps around its passes: the partition pass goes through the placement cache
(``compiler/place_cache.py``), whose signature its other callers share.

Before: ``[8/10] place stages ...``, silence for up to a minute, ``partition took 60.0 s``.
After, every 5 s (one line each)::

          placing: 10.0 s of 60 s, exact model (Z3 Optimize); best so far (Z3 Optimize):
          6 of 8 stages on the switch, server 6.2 ns/packet, 589,708 cached entries, 12 MAU stages
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType

__all__ = ["PROGRESS_EVERY_S", "Candidate", "PlaceProgress", "reporting"]

Report = Callable[[str], None]

PROGRESS_EVERY_S = 5.0  # between two reports of a long placement
_INDENT = "      "  # as compiler/pipeline.py's "partition took" line: progress, not a diagnostic

_REPORT: ContextVar[Report | None] = ContextVar("nfc_partition_progress", default=None)


@contextlib.contextmanager
def reporting(report: Report | None) -> Iterator[None]:
    """``partition`` calls inside this block report their progress to ``report`` (None: silent)."""
    token = _REPORT.set(report)
    try:
        yield
    finally:
        _REPORT.reset(token)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A placement found on the way: its sort key (smaller is better, objective by objective:
    ``compiler/partition.py``'s ``_key``), how a person reads it, and which step found it."""

    key: tuple[int, int, int, int]
    text: str  # "5 of 8 stages on the switch, server 6.2 ns/packet, 12 MAU stages"
    source: str  # "greedy start", "Z3 Optimize", ...


class PlaceProgress:
    """One placement's progress reports (a context manager: the timer thread runs inside it).

    ``offer`` the candidates as they are found and name the current step with ``step``; both
    are cheap, and no-ops without a listener.  ``offer`` may come from another thread than the
    timer's (Z3 calls back from inside ``check``): the state is under a lock."""

    def __init__(self, limit_s: float, report: Report | None = None, started: float | None = None) -> None:
        self.report = report if report is not None else _REPORT.get()
        self.limit_s = limit_s
        self.started = time.monotonic() if started is None else started
        self.every_s = PROGRESS_EVERY_S  # read when the placement starts: a test may shorten it
        self._lock = threading.Lock()
        self._best: Candidate | None = None
        self._step = "starting"
        self._reported_at: float | None = None  # the last line's time (None: no line yet)
        self._reported_server: int | None = None  # the server cost the last line showed
        self._improved_at: float | None = None  # the last "better placement" line's time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self.report is not None

    def __enter__(self) -> PlaceProgress:
        if self.report is not None:
            self._thread = threading.Thread(target=self._run, name="nfc-place-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def step(self, what: str) -> None:
        """The search is now doing ``what`` ("exact model (Z3 Optimize)")."""
        with self._lock:
            self._step = what

    def offer(self, key: tuple[int, int, int, int], describe: Callable[[], str], source: str) -> None:
        """A placement was found by ``source``, of sort ``key``; if it beats the best so far it
        takes its place (described by ``describe``, called only then), with a line of its own
        when its server cost is lower than the last line showed (after the first periodic
        line, at most five per period)."""
        if self.report is None:
            return
        with self._lock:
            if self._best is not None and self._best.key <= key:
                return
            cand = self._best = Candidate(key, describe(), source)
            now = time.monotonic()
            due = (self._reported_at is not None
                   and (self._improved_at is None or now - self._improved_at >= self.every_s / 5)
                   and (self._reported_server is None or cand.key[0] < self._reported_server))
            if due:
                self._improved_at = now
                self._say(now, f"better placement ({cand.source}): {cand.text}")

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            with self._lock:
                best = "none yet" if self._best is None else f"({self._best.source}): {self._best.text}"
                self._say(time.monotonic(), f"{self._step}; best so far {best}")

    def _say(self, now: float, what: str) -> None:
        """One line (the lock held): the time spent against the limit, then ``what``."""
        assert self.report is not None
        self._reported_at = now
        self._reported_server = None if self._best is None else self._best.key[0]
        self.report(f"{_INDENT}placing: {now - self.started:.1f} s of {self.limit_s:g} s, {what}")
