"""Data-plane state the reference interpreter keeps between packets.

Registers, counters, meters (RFC 2698 two-rate three-colour, colour-blind), data-plane
written ``state`` tables with idle timeouts, ESP anti-replay windows and NAT port pools.
Out-of-range register / counter / meter indices read 0 and write nothing.

A port pool keeps, per port, the time it is held until: ``alloc_port`` gives out the lowest
port >= 1024 whose time has passed and holds it for ever; the entries of the state that
``holds_ports`` (if any) set it to their expiry when inserted or refreshed and give it back
when removed, so the port of an expired mapping is free again (seed 002 §3).
"""

from __future__ import annotations

import math
from collections import Counter as Tally
from dataclasses import dataclass, field

from compiler import ir
from compiler.interp.meter import MeterConfig, TrTcm

__all__ = ["REPLAY_WINDOW", "DataplaneState", "MeterConfig"]

REPLAY_WINDOW = 64


@dataclass
class _StateEntry:
    values: dict[str, int]
    timeout: float
    expires: float


@dataclass
class DataplaneState:
    program: ir.Program
    registers: dict[str, dict[int, int]] = field(default_factory=dict)
    counters: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    meter_config: dict[str, dict[int, MeterConfig]] = field(default_factory=dict)
    buckets: dict[tuple[str, int], TrTcm] = field(default_factory=dict)
    state_tables: dict[str, dict[tuple[int, ...], _StateEntry]] = field(default_factory=dict)
    replay: dict[int, tuple[int, int]] = field(default_factory=dict)  # sa -> (highest seq, bitmap)
    port_pools: dict[int, dict[int, float]] = field(default_factory=dict)  # address -> port -> held until
    drops: Tally[str] = field(default_factory=Tally)
    punts: Tally[str] = field(default_factory=Tally)

    # registers
    def reg_read(self, name: str, index: int) -> int:
        return self.registers.get(name, {}).get(index, 0)

    def reg_write(self, name: str, index: int, value: int) -> None:
        if 0 <= index < self.program.registers[name].size:
            self.registers.setdefault(name, {})[index] = value

    # counters and meters
    def count(self, name: str, index: int, nbytes: int) -> None:
        if 0 <= index < self.program.counters[name].size:
            per = self.counters.setdefault(name, {})
            pkts, byts = per.get(index, (0, 0))
            per[index] = (pkts + 1, byts + nbytes)

    def meter(self, name: str, index: int, nbytes: int, now: float) -> int:
        """Colour of a packet: 0 green, 1 yellow, 2 red; unconfigured meters are green."""
        cfg = self.meter_config.get(name, {}).get(index)
        if cfg is None:
            return 0
        b = self.buckets.get((name, index))
        if b is None or b.cfg != cfg:  # rates set (or changed): both buckets full
            b = self.buckets[(name, index)] = TrTcm.start(cfg)
        return b.colour(nbytes, now)

    # data-plane written state
    def state_lookup(self, name: str, key: tuple[int, ...], now: float, refresh: bool = True) -> dict[str, int] | None:
        """A hit refreshes the entry's idle timer (unless the table says ``refresh = false``);
        expired entries are removed."""
        entries = self.state_tables.get(name, {})
        e = entries.get(key)
        if e is None:
            return None
        if e.expires <= now:
            del entries[key]
            return None
        if refresh:
            e.expires = now + e.timeout
            self._hold(name, key, e.expires)
        return e.values

    def state_insert(self, name: str, key: tuple[int, ...], values: dict[str, int], timeout: float,
                     now: float) -> bool:
        entries = self.state_tables.setdefault(name, {})
        if key not in entries and len(entries) >= self.program.tables[name].size:
            self.expire(name, now)
            if len(entries) >= self.program.tables[name].size:
                return False
        entries[key] = _StateEntry(dict(values), timeout, now + timeout)
        self._hold(name, key, now + timeout)
        return True

    def state_remove(self, name: str, key: tuple[int, ...], now: float) -> None:
        e = self.state_tables.get(name, {}).pop(key, None)
        if e is not None and e.expires > now:
            self._hold(name, key, now)

    def _hold(self, name: str, key: tuple[int, ...], until: float) -> None:
        """The port an entry of the ``holds_ports`` state holds is held until ``until``."""
        held = self.program.tables[name].holds_ports
        if held is not None:
            self.port_pools.setdefault(key[held[0]], {})[key[held[1]]] = until

    def expire(self, name: str, now: float) -> None:
        entries = self.state_tables.get(name, {})
        for k in [k for k, e in entries.items() if e.expires <= now]:
            del entries[k]

    # ESP anti-replay, RFC 4303 Appendix A (window of REPLAY_WINDOW packets)
    def replay_check(self, sa: int, seq: int) -> bool:
        top, bitmap = self.replay.get(sa, (0, 0))
        if seq == 0:
            return False
        if seq > top:
            shift = seq - top
            bitmap = ((bitmap << shift) | 1) & ((1 << REPLAY_WINDOW) - 1) if shift < REPLAY_WINDOW else 1
            self.replay[sa] = (seq, bitmap)
            return True
        offset = top - seq
        if offset >= REPLAY_WINDOW or bitmap >> offset & 1:
            return False
        self.replay[sa] = (top, bitmap | (1 << offset))
        return True

    def esn_high(self, sa: int, seql: int) -> int:
        """RFC 4303 Appendix A2.2: the high 32 bits of the 64-bit sequence number whose low 32
        bits are ``seql``, from SA ``sa``'s window (top T = Th:Tl, W = REPLAY_WINDOW).  Case A
        (the window within one 2^32 subspace, Tl >= W - 1): Th if seql >= Tl - W + 1, else
        Th + 1 (it wrapped ahead).  Case B (the window straddles the subspace boundary): Th - 1
        if seql >= Tl - W + 1 mod 2^32 (behind, in the previous subspace), else Th; at Th = 0
        there is no previous subspace, so Th."""
        top, _ = self.replay.get(sa, (0, 0))
        th, tl, w = top >> 32, top & 0xFFFFFFFF, REPLAY_WINDOW
        if tl >= w - 1:
            return th if seql >= tl - w + 1 else (th + 1) & 0xFFFFFFFF
        return th - 1 if th > 0 and seql >= (tl - w + 1) % (1 << 32) else th

    # NAT port pools
    def alloc_port(self, ext_ip: int, now: float) -> int:
        until = self.port_pools.setdefault(ext_ip, {})
        for port in range(1024, 65536):
            if until.get(port, 0.0) <= now:
                until[port] = math.inf  # until an entry that holds it says otherwise
                return port
        return 0
