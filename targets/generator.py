"""What every code generator is: a name (the ``generator`` a target profile names), the kind
of code it writes, and ``emit(placed, plan, out)`` returning the artifacts it wrote
(artifact name -> path relative to ``out``), which ``plan.json`` lists under ``generated``.

A generator reads the placed program (typed IR, placement, bridges) and the plan, never the
syntax tree; a construct it cannot produce code for is a ``GeneratorError`` at its span.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from compiler.manifest import Plan
from compiler.placed import Placed

__all__ = ["Generator", "GeneratorError"]


class GeneratorError(Exception):
    """A construct the generator cannot produce code for (yet), at a source span."""

    def __init__(self, what: str, span: object) -> None:
        super().__init__(what)
        self.what = what
        self.span = span


class Generator(Protocol):
    name: str  # what a target profile's ``generator`` says
    what: str  # the code it writes, for progress messages: "switch", "server", "runtime API"

    def emit(self, placed: Placed, plan: Plan, out: Path) -> dict[str, str]: ...
