"""Server programs made once by content: ``make`` of a generated server folder, kept in the
cache (``compiler/content_cache.py``) under a key of every source file in the folder, the make
target, the compiler settings of the environment and the toolchain (``cc --version``, DPDK's
version), and copied from there the next time the same sources are made.

The key is the sources' content, not their times: a folder rebuilt with another program gets
that program's binary (``nfc run`` never runs a binary older than its sources), and a folder
that holds the same sources as one made before gets its binary without compiling.
"""

from __future__ import annotations

import filecmp
import functools
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from compiler.content_cache import content_key, entry, locked, store

__all__ = ["PRODUCTS", "is_made", "make_program", "program_key"]

PRODUCTS = ("nf", "nf-san", "nf-bench")  # what the generated Makefile makes (its header lists them)
_MADE = (".o", ".d", ".gch")  # what it makes on the way: objects, dependencies, precompiled headers


def is_made(path: Path) -> bool:
    """Did ``make`` make the file at ``path`` of a server folder (a program, or a step towards one),
    rather than the generator write it?"""
    return path.name in PRODUCTS or path.suffix in _MADE
_SETTINGS = ("CC", "CFLAGS", "LDFLAGS", "MAKEFLAGS", "PKG_CONFIG_PATH")
_KIND = "server"


@functools.cache
def _toolchain() -> str:
    """The C compiler's and DPDK's versions (part of every key)."""
    parts = []
    for cmd in ([os.environ.get("CC", "cc"), "--version"], ["pkg-config", "--modversion", "libdpdk"]):
        try:
            parts.append(subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout)
        except OSError:
            parts.append(f"{cmd[0]}: not found")
    return "\0".join(parts)


def program_key(folder: Path, target: str = "nf") -> str:
    """The key of making ``target`` in ``folder``: its sources (not the objects or programs a
    make left there), the environment's compiler settings and the toolchain."""
    parts: list[str | bytes] = [target, _toolchain(), *(f"{v}={os.environ.get(v)}" for v in _SETTINGS)]
    for f in sorted(folder.rglob("*")):
        if f.is_file() and not is_made(f):
            parts += [str(f.relative_to(folder)), f.read_bytes()]
    return content_key(*parts)


def make_program(folder: Path, target: str = "nf", cache: Path | None = None, jobs: int = 2,
                 progress: Callable[[str], None] | None = None) -> subprocess.CompletedProcess[str]:
    """``make -jJOBS -C FOLDER TARGET``, or the program made before from the same sources (from
    ``cache``; None: always make).  ``progress`` hears what is being made and how long it took."""
    say = progress or (lambda _msg: None)
    cmd = ["make", f"-j{jobs}", "-C", str(folder), target]
    if cache is None:
        return _make(cmd, folder, target, say)
    key = program_key(folder, target)
    with locked(cache, _KIND, key):  # a second process making the same sources waits, then copies
        kept = entry(cache, _KIND, key, target)
        if kept is not None:
            _take(kept, folder / target)
            say(f"server program {folder / target}: made before from the same sources (cache {key[:12]})")
            return subprocess.CompletedProcess(cmd, 0, "", "")
        r = _make(cmd, folder, target, say)
        if r.returncode == 0:
            store(cache, _KIND, key, target, folder / target)
            store(cache, _KIND, key, f"{target}.from", f"{folder.resolve()}\n".encode())  # where it was first made
        return r


def _take(kept: Path, dest: Path) -> None:
    """The kept program as ``dest``: left alone when it is that program already (another process
    may be running it), else copied beside and renamed over it (a running binary stays whole)."""
    if dest.is_file() and filecmp.cmp(kept, dest, shallow=False):
        return
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.copy2(kept, tmp)
    os.replace(tmp, dest)


def _make(cmd: list[str], folder: Path, target: str, say: Callable[[str], None]) -> subprocess.CompletedProcess[str]:
    say(f"making the server program {folder / target} ({' '.join(cmd[:2])}) ...")
    started = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    say(f"      {'made' if r.returncode == 0 else 'make failed'} in {time.monotonic() - started:.1f} s")
    return r
