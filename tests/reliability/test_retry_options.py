"""``retry_*`` client options reach the SDK's retry policy: attempts counted by the emulator."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from azure.ai.agentserver.core.storage import FoundryStorageError
from langgraph.graph import END, START, StateGraph

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint.emulator import FoundryEmulator
from foundry_checkpoint_maf import FoundryCheckpointStorage


class _State(TypedDict):
    log: Annotated[list[str], operator.add]


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[FoundryEmulator]:
    """An emulator of our own (its faults reach no other test), hosted mode on."""
    with FoundryEmulator(seed=5) as running:
        monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "1")
        monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
        yield running
        running.clear_faults()


def _client(emu: FoundryEmulator) -> dict[str, Any]:
    return {
        "credential": emu.credential(user="alice"),
        "endpoint": emu.endpoint,
        "connection_verify": emu.ca_file,
        "retry_backoff_factor": 0,  # a retry option too: no sleeping between attempts
    }


@pytest.mark.parametrize(
    ("options", "attempts"),
    [
        ({}, 4),
        ({"retry_total": 0}, 1),
        ({"retry_total": 2}, 3),
        ({"retry_total": 6, "retry_status": 6}, 7),
        ({"retry_total": 6}, 4),
    ],
)
def test_retry_total_sets_the_attempts_of_a_langgraph_read(
    emu: FoundryEmulator, options: dict[str, Any], attempts: int
) -> None:
    builder = StateGraph(_State)
    builder.add_node("step", lambda state: {"log": ["step"]})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    config: Any = {"configurable": {"thread_id": "retries"}}
    with FoundryCheckpointer(**_client(emu), **options) as saver:
        builder.compile(checkpointer=saver).invoke({"log": []}, config)
        emu.reset_counts()
        emu.inject("list_keys", status=503, times=None)
        with pytest.raises(FoundryStorageError):
            saver.get_tuple(config)
        assert emu.requests["list_keys"] == attempts
        assert emu.faults_served["list_keys"] == attempts
        emu.clear_faults()
        assert saver.get_tuple(config) is not None


async def test_retry_total_sets_the_attempts_of_a_maf_write(emu: FoundryEmulator) -> None:
    from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

    async with FoundryCheckpointStorage("conv-retries", **_client(emu), retry_total=1) as storage:
        # a first save opens the stores and registers the context, so the next one is one write
        await storage.save(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h"))
        emu.reset_counts()
        emu.inject("*", status=503, times=None)
        with pytest.raises(WorkflowCheckpointException, match="HTTP 503"):
            await storage.save(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h"))
        served = sum(emu.faults_served.values())
        assert served == 2 and sum(emu.requests.values()) == 2
