"""Fixtures (the helpers they use, and every other shared helper, are in ``tests/support``)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Front, changed_shared_builds


@pytest.fixture
def front(tmp_path: Path) -> Front:
    return Front(tmp_path)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true", help="rewrite golden files instead of comparing")


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


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
