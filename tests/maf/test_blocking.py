"""The Agent Framework storage under ``langgraph dev``'s blockbuster (any host arming it).

The storage runs on the same core and stores as the LangGraph saver: armed as ``langgraph dev``
arms it (``tests._blockbuster``), blockbuster sees no blocking call on the caller's loop or on
the storage's private loop, on a state root that does not exist yet, through a human-in-the-
loop workflow, its resume, a checkpoint over the item limit (spilled to a ``LocalSpill``),
listing and deletion.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint

from foundry_checkpoint.spill import LocalSpill
from foundry_checkpoint_maf import FoundryCheckpointStorage
from tests._blockbuster import langgraph_dev_blockbuster

from . import _workflows as wf


@pytest.fixture(params=["local", "local-sdk", "hosted"])
def store_mode(request: pytest.FixtureRequest) -> str:
    """The embedded store, the SDK's local mode (both local), and hosted mode (the emulator)."""
    return str(request.param)


def _state_root_exists() -> bool:
    return Path(os.environ["AGENTSERVER_STATE_ROOT"]).exists()


async def test_workflow_runs_under_langgraph_dev_blockbuster(
    store_env: Any, store_mode: str, tmp_path: Path
) -> None:
    options: dict[str, Any] = {"allowed_checkpoint_types": [wf.Question]}
    if store_mode == "local-sdk":
        options["local_backend"] = "sdk"
    elif store_mode == "hosted":  # hosted mode has no default spill store: give it a local one
        options["spill"] = LocalSpill(tmp_path / "spill", fsync=False)
    assert not _state_root_exists()  # the first call creates every folder it needs
    with langgraph_dev_blockbuster():
        storage = FoundryCheckpointStorage("conv-bb", **store_env.kwargs(**options))
        try:
            first = await wf.approval(storage).run("report")
            (request,) = first.get_request_info_events()
            latest = await storage.get_latest(workflow_name=wf.APPROVAL)
            assert latest is not None and request.request_id in latest.pending_request_info_events
            answered = await wf.approval(storage).run(
                checkpoint_id=latest.checkpoint_id, responses={request.request_id: "yes"}
            )
            assert answered.get_outputs() == ["send report? yes!"]

            big = WorkflowCheckpoint(
                workflow_name="big", graph_signature_hash="g", state={"blob": os.urandom(1_200_000)}
            )
            await storage.save(big)
            assert (await storage.load(big.checkpoint_id)).state == big.state
            assert [
                cp.checkpoint_id for cp in await storage.list_checkpoints(workflow_name="big")
            ] == [big.checkpoint_id]
            ids = await storage.list_checkpoint_ids(workflow_name=wf.APPROVAL)
            assert len(ids) >= 2
            for checkpoint_id in [*ids, big.checkpoint_id]:
                assert await storage.delete(checkpoint_id) is True
            assert await storage.get_latest(workflow_name=wf.APPROVAL) is None
        finally:
            await storage.aclose()
        await storage.aclose()  # idempotent
