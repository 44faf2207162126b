"""Cache correctness for a table split into a switch cache and the full table on a server.

A lookup tries the cache first; on a miss the packet goes to the server, which looks up the
full table.  The split is correct iff, for every address and every table content the runtime
may produce, a cache hit gives the entry the full table would give.

* Exact match: a hit's key equals the address's key, and keys are unique, so any subset of
  the table is a correct cache (proved below as the degenerate case: every prefix /W).
* LPM: a cached prefix can hit for an address whose longest match in the full table is a
  more specific prefix left on the server (CacheFlow's dependency problem).  The admission
  rule of ``runtime/cache.py`` — a cached prefix has every table prefix inside it cached
  too — is sufficient; Z3 proves it for all tables of ``n`` entries of width ``width``
  (fresh context per query, with a timeout) and finds the counterexample for a naive rule
  that caches any subset.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import z3

__all__ = ["CacheProof", "prove_lpm_cache"]


@dataclass(frozen=True)
class CacheProof:
    rule: str
    entries: int
    width: int
    proved: bool
    seconds: float
    # a counterexample: (prefix value, length, action, cached) per entry, the address, and
    # the actions the cache and the full table give it
    table: tuple[tuple[int, int, int, bool], ...] = ()
    address: int = 0
    cache_action: int = 0
    full_action: int = 0


def prove_lpm_cache(rule: str = "dependent", n: int = 4, width: int = 32, exact: bool = False,
                    timeout_ms: int = 30_000) -> CacheProof:
    """``rule``: "dependent" (the runtime's) or "naive" (any subset); ``exact``: every prefix
    is /width (exact match)."""
    ctx = z3.Context()
    s = z3.Solver(ctx=ctx)
    s.set("timeout", timeout_ms)
    lw = max(1, width.bit_length())
    bv = width + lw  # room to compute masks from lengths without overflow

    def mask(length: z3.BitVecRef) -> z3.BitVecRef:
        ones = z3.BitVecVal((1 << width) - 1, bv, ctx)
        return z3.Extract(width - 1, 0, ~(ones >> z3.ZeroExt(bv - lw, length)) & ones)

    v = [z3.BitVec(f"v{i}", width, ctx) for i in range(n)]
    ln = [z3.BitVec(f"len{i}", lw, ctx) for i in range(n)]
    act = [z3.BitVec(f"action{i}", 8, ctx) for i in range(n)]
    cached = [z3.Bool(f"cached{i}", ctx) for i in range(n)]
    x = z3.BitVec("address", width, ctx)
    for i in range(n):
        s.add(z3.ULE(ln[i], width))
        if exact:
            s.add(ln[i] == width)
        s.add(v[i] & mask(ln[i]) == v[i])  # stored masked (runtime and server do so)
        for j in range(i):
            s.add(z3.Or(ln[i] != ln[j], v[i] != v[j]))  # keys unique

    def matches(i: int) -> z3.BoolRef:
        return x & mask(ln[i]) == v[i]

    def covers(i: int, j: int) -> z3.BoolRef:  # prefix i contains prefix j
        return z3.And(z3.ULE(ln[i], ln[j]), v[j] & mask(ln[i]) == v[i])

    def best(i: int, among: list[z3.BoolRef]) -> z3.BoolRef:
        return z3.And(among[i], matches(i), *[z3.Implies(z3.And(among[j], matches(j)), z3.ULT(ln[j], ln[i]))
                                              for j in range(n) if j != i])

    if rule == "dependent":
        for i in range(n):
            for j in range(n):
                if i != j:
                    s.add(z3.Implies(z3.And(cached[i], covers(i, j)), cached[j]))
    elif rule != "naive":
        raise ValueError(f"unknown rule {rule}")
    everything = [z3.BoolVal(True, ctx)] * n
    hit, full = z3.Int("hit", ctx), z3.Int("full", ctx)
    s.add(z3.Or(*[z3.And(hit == i, best(i, cached)) for i in range(n)]))
    s.add(z3.Or(*[z3.And(full == i, best(i, everything)) for i in range(n)]))
    s.add(z3.Or(*[z3.And(hit == i, full == j, act[i] != act[j]) for i in range(n) for j in range(n)]))
    t0 = time.perf_counter()
    result = s.check()
    seconds = time.perf_counter() - t0
    if result == z3.unsat:
        return CacheProof(rule, n, width, True, seconds)
    if result != z3.sat:
        raise TimeoutError(f"z3: {s.reason_unknown()} after {seconds:.1f} s")
    m = s.model()

    def val(e: z3.ExprRef) -> int:
        return int(m.eval(e, model_completion=True).as_long())

    table = tuple((val(v[i]), val(ln[i]), val(act[i]), bool(z3.is_true(m.eval(cached[i], model_completion=True))))
                  for i in range(n))
    return CacheProof(rule, n, width, False, seconds, table, val(x), val(act[val(hit)]), val(act[val(full)]))
