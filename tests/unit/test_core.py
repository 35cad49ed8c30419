"""The shared core: store registry, isolation check, pass-through options, lifecycle."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import FoundryStateStore

from foundry_checkpoint._core import CheckpointCore
from foundry_checkpoint._options import StoreOptions
from foundry_checkpoint.errors import (
    InvalidArgumentError,
    InvalidIdentifierError,
    IsolationRefusedError,
)
from tests.conftest import StoreEnv


def _core(env: StoreEnv, **extra: Any) -> CheckpointCore:
    kwargs = env.kwargs(**extra)
    known = {
        "store_prefix",
        "credential",
        "endpoint",
        "user_id",
        "item_ttl_seconds",
        "spill",
        "local_backend",
    }
    client = {k: v for k, v in kwargs.items() if k not in known}
    own = {k: v for k, v in kwargs.items() if k in known}
    own.setdefault("store_prefix", "core")
    options = StoreOptions(client_kwargs=client, **own)
    return CheckpointCore(options, scope_word="thread")


async def _roundtrip(core: CheckpointCore, scope_id: str) -> object:
    scope = await core.scope(scope_id)
    await scope.store.set_item("k", {"v": 1})
    item = await scope.store.get_item("k")
    return None if item is None else item.value


def test_a_scope_opens_its_store_once_per_process(store_env: StoreEnv) -> None:
    core = _core(store_env)
    try:
        assert core.run(_roundtrip(core, "t1")) == {"v": 1}
        if store_env.emulator is not None:
            store_env.emulator.reset_counts()
        for _ in range(5):
            assert core.run(_roundtrip(core, "t1")) == {"v": 1}
        if store_env.emulator is not None:
            counts = dict(store_env.emulator.requests)
            assert counts.get("get_store", 0) == 0 and counts.get("create_store", 0) == 0
            assert counts["put_item"] == 5 and counts["get_item"] == 5
    finally:
        core.close()


def test_existing_store_without_isolation_is_refused(store_env: StoreEnv) -> None:
    core = _core(store_env)
    name = core.name_for("legacy")

    async def make_unisolated() -> None:
        if store_env.mode == "local":
            from foundry_checkpoint._store._embedded import default_engine

            default_engine().create_store(name, user_isolation=False, item_ttl_seconds=-1)
        else:
            kwargs = store_env.kwargs()
            store = await FoundryStateStore.get_or_create(
                name,
                kwargs["credential"],
                kwargs["endpoint"],
                user_isolation=False,
                connection_verify=kwargs["connection_verify"],
            )
            await store.aclose()

    try:
        core.run(make_unisolated())
        with pytest.raises(IsolationRefusedError, match="user_isolation") as info:
            core.run(core.scope("legacy"))
        assert name in str(info.value)
        assert core.run(_roundtrip(core, "fresh")) == {"v": 1}
    finally:
        core.close()


def test_users_are_isolated_in_one_scope(store_env: StoreEnv) -> None:
    alice, bob = _core(store_env), _core(store_env, user="bob")
    try:
        alice.run(_roundtrip(alice, "shared"))

        async def bob_reads() -> object:
            scope = await bob.scope("shared")
            return await scope.store.get_item("k")

        assert bob.run(bob_reads()) is None
    finally:
        alice.close()
        bob.close()


def test_bad_options_raise_typed_errors(store_env: StoreEnv) -> None:
    with pytest.raises(InvalidIdentifierError):
        _core(store_env, store_prefix="bad prefix")
    with pytest.raises(InvalidArgumentError):
        _core(store_env, item_ttl_seconds=0)
    with pytest.raises(InvalidArgumentError):
        _core(store_env, local_backend="postgres")
    core = _core(store_env)
    with pytest.raises(InvalidIdentifierError):
        core.name_for("")


def test_lifecycle_is_forgiving(store_env: StoreEnv) -> None:
    never_used = _core(store_env)
    never_used.close()
    never_used.close()
    core = _core(store_env)
    core.run(_roundtrip(core, "t"))
    core.close()
    core.close()
    assert core.run(_roundtrip(core, "t")) == {"v": 1}  # usable again after close
    asyncio.run(core.aclose())
    asyncio.run(core.aclose())


def test_sync_use_from_inside_a_running_loop_and_eight_threads(store_env: StoreEnv) -> None:
    core = _core(store_env)

    async def inside_a_loop() -> object:
        return core.run(_roundtrip(core, "jupyter"))  # blocking call from a running loop

    try:
        assert asyncio.run(inside_a_loop()) == {"v": 1}
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: core.run(_roundtrip(core, f"t{i % 3}")), range(24)))
        assert results == [{"v": 1}] * 24
    finally:
        core.close()


def _spilling_core(env: StoreEnv, spill: object, user: str = "alice") -> CheckpointCore:
    return _core(env, user=user, spill=spill)


async def _live_digests(scope: object) -> set[str]:
    from foundry_checkpoint import _codec
    from foundry_checkpoint._core import Scope

    assert isinstance(scope, Scope)
    out: set[str] = set()
    for key in await scope.keys():
        item = await scope.store.get_item(key.key)
        digest = _codec.spilled_digest(item.value) if item is not None else None
        if digest:
            out.add(digest)
    return out


def test_gc_removes_only_the_callers_unreferenced_old_blobs(store_env: StoreEnv) -> None:
    from foundry_checkpoint.spill import LocalSpill

    shared = LocalSpill(store_env.root / "shared-container")
    alice = _spilling_core(store_env, shared)
    bob = _spilling_core(store_env, LocalSpill(store_env.root / "shared-container"), user="bob")
    big_a, big_b = os.urandom(1_500_000), os.urandom(1_500_000)

    async def write(core: CheckpointCore, key: str, payload: bytes) -> str:
        scope = await core.scope("t1")  # the same thread id for both users
        await scope.touch()
        value = await scope.encode(key, payload)
        await scope.store.set_item(key, value)
        ns = await scope.namespace(create=False)
        assert ns is not None
        return ns

    async def read(core: CheckpointCore, key: str) -> bytes:
        scope = await core.scope("t1")
        item = await scope.store.get_item(key)
        assert item is not None
        return await scope.decode(item.value, key=key)

    async def drop(core: CheckpointCore, key: str) -> None:
        scope = await core.scope("t1")
        await scope.store.delete_item(key)

    try:
        ns_a = alice.run(write(alice, "c/1", big_a))
        alice.run(write(alice, "c/2", big_b))
        ns_b = bob.run(write(bob, "c/1", big_b))
        assert ns_a != ns_b  # namespaces are random per (user, scope), never the store name

        alice.run(drop(alice, "c/2"))
        report = alice.run(alice.gc(_live_digests, grace_seconds=3600))
        assert report.deleted == [] and report.kept_recent == 1  # too young to be taken
        report = alice.run(alice.gc(_live_digests, grace_seconds=0, dry_run=True))
        assert len(report.deleted) == 1 and len(alice.run(shared.list(ns_a))) == 2
        report = alice.run(alice.gc(_live_digests, grace_seconds=0))
        assert len(report.deleted) == 1 and report.deleted[0][0] == ns_a
        assert ns_b in report.unattributed  # bob's namespace: reported, never touched
        assert alice.run(read(alice, "c/1")) == big_a
        assert bob.run(read(bob, "c/1")) == big_b

        bob.run(drop(bob, "c/1"))
        bob.run(bob.gc(_live_digests, grace_seconds=0))
        assert alice.run(read(alice, "c/1")) == big_a
        purge_scope = alice.run(alice.scope("t1"))
        alice.run(purge_scope.purge())
        assert alice.run(shared.list(ns_a)) == []
        assert alice.run(alice.scope_ids()) == []
    finally:
        alice.close()
        bob.close()


def test_sdk_backend_in_hosted_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from foundry_checkpoint import FoundryCheckpointer
    from foundry_checkpoint.errors import InvalidArgumentError
    from foundry_checkpoint_maf import FoundryCheckpointStorage

    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "1")
    for make in (FoundryCheckpointer, lambda **kw: FoundryCheckpointStorage("c", **kw)):
        with pytest.raises(InvalidArgumentError, match="only available when it is unset"):
            make(local_backend="sdk")


def test_the_embedded_store_keeps_small_values_uncompressed(store_env: StoreEnv) -> None:
    """Local SQLite skips the zlib pass for values that fit raw; hosted mode compresses."""
    core = _core(store_env)
    payload = b"checkpoint state, very compressible. " * 300

    async def encode() -> dict[str, Any]:
        scope = await core.scope("t1")
        return dict(await scope.encode("k", payload))

    try:
        value = core.run(encode())
        assert value["c"] == ("z" if store_env.mode == "hosted" else "raw")
    finally:
        core.close()


def test_scope_ids_are_read_from_the_index_keys(
    store_env: StoreEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing a user's threads lists the index: no item is read, except for an id too long
    to be spelled out in its key (the key is then a hash)."""
    core = _core(store_env)
    ids: list[str | None] = ["t1", "a b/ç.~", ".dot", "x" * 200, None]
    try:
        for scope_id in ids:
            core.run(core.register(scope_id))
        index = core.run(core.index())
        read: list[str] = []
        get_item = index.get_item

        async def counted(key: str) -> Any:
            read.append(key)
            return await get_item(key)

        monkeypatch.setattr(index, "get_item", counted)
        assert sorted(core.run(core.scope_ids()), key=str) == sorted(ids, key=str)
        assert len(read) == 1 and read[0].startswith("!")
    finally:
        core.close()
