"""Code generators plug in here: ``register("tna")(emit)``; the CLI looks them up by the
``generator`` name in a target profile.  ``compiler/`` never imports this package."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["GENERATORS", "Generator", "GeneratorError", "lookup", "register"]


class GeneratorError(Exception):
    """A construct the generator cannot produce code for (yet), at a source span."""

    def __init__(self, what: str, span: object) -> None:
        super().__init__(what)
        self.what = what
        self.span = span

# emit(compilation, plan, out_dir) -> {artifact name: path relative to out_dir}
Generator = Callable[[Any, dict[str, Any], Path], dict[str, str]]
GENERATORS: dict[str, Generator] = {}


def register(name: str) -> Callable[[Generator], Generator]:
    def deco(fn: Generator) -> Generator:
        GENERATORS[name] = fn
        return fn

    return deco


def lookup(name: str) -> Generator | None:
    return GENERATORS.get(name)
