"""The shared core: store registry, isolation check, pass-through options, processes, lifecycle."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from azure.ai.agentserver.core.storage import FoundryStateStore

from foundry_checkpoint._core import CheckpointCore
from foundry_checkpoint.errors import InvalidIdentifierError, IsolationRefusedError
from tests.conftest import StoreEnv


def _core(env: StoreEnv, **extra: object) -> CheckpointCore:
    kwargs = env.kwargs(**extra)
    known = {"store_prefix", "credential", "endpoint", "user_id", "item_ttl_seconds",
             "spill", "local_backend"}
    client = {k: v for k, v in kwargs.items() if k not in known}
    own = {k: v for k, v in kwargs.items() if k in known}
    own.setdefault("store_prefix", "core")
    return CheckpointCore(scope_word="thread", client_kwargs=client, **own)  # type: ignore[arg-type]


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
            from foundry_checkpoint._local_store import default_engine

            default_engine().create_store(name, user_isolation=False, item_ttl_seconds=-1)
        else:
            kwargs = store_env.kwargs()
            store = await FoundryStateStore.get_or_create(
                name, kwargs["credential"], kwargs["endpoint"], user_isolation=False,
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
    with pytest.raises(InvalidIdentifierError):
        _core(store_env, item_ttl_seconds=0)
    with pytest.raises(InvalidIdentifierError):
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


def _writer(root: str, backend: str, worker: int, count: int) -> None:
    os.environ["AGENTSERVER_STATE_ROOT"] = root
    os.environ.pop("FOUNDRY_HOSTING_ENVIRONMENT", None)
    core = CheckpointCore(store_prefix="procs", scope_word="thread", local_backend=backend)  # type: ignore[arg-type]

    async def write() -> None:
        scope = await core.scope("shared")
        for i in range(count):
            await scope.store.set_item(f"w{worker}-{i}", {"i": i})

    try:
        core.run(write())
    finally:
        core.close()


@pytest.mark.parametrize(("backend", "count"), [("sqlite", 100), ("sdk", 100)])
def test_four_processes_keep_every_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, count: int
) -> None:
    root = str(tmp_path / "state")
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", root)
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(root, backend, w, count)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    core = CheckpointCore(store_prefix="procs", scope_word="thread", local_backend=backend)  # type: ignore[arg-type]

    async def count_keys() -> int:
        scope = await core.scope("shared")
        return len(await scope.keys())

    try:
        assert core.run(count_keys()) == 4 * count
    finally:
        core.close()
