"""The cache manager (issue 14 item 2): keeps a switch cache filled with what the traffic
hits, not with what was added first.

One ``step`` of a cached table:

1. **Evict the idle.** The switch keeps each cached entry's time since its last hit
   (``SwitchClient.idle``: TNA ``idle_timeout``, P4Runtime ``time_since_last_hit``).  How idle
   an entry may be depends on how full the cache is — Bluebird's Table 2 (seed 003 §4.4):
   at 85 / 90 / 95 % occupancy, entries idle over 1100 / 300 / 100 s go; below 85 % none does.
   An LPM prefix leaves with every cached prefix covering it (``CachePolicy.demote``).
2. **Promote the hot.** The server counts its hits of the table (control channel HITS): each
   is a switch miss.  The manager adds them to each entry's heat, which halves every
   ``half_life`` seconds; the hottest entries go into the room there is, first; an LPM
   prefix goes in with every server prefix inside it that is not cached yet, as one unit of
   at most ``unit`` entries, so it hijacks none (``CachePolicy.promote``; a prefix with a
   bigger unit, or one that does not fit the room left, is counted as ``blocked``).
3. **Replace the colder.** Idle eviction alone does not converge to the hottest entries:
   a lukewarm entry cached early is hit often enough never to go idle, while a hotter one
   waits on the server for room.  So each read of the cached entries' idle times (a full
   cache is read at every eviction step, whatever its occupancy limit) also tells which were
   hit since the read before — Bluebird's hit bits (§4.4), sampled — and each cached entry
   keeps the decayed share of reads that found it hit.  From that share ``f`` over reads
   ``gap`` seconds apart its packet rate is estimated as ``-ln(1 - f) / gap`` (a Poisson
   stream hits an interval with probability ``1 - e^(-rate gap)``), a server entry's from its
   heat (``heat · ln 2 / half_life`` hits/s); a server entry more than ``replace`` times as
   hot as the coldest cached entry takes its place, at most ``swaps`` a step.  A cached entry
   is taken to be hit at least once per half-life (reads that found it unhit are little
   evidence), so under uniform traffic a server entry hit once does not displace one.
4. Write both to the switch in a safe order (``Runtime.apply_cache``: evictions shortest
   prefix first, then promotions longest first; an entry is on the server before it is in
   the cache).

Data-plane state (seed 002's CGN mappings, "active flows pushed to the switch") is cached the
same way, with the server's timers kept in step (``Runtime.apply_cache`` pins what goes to the
switch; nfc_state.h): every step reads the whole cache's idle times, tells the server which
cached entries the switch hit since the read before and when (TOUCH: the server restarts the
timers those hits would have, the entry's own and the mapping's other half), and evicts the
entries whose server timer has run out (OVERDUE) — off the switch first, then unpinned, so the
server frees a mapping (and its port) only once no switch entry translates with it.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass

from runtime.api import Runtime
from runtime.cache import CacheDecision, CachePolicy, Key
from runtime.control import Hits
from runtime.errors import ChannelError, RuntimeApiError
from runtime.p4runtime import SwitchUpdate
from runtime.reconcile import Repair

__all__ = ["BLUEBIRD", "CacheLost", "CacheManager", "EvictionStopped", "IdleLimits", "Managers", "StepReport"]


@dataclass(frozen=True)
class IdleLimits:
    """Per occupancy (a fraction of the cache's capacity), how long an entry may stay idle:
    ``steps`` (occupancy at least, seconds), the fullest first."""

    steps: tuple[tuple[float, float], ...]

    def limit(self, occupancy: float) -> float | None:
        """Seconds of idleness past which an entry is evicted; None: the cache keeps everything."""
        return next((seconds for at_least, seconds in self.steps if occupancy >= at_least), None)


BLUEBIRD = IdleLimits(((0.95, 100.0), (0.90, 300.0), (0.85, 1100.0)))  # seed 003, Table 2


@dataclass(frozen=True)
class StepReport:
    evicted: int  # entries taken out of the switch cache (LPM: with their covering prefixes)
    promoted: int  # server entries put into it
    blocked: int  # hot LPM prefixes left out: the unit of them and what is inside them is too big
    server_hits: int  # the switch misses the server counted since the last step
    lost: int  # hits the server could not count (HITS: not kept, and lost in its logs since the last step)
    replaced: int = 0  # cached entries that made room for a server entry at least ``replace`` times hotter


class CacheManager:
    """Manages one cached table of a ``Runtime`` connected to both the switch and the server."""

    def __init__(self, runtime: Runtime, table: str, limits: IdleLimits | None = None, half_life: float = 1.0,
                 unit: int = 64, notify: bool = False, replace: float = 2.0, swaps: int = 64) -> None:
        """``half_life``: seconds after which a server hit counts half when hot entries are
        ranked (the counts of one step are few; the ranking remembers the steps before);
        ``limits``: the table's ``idle_limits`` (plan.json) if not given, else Bluebird's;
        ``unit``: most entries an LPM prefix takes into the cache with it (itself and the
        server prefixes inside it); ``notify``: the switch reports idle entries (P4Runtime
        idle-timeout notifications, each cache entry written with the lowest limit as its
        ``idle_timeout_ns``) and eviction reads the idle time of those only, not of the whole
        cache at every step (then nothing is replaced: the hits of the cached entries are not
        read); ``replace``: how many times hotter than the coldest cached entry a server entry
        must be to take its place (0: never), ``swaps``: most such replacements a step."""
        self.rt = runtime
        self.table = table
        self.schema = runtime.schemas[table]
        if not self.schema.cached:
            raise ValueError(f"table {table} is not a switch cache")
        self.limits = limits or (IdleLimits(self.schema.idle_limits) if self.schema.idle_limits else BLUEBIRD)
        self.half_life = half_life
        self.unit = unit
        # server hits of entries not cached, each weighted 2^((t - _t0) / half_life) at its time t:
        # ranked as the decayed counts are, without touching every entry at every step
        self.heat: dict[Key, float] = {}
        self._t0 = time.monotonic()
        self._lost_in_logs = 0
        self.replace = replace
        self.swaps = swaps
        # per cached entry, the decayed share of idle reads that found it hit since the read before
        self.hit_share: dict[Key, float] = {}
        self._coldest: list[tuple[float, Key]] = []  # the lowest shares of the last read, lowest first
        self._read_at: tuple[float, float] | None = None  # when the last read was sent, and when it returned
        self._read_gap = 0.0
        self.candidates: dict[Key, tuple[dict[str, tuple[int, int | None]], int]] | None = None
        self.state = self.schema.state  # data-plane state: the server's timers kept in step
        self.touched = 0  # cached state entries whose switch hits the server was told of
        # the table's lock (Runtime.cache_locks): over the policy, this manager's own state and
        # the writes, one at a time — the manager's steps (Managers promotes and evicts in
        # threads of their own; the slow reads are made without it), the runtime's own writes
        # to the table, reconcile
        self.lock = runtime.cache_locks[table]
        self._fresh: set[Key] = set()  # promoted since the eviction step's read was sent
        self._promotion_waits = threading.Event()  # a promotion step waits for the lock: evictions let it in
        self._seen = Counter(runtime.restarts)  # the runtime's repaired restarts this manager has seen
        self._generation = 0  # restarts this manager has adopted: an eviction read of an earlier one is dropped
        self.put_back = 0  # entries the switch lost, written again (a runtime without goal state)
        if notify and self.state:
            raise ValueError(f"{table} is data-plane state: every step reads the whole cache (its hits restart "
                             "the server's timers), so idle notifications do not apply")
        if self.state and runtime.switch is not None and runtime.server is not None:
            self._adopt_state()
        if notify and self.limits.steps and runtime.switch is not None:
            self._notify(min(seconds for _at, seconds in self.limits.steps))

    @property
    def policy(self) -> CachePolicy:
        """The table's cache policy: the runtime's (reconcile may replace it)."""
        return self.rt.caches[self.table]

    def step(self, evict: bool = True) -> StepReport:
        """Evict the idle (unless ``evict`` is false: that reads every cached entry's idle time
        from the switch, O(cache); promotion alone is O(hits)), then promote the hot."""
        out = self.evict_step() if evict else NOTHING
        into = self.promote_step()
        return StepReport(*(getattr(out, f) + getattr(into, f) for f in _FIELDS))

    def evict_step(self) -> StepReport:
        """Evict the idle.  When every cached entry's idle time is read (no idle notifications),
        the read, and what it tells of the entries' hits, is made without ``lock``, so that
        promotions go on meanwhile (``Managers`` runs them in a thread of their own: a read of
        100,000 entries takes a second); the evictions are then decided and written under it
        ``EVICT_CHUNK`` entries at a time (data-plane state: all at once, with the server's
        timers), the policy and the switch alike at every release.  An entry promoted since
        the read was sent is not evicted by it (the idle time read is its last stay's)."""
        if self.rt.switch is None:
            return NOTHING
        if self.candidates is not None:
            with self.lock:
                self._sync()
                decisions = self._evict_notified()
                self.rt.apply_cache(self.table, decisions)
            return dataclasses.replace(NOTHING, evicted=sum(len(d.evict) for d in decisions))
        with self.lock:
            self._sync()
            generation = self._generation
            limit = self.limits.limit(len(self.policy.cached) / max(1, self.policy.capacity))
            if limit is None and len(self.policy.cached) < self.policy.capacity and not self.state:
                return NOTHING
            self._fresh = set()
        sent = time.monotonic()
        # a hit after the last read's sending may not have shown in it: replayed (again), as a
        # timer only moves later (the rates use the stricter window: _hit_shares)
        since = (sent - self._read_at[0]) * 1e9 if self._read_at is not None else math.inf
        idle = [(self._key(m), idle_ns) for m, _p, idle_ns in self.rt.switch.idle(self.table)]
        shares = self._hit_shares(idle, sent, time.monotonic())
        with self.lock:
            self._sync()
            if self._generation != generation:  # a restart was repaired meanwhile: the read is of the switch before
                return NOTHING
            self._check_kept(idle)
            self.hit_share, self._read_gap, self._coldest, self._read_at = shares
            if self.state:
                decisions = self._keep_state_in_step(idle, since)
                self.rt.apply_cache(self.table, decisions)
                return dataclasses.replace(NOTHING, evicted=sum(len(d.evict) for d in decisions))
        evicted = 0
        over = [k for k, idle_ns in idle if idle_ns > limit * 1e9] if limit is not None else []
        for start in range(0, len(over), EVICT_CHUNK):
            with self.lock:
                self._sync()
                if self._generation != generation:
                    break
                keys = over[start:start + EVICT_CHUNK]
                decisions = [self.policy.demote(k) for k in keys if k in self.policy.cached and k not in self._fresh]
                try:
                    if decisions:
                        self.rt.apply_cache(self.table, decisions)
                except RuntimeApiError as e:  # the chunks before it were written
                    raise EvictionStopped(str(e), dataclasses.replace(NOTHING, evicted=evicted)) from e
                evicted += sum(len(d.evict) for d in decisions)
            self._let_promotion_in()
        return dataclasses.replace(NOTHING, evicted=evicted)

    def _let_promotion_in(self) -> None:
        """Between two chunks of evictions: a promotion step waiting for ``lock`` takes it
        first.  A lock released is otherwise taken again by this thread, which holds the
        interpreter, before the waiter wakes: at 1M entries two promotions of 20 waited
        0.1-0.17 s (bench_cache --skews none), behind the first step's 10,000 evictions."""
        deadline = time.monotonic() + 0.05
        while self._promotion_waits.is_set() and time.monotonic() < deadline:
            time.sleep(0.0001)

    def promote_step(self) -> StepReport:
        """The server's hits since the last step (HITS, without ``lock``), then under it the
        hottest server entries promoted into the room there is, or in place of colder cached
        ones, and written to the switch."""
        hits = self.rt.server.hits(self.table) if self.rt.server is not None else None
        self._promotion_waits.set()
        try:
            with self.lock:
                self._promotion_waits.clear()
                self._sync()
                return self._promote(hits)
        finally:
            self._promotion_waits.clear()

    def _promote(self, hits: Hits | None) -> StepReport:
        decisions: list[CacheDecision] = []
        weight = self._weight()
        for fields, n in (hits.counts.items() if hits is not None else ()):
            key = self.policy.match(fields)
            if key is not None and key not in self.policy.cached:
                self.heat[key] = self.heat.get(key, 0.0) + n * weight
        blocked = 0
        for key, _n in sorted(self.heat.items(), key=lambda kv: kv[1], reverse=True):
            if len(self.policy.cached) >= self.policy.capacity:
                break
            d = self.policy.promote(key, self.unit)
            if d is None:
                blocked += 1
            else:
                decisions.append(d)
                del self.heat[key]
        replaced = self._replace_colder(decisions, weight)
        evicted = sum(len(d.evict) for d in decisions)
        self.rt.apply_cache(self.table, decisions)
        self._fresh.update(k for d in decisions for k in d.install)
        lost = 0
        if hits is not None:
            lost = hits.not_kept + hits.lost_in_logs - self._lost_in_logs
            self._lost_in_logs = hits.lost_in_logs
        return StepReport(evicted, sum(len(d.install) for d in decisions), blocked,
                          sum(hits.counts.values()) if hits is not None else 0, lost, replaced)

    def _replace_colder(self, decisions: list[CacheDecision], weight: float) -> int:
        """Once the cache is full: the hottest server entries, each in place of the coldest cached
        entry while it is more than ``replace`` times as hot (3. in the module's doc)."""
        coldest = self._coldest
        if not self.replace or not self.heat or not coldest or self._read_gap <= 0.0 or \
                len(self.policy.cached) < self.policy.capacity:
            return 0
        per_hit = math.log(2.0) / self.half_life / weight  # a server entry's heat -> hits/s
        done = 0
        for key, heat in sorted(self.heat.items(), key=lambda kv: kv[1], reverse=True):
            while coldest and coldest[0][1] not in self.policy.cached:  # gone with a unit demoted before
                coldest.pop(0)
            if done >= self.swaps or not coldest:
                break
            share, victim = coldest[0]
            cold = max(-math.log(1.0 - min(share, 0.999)) / self._read_gap, 1.0 / self.half_life)
            if heat * per_hit <= self.replace * cold:
                break  # the hottest left is not hot enough for the coldest cached: nor is the rest
            out = self.policy.demote(victim)
            into = self.policy.promote(key, self.unit)
            if into is None:  # its unit does not fit the room made: the victim stays
                back = self.policy.promote(victim, self.unit)
                decisions += [out, back] if back is not None else [out]
                coldest.pop(0)
                continue
            decisions += [out, into]
            del self.heat[key]
            coldest.pop(0)
            done += 1
        return done

    def _check_kept(self, idle: list[tuple[Key, int]]) -> None:
        """Under ``lock``, after a read of every cached entry's idle time: CacheLost if the
        switch lacks entries the policy has cached there (it restarted, or lost them).  Only
        a read shorter than the cache is looked into (O(cache) then), and an entry it lacks
        counts only if a read of it now, under the lock, does not find it either (it may
        have been cached after the read was sent, by a promotion or the runtime's own add).
        A runtime without goal state has nothing to recover from: the lost entries are
        written to the switch again, with the server's values (``put_back``)."""
        policy = self.policy
        if len(idle) >= len(policy.cached) - len(self._fresh):
            return
        seen = {k for k, _ in idle}
        suspects = [k for k in policy.cached if k not in seen and k not in self._fresh]
        missing = self.rt.switch_lacks(self.table, suspects) if suspects else []
        if missing and self.rt.goal is None:  # nothing to reconcile from: the server's copies put back
            try:
                self.rt.apply_cache(self.table, [CacheDecision(install=missing)])
            except RuntimeApiError:  # (apply_cache forgot them) still cached: tried again at the next read
                policy.revert(CacheDecision(evict=missing))
                raise
            self.put_back += len(missing)
        elif missing:
            raise CacheLost(f"the switch lacks {len(missing)} of the {len(policy.cached)} entries cached in "
                            f"{self.table} (it restarted, or lost them)")

    def _hit_shares(self, idle: list[tuple[Key, int]], sent: float, returned: float,
                    ) -> tuple[dict[Key, float], float, list[tuple[float, Key]], tuple[float, float]]:
        """From one read of every cached entry's idle time, sent at ``sent`` and returned at
        ``returned``: which were hit since the read before (their time since the last hit,
        taken at the switch some time after ``sent``, is shorter than the time from the return
        of that read to ``sent``: no entry last hit before it counts, however long either read
        took); the new ``hit_share``, ``_read_gap``, ``_coldest`` and ``_read_at``.  Reads what
        only the eviction step writes, so it needs no lock."""
        if self._read_at is None:
            return self.hit_share, self._read_gap, self._coldest, (sent, returned)
        gap = sent - self._read_at[0]
        since = (sent - self._read_at[1]) * 1e9
        keep = 2.0 ** (-gap / self.half_life)
        share: dict[Key, float] = {}
        for key, idle_ns in idle:
            hit = 1.0 if idle_ns < since else 0.0
            before = self.hit_share.get(key)
            share[key] = hit if before is None else before * keep + hit * (1.0 - keep)
        # the victims a step may take, and as many again for those gone by then: O(cache log swaps)
        return share, gap, heapq.nsmallest(4 * self.swaps, ((f, k) for k, f in share.items())), (sent, returned)

    def _weight(self) -> float:
        """A hit's weight now.  Past 8 half-lives the heat is rescaled to weight 1, and what has
        decayed below half a hit is forgotten: O(heat) once per 8 half-lives, not per step."""
        weight = float(2.0 ** ((time.monotonic() - self._t0) / self.half_life))
        if weight < 256.0:
            return weight
        self.heat = {k: v / weight for k, v in self.heat.items() if v / weight >= 0.5}
        self._t0 = time.monotonic()
        return 1.0

    def _notify(self, seconds: float) -> None:
        """From now on every cache entry is written with ``seconds`` as its idle timeout, the
        ones already there rewritten so (once, O(cache)); the switch reports each when idle."""
        assert self.rt.switch is not None
        self.rt.idle_notify[self.table] = max(1, int(seconds * 1e9))
        self.candidates = {}
        there = [SwitchUpdate("modify", self.table, m, v, p, self.rt.idle_notify[self.table])
                 for m, v, p in self.rt.switch.read(self.table)]
        errors = self.rt.switch.write(there) if there else []
        bad = next((e for e in errors if e is not None), None)
        if bad is not None:
            raise bad

    def _evict_notified(self) -> list[CacheDecision]:
        """The evictions of a cache with idle notifications: of the entries the switch reported."""
        assert self.rt.switch is not None and self.candidates is not None
        candidates = self.candidates
        limit = self.limits.limit(len(self.policy.cached) / max(1, self.policy.capacity))
        for table, match, prio in self.rt.switch.idle_expired():
            if table == self.table:
                candidates[self._key(match)] = (match, prio)
        if limit is None or not candidates:
            return []
        out: list[CacheDecision] = []
        seen: set[Key] = set()
        for match, _prio, idle_ns in self.rt.switch.idle(self.table, list(candidates.values())):
            key = self._key(match)
            seen.add(key)
            if idle_ns > limit * 1e9 and key in self.policy.cached:
                out.append(self.policy.demote(key))
            if idle_ns < self.rt.idle_notify[self.table] or key not in self.policy.cached:
                candidates.pop(key, None)  # hit since it was reported (it will be again), or gone
        for key in set(candidates) - seen:  # no longer on the switch
            del candidates[key]
        return out

    def _sync(self) -> bool:
        """Under ``lock``: has the runtime repaired a restart since this manager last looked
        (``Runtime.restarts``: a ``recover`` or a ``reconcile``, by the managers or anyone)?
        If so, ``restarted`` with the sides it repaired."""
        now = self.rt.restarts
        if now == self._seen:  # (every step: no copy)
            return False
        seen = Counter(now)
        self.restarted({side for side, n in seen.items() if n != self._seen.get(side, 0)})
        self._seen = seen  # (a restarted that failed is tried again at the next step)
        return True

    def restarted(self, sides: Collection[str] = ("server", "switch")) -> None:
        """After a restart of ``sides`` was repaired: what the manager learnt from the
        switch's reads starts again (the switch's), and data-plane state is adopted afresh
        (either's: a switch that restarted holds none of it; one whose server restarted
        holds mappings the server no longer has, which ``_adopt_state`` takes off it)."""
        with self.lock:
            self._generation += 1
            if "switch" in sides:
                self.hit_share, self._coldest, self._read_at, self._read_gap = {}, [], None, 0.0
                self._fresh = set()
                if self.candidates is not None:
                    self.candidates = {}  # reconcile wrote the entries with their idle timeouts: reported anew
            if self.state and self.rt.switch is not None and self.rt.server is not None:
                old = self.policy
                self.rt.caches[self.table] = old.empty()
                try:
                    self._adopt_state()
                except BaseException:  # the old policy back: its entries stay known, evicted in time
                    self.rt.caches[self.table] = old
                    raise

    def _adopt_state(self) -> None:
        """What the switch already holds of a state cache (the manager of a runtime that
        restarted left it there): an entry the server still has, with the same values, is
        pinned again (a pin is a flag: re-pinning what the last manager pinned changes nothing)
        and kept; the others are taken off the switch, then unpinned (the server's entry,
        if any, is not what the switch translates with: a server that restarted)."""
        assert self.rt.switch is not None and self.rt.server is not None
        there = list(self.rt.switch.read(self.table))
        if not there:
            return
        keys = [self._key(m) for m, _v, _p in there]
        names = [v.name for v in self.schema.values]
        values = self.rt.server.pin(self.table, keys)
        stale = [k for (_m, v, _p), k, now in zip(there, keys, values, strict=True)
                 if now is None or tuple(v[n] for n in names) != now or self.policy.promote(k) is None]
        if stale:
            try:
                self.rt.apply_cache(self.table, [CacheDecision(evict=stale)])
            except RuntimeApiError:  # still on the switch: they stay pinned, and out of the policy
                for k in stale:
                    self.policy.demote(k)
                raise

    def _keep_state_in_step(self, keyed: list[tuple[Key, int]], since: float) -> list[CacheDecision]:
        """Data-plane state: the switch hits since the last read (``since`` ns before this
        one) told to the server, then off the switch what has expired there (and, past the
        occupancy's idle limit, what idles)."""
        server = self.rt.server
        assert server is not None
        hit = [(k, idle_ns) for k, idle_ns in keyed if idle_ns < since]
        if hit:
            self.touched += server.touch(self.table, hit)
        limit = self.limits.limit(len(self.policy.cached) / max(1, self.policy.capacity))
        overdue = server.overdue(self.table)
        out = [self.policy.demote(k) for k in overdue if k in self.policy.cached]
        strays = [k for k in overdue if k not in self.policy.cached]
        if strays:  # pinned with no switch entry behind them (a runtime stopped between pin and write)
            server.unpin(self.table, strays)
        if limit is not None:
            out += [self.policy.demote(k) for k, idle_ns in keyed if idle_ns > limit * 1e9 and k in self.policy.cached]
        return out

    def _key(self, match: dict[str, tuple[int, int | None]]) -> Key:
        """A switch entry's match as the policy's key (an LPM table: its prefix length last)."""
        s = self.schema
        key = tuple(match[k.name][0] for k in s.keys)
        if s.lpm is None:
            return key
        plen = match[s.keys[s.lpm].name][1]
        return (*key, s.keys[s.lpm].width if plen is None else plen)


class Managers:
    """Cache managers stepping in two threads of their own: every ``step_s`` a promotion step
    (HITS, then the writes), and every ``evict_s`` an eviction step (a read of each cache's
    idle times; for data-plane state, the step that keeps the server's timers in step), so
    that a promotion never waits for a read of the whole cache.  ``with`` starts and stops
    them.  A manager whose step fails is counted and told to ``on_error`` and steps again next
    time (the others go on): a gateway's caches are not left unmanaged by one refused write.
    Running sums only, so a long run does not grow.

    A restart of either side is noticed and repaired here (issue 14 item 5): the switch's
    stream channel ending, a step failing on a channel (ChannelError: the server program
    closed its control socket, the switch stopped answering), or an eviction read missing
    entries the manager cached (CacheLost) — the next step of either thread first calls
    ``Runtime.recover`` (needs the runtime's goal state; without it the steps go on, errors
    counted, and lost cache entries are written again from the server): the side that is down
    reconnected, the sides that restarted brought to the goal; each manager then sees
    ``Runtime.restarts`` move at its next step (``restarted``).  While a side does not answer,
    that is tried again every ``retry_s``, counted under ``errors["recover"]``, and nothing
    steps (a fleet's server that does not come back must be failed over: ``fail_over``)."""

    def __init__(self, managers: dict[str, CacheManager], step_s: float = 0.005, evict_s: float = 0.2,
                 on_error: Callable[[str, Exception], None] | None = None, retry_s: float = 0.5) -> None:
        self.managers = managers
        runtimes = {id(m.rt): m.rt for m in managers.values()}
        if len(runtimes) > 1:
            raise ValueError("the managers of one Managers are of one runtime")
        self.rt = next(iter(runtimes.values()), None)
        self.retry_s = retry_s
        self.recoveries: list[dict[str, dict[str, Repair]]] = []  # what each recovery repaired, the last 16
        # signs that a side may have restarted (under ``lock``): while more were given than a
        # recovery has handled, no step runs before ``Runtime.recover`` succeeds
        self._signs = self._handled = 0
        self._lost = False  # ... and entries are known to be missing (CacheLost)
        self._recovering = threading.Lock()
        self._next_try = 0.0  # no recovery attempt before (monotonic): both threads wait out a failed one
        self._quiet_until = 0.0  # the last recovery found every side up: signs until then are no restart
        self.step_s, self.evict_s = step_s, evict_s
        self.on_error = on_error
        self.steps = 0  # promotion and eviction steps
        self.seconds = 0.0  # busy in steps, the two threads' time added
        self.totals: dict[str, Counter[str]] = {name: Counter() for name in managers}  # per table: StepReport sums
        self.errors: dict[str, int] = dict.fromkeys([*managers, "recover"], 0)
        self.last_error: dict[str, Exception] = {}
        self.failed: Exception | None = None
        self.lock = threading.Lock()  # the sums above
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(step, period), daemon=True, name=f"nfc-cache-{what}")
                         for what, step, period in (("promote", CacheManager.promote_step, step_s),
                                                    ("evict", CacheManager.evict_step, evict_s))]

    @classmethod
    def every_cache(cls, runtime: Runtime, step_s: float = 0.005, evict_s: float = 0.2,
                    on_error: Callable[[str, Exception], None] | None = None, retry_s: float = 0.5) -> Managers:
        """A manager (the defaults) for each switch cache of the runtime's plan."""
        return cls({name: CacheManager(runtime, name) for name, s in runtime.schemas.items() if s.cached},
                   step_s, evict_s, on_error, retry_s)

    def __enter__(self) -> Managers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        if self.failed is not None and exc[0] is None:
            raise self.failed

    def _run(self, step: Callable[[CacheManager], StepReport], period: float) -> None:
        try:
            self._steps(step, period)
        except Exception as e:  # a bug, not a refusal: the thread stops; __exit__ raises it
            self.failed = e
            self._stop.set()

    def _steps(self, step: Callable[[CacheManager], StepReport], period: float) -> None:
        while not self._stop.is_set():
            if not self._recovered():
                self._stop.wait(self.retry_s)
                continue
            t0 = time.monotonic()
            for name, m in self.managers.items():
                try:
                    r = step(m)
                except (RuntimeApiError, OSError) as e:  # counted, reported, stepped again next time
                    if isinstance(e, ChannelError):
                        self._sign(isinstance(e, CacheLost))
                    with self.lock:
                        if isinstance(e, EvictionStopped):  # what it wrote before the refusal
                            self.totals[name].update({f: getattr(e.report, f) for f in _FIELDS})
                    self._failed(name, e)
                    continue
                with self.lock:
                    self.totals[name].update({f: getattr(r, f) for f in _FIELDS})
            with self.lock:
                self.steps += 1
                self.seconds += time.monotonic() - t0
            self._stop.wait(period)

    def _failed(self, name: str, e: Exception) -> None:
        with self.lock:
            self.errors[name] += 1
            self.last_error[name] = e
        if self.on_error is not None:
            self.on_error(name, e)

    def _sign(self, lost: bool = False) -> None:
        with self.lock:
            self._signs += 1
            self._lost = self._lost or lost

    def _recovered(self) -> bool:
        """False while a restart is not repaired yet (the class's doc); one thread recovers,
        the other waits for it (and for ``retry_s`` after a failed attempt)."""
        rt = self.rt
        if rt is None or rt.goal is None:
            return True  # nothing can be repaired: the steps go on, their errors counted
        if rt.switch is not None and rt.switch.lost:
            self._sign()
        with self.lock:
            if self._signs == self._handled:
                return True
            if not self._lost and time.monotonic() < self._quiet_until:  # a ChannelError that is no restart
                self._handled = self._signs
                return True
        with self._recovering:
            with self.lock:
                if self._signs == self._handled:
                    return True  # the other thread did it
                signs, lost = self._signs, self._lost
            if time.monotonic() < self._next_try:
                return False
            try:
                repair = rt.recover(lost)  # the managers see it at their next step (Runtime.restarts)
            except Exception as e:  # a side down, the goal store unreachable (GoalError, sqlite3): again later
                self._next_try = time.monotonic() + self.retry_s
                self._failed("recover", e)
                return False
            with self.lock:
                self._handled = signs
                if self._signs == signs:
                    self._lost = False
            if repair is None:
                self._quiet_until = time.monotonic() + self.retry_s
            else:
                self.recoveries = [*self.recoveries[-15:], repair]
            return True

    def total(self, what: str, table: str | None = None) -> int:
        """A StepReport field summed over the steps (and the tables, or one)."""
        return sum(c[what] for name, c in self.totals.items() if table in (None, name))


class CacheLost(ChannelError):
    """The switch lacks entries the manager cached there: it restarted, or lost them
    (``Managers`` recovers: ``Runtime.recover(lost=True)``)."""


class EvictionStopped(RuntimeApiError):
    """A write of an eviction step's chunk was refused; ``report``: what the chunks before it evicted."""

    def __init__(self, message: str, report: StepReport) -> None:
        super().__init__(message)
        self.report = report


_FIELDS = tuple(f.name for f in dataclasses.fields(StepReport))
NOTHING = StepReport(0, 0, 0, 0, 0)
EVICT_CHUNK = 64  # the evictions of a read written under the manager's lock at a time
