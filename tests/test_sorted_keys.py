"""The LPM cache policy's sorted prefixes (issue 14, item 4: 10M routes without a Python
object per route): ``SortedKeys`` against a plain set, and ``CachePolicy`` with keys packed
into 64-bit ints against the same policy keeping tuples, both against a longest-prefix match
and the hijack invariant written here from their definitions, with VRF fields before and
after the LPM field."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.cache import CachePolicy, Key
from runtime.sorted_keys import SortedKeys

EXAMPLES = 300 if os.environ.get("NFC_SLOW") else 60

ops = st.lists(st.tuples(st.sampled_from(["add", "discard"]), st.integers(0, 60)), max_size=120)


@pytest.mark.parametrize("packed", [True, False])
@settings(max_examples=EXAMPLES, deadline=None)
@given(ops=ops, bounds=st.lists(st.tuples(st.integers(-2, 62), st.integers(-2, 62)), max_size=8))
def test_sorted_keys_hold_what_a_set_holds(packed: bool, ops: list[tuple[str, int]],
                                           bounds: list[tuple[int, int]]) -> None:
    keys = SortedKeys(packed)
    keys.chunk = 2  # split often
    ref: set[int] = set()
    for op, x in ops:
        wrap = x if packed else (x,)
        if op == "add":
            assert keys.add(wrap) == (x not in ref)
            ref.add(x)
        else:
            assert keys.discard(wrap) == (x in ref)
            ref.discard(x)
        assert len(keys) == len(ref)
    assert [x if packed else x[0] for x in keys] == sorted(ref)
    for x in range(62):
        assert ((x if packed else (x,)) in keys) == (x in ref)
    for lo, hi in bounds:
        lo, hi = max(lo, 0), max(hi, 0)
        want = sorted(x for x in ref if lo <= x < hi)
        wrap_lo, wrap_hi = (lo, hi) if packed else ((lo,), (hi,))
        assert keys.count(wrap_lo, wrap_hi) == len(want)
        assert [x if packed else x[0] for x in keys.between(wrap_lo, wrap_hi)] == want


# ---- the policy: (vrf, address) keys, 4 + 8 bits, the LPM field first or second --------------

WIDTH, VRF_BITS = 8, 4
prefix = st.builds(lambda vrf, addr, n: (vrf, addr >> (WIDTH - n) << (WIDTH - n) if n else 0, n),
                   st.sampled_from([0, 3, 15]), st.one_of(st.sampled_from([0, 0x80, 0xF0, 0xFF]), st.integers(0, 255)),
                   st.sampled_from([0, 1, 2, 4, 5, 7, 8]))  # the top of the space often: its range ends at 2^8
steps = st.lists(st.tuples(st.sampled_from(["add", "delete", "promote", "demote", "room"]), prefix,
                           st.sampled_from([1, 2, 3])), max_size=60)


def _inside(outer: tuple[int, int, int], inner: tuple[int, int, int]) -> bool:
    """inner (vrf, address, length) strictly inside outer, from the definition."""
    (v, a, n), (w, b, m) = outer, inner
    return v == w and m > n and (a ^ b) >> (WIDTH - n) == 0


@pytest.mark.parametrize("lpm_first", [True, False])
@settings(max_examples=EXAMPLES, deadline=None)
@given(steps=steps, capacity=st.integers(0, 6))
def test_a_packed_policy_decides_as_the_tuple_one_and_never_lets_a_prefix_hijack(
        lpm_first: bool, steps: list[tuple[str, tuple[int, int, int], int]], capacity: int) -> None:
    def key(p: tuple[int, int, int]) -> Key:
        vrf, addr, n = p
        return (addr, vrf, n) if lpm_first else (vrf, addr, n)

    lpm, widths = (0, (WIDTH, VRF_BITS)) if lpm_first else (1, (VRF_BITS, WIDTH))
    packed = CachePolicy(capacity, lpm, WIDTH, widths)
    tupled = CachePolicy(capacity, lpm, WIDTH)
    assert packed.server.packed and not tupled.server.packed
    SortedKeys.chunk, chunk = 2, SortedKeys.chunk
    try:
        server: set[tuple[int, int, int]] = set()
        for op, p, unit in steps:
            k = key(p)
            if op == "add" and p not in server:
                server.add(p)
                a, b = packed.on_add(k), tupled.on_add(k)
            elif op == "delete" and p in server:
                server.discard(p)
                a, b = packed.on_delete(k), tupled.on_delete(k)
            elif op == "promote":
                a, b = packed.promote(k, unit), tupled.promote(k, unit)
            elif op == "demote" and k in packed.cached:
                a, b = packed.demote(k), tupled.demote(k)
            elif op == "room":  # the cache grows: what went in while it was full may now be left out
                packed.capacity = tupled.capacity = capacity = capacity + 1
                continue
            else:
                continue
            assert a == b
            assert packed.cached == tupled.cached and len(packed.cached) <= capacity
            assert sorted(packed.prefixes()) == sorted(tupled.prefixes()) == sorted(map(key, server))
            cached = {p for p in server if key(p) in packed.cached}
            assert len(cached) == len(packed.cached)  # only server prefixes are cached
            for c in cached:  # the invariant: everything inside a cached prefix is cached
                assert all(q in cached for q in server if _inside(c, q)), (c, sorted(server), sorted(cached))
        for vrf in (0, 3, 15):
            for addr in range(0, 256, 7):
                covering = [p for p in server if p[0] == vrf and (p[1] ^ addr) >> (WIDTH - p[2]) == 0]
                best = max(covering, key=lambda p: p[2], default=None)
                fields = (addr, vrf) if lpm_first else (vrf, addr)
                assert packed.match(fields) == tupled.match(fields) == (key(best) if best else None)
    finally:
        SortedKeys.chunk = chunk


def test_a_key_too_wide_for_64_bits_is_kept_as_a_tuple():
    """VRF 32 bits + IPv4 + a length byte is 72 bits: tuples; 16 + 32 + 8: packed."""
    assert not CachePolicy(4, 1, 32, (32, 32)).server.packed
    assert CachePolicy(4, 1, 32, (16, 32)).server.packed


@pytest.mark.parametrize("lpm_first", [True, False])
@pytest.mark.parametrize("vrf", [2, 3])  # the end of a range at the top carries into the VRF: odd and even
@pytest.mark.parametrize("outer", [(0, 0), (0xFFFFFF00, 24), (0xF0000000, 4)])
def test_a_prefix_at_the_top_of_the_space_is_not_cached_without_what_is_inside_it(lpm_first, vrf, outer):
    """DSR's layout packed (14-bit VRF, IPv4, a length byte): a /0, or a prefix whose range
    ends at 2^32, with a longer server prefix inside it that is not cached, stays out."""
    addr, length = outer
    inner = (addr | 0xF0, 28)

    def key(a: int, n: int) -> Key:
        return (a, vrf, n) if lpm_first else (vrf, a, n)

    p = CachePolicy(0, 0 if lpm_first else 1, 32, (32, 14) if lpm_first else (14, 32))
    assert p.server.packed
    p.on_add(key(*inner))  # no room: on the server only
    p.capacity = 10
    assert p.on_add(key(addr, length)).install == []  # it would take the /28's traffic
    d = p.promote(key(addr, length), unit=2)
    assert d is not None and d.install == [key(*inner), key(addr, length)]
