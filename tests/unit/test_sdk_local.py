"""The SDK's local mode under an inter-process lock, and parity with the engine face."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import (
    FoundryStorageConflictError,
    FoundryStorageError,
    FoundryStorageNotFoundError,
    FoundryStoragePreconditionError,
    StateStoreItemRef,
)

from foundry_checkpoint._store._embedded import EngineStore
from foundry_checkpoint._store._engine import StateEngine
from foundry_checkpoint._store._protocol import StateStoreLike
from foundry_checkpoint._store._sdk_local import LockedSdkStore, _drive
from foundry_checkpoint.errors import FoundryCheckpointError


@pytest.fixture(autouse=True)
def local_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "state"
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(root))
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    return root


def _sdk_file(root: Path, name: str) -> Path:
    segment = base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")
    return root / "state_stores" / f"{segment}.json"


async def test_lock_file_sits_beside_the_sdk_file(local_mode: Path) -> None:
    store = await LockedSdkStore.get_or_create(
        "threads/a b", user_isolation=True, item_ttl_seconds=-1
    )
    await store.set_item("k", {"v": 1})
    data_file = _sdk_file(local_mode, "threads/a b")
    assert data_file.exists()
    assert "k" in json.loads(data_file.read_text())["items"]
    await store.aclose()


class _Suspend:
    def __await__(self) -> Generator[None, None, None]:
        yield None


async def _network_like_call() -> int:
    await _Suspend()
    return 1


def test_a_call_that_would_suspend_is_refused() -> None:
    with pytest.raises(FoundryCheckpointError, match="network I/O"):
        _drive(_network_like_call)


async def test_refuses_hosted_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "production")
    with pytest.raises(FoundryCheckpointError, match="FOUNDRY_HOSTING_ENVIRONMENT"):
        await LockedSdkStore.get_or_create("s", user_isolation=True, item_ttl_seconds=-1)


async def test_a_call_waits_for_the_inter_process_lock(local_mode: Path) -> None:
    from filelock import FileLock

    store = await LockedSdkStore.get_or_create("s", user_isolation=True, item_ttl_seconds=-1)
    data_file = _sdk_file(local_mode, "s")
    holder = FileLock(data_file.with_name(data_file.name + ".lock"), thread_local=False)
    holder.acquire()
    try:
        pending = asyncio.ensure_future(store.set_item("k", {"v": 1}))
        for _ in range(20):  # the loop stays free while the call waits for the lock
            await asyncio.sleep(0)
        assert not pending.done()
        assert "k" not in json.loads(data_file.read_text())["items"]
    finally:
        holder.release()
    ref = await pending
    assert isinstance(ref, StateStoreItemRef)


# ------------------------------------------------------------------------------------ parity


async def _outcome(call: Any) -> Any:
    """A comparable summary of one call: its result or the kind of error it raised."""
    try:
        result = await call
    except FoundryStorageError as exc:
        extra = getattr(exc, "current_etag", "n/a")
        return (type(exc).__name__, exc.status_code, extra if extra in (None, "n/a") else "etag")
    except ValueError as exc:
        return ("ValueError", str(exc))
    return result


async def _scenario(store: StateStoreLike) -> list[Any]:
    seen: list[Any] = []
    descriptor = await store.get()
    seen.append((store.name, descriptor.user_isolation, descriptor.item_ttl_seconds))

    a = await store.create_item("a", {"n": 1}, tags={"kind": "cp", "thread": "t"})
    seen.append((a.key, a.created_at == a.updated_at))
    seen.append(await _outcome(store.create_item("a", {"n": 2})))
    b = await store.set_item("b", {"n": 1}, tags={"kind": "cp"})
    seen.append(await _outcome(store.set_item("missing", {}, require_exists=True)))
    seen.append(await _outcome(store.set_item("missing", {}, if_match=b.etag)))
    seen.append(await _outcome(store.set_item("b", {}, if_match=a.etag)))
    seen.append(await _outcome(store.set_item("b", {}, if_match="*", require_exists=True)))
    b2 = await store.set_item("b", {"n": 2}, tags={"kind": "cp"}, if_match=b.etag)
    seen.append((b2.etag != b.etag, b2.id == b.id))
    await store.set_item("a", {"n": 3}, require_exists=True)  # no tags: clears them

    item_a = await store.get_item("a")
    item_b = await store.get_item("b")
    assert item_a is not None and item_b is not None
    seen.append((item_a.value, item_a.tags, item_b.value, item_b.tags, item_b.etag == b2.etag))
    seen.append(await store.get_item("nope"))

    cp = await store.list_keys(tags={"kind": "cp"})
    seen.append((sorted(k.key for k in cp.keys), cp.has_more))
    everything = await store.list_keys(limit=100, order="asc")
    seen.append(sorted(k.key for k in everything.keys))
    first = await store.list_keys(limit=1)
    rest = await store.list_keys(limit=1, after=first.last_id)
    seen.append((first.has_more, rest.has_more, sorted([first.keys[0].key, rest.keys[0].key])))
    unknown = await store.list_keys(after="it_unknown")
    seen.append((unknown.keys, unknown.first_id, unknown.last_id, unknown.has_more))
    seen.append(await _outcome(store.list_keys(after="x", before="y")))

    seen.append(await _outcome(store.delete_item("b", if_match=a.etag)))
    deleted = await store.delete_item("b", if_match=b2.etag)
    seen.append((deleted.key, deleted.deleted, deleted.id == b.id))
    again = await store.delete_item("b")
    seen.append((again.key, again.deleted, again.id))
    seen.append(await _outcome(store.delete_item("b", if_match="*")))
    seen.append(sorted(k.key for k in (await store.list_keys()).keys))

    gone = await store.delete()
    seen.append((gone.name, gone.deleted))
    seen.append(await store.get_item("a"))
    seen.append(await _outcome(store.get()))
    await store.aclose()
    return seen


async def test_both_local_faces_behave_the_same() -> None:
    engine = StateEngine()
    engine_side = await _scenario(
        await EngineStore.get_or_create(
            engine, "parity", user_isolation=True, item_ttl_seconds=3600
        )
    )
    sdk_side = await _scenario(
        await LockedSdkStore.get_or_create("parity", user_isolation=True, item_ttl_seconds=3600)
    )
    engine.close()
    assert engine_side == sdk_side
    # The scenario really exercised the error paths on both sides.
    assert (FoundryStorageConflictError.__name__, 409, "n/a") in engine_side
    assert (FoundryStoragePreconditionError.__name__, 412, None) in engine_side
    assert (FoundryStoragePreconditionError.__name__, 412, "etag") in engine_side
    assert (FoundryStorageNotFoundError.__name__, 404, "n/a") in engine_side
    assert ("ValueError", "after and before are mutually exclusive") in engine_side
    assert (["b"], False) in engine_side  # the tag filter after a write that cleared a's tags
