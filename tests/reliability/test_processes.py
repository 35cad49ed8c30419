"""Four processes writing one local store at once: every write is kept.

Each writer is a spawned process of its own that writes 100 items to one shared store; the
test then counts them through a fresh reader. Run for the embedded engine (``EngineStore``),
the SDK's local mode under its inter-process lock (``LockedSdkStore``), and through the core
with either backend.
"""

from __future__ import annotations

import asyncio
import base64
import json
import multiprocessing
import os
from pathlib import Path

import pytest

from foundry_checkpoint._core import CheckpointCore
from foundry_checkpoint._options import StoreOptions
from foundry_checkpoint._store._embedded import EngineStore, default_engine
from foundry_checkpoint._store._engine import StateEngine
from foundry_checkpoint._store._sdk_local import LockedSdkStore

pytestmark = pytest.mark.multiprocess

WRITERS = 4
ITEMS_PER_WRITER = 100


def _run_writers(target: object, args: list[tuple[object, ...]]) -> None:
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=target, args=a) for a in args]  # type: ignore[arg-type]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [p.exitcode for p in processes] == [0] * len(processes)


def _local_env(root: str) -> None:
    os.environ["AGENTSERVER_STATE_ROOT"] = root
    os.environ["AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING"] = "true"
    os.environ.pop("FOUNDRY_HOSTING_ENVIRONMENT", None)


@pytest.fixture
def local_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "state"
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(root))
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    return root


# ------------------------------------------------------------------------- the engine face


def _engine_writer(root: str, writer: int) -> None:
    async def run() -> None:
        engine = default_engine(Path(root))
        store = await EngineStore.get_or_create(
            engine, "shared", user_isolation=True, item_ttl_seconds=-1
        )
        for i in range(ITEMS_PER_WRITER):
            await store.set_item(f"w{writer}-{i:03d}", {"i": i}, tags={"w": str(writer)})
        engine.close()

    asyncio.run(run())


def test_four_engine_processes_keep_every_write(tmp_path: Path) -> None:
    _run_writers(_engine_writer, [(str(tmp_path), n) for n in range(WRITERS)])

    engine = StateEngine(tmp_path / "foundry_checkpoint" / "state.sqlite3")
    seen: set[str] = set()
    page = engine.list_keys("shared", user="local", limit=100)
    seen.update(entry["key"] for entry in page["data"])
    while page["has_more"]:
        page = engine.list_keys("shared", user="local", limit=100, after=page["last_id"])
        seen.update(entry["key"] for entry in page["data"])
    engine.close()
    assert len(seen) == WRITERS * ITEMS_PER_WRITER
    assert seen == {f"w{w}-{i:03d}" for w in range(WRITERS) for i in range(ITEMS_PER_WRITER)}


# --------------------------------------------------------------- the SDK's local mode, locked


def _sdk_file(root: Path, name: str) -> Path:
    segment = base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")
    return root / "state_stores" / f"{segment}.json"


def _sdk_writer(root: str, writer: int) -> None:
    _local_env(root)

    async def run() -> None:
        store = await LockedSdkStore.get_or_create(
            "shared", user_isolation=True, item_ttl_seconds=-1
        )
        for i in range(ITEMS_PER_WRITER):
            await store.set_item(f"w{writer}-{i:03d}", {"i": i})
        await store.aclose()

    asyncio.run(run())


def test_four_sdk_processes_keep_every_write(local_mode: Path) -> None:
    _run_writers(_sdk_writer, [(str(local_mode), n) for n in range(WRITERS)])
    items = json.loads(_sdk_file(local_mode, "shared").read_text())["items"]
    assert set(items) == {f"w{w}-{i:03d}" for w in range(WRITERS) for i in range(ITEMS_PER_WRITER)}


# ------------------------------------------------------------------------------- the core


def _core_writer(root: str, backend: str, worker: int, count: int) -> None:
    _local_env(root)
    options = StoreOptions(store_prefix="procs", local_backend=backend)
    core = CheckpointCore(options, scope_word="thread")

    async def write() -> None:
        scope = await core.scope("shared")
        for i in range(count):
            await scope.store.set_item(f"w{worker}-{i}", {"i": i})

    try:
        core.run(write())
    finally:
        core.close()


@pytest.mark.parametrize(("backend", "count"), [("sqlite", 100), ("sdk", 100)])
def test_four_core_processes_keep_every_write(local_mode: Path, backend: str, count: int) -> None:
    root = str(local_mode)
    _run_writers(_core_writer, [(root, backend, w, count) for w in range(WRITERS)])
    options = StoreOptions(store_prefix="procs", local_backend=backend)
    core = CheckpointCore(options, scope_word="thread")

    async def count_keys() -> int:
        scope = await core.scope("shared")
        return len(await scope.keys())

    try:
        assert core.run(count_keys()) == WRITERS * count
    finally:
        core.close()
