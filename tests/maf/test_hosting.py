"""FoundryCheckpointStorageProvider: the storage plugged into agent-framework-foundry-hosting."""

from __future__ import annotations

from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from agent_framework._workflows._checkpoint_encoding import encode_checkpoint_value
from agent_framework_foundry_hosting import ContextScopedStoreProvider
from agent_framework_foundry_hosting._state_store import _encoded_checkpoint_hash
from agent_framework_foundry_hosting._workflow_state import _CheckpointWrites
from azure.ai.agentserver.core import (
    FoundryAgentRequestContext,
    get_request_context,
)

from foundry_checkpoint.errors import InvalidArgumentError
from foundry_checkpoint_maf import FoundryCheckpointStorage, FoundryCheckpointStorageProvider
from tests._request import agent_config, in_request

from . import _workflows as wf


class _CallIdRecorder:
    """Wraps a store and records the request context's call id seen by every call."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.call_ids: list[str | None] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in {"get_item", "set_item", "list_keys", "greatest", "delete_item"}:
            return attr

        async def _recorded(*args: Any, **kwargs: Any) -> Any:
            self.call_ids.append(get_request_context().call_id)
            return await attr(*args, **kwargs)

        return _recorded


@pytest.fixture
async def provider(store_env: Any) -> Any:
    made = FoundryCheckpointStorageProvider(**store_env.kwargs())
    yield made
    await made.aclose()


async def test_provider_gives_context_scoped_storages(store_env: Any, provider: Any) -> None:
    assert isinstance(provider, ContextScopedStoreProvider)
    config = agent_config(hosted=store_env.mode == "hosted")
    request = FoundryAgentRequestContext(
        call_id=store_env.call_id("alice"), user_id="alice", session_id="s"
    )
    conv_a = provider.get_store(config=config, context_id="conv-a", platform_context=request)
    conv_b = provider.get_store(config=config, context_id="conv-b", platform_context=request)
    assert isinstance(conv_a, FoundryCheckpointStorage)
    assert conv_a._core is conv_b._core  # one loop, one client cache

    cp = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="g")
    await conv_a.save(cp)
    assert await conv_b.get_latest(workflow_name="w") is None
    again = provider.get_store(config=config, context_id="conv-a", platform_context=request)
    latest = await again.get_latest(workflow_name="w")
    assert latest is not None and latest.checkpoint_id == cp.checkpoint_id
    await again.aclose()  # a provider's storage leaves the shared core open
    assert (await conv_a.load(cp.checkpoint_id)).checkpoint_id == cp.checkpoint_id
    with pytest.raises(InvalidArgumentError, match="context_id"):
        provider.get_store(config=config, context_id="", platform_context=request)


async def test_storage_forwards_the_request_call_id(store_env: Any, provider: Any) -> None:
    call_id = store_env.call_id("alice")
    request = FoundryAgentRequestContext(call_id=call_id, user_id="alice")
    storage = provider.get_store(
        config=agent_config(hosted=store_env.mode == "hosted"),
        context_id="conv-call",
        platform_context=request,
    )
    await storage.save(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="g"))
    with in_request(request):  # the scope (and its client) this request uses
        scope = await storage._core.arun(storage._core.scope("conv-call"))
    recorder = _CallIdRecorder(scope.store)
    scope.store = recorder
    assert get_request_context().call_id is None  # nothing set on the caller's side
    await storage.get_latest(workflow_name="w")
    assert recorder.call_ids == [call_id, call_id]


async def test_hosting_integrity_hash_pairs_with_ours(store_env: Any, provider: Any) -> None:
    request = FoundryAgentRequestContext(call_id=store_env.call_id("alice"))
    storage = provider.get_store(
        config=agent_config(hosted=store_env.mode == "hosted"),
        context_id="conv-hash",
        platform_context=request,
    )
    cp = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="g", state={"k": [1, "two"]})
    await storage.save(cp)
    writes = _CheckpointWrites(storage, run=None)  # type: ignore[arg-type]
    loaded, digest = await writes.load_persisted(cp.checkpoint_id)
    assert loaded == cp
    assert digest == _encoded_checkpoint_hash(encode_checkpoint_value(cp.to_dict()))


async def test_provider_allowed_types_and_validation(store_env: Any) -> None:
    async with FoundryCheckpointStorageProvider(
        allowed_checkpoint_types=[wf.Question], **store_env.kwargs()
    ) as provider:
        provider.validate_checkpoint_value(wf.Question("ok?"))
        storage = provider.get_store(
            config=agent_config(hosted=store_env.mode == "hosted"),
            context_id="conv-types",
            platform_context=FoundryAgentRequestContext(),
        )
        assert storage.allowed_checkpoint_types == provider.allowed_checkpoint_types
        result = await wf.approval(storage).run("x")
        assert len(result.get_request_info_events()) == 1
        assert storage.save_failures == 0
        assert "backend=" in repr(provider)
    async with FoundryCheckpointStorageProvider(**store_env.kwargs()) as strict:
        with pytest.raises(WorkflowCheckpointException):
            strict.validate_checkpoint_value(wf.Question("ok?"))
