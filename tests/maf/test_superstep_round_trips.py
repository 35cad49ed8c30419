"""The first superstep of a new MAF context waits three round trips (hosted), a later one one.

Counted from the client's own requests (:class:`tests._trips.Trips`, one simulated round trip
each): the context's store and the index store are looked up together (each created when
missing), then the checkpoint, the index entry and the metadata read are written in flight
together (``Scope.put``). Before, the first save waited 8: get_store -> create_store ->
get_store -> put_item -> get_store -> get_store -> put_item -> get_item.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint
from agent_framework.exceptions import WorkflowCheckpointException

from foundry_checkpoint._store._naming import store_name
from foundry_checkpoint.errors import StoreBadRequestError
from foundry_checkpoint_maf import FoundryCheckpointStorage
from tests._trips import Trips, chain, waves

pytestmark = pytest.mark.emulator


def _storage(emulator: Any, trips: Trips, prefix: str, context_id: str) -> FoundryCheckpointStorage:
    return FoundryCheckpointStorage(
        context_id,
        store_prefix=prefix,
        credential=emulator.credential(user="alice"),
        endpoint=emulator.endpoint,
        connection_verify=emulator.ca_file,
        per_call_policies=[trips],
    )


async def test_the_first_save_of_a_new_context_waits_three_round_trips(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    prefix = f"maf1st{uuid.uuid4().hex[:10]}"
    trips = Trips()
    first = _storage(emulator, trips, prefix, "ctx-a")
    try:
        # a new prefix: neither the context's store nor the index store exists
        await first.save(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h"))
        opening = trips.take()
        await first.save(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h"))
        later = trips.take()
    finally:
        await first.aclose()
    assert Counter(name for name, _, _ in opening) == Counter(
        {"get_store": 2, "create_store": 2, "put_item": 2, "get_item": 1}
    )
    assert waves(opening)[-1] == "get_item | put_item | put_item"
    assert chain(opening) == 3
    assert [name for name, _, _ in later] == ["put_item"]

    # Another storage object (its own core) on a new context; the index store exists.
    second = _storage(emulator, trips, prefix, "ctx-b")
    try:
        await second.save(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h"))
        opening = trips.take()
        assert await second.list_contexts() == ["ctx-a", "ctx-b"]
    finally:
        await second.aclose()
    assert waves(opening) == [
        "get_store | get_store",
        "create_store",
        "get_item | put_item | put_item",
    ]
    assert chain(opening) == 3


async def test_a_first_save_whose_index_entry_failed_is_indexed_by_the_next_save(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The touch that failed is not counted as done: the next write registers the context."""
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    prefix = f"maf1st{uuid.uuid4().hex[:10]}"
    storage = _storage(emulator, Trips(), prefix, "ctx-a")
    try:
        await storage.list_contexts()  # the index store exists (and is empty)
        emulator.inject("put_item", status=400, times=1, store=store_name(prefix, "index"))
        try:
            with pytest.raises(WorkflowCheckpointException) as failed:
                await storage.save(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h"))
        finally:
            emulator.clear_faults()
        assert isinstance(failed.value.__cause__, StoreBadRequestError)
        assert await storage.list_contexts() == []
        await storage.save(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h"))
        assert await storage.list_contexts() == ["ctx-a"]
    finally:
        await storage.aclose()
