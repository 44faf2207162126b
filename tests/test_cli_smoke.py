"""``nfc`` as a user runs it: its own process (``python -m nfc.cli``), its exit status and its
output.  The other tests call ``nfc.cli.main`` in-process (tests/support ``nfc_cli``); these
keep the command itself honest: start-up, argument errors, diagnostics on stderr, a build."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import ROOT, nfc_subprocess


def test_help_lists_every_command():
    r = nfc_subprocess("--help")
    assert r.returncode == 0, r.stderr
    for command in ("check", "fmt", "build", "switch-model", "run", "verify"):
        assert command in r.stdout


def test_help_does_not_load_the_compiler_the_generators_or_the_runtime():
    """``nfc --help`` imports the command line and nothing heavy (it answers at once)."""
    code = ("import sys\nsys.argv = ['nfc', '--help']\nfrom nfc.cli import main\ntry:\n    main()\n"
            "except SystemExit:\n    pass\nheavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('z3', 'grpc', 'lark', 'compiler', 'targets', 'emulator', 'runtime', 'scapy'))\nprint(heavy)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout


def test_usage_error_exits_2():
    r = nfc_subprocess("build")
    assert r.returncode == 2 and "the following arguments are required: file" in r.stderr


def test_check_accepts_an_example_and_reports_a_located_error(tmp_path):
    r = nfc_subprocess("check", "examples/vpn_gateway.nfp")
    assert (r.returncode, r.stdout) == (0, "examples/vpn_gateway.nfp: ok\n"), r.stderr
    bad = tmp_path / "bad.nfp"
    bad.write_text('import "std/headers.nfp";\npacket { eth: ethernet; }\nstage s { eth.nope = 1; }\n')
    r = nfc_subprocess("check", str(bad))
    assert r.returncode == 1 and f"{bad}:3:" in r.stderr and "error[E" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_build_writes_the_folder_and_names_the_plan_and_the_report(tmp_path):
    out = tmp_path / "out"
    r = nfc_subprocess("build", "tests/corpus/lpm_routes.nfp", "--target", "tofino+dpdk", "-o", str(out),
                       "--no-verify", timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}/plan.json, report {out}/report.txt" in r.stderr
    plan = json.loads((out / "plan.json").read_text())
    assert {s["name"] for s in plan["stages"]} == {"classify", "route"}
    assert (out / "report.txt").is_file() and (out / "server" / "nf.c").is_file()
