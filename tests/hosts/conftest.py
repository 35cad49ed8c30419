"""The sample agents in real host processes, driven over HTTP on loopback as the platform would.

A test gets a :class:`Platform`: an emulator of its own and a fresh state root.
``platform.start("langgraph_agent:app")`` runs a sample app (``samples/hosted_agents/``) in a new
Python process with the environment of a Foundry-hosted agent (``emulator.agent_environment()``)
on a socket the test opened on 127.0.0.1 with an OS-chosen port. ``host.post(user, path, body)``
sends a request the way the platform does: a fresh call id minted for ``user`` in
``x-agent-foundry-call-id`` and the user in ``x-agent-user-id``. Every process is killed at
teardown, and a server whose log shows an attempt to leave the machine fails the test.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from foundry_checkpoint.emulator import FoundryEmulator

from ._serve import MARK

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "samples" / "hosted_agents"
SERVE = Path(__file__).resolve().parent / "_serve.py"
_READY_SECONDS = 90.0
_REQUEST_SECONDS = 120.0
_STOP_SECONDS = 20.0

#: A line a kill or SIGTERM test prints with its counts (``Counts.report()`` and the like).
_COUNTS = re.compile(r"\b(?:kills|SIGTERMs)=\d")
_counted: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep the count lines of this folder's tests (pytest hides a passing test's output)."""
    if report.when == "call":
        name = report.nodeid.rsplit("::", 1)[-1]
        _counted.extend(
            f"{line.strip()}  [{name}]"
            for line in report.capstdout.splitlines()
            if _COUNTS.search(line)
        )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print them at the end of the run: kills, recoveries, steps repeated, orphans."""
    if _counted:
        terminalreporter.write_sep("=", "host kill and shutdown counts")
        for line in _counted:
            terminalreporter.write_line(line)


class Host:
    """One server process of a sample app."""

    def __init__(
        self,
        platform: Platform,
        target: str,
        process: subprocess.Popen[bytes],
        port: int,
        log: Path,
    ) -> None:
        self.platform = platform
        self.target = target
        self.process = process
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self._client = httpx.Client(base_url=self.url, timeout=_REQUEST_SECONDS)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + _READY_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"{self.target} exited early:\n{self.log_text()[-4000:]}")
            try:
                if self._client.get("/readiness", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{self.target} not ready in {_READY_SECONDS}s:\n{self.log_text()}")

    def post(self, user: str, path: str, body: dict[str, Any]) -> httpx.Response:
        """POST ``body`` as ``user``: a new call id per request, as the platform sends it."""
        call_id = self.platform.emulator.mint_call(user)
        for other in self.platform.other_emulators:
            other.bind_call(call_id, user)
        headers = {"x-agent-foundry-call-id": call_id, "x-agent-user-id": user}
        return self._client.post(path, json=body, headers=headers)

    def get(self, user: str, path: str) -> httpx.Response:
        """GET ``path`` as ``user``, with a new call id as the platform sends it."""
        call_id = self.platform.emulator.mint_call(user)
        headers = {"x-agent-foundry-call-id": call_id, "x-agent-user-id": user}
        return self._client.get(path, headers=headers)

    def lifecycle(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """A platform lifecycle call (no user): ``/_agent/before-snapshot`` and the like."""
        return self._client.post(path, json=body)

    def kill(self) -> None:
        """End the process abruptly (a crash): nothing is flushed or closed."""
        self._stop(signal.SIGKILL)

    def stop(self) -> None:
        """Graceful shutdown (SIGTERM): the host runs its shutdown handlers."""
        self._stop(signal.SIGTERM)

    def _stop(self, sig: signal.Signals) -> None:
        self._client.close()
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(_STOP_SECONDS)

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""


class Platform:
    """Starts sample apps as hosted agents against one emulator and one state root."""

    def __init__(self, emulator: FoundryEmulator, root: Path) -> None:
        self.emulator = emulator
        self.root = root
        self.hosts: list[Host] = []
        #: Emulators that resolve the call ids minted for requests too (a restore may move the
        #: endpoint to one of them).
        self.other_emulators: list[FoundryEmulator] = []
        self.env = {
            **os.environ,
            **emulator.agent_environment(session_id=f"session-{uuid.uuid4().hex[:8]}"),
            "AGENTSERVER_STATE_ROOT": str(root / "state"),
            "AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING": "true",
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
            ),
        }
        for name in (
            "APPLICATIONINSIGHTS_CONNECTION_STRING",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING",
            "FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL",
            "AZURE_CLIENT_ID",
            "AZURE_CLIENT_SECRET",
            "AZURE_TENANT_ID",
            "AZURE_FEDERATED_TOKEN_FILE",
            "MSI_ENDPOINT",
            "IMDS_ENDPOINT",
            "PORT",
        ):
            self.env.pop(name, None)

    def settled_requests(self, **at_least: int) -> Counter[str]:
        """The emulator's platform request counts once each reached its ``at_least`` count.

        A host records a task's or response's end a few ms after the client reads
        ``completed``, so counts read right then may miss it; this waits (up to 30 s).
        """
        deadline = time.monotonic() + 30.0
        while True:
            calls = self.emulator.platform_requests
            if all(calls[name] >= n for name, n in at_least.items()) or time.monotonic() > deadline:
                return calls
            time.sleep(0.02)

    def start(self, target: str, *, apps: Path = APPS) -> Host:
        """Run ``module:app`` of ``apps`` (the samples) and wait until it is ready."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(("127.0.0.1", 0))
            listener.listen(128)
            port = listener.getsockname()[1]
            log = self.root / f"{target.split(':')[0]}-{len(self.hosts)}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [sys.executable, str(SERVE), str(listener.fileno()), str(apps), target],
                    env=self.env,
                    cwd=self.root,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    pass_fds=[listener.fileno()],
                )
        finally:
            listener.close()  # the child holds its own copy
        host = Host(self, target, process, port, log)
        self.hosts.append(host)
        host.wait_ready()
        return host

    def stop_all(self) -> None:
        for host in self.hosts:
            host.kill()

    def egress_attempts(self) -> list[str]:
        return [
            line for host in self.hosts for line in host.log_text().splitlines() if MARK in line
        ]


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    """Sample apps as hosted agents on an emulator of the test's own; all killed at teardown."""
    with FoundryEmulator(seed=3) as emulator:
        made = Platform(emulator, tmp_path)
        try:
            yield made
        finally:
            made.stop_all()
    assert made.egress_attempts() == [], "a host tried to leave the machine"
