"""An LPM switch cache never forwards a packet as no version of the full table would, under
any interleaving of operator adds and deletes and of the cache manager's promotions (one
prefix, or a prefix with everything inside it as a unit) and evictions (issue 14, item 3).

A Hypothesis state machine drives ``CachePolicy`` (what the manager and the runtime decide)
and ``switch_order`` (the writes that reach the switch, one after the other; a switch applies
one write's updates in any order, so only between writes is its state known).  The reference
is the full table as a dict of ``ipaddress`` networks and a longest-prefix match written here
from the definition: after every write, every probe address is forwarded — by the cache if it
hits there, else by the server — as the table was before the operation or is after it (an
operation is on the server before its cache entries reach the switch, and off the switch
before it leaves the server)."""

from __future__ import annotations

import ipaddress
import os

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from runtime.cache import CacheDecision, CachePolicy, Key, switch_order

Net = ipaddress.IPv4Network
BASE = 0x0A000000
# prefixes of 10.0.0.0/8 drawn from few bits, so that they nest and overlap often
LENGTHS = (8, 12, 16, 20, 24, 28, 32)
PROBES = [BASE + (a << 20) + (b << 12) + (c << 4) + d for a in range(2) for b in range(2) for c in range(2)
          for d in (0, 9)]
CAPACITY = 4


def _net(key: Key) -> Net:
    return Net((key[0], key[1]))


def _lpm(table: dict[Net, int], addr: int) -> int | None:
    a = ipaddress.IPv4Address(addr)
    best = max((n for n in table if a in n), key=lambda n: n.prefixlen, default=None)
    return table[best] if best is not None else None


prefixes = st.builds(lambda a, b, c, n: Net((BASE + (a << 20) + (b << 12) + (c << 4), n), strict=False),
                     st.integers(0, 1), st.integers(0, 1), st.integers(0, 1), st.sampled_from(LENGTHS))


class CacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.policy = CachePolicy(capacity=CAPACITY, lpm=0, width=32)
        self.table: dict[Net, int] = {}  # the full table: what the operator wrote, on the server
        self.switch: set[Key] = set()
        self.version = 0

    # ---- what happens to the switch, write by write ---------------------------------------

    def _writes(self, decisions: list[CacheDecision], before: dict[Net, int], after: dict[Net, int]) -> None:
        deletes, adds = switch_order(decisions, lpm=True)
        for keys in deletes:
            assert all(k in self.switch for k in keys), "a delete of an entry the switch does not hold"
            self.switch.difference_update(keys)
            self._forwards_as(before, after)
        for keys in adds:
            assert not any(k in self.switch for k in keys), "an add of an entry the switch holds"
            assert all(_net(k) in after or _net(k) in before for k in keys), "a cache entry not on the server"
            self.switch.update(keys)
            self._forwards_as(before, after)

    def _forwards_as(self, *versions: dict[Net, int]) -> None:
        server = {**versions[0], **versions[-1]}  # entries on their way in or out are still on the server
        cached = {_net(k): server[_net(k)] for k in self.switch}
        for addr in PROBES:
            hit = _lpm(cached, addr)
            got = hit if hit is not None else _lpm(server, addr)
            assert got in {_lpm(v, addr) for v in versions}, (ipaddress.IPv4Address(addr), sorted(self.switch))

    def _key(self, net: Net) -> Key:
        return (int(net.network_address), net.prefixlen)

    # ---- the operator -----------------------------------------------------------------------

    @rule(net=prefixes)
    def add(self, net: Net) -> None:
        if net in self.table:
            return
        before = dict(self.table)
        self.version += 1
        self.table[net] = self.version  # on the server first
        self._writes([self.policy.on_add(self._key(net))], before, self.table)

    @precondition(lambda self: bool(self.table))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        net = data.draw(st.sampled_from(sorted(self.table)))
        after = {n: v for n, v in self.table.items() if n != net}
        self._writes([self.policy.on_delete(self._key(net))], self.table, after)  # off the switch first
        self.table = after
        self._forwards_as(self.table)

    # ---- the cache manager ------------------------------------------------------------------

    @precondition(lambda self: bool(self.table))
    @rule(data=st.data(), unit=st.sampled_from([1, 2, 4]))
    def promote(self, data: st.DataObject, unit: int) -> None:
        net = data.draw(st.sampled_from(sorted(self.table)))
        d = self.policy.promote(self._key(net), unit)
        if d is not None:
            assert len(d.install) <= unit and d.install[-1] == self._key(net)
            self._writes([d], self.table, self.table)

    @precondition(lambda self: bool(self.switch))
    @rule(data=st.data())
    def evict(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.switch)))
        self._writes([self.policy.demote(key)], self.table, self.table)

    @invariant()
    def the_switch_holds_what_the_policy_says(self) -> None:
        assert self.switch == self.policy.cached and len(self.switch) <= CAPACITY
        assert all(_net(k) in self.table for k in self.switch)
        self._forwards_as(self.table)


CacheMachine.TestCase.settings = settings(max_examples=400 if os.environ.get("NFC_SLOW") else 60,
                                          stateful_step_count=40, deadline=None)
test_lpm_cache_never_hijacks_under_any_interleaving = CacheMachine.TestCase


def test_a_hot_prefix_goes_in_with_everything_inside_it_as_one_unit():
    """10.0.0.0/8 with 10.1.0.0/16 and 10.1.2.0/24 inside it, none cached: alone it would
    hijack the /16 and /24's traffic; as a unit of 3 the /24 goes in first."""
    p = CachePolicy(capacity=8, lpm=0, width=32)
    for key in [(0x0A000000, 8), (0x0A010000, 16), (0x0A010200, 24), (0x0B000000, 8)]:
        p.serve(key)  # on the server only
    assert p.cached == set()
    assert p.promote((0x0A000000, 8), unit=2) is None  # a unit of 3 does not fit in 2
    d = p.promote((0x0A000000, 8), unit=3)
    assert d is not None and sorted(d.install) == [(0x0A000000, 8), (0x0A010000, 16), (0x0A010200, 24)]
    assert switch_order([d], lpm=True)[1] == [[(0x0A010200, 24)], [(0x0A010000, 16)], [(0x0A000000, 8)]]
    assert p.cached == {(0x0A000000, 8), (0x0A010000, 16), (0x0A010200, 24)}
