"""A graph's own state types read back in the next process, with ``LANGGRAPH_STRICT_MSGPACK``
set or not.

Under ``LANGGRAPH_STRICT_MSGPACK=true`` LangGraph's ``compile`` calls
``checkpointer.with_allowlist(...)`` with the types its schemas name; without it the saver
collects the same types from the graph that calls it. Either way the dataclass state resumes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, strict: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENTSERVER_STATE_ROOT": str(tmp_path)}
    env.pop("FOUNDRY_HOSTING_ENVIRONMENT", None)
    env.pop("LANGGRAPH_STRICT_MSGPACK", None)
    if strict:
        env["LANGGRAPH_STRICT_MSGPACK"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "tests.security._strict_graph", "t1"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("strict", [True, False], ids=["strict-msgpack", "default"])
def test_the_own_types_resume_in_the_next_run(tmp_path: Path, strict: bool) -> None:
    done = _run(tmp_path, strict=strict)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Point(x=2,", "y=0)", "2"]
    assert "UnsafeValueError" not in done.stderr
