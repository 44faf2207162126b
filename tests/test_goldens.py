"""Golden files (p4c style): examples → IR dump, plan.json, report; error cases → stderr.

A missing or different golden fails.  Rewrite them only with
``python3 build.py test --update-goldens`` and read the diff before committing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from targets.dpdk.generator import COPIED
from tests.support import ROOT, nfc_cli

GOLDEN = ROOT / "tests" / "golden"
EXAMPLES = sorted((ROOT / "examples").glob("*.nfp"))
# a corpus program that pins what examples do not show: registers on the switch (RegisterAction)
EXAMPLES.append(ROOT / "tests" / "corpus" / "switch_registers.nfp")
ERRORS = sorted((GOLDEN / "errors").glob("*.nfp"))


def check_golden(path: Path, actual: str, update: bool) -> None:
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        return
    assert path.exists(), f"missing golden {path.relative_to(ROOT)} (run with --update-goldens)"
    expected = path.read_text()
    assert actual == expected, f"{path.relative_to(ROOT)} differs (run with --update-goldens and read the diff)"


def nfc(*args: str) -> subprocess.CompletedProcess[str]:
    return nfc_cli(*args)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_example_goldens(example: Path, tmp_path: Path, update_goldens: bool) -> None:
    rel = str(example.relative_to(ROOT))
    r = nfc("build", rel, "--target", "tofino+dpdk", "-o", str(tmp_path))
    check_golden(GOLDEN / "examples" / example.stem / "stderr.txt", _stable_stderr(r.stderr), update_goldens)
    if not (tmp_path / "plan.json").exists():
        return
    import json

    generated = json.loads((tmp_path / "plan.json").read_text())["generated"]
    copied = set(COPIED)  # the hand-written runtime, copied verbatim
    pinned = sorted(v for k, v in generated.items() if k not in copied)
    for name in ("ir.txt", "plan.json", "report.txt", *pinned):
        check_golden(GOLDEN / "examples" / example.stem / name, (tmp_path / name).read_text(), update_goldens)


@pytest.mark.parametrize("case", ERRORS, ids=[e.stem for e in ERRORS])
def test_error_goldens(case: Path, update_goldens: bool) -> None:
    r = nfc("check", str(case.relative_to(ROOT)))
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    check_golden(case.with_suffix(".stderr"), r.stderr, update_goldens)


_PROGRESS = ("[", "      ", "generating ", "placed ", "note: no ", "verified ")


def _stable_stderr(text: str) -> str:
    """The diagnostics, without progress lines (which carry timings)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith(_PROGRESS)) + "\n"
