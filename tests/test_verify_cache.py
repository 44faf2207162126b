"""Z3 on the switch-cache admission rule (issue 6, item 4): the dependent-prefix rule the
runtime applies is proved for every table of n entries; the naive rule's counterexample,
replayed through an independent LPM (``ipaddress``), really forwards differently."""

from __future__ import annotations

import ipaddress

import pytest

from compiler.verify.cache_rule import prove_lpm_cache
from runtime.cache import CachePolicy


def _lpm(table, addr):
    nets = [(ipaddress.IPv4Network((v, ln)), a) for v, ln, a, _c in table]
    best = max((na for na in nets if addr in na[0]), key=lambda na: na[0].prefixlen, default=None)
    return None if best is None else best[1]


def test_naive_rule_has_a_counterexample_that_really_hijacks():
    p = prove_lpm_cache("naive", n=4)
    assert not p.proved
    addr = ipaddress.IPv4Address(p.address)
    cached = [e for e in p.table if e[3]]
    assert _lpm(cached, addr) == p.cache_action  # the cache hits ...
    assert _lpm(p.table, addr) == p.full_action  # ... and the full table says otherwise
    assert p.cache_action != p.full_action


@pytest.mark.parametrize("n", [2, 4])
def test_dependent_rule_is_proved(n):
    p = prove_lpm_cache("dependent", n=n)
    assert p.proved, p


def test_exact_match_caches_are_correct_whatever_the_subset():
    assert prove_lpm_cache("naive", n=4, exact=True).proved


def test_runtime_cache_keeps_the_proved_invariant():
    """The runtime's cache content satisfies the rule Z3 proved sufficient: every table prefix
    inside a cached prefix is cached."""
    policy = CachePolicy(capacity=3, lpm=0, width=32)
    for v, ln in [(0x0A000000, 8), (0x0A010000, 16), (0x0A010100, 24), (0x0B000000, 8), (0x0A020000, 16)]:
        policy.on_add((v, ln))
        for c in policy.cached:
            for s in policy.prefixes():
                inside = s[1] >= c[1] and (s[0] >> (32 - c[1]) if c[1] else 0) == (c[0] >> (32 - c[1]) if c[1] else 0)
                assert not inside or s in policy.cached, (c, s)
