"""The embedded local default: ``default_engine`` and the ``EngineStore`` face."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import (
    FoundryStorageConflictError,
    FoundryStorageNotFoundError,
    FoundryStoragePreconditionError,
    StateStore,
    StateStoreItemKey,
)
from langchain_core.runnables import RunnableConfig

from foundry_checkpoint._store._embedded import EngineStore, default_engine, default_state_root
from foundry_checkpoint._store._engine import StateEngine
from foundry_checkpoint._store._protocol import StateStoreLike
from foundry_checkpoint.errors import InvalidArgumentError


@pytest.fixture
def engine() -> StateEngine:
    return StateEngine()


def test_default_engine_is_one_per_file_and_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "root"))
    assert default_state_root() == tmp_path / "root"
    engine = default_engine()
    assert engine.path == (tmp_path / "root" / "foundry_checkpoint" / "state.sqlite3").resolve()
    assert engine.path is not None and engine.path.exists()
    assert default_engine(tmp_path / "root") is engine
    other = default_engine(tmp_path / "other")
    assert other is not engine
    engine.close()
    fresh = default_engine()
    assert fresh is not engine and not fresh.closed
    fresh.close()
    other.close()


def test_default_state_root_falls_back_to_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTSERVER_STATE_ROOT", raising=False)
    assert default_state_root() == Path.home() / ".agentserver"


async def test_engine_store_returns_sdk_models(engine: StateEngine) -> None:
    store: StateStoreLike = await EngineStore.get_or_create(
        engine, "s", user_isolation=True, item_ttl_seconds=60, description="d"
    )
    assert store.name == "s"
    descriptor = await store.get()
    assert isinstance(descriptor, StateStore)
    assert (descriptor.user_isolation, descriptor.item_ttl_seconds, descriptor.description) == (
        True,
        60,
        "d",
    )

    ref = await store.create_item("a", {"n": 1}, tags={"kind": "cp"})
    assert ref.key == "a" and ref.etag.startswith('"') and ref.created_at == ref.updated_at
    item = await store.get_item("a")
    assert item is not None and (item.id, item.key) == (ref.id, "a")
    assert (item.value, item.tags, item.etag) == ({"n": 1}, {"kind": "cp"}, ref.etag)
    page = await store.list_keys(tags={"kind": "cp"})
    # the records carry exactly the fields of the SDK's models, under the same names
    wire = engine.list_keys("s", user="local", tags={"kind": "cp"})["data"][0]
    sdk_key = StateStoreItemKey(wire)
    assert [(k.id, k.key, k.etag, k.created_at, k.updated_at, k.tags) for k in page.keys] == [
        (
            sdk_key.id,
            sdk_key.key,
            sdk_key.etag,
            sdk_key.created_at,
            sdk_key.updated_at,
            sdk_key.tags,
        )
    ]
    assert (page.keys[0].id, page.first_id, page.last_id, page.has_more) == (
        ref.id,
        ref.id,
        ref.id,
        False,
    )
    deleted = await store.delete_item("a")
    assert (deleted.key, deleted.deleted) == ("a", True)
    assert await store.get_item("a") is None
    gone = await store.delete()
    assert (gone.name, gone.deleted) == ("s", True)
    await store.aclose()
    await store.aclose()


async def test_get_or_create_keeps_an_existing_store(engine: StateEngine) -> None:
    engine.create_store("s", user_isolation=False, item_ttl_seconds=5)
    store = await EngineStore.get_or_create(engine, "s", user_isolation=True, item_ttl_seconds=-1)
    descriptor = await store.get()
    assert (descriptor.user_isolation, descriptor.item_ttl_seconds) == (False, 5)


async def test_conditional_writes(engine: StateEngine) -> None:
    store = await EngineStore.get_or_create(engine, "s", user_isolation=True, item_ttl_seconds=-1)
    with pytest.raises(FoundryStoragePreconditionError) as missing:
        await store.set_item("a", {}, require_exists=True)
    assert missing.value.current_etag is None
    first = await store.set_item("a", {"v": 1})
    second = await store.set_item("a", {"v": 2}, require_exists=True)
    with pytest.raises(FoundryStoragePreconditionError) as stale:
        await store.set_item("a", {"v": 3}, if_match=first.etag)
    assert stale.value.current_etag == second.etag
    with pytest.raises(FoundryStorageConflictError):
        await store.create_item("a", {})
    with pytest.raises(ValueError, match="mutually exclusive"):
        await store.set_item("a", {}, if_match=second.etag, require_exists=True)
    with pytest.raises(ValueError, match="mutually exclusive"):
        await store.list_keys(after="x", before="y")
    with pytest.raises(FoundryStoragePreconditionError):
        await store.delete_item("a", if_match=first.etag)
    assert (await store.delete_item("a", if_match=second.etag)).id == first.id


async def test_refused_argument_combinations_are_typed_errors(engine: StateEngine) -> None:
    store = await EngineStore.get_or_create(engine, "s", user_isolation=True, item_ttl_seconds=-1)
    with pytest.raises(InvalidArgumentError, match="if_match and require_exists"):
        await store.set_item("a", {}, if_match='"e"', require_exists=True)
    with pytest.raises(InvalidArgumentError, match="after and before"):
        await store.list_keys(after="x", before="y")
    assert await store.get_item("a") is None  # nothing was written


async def test_users_are_isolated_through_the_face(engine: StateEngine) -> None:
    ann = await EngineStore.get_or_create(
        engine, "s", user_isolation=True, item_ttl_seconds=-1, user="ann"
    )
    bob = await EngineStore.get_or_create(
        engine, "s", user_isolation=True, item_ttl_seconds=-1, user="bob"
    )
    assert (ann.user, bob.user) == ("ann", "bob")
    await ann.set_item("k", {"who": "ann"})
    assert await bob.get_item("k") is None
    assert (await bob.list_keys()).keys == []
    await bob.set_item("k", {"who": "bob"})
    ann_item = await ann.get_item("k")
    assert ann_item is not None and ann_item.value == {"who": "ann"}


async def test_deleted_store_reads_as_missing(engine: StateEngine) -> None:
    store = await EngineStore.get_or_create(engine, "s", user_isolation=True, item_ttl_seconds=-1)
    await store.set_item("a", {})
    await store.delete()
    assert await store.get_item("a") is None  # as the hosted client answers a 404
    with pytest.raises(FoundryStorageNotFoundError):
        await store.get()
    with pytest.raises(FoundryStorageNotFoundError):
        await store.set_item("a", {})


async def test_engine_calls_never_run_on_the_callers_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite work (which may wait for another process's write lock) runs on the adapter's
    private loop, not on the loop that awaits the adapter."""
    from langgraph.checkpoint.base import empty_checkpoint

    from foundry_checkpoint import FoundryCheckpointer

    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path))
    threads: list[threading.Thread] = []
    original = StateEngine.put_item

    def spy(self: StateEngine, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(StateEngine, "put_item", spy)
    async with FoundryCheckpointer() as saver:
        config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        await saver.aput(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    assert len(threads) >= 2  # both checkpoints (and the thread's registration) were written
    assert threading.main_thread() not in threads
