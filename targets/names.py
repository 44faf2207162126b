"""A ``.nfp`` name a generated language cannot take: the one error every generator raises
for it (E014 at the name), whatever the language."""

from __future__ import annotations

from compiler.ir import Span
from targets.generator import GeneratorError

__all__ = ["NameClash"]


class NameClash(GeneratorError):
    """``what`` is the whole message: '<kind> '<name>' is a keyword of P4 ...'."""

    code = "E014"

    def __init__(self, what: str, span: Span) -> None:
        super().__init__(what, span)
