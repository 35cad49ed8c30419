"""The built wheel installs into a fresh virtual environment with one framework's extra and
runs that framework's quickstart (nothing from the repository on the path): the extras
declare everything each needs, and nothing needs the other framework."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _clean_env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FOUNDRY_", "PYTHON"))}
    env["AGENTSERVER_STATE_ROOT"] = str(state)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--wheel", "--outdir", out, ROOT, cwd=out)
    [built] = out.glob("foundry_checkpoint-*.whl")
    return built


def _fresh(tmp_path: Path, wheel: Path, extras: str) -> Path:
    """A new venv with ``wheel[extras]`` installed; its python."""
    home = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(home)
    python = home / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", "--no-compile", f"{wheel}[{extras}]",
         cwd=tmp_path, env=_clean_env(tmp_path / "state"))  # fmt: skip
    where = _run(python, "-c", "import foundry_checkpoint; print(foundry_checkpoint.__file__)",
                 cwd=tmp_path, env=_clean_env(tmp_path / "state"))  # fmt: skip
    assert str(home) in where  # the installed copy, not the repository's
    return python


@pytest.mark.slow
def test_langgraph_only(tmp_path: Path, wheel: Path) -> None:
    python = _fresh(tmp_path, wheel, "langgraph")
    env = _clean_env(tmp_path / "state")
    out = _run(python, ROOT / "samples" / "quickstart.py", cwd=tmp_path, env=env)
    assert "finished: ['plan', 'research', 'draft', 'review', 'publish']" in out
    missing = subprocess.run(
        [python, "-c", "import agent_framework"], capture_output=True, env=env, check=False
    )
    assert missing.returncode != 0  # the MAF extra was not pulled in


@pytest.mark.slow
def test_maf_only_then_the_command_line(tmp_path: Path, wheel: Path) -> None:
    python = _fresh(tmp_path, wheel, "maf")
    env = _clean_env(tmp_path / "state")
    out = _run(python, ROOT / "samples" / "maf_workflow_resume.py", cwd=tmp_path, env=env)
    assert "finished: start > plan > draft > review > publish" in out
    missing = subprocess.run(
        [python, "-c", "import langgraph"], capture_output=True, env=env, check=False
    )
    assert missing.returncode != 0  # the LangGraph extra was not pulled in

    # adding the cli extra: the maf commands work without LangGraph
    _run(python, "-m", "pip", "install", "--quiet", "--no-compile", f"{wheel}[maf,cli]",
         cwd=tmp_path, env=env)  # fmt: skip
    listed = _run(python.parent / "foundry-checkpoint", "maf", "contexts", "--json",
                  cwd=tmp_path, env=env)  # fmt: skip
    contexts = json.loads(listed)["contexts"]
    assert [c["context_id"] for c in contexts] == ["conv-42"]
    langgraph = subprocess.run(
        [python.parent / "foundry-checkpoint", "threads"],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert langgraph.returncode == 1
    assert "install 'foundry-checkpoint[cli,langgraph]'" in langgraph.stderr
