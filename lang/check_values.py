"""Checks of the numbers and port lists written in properties (E032, E090).

A property value reaches code that counts in floats, 32-bit entries and 64-bit
nanoseconds, and port lists are expanded port by port; these checks keep every value
inside the limits of ``lang.limits`` so no later pass meets an overflow or a range it
cannot hold.
"""

from __future__ import annotations

import math

from lang import ast
from lang.diagnostics import Diagnostics
from lang.limits import MAX_ENTRIES, MAX_PORT, MAX_PROPERTY_NUMBER, MAX_TIMEOUT_SECONDS
from lang.symbols import quantity_count, quantity_seconds

__all__ = ["check_count", "check_number", "check_port_list", "check_timeout"]


def check_number(p: ast.Property, diags: Diagnostics) -> bool:
    """E090 if ``p`` holds a number above ``MAX_PROPERTY_NUMBER``; port lists are checked too.
    True if the value is usable."""
    v = p.value
    if isinstance(v, ast.PortList):
        return check_port_list(v, diags)
    number = v.value if isinstance(v, ast.IntLit) and v.width is None else \
        v.number if isinstance(v, ast.Quantity) else None
    if number is None or number <= MAX_PROPERTY_NUMBER:
        return True
    shown = _shown(number)
    diags.error("E090", f"{p.name} must be at most 2^53 ({MAX_PROPERTY_NUMBER}), not {shown}", v.span)
    return False


def check_count(v: ast.PropValue, what: str, diags: Diagnostics) -> int:
    """A size like ``4096`` or ``16M``: E032 unless a positive count, E090 above ``MAX_ENTRIES``.
    Returns the count, 0 after an error."""
    if isinstance(v, ast.Quantity) and not math.isfinite(v.number):
        n: int | None = None
        shown = "infinity"
    else:
        n = quantity_count(v)
        if n is None or n <= 0:
            diags.error("E032", f"{what} must be a positive count like 4096 or 16M", v.span)
            return 0
        shown = _shown(n)
    if n is None or n > MAX_ENTRIES:
        diags.error("E090", f"{what} must be at most {MAX_ENTRIES} (2^32 - 1: generated code counts entries in "
                    f"32 bits), not {shown}", v.span)
        return 0
    return n


def check_timeout(v: ast.PropValue, diags: Diagnostics) -> None:
    """A duration like ``120s``: E032 unless one, E090 unless above zero and at most
    ``MAX_TIMEOUT_SECONDS`` (generated code keeps nanoseconds in 64 bits)."""
    seconds = quantity_seconds(v)
    if seconds is None:
        diags.error("E032", "timeout must be a duration like 120s", v.span)
    elif not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        diags.error("E090", f"timeout must be above 0s and at most {MAX_TIMEOUT_SECONDS}s, not {_shown(seconds)}s",
                    v.span)


def check_port_list(pl: ast.PortList, diags: Diagnostics) -> bool:
    """E090 for a range that is descending or beyond port ``MAX_PORT``."""
    ok = True
    for lo, hi in pl.ranges:
        if hi < lo or hi > MAX_PORT:
            diags.error("E090", f"port range {_shown(lo)}..{_shown(hi)} must be ascending and below {MAX_PORT + 1}",
                        pl.span)
            ok = False
    return ok


def _shown(x: float) -> str:
    """A number as a message shows it: short even when it has hundreds of digits."""
    if isinstance(x, float):
        return "infinity" if math.isinf(x) else f"{x:g}"
    return str(x) if x.bit_length() < 64 else f"a number of {len(str(x))} digits"
