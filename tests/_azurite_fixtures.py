"""A real Azure Blob Storage emulator (Azurite) for tests, started once per test session.

Use it by importing the fixture into a test module (or a conftest)::

    from tests._azurite_fixtures import azurite  # noqa: F401

The fixture starts ``node_modules/.bin/azurite-blob`` (pinned in ``package.json``; ``npm ci`` at
the repository root installs it) on 127.0.0.1 with a free port chosen by the OS, in memory and
with telemetry off, reads the port from its output and kills the process by its pid at
teardown. A missing ``node_modules`` fails the tests with the fix; it never skips them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["ACCOUNT_KEY", "ACCOUNT_NAME", "Azurite", "azurite", "running_azurite"]

REPO_ROOT = Path(__file__).resolve().parents[1]
AZURITE_BIN = REPO_ROOT / "node_modules" / ".bin" / "azurite-blob"

ACCOUNT_NAME = "devstoreaccount1"
"""Azurite's well-known development account (public, documented; not a secret)."""
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
"""The well-known key of :data:`ACCOUNT_NAME`."""

_LISTENING = re.compile(r"successfully listens on http://127\.0\.0\.1:(\d+)")
_START_TIMEOUT = 60.0


@dataclass(frozen=True)
class Azurite:
    """A running Azurite blob service."""

    pid: int
    port: int

    @property
    def blob_endpoint(self) -> str:
        """The account's blob endpoint (the account name is in the path)."""
        return f"http://127.0.0.1:{self.port}/{ACCOUNT_NAME}"

    @property
    def connection_string(self) -> str:
        """A connection string for the development account."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};"
            f"AccountKey={ACCOUNT_KEY};BlobEndpoint={self.blob_endpoint};"
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate Azurite by its pid, escalating to SIGKILL, and reap it."""
    if process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@contextlib.contextmanager
def running_azurite(workdir: Path) -> Iterator[Azurite]:
    """Run one Azurite blob service (working directory ``workdir``) until the block exits."""
    if not AZURITE_BIN.exists():
        pytest.fail(
            f"Azurite is not installed ({AZURITE_BIN.relative_to(REPO_ROOT)} is missing): "
            "run `npm ci` at the repository root (`make test` does it).",
            pytrace=False,
        )
    if shutil.which("node") is None:
        pytest.fail("Azurite needs Node.js (node) on PATH; install Node.js 20.", pytrace=False)
    log_path = workdir / "azurite.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                str(AZURITE_BIN),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                "0",
                "--inMemoryPersistence",
                "--silent",
                "--disableTelemetry",
                "--skipApiVersionCheck",
            ],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        port = None
        deadline = time.monotonic() + _START_TIMEOUT
        while port is None:
            match = _LISTENING.search(log_path.read_text(errors="replace"))
            if match:
                port = int(match.group(1))
            elif process.poll() is not None:
                pytest.fail(
                    f"Azurite exited with code {process.returncode} before listening:\n"
                    + log_path.read_text(errors="replace"),
                    pytrace=False,
                )
            elif time.monotonic() > deadline:
                pytest.fail(
                    f"Azurite did not listen within {_START_TIMEOUT:.0f} s:\n"
                    + log_path.read_text(errors="replace"),
                    pytrace=False,
                )
            else:
                time.sleep(0.02)
        yield Azurite(pid=process.pid, port=port)
    finally:
        _stop(process)


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """Azurite's blob service for the whole session; yields its pid and port."""
    with running_azurite(tmp_path_factory.mktemp("azurite")) as service:
        yield service
