"""The core's per-request identity rule and its bounded resources."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from azure.ai.agentserver.core import (
    FoundryAgentRequestContext,
    reset_request_context,
    set_request_context,
)

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint._core import MAX_OPEN_STORES, CheckpointCore, user_key
from foundry_checkpoint_maf import FoundryCheckpointStorage
from tests.conftest import StoreEnv


@contextmanager
def request(call_id: str | None = None, user_id: str | None = None) -> Iterator[None]:
    token = set_request_context(FoundryAgentRequestContext(call_id=call_id, user_id=user_id))
    try:
        yield
    finally:
        reset_request_context(token)


def test_user_key_rule() -> None:
    assert user_key() == "self"
    with request(call_id="c1"):
        assert user_key() == "call:c1"
        assert user_key("ann") == "user:ann"
    with request(call_id="c1", user_id="bob"):
        assert user_key() == "user:bob"  # the user id outlives the request; the call id not
        assert user_key("ann") == "user:ann"  # an explicit user_id= wins
    with request(user_id=""):
        assert user_key() == "self"


def test_reads_of_unknown_threads_create_no_store(store_env: StoreEnv) -> None:
    emu = store_env.emulator
    if emu is not None:
        emu.reset_counts()
    config: Any = {"configurable": {"thread_id": "never-written"}}
    with FoundryCheckpointer(**store_env.kwargs()) as saver:
        assert saver.get_tuple(config) is None
        assert list(saver.list(config)) == []
        assert list(saver.list(None)) == []
        saver.delete_thread("never-written")
        saver.prune(["never-written"])
        saver.delete_for_runs(["r"])
        saver.copy_thread("never-written", "target")
        assert saver.gc(grace_seconds=0).scanned_scopes == 0
        assert saver.get_tuple({"configurable": {"thread_id": "target"}}) is None
        if emu is not None:
            assert emu.requests["create_store"] == 0
            assert emu.requests["put_item"] == 0
        else:
            from azure.ai.agentserver.core.storage import FoundryStorageNotFoundError

            from foundry_checkpoint._local_store import default_engine
            from foundry_checkpoint._naming import store_name

            core = saver._core
            names = [core.name_for("never-written"), core.name_for("target")]
            for name in [*names, store_name(core.prefix, "index")]:
                with pytest.raises(FoundryStorageNotFoundError):
                    default_engine().get_store(name)
    with FoundryCheckpointStorage("never-used", **store_env.kwargs()) as storage:
        import asyncio

        from agent_framework import WorkflowCheckpointException

        async def reads() -> None:
            assert await storage.get_latest(workflow_name="w") is None
            assert await storage.list_checkpoints(workflow_name="w") == []
            assert await storage.list_checkpoint_ids(workflow_name="w") == []
            assert await storage.delete("c") is False
            with pytest.raises(WorkflowCheckpointException):
                await storage.load("c")

        asyncio.run(reads())
        if emu is not None:
            assert emu.requests["create_store"] == 0


def _hosted_core(env: StoreEnv, **client: Any) -> CheckpointCore:
    kwargs = env.kwargs()
    return CheckpointCore(
        store_prefix=kwargs["store_prefix"],
        scope_word="thread",
        credential=kwargs["credential"],
        endpoint=kwargs["endpoint"],
        client_kwargs=client,
    )


@pytest.mark.parametrize("store_mode", ["hosted"])
@pytest.mark.parametrize("verify", ["ca-file", "default", "off"])
def test_every_client_shares_one_transport(store_env: StoreEnv, verify: str) -> None:
    client: dict[str, Any] = {}
    if verify == "ca-file":
        client["connection_verify"] = store_env.emulator.ca_file
    elif verify == "off":
        client["connection_verify"] = False
    core = _hosted_core(store_env, **client)

    async def transports() -> set[int]:
        seen = set()
        for i in range(5):
            kwargs = core._pipeline_kwargs()
            assert "connection_verify" not in kwargs
            seen.add(id(kwargs["transport"]))
            store = core.client(f"{store_env.prefix}/t/{i}", "")
            seen.add(id(store._client._pipeline._transport))  # type: ignore[attr-defined]
        return seen

    try:
        assert len(core.run(transports())) == 1
    finally:
        core.close()


@pytest.mark.parametrize("store_mode", ["hosted"])
def test_open_clients_are_bounded(store_env: StoreEnv) -> None:
    core = _hosted_core(store_env, connection_verify=store_env.emulator.ca_file)

    async def serve(threads: int) -> None:
        for i in range(threads):
            scope = await core.scope(f"bounded-{i}")
            await scope.store.set_item("k", {"i": i})
        # a thread whose client was dropped still works (a new client; no store request)
        store_env.emulator.reset_counts()
        scope = await core.scope("bounded-0")
        item = await scope.store.get_item("k")
        assert item is not None and item.value == {"i": 0}
        assert store_env.emulator.requests["get_store"] == 0

    try:
        core.run(serve(MAX_OPEN_STORES + 20))
        assert len(core._stores) == MAX_OPEN_STORES
    finally:
        core.close()
    assert len(core._stores) == 0
