"""Fixtures of the sample tests: a clean environment for running samples as users would."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"


@pytest.fixture
def sample_env(tmp_path: Path) -> dict[str, str]:
    """Local mode, a fresh temporary ``AGENTSERVER_STATE_ROOT``, the repository importable."""
    env = dict(os.environ)
    for name in (
        "FOUNDRY_HOSTING_ENVIRONMENT",
        "FOUNDRY_PROJECT_ENDPOINT",
        "FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING",
        "FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL",
    ):
        env.pop(name, None)
    env["AGENTSERVER_STATE_ROOT"] = str(tmp_path / "state")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print how many docs blocks were run and how many were checked without running."""
    from .test_doc_blocks import TALLY

    if not TALLY:
        return
    run = sum(n for kind, n in TALLY.items() if kind in ("python", "shell", "background"))
    compared = sum(n for kind, n in TALLY.items() if "output" in kind)
    kept = ", ".join(f"{kind} {n}" for kind, n in sorted(TALLY.items()))
    terminalreporter.write_line(
        f"docs blocks: {sum(TALLY.values())} ({run} run, {compared} outputs compared; {kept})"
    )
