#!/usr/bin/env python3
"""The one entry point of the nfc project: setup, test, demo, bench.

    python3 build.py setup   # apt packages (DPDK, compilers) + .venv with pinned Python deps
    python3 build.py test    # setup, then ruff, mypy (strict on lang/ and compiler/), pytest
    python3 build.py demo    # setup, build the VPN gateway, print its placement, run it (switch model + DPDK)
    python3 build.py bench   # setup, then run bench/*.py (ratios against in-run baselines)

Everything a fresh Debian machine lacks is installed here, so nothing depends on what an
earlier session left behind.  Only the standard library is used in this file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"
CLIENT_VENV = ROOT / ".venv-p4rt"  # the independent P4Runtime client (p4runtime-shell) pins old protobuf
APT_PACKAGES = ["dpdk", "libdpdk-dev", "dpdk-dev", "pkg-config", "gcc", "make", "libpcap-dev", "python3-venv",
                "graphviz"]


def log(msg: str) -> None:
    print(f"[build.py {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd: list[str], **kw: object) -> int:
    log("$ " + " ".join(str(c) for c in cmd))
    return subprocess.call(cmd, cwd=ROOT, **kw)  # type: ignore[call-overload, no-any-return]


def missing_apt() -> list[str]:
    if shutil.which("dpkg-query") is None:
        return []
    missing = []
    for pkg in APT_PACKAGES:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
        if "install ok installed" not in out.stdout:
            missing.append(pkg)
    return missing


def setup_apt() -> None:
    missing = missing_apt()
    if not missing:
        log("apt packages present")
        return
    if os.geteuid() != 0:
        log(f"WARNING: not root, cannot install {missing}; tests needing them will skip")
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    rc = run(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL)
    rc = rc or run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], env=env,
                   stdout=subprocess.DEVNULL)
    if rc:
        log(f"WARNING: apt-get failed ({rc}); tests needing {missing} will skip")


def setup_venv() -> None:
    req = ROOT / "requirements.txt"
    stamp = VENV / ".nfc-stamp"
    want = hashlib.sha256(req.read_bytes() + (ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if PY.exists() and stamp.exists() and stamp.read_text() == want:
        log("virtualenv up to date")
        return
    if not PY.exists():
        rc = run([sys.executable, "-m", "venv", str(VENV)])
        if rc:
            sys.exit("cannot create the virtualenv (is python3-venv installed?)")
    pip = [str(PY), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if run([*pip, "-r", str(req)]) or run([*pip, "--no-deps", "--no-build-isolation", "-e", str(ROOT)]):
        sys.exit("pip install failed")
    stamp.write_text(want)


def setup_client_venv() -> None:
    req = ROOT / "requirements-p4rt.txt"
    stamp = CLIENT_VENV / ".nfc-stamp"
    want = hashlib.sha256(req.read_bytes()).hexdigest()
    py = CLIENT_VENV / "bin" / "python"
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return
    if (not py.exists() and run([sys.executable, "-m", "venv", str(CLIENT_VENV)])) or \
            run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(req)]):
        log("WARNING: could not set up the P4Runtime client virtualenv; tests that need it will skip")
        return
    stamp.write_text(want)


def setup() -> None:
    setup_apt()
    setup_venv()
    setup_client_venv()


def test(args: list[str]) -> int:
    setup()
    bin_ = VENV / "bin"
    steps = [
        [str(bin_ / "ruff"), "check", "."],
        [str(bin_ / "mypy")],
        [str(PY), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
    ]
    for step in steps:
        rc = run(step)
        if rc:
            log(f"FAILED: {' '.join(step[:2])} exited {rc}")
            return rc
    return 0


def demo() -> int:
    setup()
    nfc = str(VENV / "bin" / "nfc")
    return run([nfc, "build", "examples/vpn_gateway.nfp", "--target", "tofino+dpdk", "-o", "build/vpn_gateway"]) \
        or run(["cat", "build/vpn_gateway/report.txt"]) \
        or run([str(PY), "examples/demo_run.py"])


def bench(args: list[str]) -> int:
    setup()
    rc = 0
    for script in sorted((ROOT / "bench").glob("bench_*.py")):
        rc |= run([str(PY), str(script), *args])
    return rc


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("setup", "test", "demo", "bench"):
        print(__doc__)
        return 2
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "setup":
        setup()
        return 0
    if cmd == "test":
        return test(rest)
    if cmd == "demo":
        return demo()
    return bench(rest)


if __name__ == "__main__":
    sys.exit(main())
