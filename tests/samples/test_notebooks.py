"""Every notebook executes top to bottom in a real kernel (with Jupyter's running loop)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from .conftest import SAMPLES


def execute(
    name: str, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("FOUNDRY_HOSTING_ENVIRONMENT", "FOUNDRY_PROJECT_ENDPOINT"):
        monkeypatch.delenv(key, raising=False)
    notebook = nbformat.read(SAMPLES / "notebooks" / name, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=180,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    lines: list[str] = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error", output
            if output["output_type"] == "stream" and output["name"] == "stdout":
                lines.extend(line.strip() for line in output["text"].splitlines())
    return lines


def test_notebooks_are_stored_without_outputs() -> None:
    for path in (SAMPLES / "notebooks").glob("*.ipynb"):
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        assert any(c.cell_type == "markdown" for c in notebook.cells), path.name
        assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code"), path.name


@pytest.mark.notebooks
def test_langgraph_quickstart_notebook(
    sample_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = execute("langgraph_quickstart.ipynb", sample_env, tmp_path, monkeypatch)
    assert "local-sqlite" in out
    assert "answer: Checkpoints make agents survive restarts." in out
    assert "words: 5" in out and "async words: 5" in out
    checkpoints = int(next(x for x in out if x.startswith("checkpoints:")).split()[-1])
    assert checkpoints == 8  # input + 2 steps, twice, each run also saving its input checkpoint
    assert "newest step: 6" in out
    assert "restored answer: Checkpoints make agents survive restarts." in out
    assert (tmp_path / "state" / "foundry_checkpoint" / "state.sqlite3").is_file()


@pytest.mark.notebooks
def test_maf_quickstart_notebook(
    sample_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = execute("maf_quickstart.ipynb", sample_env, tmp_path, monkeypatch)
    assert "output: ['HELLO FOUNDRY!']" in out
    assert "checkpoints: 3" in out
    assert "resumed output: ['HELLO FOUNDRY!']" in out
    assert "latest is the newest id: True" in out


@pytest.mark.notebooks
def test_autogen_team_notebook(
    sample_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = execute("autogen_team.ipynb", sample_env, tmp_path, monkeypatch)
    assert "local-sqlite" in out
    assert "writer: Saved after each step / nothing lost" in out
    assert "resumed: True" in out
    assert "writer: Saved after each step / nothing lost / a restart shrugs" in out
    assert "writer context messages: 5" in out  # both exchanges, across the restart
    assert "versions saved: 2" in out
