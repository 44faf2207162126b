"""The server's LPM trie (targets/dpdk/runtime/nfc_lpm.c, issue 13) against a brute-force
longest match.

tests/c/lpm_check.c drives the trie as nfc_tables.c does (the routes in an rte_hash beside
it, adds, replacements and deletes, single and bulk lookups), built under AddressSanitizer
and UndefinedBehaviorSanitizer.  The expectation for every lookup comes from the routes
this test holds itself: the longest route of the VRF whose prefix the address starts with.
Routes are drawn to nest and overlap at every level boundary of the trie (lengths 0, 8,
24, 32, ... and one off), so tables are made, shared, expanded and collapsed."""

from __future__ import annotations

import random
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import ROOT, sanitized_harness

pytestmark = pytest.mark.skipif(shutil.which("pkg-config") is None or shutil.which("gcc") is None,
                                reason="needs gcc and pkg-config (DPDK from Debian: python3 build.py setup)")


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sanitized_harness(ROOT / "tests" / "c" / "lpm_check.c", ["nfc_lpm.c"],
                             tmp_path_factory.mktemp("lpm") / "lpm_check")


@dataclass
class Trie:
    """One lpm_check process and the routes it was given."""
    proc: subprocess.Popen[str]
    width: int
    vrfs: bool
    stride1: int  # the bits of the trie's level 1: 16, or 8 (small VRFs)
    routes: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (vrf, plen, prefix) -> data
    log: list[str] = field(default_factory=list)

    def ask(self, line: str, answers: int = 1) -> list[str]:
        self.log.append(line)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = [self.proc.stdout.readline().strip() for _ in range(answers)]
        assert all(out), "lpm_check died after:\n" + "\n".join(self.log[-20:])
        return out

    def prefix(self, addr: int, plen: int) -> int:
        return addr >> (self.width - plen) << (self.width - plen) if plen else 0

    def add(self, vrf: int, addr: int, plen: int, data: int) -> None:
        assert self.ask(f"add {vrf} {addr:x} {plen} {data}") == ["ok"]
        self.routes[(vrf, plen, self.prefix(addr, plen))] = data

    def delete(self, vrf: int, plen: int, prefix: int) -> None:
        assert self.ask(f"del {vrf} {prefix:x} {plen}") == ["ok"]
        del self.routes[(vrf, plen, prefix)]

    def expect(self, vrf: int, addr: int) -> str:
        """Brute force: the longest route of the VRF whose prefix addr starts with."""
        best = max((plen for (v, plen, pfx) in self.routes if v == vrf and self.prefix(addr, plen) == pfx),
                   default=None)
        return "miss" if best is None else f"hit {self.routes[(vrf, best, self.prefix(addr, best))]}"

    def stats(self) -> dict[str, int]:
        words = self.ask("stats")[0].split()
        return {words[i]: int(words[i + 1]) for i in range(0, len(words), 2)}


@pytest.fixture
def trie(harness: Path, request: pytest.FixtureRequest) -> Iterator[Trie]:
    width, vrfs, stride1 = (*request.param, 16)[:3]
    proc = subprocess.Popen([str(harness), "--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--no-telemetry",
                             "--log-level=error", "-l", "0", "--", str(width), str(vrfs), str(stride1)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1", "PATH": "/usr/bin:/bin"})
    t = Trie(proc, width, vrfs > 0, stride1)
    yield t
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""


def boundary_lengths(width: int) -> list[int]:
    """Prefix lengths at and around the trie's level boundaries (8, 24, then every 8; with a
    level 1 of 8 bits every 8 from 8)."""
    ends = list(range(8, width + 1, 8)) if width > 8 else []
    return sorted({0, 1, width, *(b + d for b in ends for d in (-1, 0, 1) if 0 <= b + d <= width)})


def random_ops(t: Trie, rnd: random.Random, vrfs: int, steps: int) -> Counter[str]:
    """Adds (fresh and replacing), deletes and lookups; the lookups' answers as the brute force
    gives them (``hit`` / ``miss``), each already checked against the trie's."""
    w = t.width
    bases = [rnd.getrandbits(w) for _ in range(6)]
    lengths = boundary_lengths(w)
    answers: Counter[str] = Counter()

    def address() -> int:  # near a few bases, so routes nest and lookups fall inside them
        return bases[rnd.randrange(len(bases))] ^ rnd.getrandbits(rnd.choice([0, 1, 4, 8, 12, w]))

    for _ in range(steps):
        r = rnd.random()
        vrf = rnd.randrange(vrfs) if vrfs else 0
        if r < 0.45:
            plen = rnd.choice(lengths) if rnd.random() < 0.7 else rnd.randint(0, w)
            t.add(vrf, address(), plen, rnd.randrange(1, 2**40))
        elif r < 0.7 and t.routes:
            v, plen, pfx = rnd.choice(sorted(t.routes))
            t.delete(v, plen, pfx)
        elif r < 0.85:
            addr = address()
            want = t.expect(vrf, addr)
            assert t.ask(f"find {vrf} {addr:x}") == [want], t.log[-30:]
            answers[want.split()[0]] += 1
        else:
            probes = [(rnd.randrange(vrfs) if vrfs else 0, address()) for _ in range(rnd.randint(1, 64))]
            got = t.ask(f"bulk {len(probes)} " + " ".join(f"{v} {a:x}" for v, a in probes), len(probes))
            want_all = [t.expect(v, a) for v, a in probes]
            assert got == want_all, t.log[-30:]
            answers.update(w.split()[0] for w in want_all)
        if rnd.random() < 0.05:
            t.ask("reclaim")
    return answers


@pytest.mark.parametrize("trie", [(32, 0), (32, 16), (32, 24), (64, 14), (64, 24), (12, 0), (40, 0), (128, 0),
                                  (128, 16), (128, 24), (96, 0), (32, 16, 8), (32, 24, 8), (64, 14, 8), (128, 16, 8),
                                  (12, 0, 8), (40, 0, 8)], indirect=True,
                         ids=["ipv4", "ipv4-vrf-array", "ipv4-vrf-hash", "64bit-vrf-array", "64bit-vrf-hash", "12bit",
                              "40bit", "ipv6", "ipv6-vrf-array", "ipv6-vrf-hash", "96bit", "ipv4-vrf-array-narrow",
                              "ipv4-vrf-hash-narrow", "64bit-vrf-array-narrow", "ipv6-vrf-array-narrow", "12bit-narrow",
                              "40bit-narrow"])
@pytest.mark.parametrize("seed", [1, 2])
def test_lookups_answer_the_longest_matching_route_through_adds_and_deletes(trie: Trie, seed: int) -> None:
    answers = random_ops(trie, random.Random(seed * 1000 + trie.width), 4 if trie.vrfs else 0, 1500)
    # many lookups found a route; in the wider spaces some found none (a 12-bit space is soon
    # covered by some short route)
    assert answers["hit"] > 500 and (answers["miss"] > 20 or trie.width < 32), answers


@pytest.mark.parametrize("trie", [(32, 16), (32, 24), (32, 16, 8)], indirect=True,
                         ids=["vrf-array", "vrf-hash", "vrf-array-narrow"])
def test_memory_comes_back_when_the_routes_go(trie: Trie) -> None:
    """Tables are made on demand and freed (after the grace period) when no route needs them:
    a VRF with only short routes costs its 2 KiB directory, and with no routes nothing.  A
    level 1 of 8 bits makes only tables of 2^8 entries."""
    rnd = random.Random(7)
    assert trie.stats()["bytes"] == 0
    trie.add(3, 10 << 24, 8, 1)  # a /8: the directory only
    small = trie.stats()
    assert (small["small"], small["big"]) == (1, 0)
    for i in range(200):  # /24s and /32s under two /8s
        trie.add(3, (10 << 24) | rnd.getrandbits(24), rnd.choice([24, 32]), i + 2)
        trie.add(3, (11 << 24) | rnd.getrandbits(24), rnd.choice([24, 32]), i + 2)
    grown = trie.stats()
    assert (grown["big"], grown["small"] > 3) == ((2, True) if trie.stride1 == 16 else (0, True))
    for vrf, plen, pfx in sorted(trie.routes):
        if plen > 8:
            trie.delete(vrf, plen, pfx)
    trie.ask("reclaim")
    assert trie.stats() == small
    assert trie.ask(f"find 3 {(10 << 24) | 5:x}") == ["hit 1"]
    trie.delete(3, 8, 10 << 24)
    trie.ask("reclaim")
    assert trie.stats()["bytes"] == 0
    assert trie.ask(f"find 3 {(10 << 24) | 5:x}") == ["miss"]
