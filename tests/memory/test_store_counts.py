"""Store calls per ``FoundryStore`` operation, counted through the public API.

Counted with ``tests/_counting_store.py`` wrapped around the store of the one partition the
memory lives in; in hosted mode the emulator's request counts must agree (one store call, one
HTTP request). Asserted: ``get`` 1, ``put`` 1 (after the namespace's first put, which also
adds the namespace to the index), ``delete`` 1; a ``search`` page of 10 under a prefix holding
20 and 20,000 items, 10 and 10,000 of them matching a tag-served filter (local; hosted 20 and
2,000, to keep the test under ~30 s), with and without the filter: the same count (an offset
skips keys from the listing alone); a ``list_namespaces`` page at 10 and
10,000 namespaces (local; hosted 10 and 1,000): the same count.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langgraph.store.base import PutOp

from foundry_checkpoint import FoundryStore
from tests._counting_store import CountingStore
from tests.conftest import StoreEnv


async def _counting(store: FoundryStore) -> CountingStore:
    core = store._core
    scope = await core.arun(core.scope(None))
    counting = scope.store if isinstance(scope.store, CountingStore) else CountingStore(scope.store)
    scope.store = counting
    return counting


async def _count(env: StoreEnv, store: FoundryStore, op: Awaitable[Any]) -> Any:
    """The store calls ``op`` (not started yet) makes (hosted: checked against the emulator's
    requests)."""
    counting = await _counting(store)
    counting.calls.clear()
    before = Counter(env.emulator.requests) if env.mode == "hosted" else Counter()
    result = await op
    calls = dict(counting.calls)
    if env.mode == "hosted":
        sent = Counter(env.emulator.requests)
        sent.subtract(before)
        assert sum(sent.values()) == sum(calls.values()), (calls, +sent)
    return calls, result


def _big(env: StoreEnv) -> int:
    return 10_000 if env.mode == "local" else 1_000


async def _fill(store: FoundryStore, ops: list[PutOp]) -> None:
    for start in range(0, len(ops), 1000):
        await store.abatch(ops[start : start + 1000])


async def test_get_put_delete_cost_one_call(
    store_env: StoreEnv, make_memory_store: Callable[..., FoundryStore]
) -> None:
    store = make_memory_store(tag_fields=("kind",))
    await store.aput(("c", "d"), "first", {"kind": "note"})  # the namespace's first put
    calls, _ = await _count(store_env, store, store.aput(("c", "d"), "k", {"kind": "x"}))
    assert calls == {"set_item": 1}
    calls, item = await _count(store_env, store, store.aget(("c", "d"), "k"))
    assert calls == {"get_item": 1} and item is not None and item.value == {"kind": "x"}
    calls, item = await _count(store_env, store, store.aget(("c", "d"), "absent"))
    assert calls == {"get_item": 1} and item is None
    calls, _ = await _count(store_env, store, store.aput(("c", "d"), "k", {"kind": "y"}))
    assert calls == {"set_item": 1}  # an update, too
    calls, _ = await _count(store_env, store, store.adelete(("c", "d"), "k"))
    assert calls == {"delete_item": 1}
    # The sync face costs the same.
    calls, _ = await _count(
        store_env, store, asyncio.to_thread(store.put, ("c", "d"), "s", {"kind": "z"})
    )
    assert calls == {"set_item": 1}
    calls, _ = await _count(store_env, store, asyncio.to_thread(store.get, ("c", "d"), "s"))
    assert calls == {"get_item": 1}


@pytest.mark.slow
async def test_a_search_page_costs_the_same_at_10_and_many_items(
    store_env: StoreEnv, make_memory_store: Callable[..., FoundryStore]
) -> None:
    costs: dict[int, list[dict[str, int]]] = {}
    for size in (10, _big(store_env)):
        store = make_memory_store(store_prefix=f"{store_env.prefix}s{size}", tag_fields=("kind",))
        kinds = ("note", "fact")
        ops = [
            PutOp(("mem", f"t{i % 2}"), f"k{i}", {"kind": kinds[i % 2], "i": i})
            for i in range(2 * size)  # half of them notes: `size` notes under ("mem",)
        ]
        await _fill(store, ops)
        await store.aput(("other",), "k", {"kind": "note"})
        costs[size] = []
        seen: set[str] = set()
        for offset in (0, 10):
            calls, page = await _count(
                store_env,
                store,
                store.asearch(("mem",), filter={"kind": "note"}, limit=10, offset=offset),
            )
            keys = {i.key for i in page}
            assert len(page) == (10 if offset + 10 <= size else 0)
            assert all(i.value["kind"] == "note" and i.namespace[0] == "mem" for i in page)
            assert not keys & seen
            seen |= keys
            costs[size].append(calls)
        calls, page = await _count(store_env, store, store.asearch(("mem", "t1"), limit=10))
        assert len(page) == 10 and {i.namespace for i in page} == {("mem", "t1")}
        costs[size].append(calls)
    small, big = costs.values()
    assert small[0] == big[0] == {"list_keys": 1, "get_item": 10}
    assert small[2] == big[2] == {"list_keys": 1, "get_item": 10}
    # offset 10: at 10 notes the page is empty (the listing alone says so, nothing read)
    assert big[1] == {"list_keys": 1, "get_item": 10}
    assert small[1] == {"list_keys": 1}


@pytest.mark.slow
async def test_a_namespace_page_costs_the_same_at_10_and_many_namespaces(
    store_env: StoreEnv, make_memory_store: Callable[..., FoundryStore]
) -> None:
    costs: dict[int, list[dict[str, int]]] = {}
    for size in (10, _big(store_env)):
        store = make_memory_store(store_prefix=f"{store_env.prefix}n{size}")
        names = [("users", f"u{i:05d}", "memories") for i in range(size)]
        await _fill(store, [PutOp(ns, "k", {"i": i}) for i, ns in enumerate(reversed(names))])
        costs[size] = []
        listings: list[dict[str, Any]] = [
            {"limit": 10},
            {"limit": 10, "offset": 5},
            {"prefix": ("users",), "max_depth": 2, "limit": 10},
        ]
        for kwargs in listings:
            calls, page = await _count(
                store_env,
                store,
                store.alist_namespaces(**kwargs),
            )
            offset, depth = int(kwargs.get("offset", 0)), int(kwargs.get("max_depth", 3))
            want = [ns[:depth] for ns in names[offset : offset + 10]]
            assert page == want[: max(0, size - offset)]
            costs[size].append(calls)
    small, big = costs.values()
    assert small[0] == big[0] and small[2] == big[2], costs
    assert sum(big[0].values()) <= 2 + 10, costs  # the index's root and leaf, liveness checks
