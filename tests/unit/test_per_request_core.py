"""The core's per-request identity rule, and reads of unknown threads that create no store."""

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
from foundry_checkpoint._core import user_key
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

            from foundry_checkpoint._store._embedded import default_engine
            from foundry_checkpoint._store._naming import store_name

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
