"""Local state is private: folders 0700, database files 0600, whatever the umask.

Folders the package creates (the state root and every missing ancestor, spill namespaces) are
owner-only, and the SQLite database is created 0600 before SQLite opens it, so its ``-wal`` and
``-shm`` files are 0600 too. A folder that already exists more open is left alone, with a
warning. The emulator's ``--data`` file follows the same rule.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint import FoundryCheckpointer, LocalSpill
from foundry_checkpoint._store._private import private_dir
from foundry_checkpoint.emulator import FoundryEmulator
from tests.cli.conftest import build
from tests.langgraph._util import cfg

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    """A permissive umask (022, the common default), so only explicit modes keep files private."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _tree(root: Path) -> tuple[dict[Path, int], dict[Path, int]]:
    folders = {p: _mode(p) for p in [root, *root.rglob("*")] if p.is_dir()}
    files = {p: _mode(p) for p in root.rglob("*") if p.is_file()}
    return folders, files


def test_local_state_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "deep" / "state"  # neither exists yet
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(root))
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    with FoundryCheckpointer() as saver:
        build(saver).invoke({"steps": ["x" * 2_000_000]}, cfg("t1"))  # spills one value
        folders, files = _tree(tmp_path / "deep")
        names = {p.name for p in files}
        assert {"state.sqlite3", "state.sqlite3-wal", "state.sqlite3-shm"} <= names
        assert any(len(name) == 64 for name in names)  # a spilled blob
    assert folders and set(folders.values()) == {0o700}, folders
    assert set(files.values()) == {0o600}, files


def test_sdk_local_backend_folder_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    with FoundryCheckpointer(local_backend="sdk") as saver:
        build(saver).invoke({"steps": []}, cfg("t1"))
    folders, _ = _tree(tmp_path / "state")
    assert set(folders.values()) == {0o700}, folders


def test_an_existing_open_folder_is_kept_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    with caplog.at_level(logging.WARNING, logger="foundry_checkpoint"):
        spill = LocalSpill(shared, fsync=False)
        private_dir(shared)
    assert _mode(shared) == 0o755  # not changed behind the user's back
    assert any(
        "chmod 700" in r.getMessage() and str(shared) in r.getMessage() for r in caplog.records
    )
    assert spill.directory == shared


@pytest.mark.emulator
def test_an_existing_open_database_is_kept_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "emu.sqlite3"
    db.touch(mode=0o644)
    os.chmod(db, 0o644)
    with (
        caplog.at_level(logging.WARNING, logger="foundry_checkpoint"),
        FoundryEmulator(data=db) as emu,
    ):
        emu.credential(user="alice")
    assert _mode(db) == 0o644
    assert any("chmod 600" in r.getMessage() for r in caplog.records)


def _use_emulator(emu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    with FoundryCheckpointer(
        store_prefix="modes",
        credential=emu.credential(user="alice"),
        endpoint=emu.endpoint,
        connection_verify=emu.ca_file,
    ) as saver:
        build(saver).invoke({"steps": []}, cfg("t1"))


@pytest.mark.emulator
def test_the_emulator_data_file_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "emu" / "state.sqlite3"
    with FoundryEmulator(data=data) as emu:
        _use_emulator(emu, monkeypatch)
        files = {p.name: _mode(p) for p in data.parent.iterdir()}
    assert files["state.sqlite3"] == 0o600
    assert set(files.values()) == {0o600}, files
    assert _mode(data.parent) == 0o700


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask-022", "umask-000"])
def test_copy_to_sqlite_creates_a_private_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int
) -> None:
    from typer.testing import CliRunner

    from foundry_checkpoint.cli import app

    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    with FoundryCheckpointer() as saver:
        build(saver).invoke({"steps": []}, cfg("t1"))
    out = tmp_path / "export"
    out.mkdir()
    os.umask(umask)
    result = CliRunner().invoke(app, ["copy", "--from", "foundry", "--to", f"sqlite:{out}/a.db"])
    assert result.exit_code == 0, result.stderr
    files = {p.name: _mode(p) for p in out.iterdir()}
    assert "a.db" in files
    assert set(files.values()) == {0o600}, files

    existing = tmp_path / "mine.db"  # an existing destination keeps the mode its owner gave it
    existing.touch()
    os.chmod(existing, 0o640)
    result = CliRunner().invoke(app, ["copy", "--from", "foundry", "--to", f"sqlite:{existing}"])
    assert result.exit_code == 0, result.stderr
    assert _mode(existing) == 0o640
