"""Teams through TeamSession: 40 runs, spill-over, resumed by a new team object."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint.spill import LocalSpill
from foundry_checkpoint_autogen import TeamSession, load_team, save_team

from ._teams import make_team, replies
from .conftest import MakeStore

ROOT = Path(__file__).resolve().parents[2]


def _big_files(directory: Path) -> int:
    return sum(1 for p in directory.rglob("*") if p.is_file() and p.stat().st_size > 1_000_000)


def _thread(state: dict[str, Any]) -> list[Any]:
    manager = next(v for k, v in state["agent_states"].items() if k not in ("writer", "critic"))
    return list(manager["message_thread"])


@pytest.mark.timeout(240)
async def test_a_team_run_40_times_spills_and_resumes_equal(
    store_env: Any, make_store: MakeStore, tmp_path: Path
) -> None:
    if store_env.mode == "local":  # the default spill store, which a fresh process finds too
        spill_dir = store_env.root / "state" / "foundry_checkpoint" / "spill"
        spill: dict[str, Any] = {}
    else:  # hosted mode has no default spill store
        spill_dir = store_env.root / "spill"
        spill = {"spill": LocalSpill(spill_dir, fsync=False)}
    store = make_store(**spill)
    team = make_team(replies(80, 10_000))
    session = TeamSession(team, store, "conv-40")
    for i in range(40):
        result = await session.run(task=f"task {i}")
        assert len(result.messages) == 3
    state = dict(await team.save_state())
    assert len(json.dumps(state)) > 2_000_000
    assert len(_thread(state)) == 120
    assert _big_files(spill_dir) >= 1  # the state spilled
    assert len(await store.aversions("conv-40", "team", "review")) == 10  # keep_versions

    if store_env.mode == "local":  # a fresh process, a new team object
        out = tmp_path / "resumed.json"
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "tests.autogen._teams", "conv-40", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(out.read_text(encoding="utf-8")) == state

    # a new store and team object (the hosted mode's "fresh process") resume and continue
    fresh = make_team(["next writer", "next critic"])
    session = TeamSession(fresh, make_store(**spill), "conv-40")
    assert await session.resume() is True
    assert dict(await fresh.save_state()) == state
    result = await session.run(task="task 40")
    assert [m.to_text() for m in result.messages] == ["task 40", "next writer", "next critic"]
    assert len(_thread(dict(await fresh.save_state()))) == 123


async def test_save_and_load_team_by_name_and_version(make_store: MakeStore) -> None:
    store = make_store()
    team = make_team(["w1", "c1", "w2", "c2"])
    await team.run(task="first")
    first = await save_team(team, store, "conv")
    await team.run(task="second")
    await save_team(team, store, "conv")
    await save_team(team, store, "conv", name="other")

    again = make_team([])
    assert await load_team(again, store, "conv", version=first) is True
    assert len(_thread(dict(await again.save_state()))) == 3
    assert await load_team(again, store, "conv") is True
    assert len(_thread(dict(await again.save_state()))) == 6
    assert await load_team(make_team([]), store, "another-conv") is False


async def test_a_failed_run_saves_nothing(make_store: MakeStore) -> None:
    store = make_store()
    session = TeamSession(make_team(["only one reply"]), store, "conv")
    with pytest.raises(RuntimeError, match="No more mock responses"):
        await session.run(task="needs two replies")
    assert await store.aversions("conv", "team", "review") == []
    assert session.last_version is None


async def test_run_stream_saves_when_the_stream_completes(make_store: MakeStore) -> None:
    store = make_store()
    session = TeamSession(make_team(["w", "c"]), store, "conv")
    items = [item async for item in session.run_stream(task="stream it")]
    assert len(items) == 4  # three messages and the TaskResult
    assert session.last_version is not None
    versions = await store.aversions("conv", "team", "review")
    assert [v.version for v in versions] == [session.last_version]
