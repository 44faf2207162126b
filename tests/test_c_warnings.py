"""The generated server program builds warning-free (the Makefile's ``-Wall -Wextra -Werror``)
for every example and every program of ``tests/corpus/`` (small programs, each exercising a
corner of the C generator: an all-switch build, odd hash widths, LPM, state, ...), under
each target combination that writes a server program.

A combination the compiler refuses for that target — a stage it cannot run (E071), a
program that does not fit (E080), a construct the generator does not support yet (E1xx) —
is skipped with the diagnostic.  A build over the servers' capacity (E081) is retried with
``--allow-overcommit``: capacity is not what this test checks.  Verification is left out
(``--no-verify``): it is not what this test checks either.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import DPDK, ROOT, build_example, copy_build, nfc_cli, run_make

pytestmark = DPDK

PROGRAMS = sorted((ROOT / "examples").glob("*.nfp")) + sorted((ROOT / "tests/corpus").glob("*.nfp"))
TARGETS = ("tofino+dpdk", "dpdk")  # the combinations that write OUT/server
SKIPPED = re.compile(r"E071|E080|E1\d\d")  # unsupported on the target, does not fit, not generated yet
ERROR = re.compile(r"^(\S+: error\[(E\d+)\]: .*)$", re.MULTILINE)


def _build(program: Path, target: str, out: Path) -> subprocess.CompletedProcess[str]:
    # the source named from the project root, as the other tests name it: the generated code quotes it
    args = ["build", str(program.relative_to(ROOT)), "--target", target, "--no-verify", "-o", str(out)]
    r = nfc_cli(*args)
    if r.returncode != 0 and "error[E081]" in r.stderr:
        r = nfc_cli(*args, "--allow-overcommit")
    return r


def _skip_reason(stderr: str) -> str | None:
    """The refusals, when every error is one this test skips; else None (a failure)."""
    errors = ERROR.findall(stderr)
    if not errors or "internal error" in stderr or not all(SKIPPED.fullmatch(code) for _, code in errors):
        return None
    return "; ".join(line for line, _ in errors)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("program", PROGRAMS, ids=[f"{p.parent.name}/{p.stem}" for p in PROGRAMS])
def test_server_program_builds_warning_free(program: Path, target: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = _build(program, target, out)
    if r.returncode != 0:
        reason = _skip_reason(r.stderr)
        if reason is None:
            pytest.fail(f"nfc build failed:\n{r.stderr[-4000:]}")
        pytest.skip(reason)
    server = out / "server"
    assert (server / "nf.c").is_file(), f"--target {target} wrote no server program"
    # made through the content cache (runtime/made.py): a program made before from the same sources
    # made with -Werror then, so it is warning-free now (the other tests build the same programs)
    make = run_make(server)
    assert make.returncode == 0, f"make failed:\n{make.stderr[-6000:]}"
    assert (server / "nf").is_file()


def test_sources_are_compiled_from_the_precompiled_header(tmp_path: Path) -> None:
    """The Makefile parses the headers once per flag set (nfc_pch.h precompiled into
    nfc_pch.h.gch/): gcc -H marks a precompiled header it takes with ``!`` and one it cannot
    take (made with other flags) with ``x``.  nfc_control.c defines _GNU_SOURCE itself, as the
    header does first."""
    server = copy_build(build_example("examples/dsr_router.nfp", "dpdk", "--no-verify"), tmp_path / "out") / "server"
    objects = ["nf.o", "nfc_control.o", "nf.san.o", "nfc_control.san.o"]
    r = subprocess.run(["make", "-C", str(server), "CC=cc -H", *objects], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    taken = re.findall(r"^! \./nfc_pch\.h\.gch/(\w+)\.gch$", r.stderr, re.MULTILINE)
    assert taken == ["nf", "nf", "san", "san"], r.stderr[-3000:]
    assert all((server / o).is_file() for o in objects)
    assert not list((server / "nfc_pch.h.gch").glob("*.gch"))  # intermediate: gone after the build
