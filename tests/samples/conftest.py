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
