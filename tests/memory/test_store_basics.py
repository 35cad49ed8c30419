"""FoundryStore basics in both store modes: the faces, errors, TTL, spill and call counts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp

from foundry_checkpoint import FoundryStore


def test_put_get_search_delete_sync(memory_store: FoundryStore) -> None:
    store = memory_store
    store.put(("users", "ann"), "food", {"likes": "pizza", "n": 2})
    store.put(("users", "bob"), "food", {"likes": "salad", "n": 1})
    item = store.get(("users", "ann"), "food")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (
        ("users", "ann"),
        "food",
        {"likes": "pizza", "n": 2},
    )
    assert item.created_at == item.updated_at
    found = store.search(("users",))
    assert sorted((i.namespace, i.key) for i in found) == [
        (("users", "ann"), "food"),
        (("users", "bob"), "food"),
    ]
    assert [i.namespace for i in store.search(("users",), filter={"n": {"$gt": 1}})] == [
        ("users", "ann")
    ]
    assert store.list_namespaces() == [("users", "ann"), ("users", "bob")]
    store.delete(("users", "ann"), "food")
    assert store.get(("users", "ann"), "food") is None
    assert store.list_namespaces() == [("users", "bob")]


def test_async_faces(memory_store: FoundryStore) -> None:
    async def scenario() -> None:
        store = memory_store
        await store.aput(("a", "b"), "k", {"x": [1, {"y": None}]})
        got = await store.aget(("a", "b"), "k")
        assert got is not None and got.value == {"x": [1, {"y": None}]}
        assert [i.key for i in await store.asearch(("a",))] == ["k"]
        assert await store.alist_namespaces(prefix=("a",)) == [("a", "b")]
        await store.adelete(("a", "b"), "k")
        assert await store.aget(("a", "b"), "k") is None

    asyncio.run(scenario())


def test_batch_reads_see_the_state_before_its_writes(memory_store: FoundryStore) -> None:
    store = memory_store
    store.put(("ns",), "a", {"v": 0})
    results = store.batch(
        [
            PutOp(("ns",), "a", {"v": 1}),
            GetOp(("ns",), "a"),
            SearchOp(("ns",)),
            ListNamespacesOp(),
            PutOp(("ns",), "a", {"v": 2}),
            PutOp(("ns",), "b", {"v": 3}),
        ]
    )
    got = results[1]
    assert got is not None and got.value == {"v": 0}  # type: ignore[union-attr]
    assert [i.value for i in results[2]] == [{"v": 0}]  # type: ignore[union-attr]
    assert results[3] == [("ns",)]
    assert results[0] is None and results[4] is None
    after = store.get(("ns",), "a")
    assert after is not None and after.value == {"v": 2}  # the last write wins


def test_reads_of_a_store_never_written(make_memory_store: Callable[..., FoundryStore]) -> None:
    store = make_memory_store(user="nobody")
    assert store.get(("x",), "k") is None
    assert store.search(("x",)) == []
    assert store.list_namespaces() == []
    store.delete(("x",), "k")  # nothing to delete: fine


def test_close_twice_and_reopen(make_memory_store: Callable[..., FoundryStore]) -> None:
    store = make_memory_store()
    with store:
        store.put(("n",), "k", {"v": 1})
    store.close()
    got = store.get(("n",), "k")  # reopens on next use
    assert got is not None and got.value == {"v": 1}
    assert repr(store).startswith("FoundryStore(backend=")


def test_update_keeps_created_at(memory_store: FoundryStore) -> None:
    memory_store.put(("n",), "k", {"v": 1})
    first = memory_store.get(("n",), "k")
    memory_store.put(("n",), "k", {"v": 2})
    second = memory_store.get(("n",), "k")
    assert first is not None and second is not None
    assert int(second.created_at.timestamp()) == int(first.created_at.timestamp())
    assert second.updated_at >= first.updated_at


@pytest.mark.parametrize("key", ["a/b", "x" * 300, "ü ~!", ""])
def test_awkward_keys_and_labels(memory_store: FoundryStore, key: str) -> None:
    namespace = ("a/b", "ü" * 200, "~x")
    memory_store.put(namespace, key, {"k": key})
    got = memory_store.get(namespace, key)
    assert got is not None and got.value == {"k": key} and got.key == key
    assert [i.key for i in memory_store.search(namespace)] == [key]
    assert memory_store.list_namespaces(prefix=("a/b",)) == [namespace]
