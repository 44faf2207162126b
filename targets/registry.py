"""The code generators, by name: a target profile's ``generator`` (``stdlib/targets/*.toml``)
is looked up here, and every build also runs the ``ALWAYS`` ones (the runtime API).  The list
is explicit: adding a generator is one line here.  ``compiler/`` never imports this package."""

from __future__ import annotations

from collections.abc import Mapping

from targets.dpdk.generator import DpdkGenerator
from targets.generator import Generator, GeneratorError
from targets.pyapi.generator import PythonApiGenerator
from targets.tofino.generator import TnaGenerator

__all__ = ["ALWAYS", "GENERATORS", "Generator", "GeneratorError", "lookup"]

GENERATORS: Mapping[str, Generator] = {g.name: g for g in (TnaGenerator(), DpdkGenerator(), PythonApiGenerator())}
ALWAYS = ("python-api",)  # run for every build, whatever its targets


def lookup(name: str) -> Generator | None:
    return GENERATORS.get(name)
