"""The placed program as a build folder keeps it: ``OUT/placed.json``.

``nfc run``, ``nfc verify``, ``nfc switch-model`` and the runtime read what was built, not
the source: the typed IR, the resolved targets, the placement and the bridge layouts,
serialised here and loaded back without the front end, so a build folder works from any
directory and on a machine that has no ``.nfp`` file.

The format is JSON: a frozen dataclass of the compiler becomes ``{"@": "Class", field: …}``;
tuples, dicts (keys need not be strings), frozensets are tagged the same way.  Only the
classes of the modules in ``_MODULES`` are accepted when loading.  ``PLACED_VERSION`` changes
whenever a class of those modules changes shape; ``load_placed`` refuses another version
with a message that says to rebuild.

Before: ``compile_program(...)`` in every command.  After: ``load_placed(OUT / "placed.json")``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler import ir, manifest, placement, profiles
from compiler.manifest import read_json
from compiler.placement import Bridge, Placement
from compiler.profiles import TargetSet
from lang import diagnostics

__all__ = ["PLACED_VERSION", "Placed", "PlacedError", "decode", "dump_placed", "encode", "load_placed"]

PLACED_VERSION = 4  # 3: a deployment's shard (TargetDecl.shard), TargetSet.sharded; 4: Register.monotonic


class PlacedError(ValueError):
    """A ``placed.json`` this compiler cannot read (another version, not one at all)."""


@dataclass(frozen=True, slots=True)
class Placed:
    """What a build placed: everything after the front end that an executor needs."""

    program: ir.Program
    targets: TargetSet
    placement: Placement
    bridges: tuple[Bridge, ...]


_MODULES = (ir, placement, manifest, profiles, diagnostics)
_CLASSES: dict[str, type] = {
    name: obj for m in _MODULES for name, obj in vars(m).items()
    if isinstance(obj, type) and obj.__module__ == m.__name__ and (dataclasses.is_dataclass(obj)
                                                                   or issubclass(obj, enum.Enum))
} | {"Placed": Placed}


def _enc(x: Any) -> Any:
    if isinstance(x, enum.Enum):  # first: an IntEnum is an int too
        return {"@": type(x).__name__, "value": x.value}
    if x is None or isinstance(x, bool | int | float | str):
        return x
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {"@": type(x).__name__, **{f.name: _enc(getattr(x, f.name)) for f in dataclasses.fields(x)}}
    if isinstance(x, tuple):
        return {"@tuple": [_enc(v) for v in x]}
    if isinstance(x, list):
        return [_enc(v) for v in x]
    if isinstance(x, frozenset | set):
        return {"@frozenset": sorted((_enc(v) for v in x), key=json.dumps)}
    if isinstance(x, dict):
        return {"@dict": [[_enc(k), _enc(v)] for k, v in x.items()]}
    raise TypeError(f"cannot serialise {type(x).__name__}")


def _dec(x: Any) -> Any:
    if isinstance(x, list):
        return [_dec(v) for v in x]
    if not isinstance(x, dict):
        return x
    if "@tuple" in x:
        return tuple(_dec(v) for v in x["@tuple"])
    if "@frozenset" in x:
        return frozenset(_dec(v) for v in x["@frozenset"])
    if "@dict" in x:
        return {_dec(k): _dec(v) for k, v in x["@dict"]}
    name = x.get("@")
    cls = _CLASSES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise PlacedError(f"unknown object {name!r}")
    if issubclass(cls, enum.Enum):
        return cls(x["value"])
    assert dataclasses.is_dataclass(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    return cls(**{k: _dec(v) for k, v in x.items() if k != "@" and k in fields})


def encode(x: Any) -> Any:
    """``x`` (an object of the compiler's dataclasses, enums and containers) as JSON data."""
    return _enc(x)


def decode(data: Any) -> Any:
    """What ``encode`` made, as objects again (PlacedError on an unknown class)."""
    return _dec(data)


def dump_placed(p: Placed) -> str:
    return json.dumps({"placed_version": PLACED_VERSION, "placed": _enc(p)}, sort_keys=True) + "\n"


def load_placed(path: Path) -> Placed:
    """The placed program of ``path``; PlacedError when it is not one this compiler wrote."""
    data = read_json(path, "cannot read the placed program", PlacedError)
    version = data.get("placed_version") if isinstance(data, dict) else None
    if version != PLACED_VERSION:
        raise PlacedError(f"{path}: placed program version {version}, this nfc reads version {PLACED_VERSION}: "
                          "rebuild with this nfc")
    try:
        placed = _dec(data["placed"])
    except (KeyError, TypeError) as e:
        raise PlacedError(f"{path}: malformed placed program ({e})") from e
    if not isinstance(placed, Placed):
        raise PlacedError(f"{path}: malformed placed program")
    return placed
