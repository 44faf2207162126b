"""The P4 generator's merge of parse-time checks (``targets/p4/lower.py``): a check that several
parsers make alike is made once, at a place that keeps every parser's order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from targets.p4 import syntax as p
from targets.p4.lower import _supersequence


def _is_subsequence(small: list[str], big: list[str]) -> bool:
    it = iter(big)
    return all(x in it for x in small)


def _lcs(a: list[str], b: list[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def _checks(names: list[str], pipeline: int) -> list:
    return [((n, p.Const(0, 0), n), {pipeline}) for n in names]


# distinct names within a parser (a parser makes a check once); shared between parsers
_seq = st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=8)


@settings(max_examples=300, deadline=None)
@given(_seq, _seq)
def test_the_merged_checks_keep_both_orders_and_make_a_shared_check_once(a, b):
    out = _supersequence(_checks(a, 1), _checks(b, 2))
    names = [c[0][0] for c in out]
    assert _is_subsequence(a, names) and _is_subsequence(b, names)
    assert len(names) == len(a) + len(b) - _lcs(a, b)  # shortest: every check of both in order
    made: dict[str, set[int]] = {}
    for (name, *_), users in out:  # a check both make in orders that conflict is made twice, once each
        assert not made.get(name, set()) & users
        made.setdefault(name, set()).update(users)
    assert made == {n: {k for k, seq in ((1, a), (2, b)) if n in seq} for n in {*a, *b}}
