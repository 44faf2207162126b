#!/usr/bin/env python3
"""The one entry point of the nfc project: setup, test, demo, bench.

    python3 build.py setup   # apt packages (DPDK, compilers) + .venv with pinned Python deps
    python3 build.py test [--quick] [PYTEST ARGS]   # setup, then ruff, mypy (strict), pytest on both cores
                                                    # (--quick: the inner loop, tests not marked slow)
    python3 build.py demo    # setup, build the VPN gateway, print its placement, run it (switch model + DPDK)
    python3 build.py bench [--quick] [NAME...]   # setup, then bench/bench_NAME.py (ratios against in-run baselines)
    python3 build.py fuzz --minutes N [--seed S] [--out DIR]   # setup, then every fuzzer for its share of N

Everything a fresh Debian machine lacks is installed here, so nothing depends on what an
earlier session left behind.  Only the standard library is used in this file.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
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
                "graphviz", "dpdk-doc",  # dpdk-doc: l3fwd's sources, bench/bench_l3fwd.py's baseline
                "redis-server"]  # the shared goal store (runtime/goal_redis.py); tests start their own


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


def setup_protos() -> None:
    """The p4runtime wheel's _pb2 modules rewritten for protobuf's C implementation (upb):
    tools/p4rt_protos.py, idempotent, run on every setup (a reinstalled wheel is converted again)."""
    if run([str(PY), str(ROOT / "tools" / "p4rt_protos.py")]):
        sys.exit("cannot regenerate the p4runtime protobuf modules")


def setup() -> None:
    setup_apt()
    setup_venv()
    setup_protos()
    setup_client_venv()


def pytest_args(args: list[str]) -> list[str]:
    """pytest's arguments for ``build.py test ARGS``: every core (pytest-xdist, one worker per
    core, a worker that runs out of tests takes some of another's) unless ARGS say ``-n``;
    ``--quick`` leaves out the tests marked slow (DPDK processes, live runs, long fuzzing)."""
    quick = "--quick" in args
    rest = [a for a in args if a != "--quick"]
    workers = [] if any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in rest) else \
        ["-n", str(os.cpu_count() or 1), "--dist", "worksteal"]
    return ["-q", "-p", "no:cacheprovider", "--durations=25", *workers, *(["-m", "not slow"] if quick else []), *rest]


def test(args: list[str]) -> int:
    setup()
    bin_ = VENV / "bin"
    steps = [
        [str(bin_ / "ruff"), "check", "."],
        [str(bin_ / "mypy")],
        [str(PY), "-m", "pytest", *pytest_args(args)],
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
    """Setup, then bench/bench_NAME.py for each NAME given (default: all), each with --quick if
    given (every benchmark takes it: one short round); exit status 1 if any failed."""
    ap = argparse.ArgumentParser(prog="build.py bench", description="run the benchmarks under bench/")
    ap.add_argument("names", nargs="*", help="e.g. l3fwd state (bench/bench_l3fwd.py, bench/bench_state.py)")
    ap.add_argument("--quick", action="store_true", help="one short round of each")
    opts = ap.parse_args(args)
    scripts = {p.stem.removeprefix("bench_"): p for p in sorted((ROOT / "bench").glob("bench_*.py"))}
    unknown = [n for n in opts.names if n not in scripts]
    if unknown:
        ap.error(f"no benchmark {', '.join(unknown)} (there are: {', '.join(scripts)})")
    setup()
    rc = 0
    for name in opts.names or list(scripts):
        rc |= run([str(PY), str(scripts[name]), *(["--quick"] if opts.quick else [])])
    return rc


# tests/<name>.py with a long mode: ``python -m tests.<name> --minutes M --seed S --out DIR`` fuzzes for M
# minutes, saves each failure minimised under DIR, prints "<n> inputs in ..." and "<k> distinct failures"
# and exits 1 if it found any.  A fuzzer whose module is not there is left out.
FUZZERS = ("nfp_fuzz", "packet_fuzz", "control_fuzz")


def fuzz(args: list[str]) -> int:
    """Setup, then each fuzzer in FUZZERS for an equal share of --minutes; a summary line per
    fuzzer; exit status 1 if any found a failure (its reproducers are under --out)."""
    ap = argparse.ArgumentParser(prog="build.py fuzz", description="run every fuzzer for its share of the minutes")
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--seed", type=int, default=None, help="default: from the clock (printed, to run it again)")
    ap.add_argument("--out", default="build/fuzz", help="minimised reproducers, one folder per fuzzer")
    opts = ap.parse_args(args)
    setup()
    seed = opts.seed if opts.seed is not None else int(time.time()) % 100_000
    present = [f for f in FUZZERS if (ROOT / "tests" / f"{f}.py").is_file()]
    log(f"fuzzing {opts.minutes:g} min with seed {seed}: {', '.join(present)}")
    summary = [run_fuzzer(name, opts.minutes / len(present), seed, Path(opts.out) / name) for name in present]
    for line, _clean in summary:
        log(line)
    return 0 if all(clean for _line, clean in summary) else 1


def run_fuzzer(name: str, minutes: float, seed: int, out: Path) -> tuple[str, bool]:
    """Run one fuzzer's long mode (its output shown as it comes); its summary line, and
    whether it ended with nothing found."""
    cmd = [str(PY), "-m", f"tests.{name}", "--minutes", f"{minutes:.2f}", "--seed", str(seed), "--out", str(out)]
    log("$ " + " ".join(cmd))
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    text = ""
    for line in proc.stdout:
        print(line, end="", flush=True)
        text += line
    rc = proc.wait()
    inputs = re.search(r"^(\d+) inputs in", text, re.M)
    failures = re.search(r"^(\d+) distinct failures", text, re.M)
    if inputs is None or failures is None:
        return f"{name}: FAILED, ended without its summary (exit {rc})", False
    clean = rc == 0 and failures[1] == "0"
    return f"{name}: {inputs[1]} inputs, {failures[1]} failures" + ("" if clean else f", reproducers in {out}"), clean


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("setup", "test", "demo", "bench", "fuzz"):
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
    if cmd == "fuzz":
        return fuzz(rest)
    return bench(rest)


if __name__ == "__main__":
    sys.exit(main())
