"""The storage conformance behaviours of agent-framework's own suite, run in both store modes.

Local mode runs them on both local backends: the embedded engine (default) and the SDK's own
local mode under the file lock (``local_backend="sdk"``).

Ported from agent-framework's ``test_checkpoint_storage_conformance.py`` (copy semantics,
filtering by workflow name, ``get_latest`` of an unknown workflow, missing ids, and a value that
survives pickle but not ``deepcopy``).
"""

from __future__ import annotations

import asyncio
import copy
import pickle
from dataclasses import dataclass
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException, WorkflowEvent
from agent_framework._workflows._runner_context import WorkflowMessage

from foundry_checkpoint_maf import FoundryCheckpointStorage

from .conftest import MakeStorage


@dataclass
class PickleableNotDeepcopyable:
    """Survives pickle, refuses deepcopy."""

    value: str

    def __deepcopy__(self, memo: Any) -> Any:
        raise TypeError("This class explicitly rejects deepcopy for testing purposes")

    def __reduce__(self) -> Any:
        return (PickleableNotDeepcopyable, (self.value,))


@pytest.fixture(params=["sqlite", "sdk"])
def storage(
    request: pytest.FixtureRequest, make_storage: MakeStorage, store_env: Any
) -> FoundryCheckpointStorage:
    """Alice's storage of context ``conv-42`` on each local backend (hosted: the service)."""
    if request.param == "sdk" and store_env.mode == "hosted":
        pytest.skip("hosted mode has no local backend to choose")
    made = make_storage(local_backend=request.param)
    assert made.kind == ("hosted" if store_env.mode == "hosted" else f"local-{request.param}")
    return made


def _cp(**fields: Any) -> WorkflowCheckpoint:
    fields.setdefault("workflow_name", "test-workflow")
    fields.setdefault("graph_signature_hash", "test-hash")
    return WorkflowCheckpoint(**fields)


async def test_load_returns_caller_owned_copy(storage: FoundryCheckpointStorage) -> None:
    saved_id = await storage.save(_cp(state={"key": "original"}))
    loaded = await storage.load(saved_id)
    loaded.state["key"] = "mutated"
    assert (await storage.load(saved_id)).state["key"] == "original"


async def test_repeated_load_returns_independent_objects(storage: FoundryCheckpointStorage) -> None:
    saved_id = await storage.save(_cp(state={"key": "original"}))
    loaded1 = await storage.load(saved_id)
    loaded2 = await storage.load(saved_id)
    loaded1.state["key"] = "mutated"
    assert loaded2.state["key"] == "original"


async def test_get_latest_returns_caller_owned_copy(storage: FoundryCheckpointStorage) -> None:
    await storage.save(_cp(state={"key": "original"}))
    latest = await storage.get_latest(workflow_name="test-workflow")
    assert latest is not None
    latest.state["key"] = "mutated"
    again = await storage.get_latest(workflow_name="test-workflow")
    assert again is not None
    assert again.state["key"] == "original"


async def test_list_checkpoints_returns_caller_owned_copies(
    storage: FoundryCheckpointStorage,
) -> None:
    await storage.save(_cp(state={"key": "checkpoint1"}))
    await storage.save(_cp(state={"key": "checkpoint2"}))
    checkpoints = await storage.list_checkpoints(workflow_name="test-workflow")
    assert len(checkpoints) == 2
    checkpoints[0].state["key"] = "mutated"
    reloaded = await storage.list_checkpoints(workflow_name="test-workflow")
    assert sorted(cp.state["key"] for cp in reloaded) == ["checkpoint1", "checkpoint2"]


async def test_save_snapshots_at_call_time(storage: FoundryCheckpointStorage) -> None:
    checkpoint = _cp(state={"key": "original"})
    saved_id = await storage.save(checkpoint)
    checkpoint.state["key"] = "mutated"
    assert (await storage.load(saved_id)).state["key"] == "original"


async def test_save_snapshots_before_the_first_await(storage: FoundryCheckpointStorage) -> None:
    checkpoint = _cp(state={"key": "original"})
    pending = storage.save(checkpoint)
    task = asyncio.ensure_future(pending)
    await asyncio.sleep(0)  # save has started and taken its snapshot
    checkpoint.state["key"] = "mutated while saving"
    saved_id = await task
    assert (await storage.load(saved_id)).state["key"] == "original"


async def test_save_snapshots_nested_mutation(storage: FoundryCheckpointStorage) -> None:
    checkpoint = _cp(state={"nested": {"deep": {"value": "original"}}})
    saved_id = await storage.save(checkpoint)
    checkpoint.state["nested"]["deep"]["value"] = "mutated"
    assert (await storage.load(saved_id)).state["nested"]["deep"]["value"] == "original"


async def test_list_checkpoints_filters_by_workflow_name(storage: FoundryCheckpointStorage) -> None:
    await storage.save(_cp(workflow_name="workflow-1", graph_signature_hash="hash-1"))
    await storage.save(_cp(workflow_name="workflow-2", graph_signature_hash="hash-2"))
    await storage.save(_cp(workflow_name="workflow-1", graph_signature_hash="hash-3"))
    first = await storage.list_checkpoints(workflow_name="workflow-1")
    assert len(first) == 2
    assert all(cp.workflow_name == "workflow-1" for cp in first)
    second = await storage.list_checkpoints(workflow_name="workflow-2")
    assert [cp.workflow_name for cp in second] == ["workflow-2"]
    assert await storage.list_checkpoints(workflow_name="workflow-3") == []


async def test_get_latest_returns_none_for_unknown_workflow(
    storage: FoundryCheckpointStorage,
) -> None:
    assert await storage.get_latest(workflow_name="unknown-workflow") is None
    await storage.save(_cp(workflow_name="known"))
    assert await storage.get_latest(workflow_name="unknown-workflow") is None


async def test_load_with_missing_id_raises(storage: FoundryCheckpointStorage) -> None:
    with pytest.raises(WorkflowCheckpointException, match="nonexistent-id"):
        await storage.load("nonexistent-id")


async def test_save_returns_checkpoint_id(storage: FoundryCheckpointStorage) -> None:
    checkpoint = _cp()
    assert await storage.save(checkpoint) == checkpoint.checkpoint_id


async def test_nested_state_mutation_isolated(storage: FoundryCheckpointStorage) -> None:
    saved_id = await storage.save(_cp(state={"nested": {"deep": {"value": "original"}}}))
    loaded = await storage.load(saved_id)
    loaded.state["nested"]["deep"]["value"] = "mutated"
    assert (await storage.load(saved_id)).state["nested"]["deep"]["value"] == "original"


async def test_messages_data_mutation_isolated(storage: FoundryCheckpointStorage) -> None:
    message = WorkflowMessage(source_id="test", target_id="test", data="original")
    saved_id = await storage.save(_cp(messages={"executor1": [message]}))
    loaded = await storage.load(saved_id)
    assert isinstance(loaded.messages["executor1"][0], WorkflowMessage)
    loaded.messages["executor1"][0].data = "mutated"
    assert (await storage.load(saved_id)).messages["executor1"][0].data == "original"


async def test_pending_request_info_events_data_mutation_isolated(
    storage: FoundryCheckpointStorage,
) -> None:
    event = WorkflowEvent(type="data", data="original")
    saved_id = await storage.save(_cp(pending_request_info_events={"req1": event}))
    loaded = await storage.load(saved_id)
    loaded.pending_request_info_events["req1"].data = "mutated"
    reloaded = await storage.load(saved_id)
    assert reloaded.pending_request_info_events["req1"].data == "original"


async def test_metadata_mutation_isolated(storage: FoundryCheckpointStorage) -> None:
    saved_id = await storage.save(_cp(metadata={"nested": {"value": "original"}}))
    loaded = await storage.load(saved_id)
    loaded.metadata["nested"]["value"] = "mutated"
    assert (await storage.load(saved_id)).metadata["nested"]["value"] == "original"


async def test_pickleable_not_deepcopyable_roundtrips(make_storage: MakeStorage) -> None:
    storage = make_storage(allowed_checkpoint_types=[PickleableNotDeepcopyable])
    value = PickleableNotDeepcopyable(value="test")
    with pytest.raises(TypeError, match="explicitly rejects deepcopy"):
        copy.deepcopy(value)
    assert pickle.loads(pickle.dumps(value)).value == "test"

    saved_id = await storage.save(_cp(state={"custom": value}))
    loaded = await storage.load(saved_id)
    assert isinstance(loaded.state["custom"], PickleableNotDeepcopyable)
    assert loaded.state["custom"].value == "test"
    loaded.state["custom"].value = "mutated"
    assert (await storage.load(saved_id)).state["custom"].value == "test"
