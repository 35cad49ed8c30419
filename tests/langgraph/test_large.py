"""Large channel values: spilled per channel, uploaded once while unchanged, or refused whole."""

from __future__ import annotations

import builtins
import hashlib
import os
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from foundry_checkpoint import AzureBlobSpill, FoundryCheckpointer
from foundry_checkpoint.spill import BlobInfo, SpillStore
from tests.langgraph._util import cfg

BIG = 3 * 1024 * 1024


class _CountingSpill:
    """A spill store that records every ``put`` (digest) of the store it wraps."""

    def __init__(self, inner: SpillStore) -> None:
        self.inner = inner
        self.puts: Counter[str] = Counter()

    async def put(self, namespace: str, data: bytes) -> str:
        digest = await self.inner.put(namespace, data)
        self.puts[digest] += 1
        return digest

    async def get(self, namespace: str, digest: str) -> bytes:
        return await self.inner.get(namespace, digest)

    async def delete(self, namespace: str, digests: Iterable[str]) -> int:
        return await self.inner.delete(namespace, digests)

    async def delete_namespace(self, namespace: str) -> int:
        return await self.inner.delete_namespace(namespace)

    async def list(self, namespace: str) -> builtins.list[BlobInfo]:
        return await self.inner.list(namespace)

    async def namespaces(self) -> builtins.list[str]:
        return await self.inner.namespaces()

    async def aclose(self) -> None:
        await self.inner.aclose()

    @property
    def describe(self) -> str:
        return self.inner.describe


def _azure_spill(azurite: Any, container: str | None = None) -> AzureBlobSpill:
    return AzureBlobSpill(
        connection_string=azurite.connection_string,
        container=container or f"lg-{uuid.uuid4().hex[:12]}",
        retry_total=0,
    )


def _items(saver: FoundryCheckpointer, thread_id: str) -> list[str]:
    """Keys of the saver's items in the thread's store (the core's own item excluded)."""

    async def keys() -> list[str]:
        scope = await saver._core.scope(thread_id)
        return [k.key for k in await scope.keys() if not k.key.startswith("m/")]

    return saver._core.run(keys())


def _blobs(saver: FoundryCheckpointer, thread_id: str) -> set[str]:
    async def listing() -> set[str]:
        scope = await saver._core.scope(thread_id)
        ns = await scope.namespace(create=False)
        spill = scope.spill
        if ns is None or spill is None:
            return set()
        return {b.digest for b in await spill.list(ns)}

    return saver._core.run(listing())


def test_large_value_round_trips_in_both_modes_with_nothing_configured(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    """Locally it spills to the default LocalSpill; hosted, with no spill store, into chunk
    items of the thread's own store."""
    saver = make_saver()
    big = os.urandom(BIG)
    first = empty_checkpoint()
    first["channel_values"] = {"small": 1}
    first["channel_versions"] = {"small": 1}
    parent = saver.put(cfg("big"), first, {"source": "input", "step": -1}, {"small": 1})
    second = empty_checkpoint()
    second["channel_values"] = {"small": 1, "big": big}
    second["channel_versions"] = {"small": 1, "big": 1}
    config = cfg("big", parent["configurable"]["checkpoint_id"])
    saver.put(config, second, {"source": "loop", "step": 0}, {"big": 1})
    # A new instance (nothing in memory) reads it back from the item and the spilled value.
    got = make_saver().get_tuple(cfg("big"))
    assert got is not None and got.checkpoint["id"] == second["id"]
    assert got.checkpoint["channel_values"] == {"small": 1, "big": big}
    assert len(_blobs(saver, "big")) == 1
    if store_env.mode == "hosted":
        assert saver._core.spill is None  # nothing configured: the chunks are items
        saver.put_writes(parent, [("big", big)], "task-big")
        found = make_saver().get_tuple(parent)
        assert found is not None and found.pending_writes == [("task-big", "big", big)]


class BigState(TypedDict, total=False):
    payload: bytes
    steps: int


def _three_step_graph() -> StateGraph[BigState]:
    builder = StateGraph(BigState)
    builder.add_node("load", lambda s: {"steps": len(s["payload"]) // BIG})
    builder.add_node("one", lambda s: {"steps": s["steps"] + 1})
    builder.add_node("two", lambda s: {"steps": s["steps"] + 1})
    builder.add_node("three", lambda s: {"steps": s["steps"] + 1})
    builder.add_edge(START, "load")
    builder.add_edge("load", "one")
    builder.add_edge("one", "two")
    builder.add_edge("two", "three")
    builder.add_edge("three", END)
    return builder


def test_azure_blob_spill_uploads_an_unchanged_value_once(
    store_env: Any, azurite: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    container = f"lg-{uuid.uuid4().hex[:12]}"
    spill = _CountingSpill(_azure_spill(azurite, container))
    saver = make_saver(spill=spill)
    graph = _three_step_graph().compile(checkpointer=saver)
    big = os.urandom(BIG)
    out = graph.invoke({"payload": big}, cfg("azure-big"))
    assert out == {"payload": big, "steps": 4}

    digest = hashlib.sha256(saver.serde.dumps_typed(big)[1]).hexdigest()
    checkpoints = list(saver.list(cfg("azure-big")))
    holding = [t for t in checkpoints if "payload" in t.checkpoint["channel_values"]]
    assert len(holding) >= 4  # after load, one, two and three
    assert spill.puts[digest] == 1  # one upload of the channel value across every step
    assert digest in _blobs(saver, "azure-big")

    # A new instance (as after a restart) resumes from the newest item and the blob.
    again = _three_step_graph().compile(
        checkpointer=make_saver(spill=_azure_spill(azurite, container))
    )
    state = again.get_state(cfg("azure-big"))
    assert state.values == {"payload": big, "steps": 4}
