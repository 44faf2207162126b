"""A persistent cache keyed by content: what nfc computed once (a placement, a compiled server
program) is kept under a key that hashes everything it was made from, and taken again
instead of being made twice.

The folder is ``$NFC_CACHE_DIR`` when set (``off`` turns caching off), else ``build/cache``
in nfc's own project folder.  An entry is a folder ``ROOT/KIND/KEY/`` whose files are
written to a temporary name and renamed into place, so a reader sees a whole file or none;
``locked`` serialises the making of one key between processes (``fcntl.flock``), so two
processes that need the same entry at once make it once.  A key covers the inputs that
decide the result: a stale entry cannot be found, only an old one that nothing asks for
(delete the folder to reclaim the space).

A leaf module (the standard library only): the compiler (placements) and the runtime
(``nfc run``'s server programs) both use it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cache_root", "compiler_fingerprint", "content_key", "entry", "locked", "store"]

_PROJECT = Path(__file__).resolve().parent.parent
# what decides what the compiler produces: its sources, the standard library, the target profiles
_SOURCES = ("lang", "compiler", "targets", "stdlib")


def cache_root() -> Path | None:
    """The cache folder (None: caching is off, ``NFC_CACHE_DIR=off``)."""
    env = os.environ.get("NFC_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "no") else Path(env)
    return _PROJECT / "build" / "cache"


@functools.cache
def compiler_fingerprint() -> str:
    """A hash of every source file of the compiler, its standard library and its target
    profiles: a key that includes it changes whenever nfc itself does."""
    h = hashlib.sha256()
    for top in _SOURCES:
        for f in sorted((_PROJECT / top).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(f"\0{f.relative_to(_PROJECT)}\0".encode() + f.read_bytes())
    return h.hexdigest()


def content_key(*parts: str | bytes) -> str:
    """The key of an entry made from ``parts`` (each one delimited, so no two lists collide)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def entry(root: Path, kind: str, key: str, name: str) -> Path | None:
    """File ``name`` of entry ``kind/key``, if it was stored."""
    path = root / kind / key / name
    return path if path.is_file() else None


def store(root: Path, kind: str, key: str, name: str, data: bytes | Path) -> Path:
    """Keep ``data`` (bytes, or a file copied with its mode) as file ``name`` of entry
    ``kind/key``: written beside, then renamed into place."""
    folder = root / kind / key
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.{os.getpid()}.tmp"
    if isinstance(data, Path):
        shutil.copy2(data, tmp)
    else:
        tmp.write_bytes(data)
    os.replace(tmp, folder / name)
    return folder / name


@contextlib.contextmanager
def locked(root: Path, kind: str, key: str) -> Iterator[None]:
    """Hold the lock of entry ``kind/key`` (other processes making it wait, then find it made)."""
    (root / kind).mkdir(parents=True, exist_ok=True)
    with open(root / kind / f"{key}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
