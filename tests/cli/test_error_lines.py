"""Credential and certificate failures are one ``error:`` line; ``--verbose`` shows the detail.

The command runs as a user runs it (a process of its own), so what the libraries log to stderr
(azure-identity's list of credentials, the SDK's transport tracebacks) is counted too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from foundry_checkpoint.emulator import FoundryEmulator

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], endpoint: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "IDENTITY_", "MSI_"))}
    env.update(
        FOUNDRY_HOSTING_ENVIRONMENT="1",
        FOUNDRY_PROJECT_ENDPOINT=endpoint,
        AGENTSERVER_STATE_ROOT=str(tmp_path / "state"),
        HOME=str(tmp_path / "home"),
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    )
    return subprocess.run(
        [sys.executable, "-m", "foundry_checkpoint.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize(
    "command", [["threads"], ["maf", "contexts"], ["maf", "sessions"], ["maf", "history", "s-1"]]
)
def test_untrusted_certificate_is_one_line(
    emulator: FoundryEmulator, tmp_path: Path, command: list[str]
) -> None:
    done = _run(["--emulator-user", "alice", *command], emulator.endpoint, tmp_path)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: ServiceRequestError: the endpoint's TLS certificate")
    assert "--ca-file" in done.stderr and "self-signed certificate" in done.stderr

    verbose = _run(["--verbose", "--emulator-user", "alice", *command], emulator.endpoint, tmp_path)
    assert verbose.returncode == 1
    assert "Traceback" in verbose.stderr and "SSLCertVerificationError" in verbose.stderr
    assert verbose.stderr.splitlines()[-1] == done.stderr.strip()


def test_no_credential_is_one_line(emulator: FoundryEmulator, tmp_path: Path) -> None:
    # No --emulator-user and no Azure sign-in: DefaultAzureCredential finds nothing.
    args = ["--ca-file", emulator.ca_file, "threads"]
    done = _run(args, emulator.endpoint, tmp_path)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: ClientAuthenticationError: DefaultAzureCredential")
    assert "az login" in done.stderr and "--verbose" in done.stderr

    verbose = _run(["--verbose", *args], emulator.endpoint, tmp_path)
    assert verbose.returncode == 1
    assert "EnvironmentCredential" in verbose.stderr  # what each credential said
    assert verbose.stderr.splitlines()[-1] == done.stderr.strip()
