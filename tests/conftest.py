"""Fixtures (the helpers they use, and every other shared helper, are in ``tests/support``)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT, Front, changed_shared_builds


@pytest.fixture
def front(tmp_path: Path) -> Front:
    return Front(tmp_path)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true", help="rewrite golden files instead of comparing")


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture(scope="session")
def server_runtime_objects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the hand-written server runtime (``targets/dpdk/runtime``) and its
    objects, compiled once by its Makefile (``-Wall -Wextra -Werror``): a build whose copy of
    the runtime is identical can take them and compile only its ``nf.c``."""
    folder = tmp_path_factory.mktemp("server_runtime")
    for f in (ROOT / "targets/dpdk/runtime").iterdir():
        shutil.copyfile(f, folder / f.name)
    # no program's sizes: nfc_rt.h's defaults (the objects taken do not lay out struct nfc_pkt);
    # the tables' layout, as every build's, from the server profile
    from compiler.profiles import load_profiles
    from targets.c import syntax as c
    from targets.c.printer import print_unit
    from targets.dpdk.lower import runtime_layout

    layout = runtime_layout(load_profiles()["dpdk_server"].memory)
    (folder / "nfc_prog.h").write_text(print_unit(c.Unit("the runtime's default packet model sizes", layout)))
    objects = [f"{c.stem}.o" for c in folder.glob("nfc_*.c") if c.name != "nfc_bench.c"]
    r = subprocess.run(["make", "-j2", "-C", str(folder), *objects], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return folder


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A redis-server of the test's own on a unix socket (owner-only), no persistence: its URL."""
    import time

    sock = tmp_path / "redis.sock"
    proc = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
                             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if sock.exists():
                break
            time.sleep(0.05)
        assert sock.exists(), "redis-server did not open its socket"
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session", autouse=True)
def _shared_builds_stay_read_only() -> Iterator[None]:
    """Builds from ``build_example`` are shared by every test: none may write into one."""
    yield
    changed = changed_shared_builds()
    assert not changed, ("tests wrote into shared builds (a test that changes a build copies it first: "
                         "tests/support copy_build):\n" + "\n".join(changed))
