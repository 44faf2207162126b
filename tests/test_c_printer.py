"""The C syntax tree and printer (the DPDK generator's output layer): printed code compiles
warning-free with gcc and computes what C's own rules say."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from targets.c import syntax as c
from targets.c.printer import expr, print_unit

GCC = shutil.which("gcc")


def test_operands_are_parenthesised():
    e = c.Bin("+", c.Bin("<<", c.Name("a"), c.Int(3)), c.Un("~", c.Bin("&", c.Name("b"), c.Int(0xFF))))
    assert expr(e) == "(a << 3u) + (~(b & 0xffu))"
    assert expr(c.Cast("uint16_t", c.Bin("-", c.Name("x"), c.Int(1)))) == "(uint16_t)(x - 1u)"


@pytest.mark.skipif(GCC is None, reason="gcc not on PATH")
def test_printed_unit_compiles_and_runs(tmp_path):
    body = (
        c.Comment("wraps modulo 2^8 like bit<8> arithmetic"),
        c.Decl("uint8_t", "x", c.Cast("uint8_t", c.Bin("-", c.Int(3), c.Int(5)))),
        c.If(c.Bin("==", c.Name("x"), c.Int(254)), (c.Return(c.Int(0, "")),), (c.Return(c.Int(1, "")),)),
    )
    unit = c.Unit("test unit", (c.Include("<stdint.h>"), c.Func("int", "main", (), body, "entry", static=False)))
    src = tmp_path / "t.c"
    src.write_text(print_unit(unit))
    subprocess.run([GCC, "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "t"), str(src)], check=True)
    assert subprocess.run([str(tmp_path / "t")]).returncode == 0
