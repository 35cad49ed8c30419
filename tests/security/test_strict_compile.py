"""Under ``LANGGRAPH_STRICT_MSGPACK=true``, compiling adds the graph's state types to the saver.

LangGraph's ``compile`` calls ``checkpointer.with_allowlist(...)`` with the types its state
schema names; the saver's strict serializer then reads them back. Without the variable the same
graph's own type is refused with a typed error that says how to allow it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def test_compile_adds_the_state_types_under_strict_msgpack(tmp_path: Path) -> None:
    done = _run(tmp_path, strict=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Point(x=2,", "y=0)", "2"]


def test_without_it_the_own_type_is_a_typed_error(tmp_path: Path) -> None:
    done = _run(tmp_path, strict=False)
    assert done.returncode != 0
    assert "UnsafeValueError" in done.stderr and "with_allowlist" in done.stderr
    # LangGraph's own strict mode hands back the constructor's raw arguments (a dict where a
    # Point was) and runs on; this saver stops instead, so no run continues on degraded state
    assert "Point(x=2" not in done.stdout
