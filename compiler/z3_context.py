"""Z3 queries in a context of their own (STYLE.md: "Z3 queries use a fresh context").

Z3's answer among equally good models follows its terms' ids, which a context shared with
earlier queries shifts: the same program placed twice in one process (``nfc.cli.main``
called twice, a test session) could get two layouts, or one that depends on whether an
earlier query ran out of time.  z3py makes its terms in ``main_ctx()``, created on first
use; ``fresh_context`` replaces the module's ``_main_ctx`` for the query and puts it back
after, so code written against the default context needs no ``ctx=`` arguments.  Terms
made inside stay valid after (each holds its context); they must not be mixed with terms
made outside.  Usable as a decorator.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import z3

__all__ = ["fresh_context"]


@contextlib.contextmanager
def fresh_context() -> Iterator[None]:
    module = z3.z3
    saved = module._main_ctx
    module._main_ctx = z3.Context()
    try:
        yield
    finally:
        module._main_ctx = saved
