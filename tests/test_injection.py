"""Names that reach generated code are data, never code (issue 17): a source path that holds
a C string terminator, a comment terminator, a backslash escape or a line break builds into
a server program that compiles warning-free and prints the path back as it was, a P4 program
that passes the lint, and a runtime API package that parses."""

from __future__ import annotations

import ast
import re
import shutil

import pytest

from tests.support import HAVE_DPDK, ROOT, nfc_cli, run_make

# the directory "evil*" makes "*/" appear in every "/* … path … */" comment; the file name closes
# a C string and would define a constructor; "\N" breaks a Python string; the line break a // comment
EVIL_DIR = "evil*"
EVIL_FILE = 'a"; __attribute__((constructor)) static void pwn(void) { abort(); } static char s[] = "\\N\nb.nfp'


def test_a_hostile_source_path_stays_a_name(tmp_path):
    folder = tmp_path / EVIL_DIR
    folder.mkdir()
    src = folder / EVIL_FILE
    shutil.copyfile(ROOT / "tests/corpus/all_switch.nfp", src)
    out = tmp_path / "out"
    r = nfc_cli("build", str(src), "-o", str(out), "--target", "tofino+dpdk")
    assert r.returncode == 0, r.stderr[-3000:]
    nf_c = (out / "server/nf.c").read_text()
    code = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', re.sub(r"/\*.*?\*/", " ", nf_c, flags=re.S))
    assert "pwn" not in code and "*/" not in code, "the path escaped its comment or string"
    assert '"' + EVIL_FILE[:1] + '\\"; __attribute__' in nf_c  # the name, escaped
    for p4 in ("tna.p4", "v1model.p4"):
        text = (out / "switch" / p4).read_text()
        assert "static char s[]" not in "\n".join(x for x in text.splitlines() if not x.lstrip().startswith("//"))
    assert (out / "switch/lint.txt").read_text() == ""
    for api in (out / "python").rglob("__init__.py"):
        ast.parse(api.read_text())
    if not HAVE_DPDK:
        pytest.skip("DPDK (libdpdk-dev) missing: the C part is checked where python3 build.py setup installed it")
    r = run_make(out / "server")
    assert r.returncode == 0, r.stderr[-3000:]
