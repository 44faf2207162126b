"""The server runtime's Internet checksum (targets/dpdk/runtime/nfc_rt.h: nfc_csum_sum, whose
loop is unrolled, and nfc_csum_fold, whose folds were cut to the fewest that keep the sum exact,
issue 13), compiled into a small C program and checked against RFC 1071 computed here."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.skipif(shutil.which("pkg-config") is None or shutil.which("gcc") is None,
                                reason="needs gcc and pkg-config (DPDK from Debian: python3 build.py setup)")

PROGRAM = r"""
#include <stdio.h>
#include "nfc_rt.h"
int main(void)
{
    unsigned char buf[128];
    unsigned len;
    while (scanf("%u", &len) == 1) {
        for (unsigned i = 0; i < len; i++) {
            unsigned b;
            if (scanf("%x", &b) != 1)
                return 1;
            buf[i] = (unsigned char)b;
        }
        printf("csum %u\n", (unsigned)nfc_csum(buf, len)); /* the number nfc_set16 stores */
        for (unsigned at = 0; at + 2 <= len; at++) { /* a header's own checksum field at byte at, as stored */
            unsigned char out[2];
            nfc_csum_put(out, buf, len, at);
            printf("put %u\n", (unsigned)(out[0] << 8 | out[1]));
        }
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def rt_probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The probe program: the checksum (the number a header's checksum field holds) of each
    byte string read from stdin."""
    d = tmp_path_factory.mktemp("rt")
    (d / "probe.c").write_text(PROGRAM)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libdpdk"], check=True, capture_output=True,
                           text=True).stdout.split()
    subprocess.run(["gcc", "-O2", "-march=native", "-I", str(ROOT / "targets" / "dpdk" / "runtime"), "-o",
                    str(d / "probe"), str(d / "probe.c"), *flags], check=True)
    return d / "probe"


def run_probe(probe: Path, inputs: list[bytes], what: str = "csum") -> list[int]:
    """``what``: "csum", the checksum of each input; "put", the two bytes nfc_csum_put stores
    for a checksum field at each byte 0 .. len - 2 of each input, in turn."""
    text = "".join(f"{len(b)} {' '.join(f'{x:x}' for x in b)}\n" for b in inputs)
    out = subprocess.run([str(probe)], input=text, check=True, capture_output=True, text=True).stdout.split("\n")
    return [int(line.split()[1]) for line in out if line.startswith(f"{what} ")]


def rfc1071(data: bytes) -> int:
    """The Internet checksum: the one's-complement sum of the 16-bit big-endian words (an odd
    last byte padded with zero), complemented."""
    padded = data + b"\0" * (len(data) % 2)
    s = sum(int.from_bytes(padded[i:i + 2], "big") for i in range(0, len(padded), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def test_checksum_equals_rfc_1071_at_every_carry(rt_probe: Path) -> None:
    rnd = random.Random(13)
    inputs = [bytes([0xFF]) * n for n in range(1, 65)]  # all-ones words: carries at every fold step
    # 32-bit words (as x86 loads them) summing to 2^33 - 1 and more: the 64 -> 32-bit fold carries too
    inputs += [bytes([0xFF] * 8 * k + [k, 0, 0, 0]) for k in range(1, 8)]
    inputs += [bytes([0xFF, 0xFF] * 30 + [0x00, 0x01]), bytes(20), bytes([0x80]) * 37]
    inputs += [bytes(rnd.choice([0x00, 0xFF, rnd.randrange(256)]) for _ in range(rnd.randint(1, 128)))
               for _ in range(300)]
    sums = run_probe(rt_probe, inputs)
    assert sums == [rfc1071(b) for b in inputs]


def test_a_checksum_field_is_stored_in_network_order_as_rfc_1071_gives_it(rt_probe: Path) -> None:
    """nfc_csum_put (what the generated code writes into a header's checksum field): the
    checksum of the bytes with the field taken as zero, stored big-endian, at every carry and
    with the field at every offset: within a 32-bit word, across two, across a word and the
    2-byte tail, across the tail and an odd last byte."""
    rnd = random.Random(17)
    inputs = [bytes([0xFF]) * n for n in range(2, 65)]
    inputs += [bytes(rnd.choice([0x00, 0xFF, rnd.randrange(256)]) for _ in range(rnd.randint(2, 128)))
               for _ in range(300)]

    def zeroed(b: bytes, at: int) -> bytes:
        return b[:at] + b"\0\0" + b[at + 2:]

    want = [rfc1071(zeroed(b, at)) for b in inputs for at in range(len(b) - 1)]
    stored = run_probe(rt_probe, inputs, "put")
    assert len(stored) == len(want)
    assert stored == want
