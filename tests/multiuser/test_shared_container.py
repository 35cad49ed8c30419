"""Hosted mode with many users: one store name, one blob container, no cross-user damage.

Alice and Bob use the same thread (context) id, the same store prefix and the same blob
container, with 3 MB states that spill. Everything Bob does to "his" thread must leave Alice's
thread resumable byte-identical and every one of her blobs in place.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint
from langgraph.checkpoint.base import empty_checkpoint

from foundry_checkpoint import AzureBlobSpill, FoundryCheckpointer
from foundry_checkpoint_maf import FoundryCheckpointStorage

THREAD = "t1"
RUNS = ["run-a", "run-b", "run-c"]


@pytest.fixture
def hosted(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    monkeypatch.setenv("FOUNDRY_PROJECT_ENDPOINT", emulator.endpoint)
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    yield emulator


def _blob_names(azurite: Any, container: str) -> set[str]:
    from azure.storage.blob import BlobServiceClient

    with BlobServiceClient.from_connection_string(azurite.connection_string) as service:
        return {b.name for b in service.get_container_client(container).list_blobs()}


def _options(emulator: Any, azurite: Any, prefix: str, container: str, user: str) -> dict[str, Any]:
    return {
        "store_prefix": prefix,
        "credential": emulator.credential(user=user),
        "endpoint": emulator.endpoint,
        "connection_verify": emulator.ca_file,
        "spill": AzureBlobSpill(
            connection_string=azurite.connection_string, container=container, retry_total=0
        ),
    }


def _config(checkpoint_id: str | None = None) -> Any:
    configurable: dict[str, Any] = {"thread_id": THREAD, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _write_history(saver: FoundryCheckpointer, fill: bytes) -> list[str]:
    """Three checkpoints with a 3 MB channel (a new value each time) and pending writes."""
    parent: str | None = None
    ids = []
    for i, run_id in enumerate(RUNS):
        cp = empty_checkpoint()
        big = fill * (3 * 1024 * 1024 // len(fill)) + bytes([i])
        cp["channel_versions"] = {"big": i + 1}
        cp["channel_values"] = {"big": big}
        config = saver.put(
            _config(parent), cp, {"source": "loop", "step": i, "run_id": run_id}, {"big": i + 1}
        )
        saver.put_writes(config, [("big", big[:10])], task_id=f"task-{i}")
        parent = cp["id"]
        ids.append(parent)
    return ids


def _snapshot(saver: FoundryCheckpointer) -> list[tuple[str, bytes, list[Any]]]:
    out = []
    for tup in saver.list(_config()):
        out.append(
            (
                tup.config["configurable"]["checkpoint_id"],
                tup.checkpoint["channel_values"]["big"],
                [tuple(w) for w in tup.pending_writes or []],
            )
        )
    return out


def test_langgraph_bob_cannot_damage_alices_thread(hosted: Any, azurite: Any) -> None:
    prefix, container = f"mu{uuid.uuid4().hex[:10]}", f"mu-{uuid.uuid4().hex[:12]}"
    alice = FoundryCheckpointer(**_options(hosted, azurite, prefix, container, "alice"))
    bob = FoundryCheckpointer(**_options(hosted, azurite, prefix, container, "bob"))
    try:
        _write_history(alice, b"alice")
        before = _snapshot(alice)
        alice_blobs = _blob_names(azurite, container)
        assert alice_blobs and len(before) == 3

        _write_history(bob, b"alice")  # identical content: dedupe must not cross users
        assert len(_blob_names(azurite, container)) > len(alice_blobs)
        bob.prune([THREAD], strategy="keep_latest")
        bob.delete_for_runs(RUNS)
        _write_history(bob, b"bob")
        report = bob.gc(grace_seconds=0)
        assert not any(ns for ns, _ in report.deleted if any(ns in b for b in alice_blobs))
        bob.delete_thread(THREAD)

        assert _snapshot(alice) == before
        assert alice_blobs <= _blob_names(azurite, container)
        assert bob.get_tuple(_config()) is None
        latest = alice.get_tuple(_config())
        assert latest is not None
        assert latest.checkpoint["channel_values"]["big"] == before[0][1]
    finally:
        alice.close()
        bob.close()


def _maf_checkpoint(name: str, payload: str, previous: str | None) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=name,
        graph_signature_hash="sig",
        previous_checkpoint_id=previous,
        state={"doc": payload},
    )


def test_maf_bob_cannot_damage_alices_context(hosted: Any, azurite: Any) -> None:
    prefix, container = f"mu{uuid.uuid4().hex[:10]}", f"mu-{uuid.uuid4().hex[:12]}"

    async def scenario() -> None:
        alice = FoundryCheckpointStorage(
            "c1", **_options(hosted, azurite, prefix, container, "alice")
        )
        bob = FoundryCheckpointStorage("c1", **_options(hosted, azurite, prefix, container, "bob"))
        async with alice, bob:
            doc = os.urandom(1024 * 1024).hex() + "a"  # ~2 MB of text per checkpoint, 3 saves
            ids: list[str] = []
            previous = None
            for i in range(3):
                cp = _maf_checkpoint("wf", doc + str(i), previous)
                ids.append(await alice.save(cp))
                previous = cp.checkpoint_id
            before = [(await alice.load(i)).state for i in ids]
            alice_blobs = _blob_names(azurite, container)
            assert alice_blobs

            previous = None
            for i in range(3):
                cp = _maf_checkpoint("wf", doc + str(i), previous)
                await bob.save(cp)
                previous = cp.checkpoint_id
            for checkpoint_id in ids:  # Bob knows Alice's ids: still not his to delete
                assert await bob.delete(checkpoint_id) is False
            for checkpoint_id in await bob.list_checkpoint_ids(workflow_name="wf"):
                assert await bob.delete(checkpoint_id) is True
            assert await bob.get_latest(workflow_name="wf") is None

            assert [(await alice.load(i)).state for i in ids] == before
            latest = await alice.get_latest(workflow_name="wf")
            assert latest is not None and latest.checkpoint_id == ids[-1]
            assert alice_blobs <= _blob_names(azurite, container)

    asyncio.run(scenario())
