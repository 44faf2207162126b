"""RFC 2698 two-rate three-colour marker, colour-blind, counting bytes: the semantics of an
``.nfp`` ``meter`` index once its rates are set (an unset one colours every packet green).
The reference interpreter and the switch model both run it; the server runs DPDK's
``rte_meter`` trTCM, the same algorithm in CPU cycles."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GREEN", "RED", "YELLOW", "MeterConfig", "TrTcm"]

GREEN, YELLOW, RED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class MeterConfig:
    """trTCM rates in bytes per second and bursts in bytes (RFC 2698)."""

    cir: float
    cbs: float
    pir: float
    pbs: float


@dataclass(slots=True)
class TrTcm:
    """One meter index: both buckets start full when its rates are set (RFC 2698 §3)."""

    cfg: MeterConfig
    tc: float
    tp: float
    last: float | None = None

    @classmethod
    def start(cls, cfg: MeterConfig) -> TrTcm:
        return cls(cfg, cfg.cbs, cfg.pbs)

    def colour(self, nbytes: int, now: float) -> int:
        """RFC 2698 §3, colour-blind: red if the packet exceeds the peak bucket, yellow if it
        exceeds the committed one, else green; the buckets refill at PIR / CIR up to PBS / CBS."""
        dt = 0.0 if self.last is None else max(0.0, now - self.last)
        self.last = now
        self.tc = min(self.cfg.cbs, self.tc + dt * self.cfg.cir)
        self.tp = min(self.cfg.pbs, self.tp + dt * self.cfg.pir)
        if self.tp < nbytes:
            return RED
        if self.tc < nbytes:
            self.tp -= nbytes
            return YELLOW
        self.tp -= nbytes
        self.tc -= nbytes
        return GREEN
