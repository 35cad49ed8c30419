"""The next backend is one file plus one registration: the in-memory backend of ``memory.py``.

Registered under ``local_backend="memory"``, it runs the store's differential scenarios (the
same transcripts as the SDK's local mode) and LangGraph's conformance suite (81/81) with no
file above the store layer knowing it exists. The adapters, the core and the CLI reach it only
through the ``Backend`` object; the CLI offers it as ``--local-backend memory`` once registered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from azure.ai.agentserver.core import FoundryAgentRequestContext
from azure.ai.agentserver.core.storage import FoundryStorageConflictError

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint._store._engine import StateEngine
from foundry_checkpoint.adapter import RanksByTag, StateStoreLike, register_backend
from foundry_checkpoint.errors import InvalidArgumentError, StoreConflictError
from tests.conftest import StoreEnv
from tests.emulator._harness import local_factory
from tests.emulator.scenarios import SCENARIOS, ScenarioClock, StoreFactory
from tests.langgraph.test_conformance import _check, _run

from .memory import NAME, MemoryBackend


@pytest.fixture(autouse=True)
def local_memory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Local mode, with the in-memory backend registered (the one registration)."""
    register_backend(NAME, MemoryBackend)
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    for name in (
        "FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING",
        "FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    yield


@asynccontextmanager
async def memory_factory(clock: ScenarioClock) -> AsyncIterator[StoreFactory]:
    """Stores of the in-memory backend (an engine of its own reading ``clock``)."""
    engine = StateEngine(None, clock=clock)

    async def open_store(
        name: str, *, user_isolation: bool = True, item_ttl_seconds: int = -1
    ) -> StateStoreLike:
        # A backend always creates isolated stores (``user_isolation`` matters only when
        # reopening, where an existing store keeps its own settings).
        backend = MemoryBackend(SimpleNamespace(item_ttl_seconds=item_ttl_seconds), engine=engine)
        caller = backend.caller(None, FoundryAgentRequestContext())
        store = await backend.open(name, caller.partition, create=True)
        assert store is not None
        return store

    try:
        yield open_store
    finally:
        engine.close()


@pytest.mark.parametrize("scenario_name", sorted(SCENARIOS))
async def test_memory_backend_agrees_with_the_sdk_local_mode(
    scenario_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = SCENARIOS[scenario_name]
    local_clock = ScenarioClock()
    async with local_factory(monkeypatch, tmp_path / "reference", local_clock) as open_local:
        reference = await scenario(open_local, local_clock)
    clock = ScenarioClock()
    async with memory_factory(clock) as open_memory:
        observed = await scenario(open_memory, clock)
    assert observed == reference


async def test_conformance_81_of_81_on_the_memory_backend(tmp_path: Path) -> None:
    _check(await _run(StoreEnv("local", tmp_path), local_backend=NAME))


def test_the_adapters_see_only_the_backend_object(tmp_path: Path) -> None:
    with FoundryCheckpointer(local_backend=NAME) as saver:
        assert (saver.kind, saver.location) == ("memory", "(memory)")
        assert saver.spill_location == "chunk items of each thread's own store"
        backend = saver._core.backend  # the registered backend, behind the store seam
        assert isinstance(backend.inner, MemoryBackend)  # type: ignore[attr-defined]
        from langchain_core.runnables import RunnableConfig
        from langgraph.checkpoint.base import empty_checkpoint

        config: RunnableConfig = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
        stored = saver.put(config, empty_checkpoint(), {"step": -1}, {})
        got = saver.get_tuple(config)
        assert got is not None and got.config == stored
        store = saver._core.client(saver._core.name_for("t-1"), "local")
        assert not isinstance(store, RanksByTag)  # "latest" came from listings
        asyncio.run(store.create_item("probe", {}))
        with pytest.raises(StoreConflictError) as info:  # the seam's typed errors
            asyncio.run(store.create_item("probe", {}))
        assert isinstance(info.value.__cause__, FoundryStorageConflictError)
    assert not (tmp_path / "state").exists()  # nothing on disk: no spill folder either


def test_a_backend_name_is_registered_once() -> None:
    register_backend(NAME, MemoryBackend)  # the same factory again: nothing changes
    with pytest.raises(InvalidArgumentError, match="is taken"):
        register_backend(NAME, lambda settings: MemoryBackend(settings))
    with pytest.raises(InvalidArgumentError, match="'sqlite', 'sdk' or 'memory', got 'nope'"):
        FoundryCheckpointer(local_backend="nope")


def test_a_local_backend_is_refused_in_hosted_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "1")
    with pytest.raises(InvalidArgumentError, match="only available when it is unset"):
        FoundryCheckpointer(local_backend=NAME)


def test_a_registered_backend_is_a_choice_of_the_cli() -> None:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import empty_checkpoint
    from typer.testing import CliRunner

    from foundry_checkpoint.cli import app

    config: RunnableConfig = {"configurable": {"thread_id": "t-cli", "checkpoint_ns": ""}}
    with FoundryCheckpointer(store_prefix="cli-memory", local_backend=NAME) as saver:
        saver.put(config, empty_checkpoint(), {"step": -1}, {})
    runner = CliRunner()
    chosen = runner.invoke(
        app, ["--prefix", "cli-memory", "--local-backend", NAME, "--json", "threads"]
    )
    assert chosen.exit_code == 0, chosen.stderr
    shown = json.loads(chosen.stdout)
    assert shown["backend"]["kind"] == "memory"
    assert [row["thread_id"] for row in shown["threads"]] == ["t-cli"]
    default = runner.invoke(app, ["--prefix", "cli-memory", "--json", "threads"])
    assert default.exit_code == 0, default.stderr
    assert json.loads(default.stdout)["threads"] == []  # the thread is in the memory backend
    refused = runner.invoke(app, ["--local-backend", "nope", "threads"])
    assert refused.exit_code == 2
    assert refused.stderr.count("\n") == 1
    assert "'nope' is not a registered backend: choose 'sqlite', 'sdk', 'memory'" in (
        refused.stderr
    )


def test_contributing_names_what_the_memory_backend_defines() -> None:
    """CONTRIBUTING's recipe names every member of ``Backend``, each of which ``memory.py``
    defines (and, besides the file and the registration, nothing else was needed)."""
    from foundry_checkpoint.adapter import Backend

    root = Path(__file__).resolve().parents[2]
    text = (root / "CONTRIBUTING.md").read_text(encoding="utf-8")
    recipe = text.split("## Adding a store backend\n", 1)[1].split("\n## ", 1)[0]
    members = sorted(name for name in vars(Backend) if not name.startswith("_"))
    assert len(members) == 10, members
    for name in members:
        assert f"`{name}`" in recipe or f"`{name}(" in recipe, name
        assert name in vars(MemoryBackend), name
    assert "register_backend" in recipe and "`store-layers`" in recipe
