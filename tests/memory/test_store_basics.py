"""FoundryStore basics in both store modes: the faces, errors, TTL, spill and call counts."""

from __future__ import annotations

import asyncio
import base64
import os
import random
import re
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from langgraph.store.base import (
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from foundry_checkpoint import FoundryStore
from foundry_checkpoint._memory import _layout
from foundry_checkpoint._memory._layout import memory_key
from foundry_checkpoint.errors import (
    CorruptPayloadError,
    InvalidArgumentError,
    InvalidIdentifierError,
    NonJsonValueError,
)
from tests._counting_store import CountingStore
from tests._request import in_request
from tests.memory._embeddings import HashingEmbeddings


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
    # a list is taken for a tuple, as SqliteStore and PostgresStore take one
    listed = store.search(["users", "ann"])  # type: ignore[arg-type]
    assert [(i.namespace, i.key) for i in listed] == [(("users", "ann"), "food")]
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


# -- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [
        {"when": datetime.now(timezone.utc)},
        {"tags": {"a", "b"}},
        {"n": float("nan")},
        {"n": [1, float("inf")]},
        {1: "non-string key"},
        {"s": "\ud800"},
        ["not", "a", "dict"],
    ],
)
def test_a_value_that_is_not_json_is_refused_before_anything_is_written(
    memory_store: FoundryStore, value: Any
) -> None:
    with pytest.raises(NonJsonValueError) as raised:
        memory_store.batch([PutOp(("ok",), "first", {"v": 1}), PutOp(("bad",), "k", value)])
    assert isinstance(raised.value, TypeError)
    assert "Nothing was written" in str(raised.value) and "'k'" in str(raised.value)
    assert memory_store.get(("ok",), "first") is None
    assert memory_store.list_namespaces() == []


@pytest.mark.parametrize(
    ("tag_fields", "fragment"),
    [
        ("kind", "sequence of field names"),
        (("a", "b", "c", "d", "e", "f"), "at most 5"),
        (("bad key",), "[A-Za-z0-9_.-]"),
        (("x" * 63,), "1-62"),
        (("a", "a"), "twice"),
        ((1,), "field name"),
    ],
)
def test_bad_tag_fields_are_refused(
    make_memory_store: Callable[..., FoundryStore], tag_fields: Any, fragment: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(fragment)) as raised:
        make_memory_store(tag_fields=tag_fields)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    "ttl",
    [{"default_ttl": 0}, {"default_ttl": "1"}, {"sweep": 1}, {"sweep_interval_minutes": -1}, 5],
)
def test_bad_ttl_config_is_refused(
    make_memory_store: Callable[..., FoundryStore], ttl: Any
) -> None:
    with pytest.raises(InvalidArgumentError):
        make_memory_store(ttl=ttl)


def test_bad_ops_are_refused(memory_store: FoundryStore) -> None:
    with pytest.raises(ValueError, match="Unknown operation type"):
        memory_store.batch(["not an op"])  # type: ignore[list-item]
    with pytest.raises(InvalidNamespaceError):
        memory_store.batch([PutOp((), "k", {"v": 1})])
    with pytest.raises(InvalidNamespaceError):
        memory_store.batch([GetOp(("a", 1), "k")])  # type: ignore[arg-type]
    for bad in [("a.b",), ("a", "\x00"), ("a", "")]:
        with pytest.raises(InvalidNamespaceError):
            memory_store.batch([SearchOp(bad)])
        with pytest.raises(InvalidNamespaceError):
            memory_store.batch([ListNamespacesOp((MatchCondition("suffix", bad),))])
    with pytest.raises(InvalidArgumentError):
        memory_store.put(("a",), "k", {"v": 1}, ttl=-1)


def test_a_string_match_path_is_one_character_labels(memory_store: FoundryStore) -> None:
    """As InMemoryStore and PostgresStore read it: ``"ab"`` is ``("a", "b")``."""
    memory_store.put(("public",), "k", {"v": 1})
    memory_store.put(("x", "a", "b"), "k", {"v": 2})
    suffix = ListNamespacesOp((MatchCondition("suffix", "ab"),))  # type: ignore[arg-type]
    assert memory_store.batch([suffix]) == [[("x", "a", "b")]]
    public = ListNamespacesOp((MatchCondition("suffix", "public"),))  # type: ignore[arg-type]
    assert memory_store.batch([public]) == [[]]
    with pytest.raises(InvalidIdentifierError):
        memory_store.get(("a",), "\ud800")


def test_a_tampered_item_is_a_typed_error(memory_store: FoundryStore) -> None:
    memory_store.put(("n",), "k", {"v": 1})
    core = memory_store._core

    async def rewrite() -> None:
        scope = await core.scope(None)
        await scope.store.set_item(memory_key(("n",), "k"), {"ns": "n", "key": 1})

    core.run(rewrite())
    with pytest.raises(CorruptPayloadError):
        memory_store.get(("n",), "k")


# -- TTL ------------------------------------------------------------------------------------
class _Clock:
    def __init__(self) -> None:
        self.at = 1_900_000_000.0

    def now(self) -> float:
        return self.at


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    clock = _Clock()
    monkeypatch.setattr(_layout, "now", clock.now)
    return clock


def test_ttl_expiry_refresh_and_sweep(
    make_memory_store: Callable[..., FoundryStore], clock: _Clock
) -> None:
    store = make_memory_store(ttl={"default_ttl": 1})  # minutes
    assert store.supports_ttl and store.ttl_config == {"default_ttl": 1}
    store.put(("t",), "default", {"v": 1})
    store.put(("t",), "long", {"v": 2}, ttl=10)
    store.put(("t",), "never", {"v": 3}, ttl=None)
    clock.at += 50
    assert store.get(("t",), "default") is not None  # refreshed on read: expires at +110
    assert store.get(("t",), "long", refresh_ttl=False) is not None
    clock.at += 50  # +100: "default" lives on, refreshed
    assert {i.key for i in store.search(("t",), refresh_ttl=False)} == {"default", "long", "never"}
    clock.at += 15  # +115: "default" expired (refreshed at +50 only: search did not refresh)
    assert store.get(("t",), "default") is None
    assert {i.key for i in store.search(("t",))} == {"long", "never"}
    clock.at += 600  # +715: "long" expired too (search at +115 refreshed it to +715)
    assert store.get(("t",), "long") is None
    assert store.list_namespaces() == [("t",)]
    assert store.sweep_ttl() == 2
    assert store.sweep_ttl() == 0
    got = store.get(("t",), "never")
    assert got is not None and got.value == {"v": 3}


def test_expired_namespaces_are_not_listed(memory_store: FoundryStore, clock: _Clock) -> None:
    memory_store.put(("gone",), "k", {"v": 1}, ttl=1)
    memory_store.put(("kept",), "k", {"v": 1})
    assert memory_store.list_namespaces() == [("gone",), ("kept",)]
    clock.at += 61
    assert memory_store.list_namespaces() == [("kept",)]
    assert memory_store.search(("gone",)) == []


def test_ttl_sweeper_thread(make_memory_store: Callable[..., FoundryStore]) -> None:
    store = make_memory_store(ttl={"default_ttl": 1, "sweep_interval_minutes": 1})
    done = store.start_ttl_sweeper()
    assert not done.done()
    assert store.start_ttl_sweeper() is done  # already running: its future, as the SQL stores
    assert store.stop_ttl_sweeper(timeout=10)
    done.result(timeout=10)
    idle = make_memory_store()
    assert idle.start_ttl_sweeper().done()  # nothing to sweep on: done at once


# -- spill ----------------------------------------------------------------------------------
def test_a_value_over_the_item_limit_spills_and_reads_back(memory_store: FoundryStore) -> None:
    blob = base64.b64encode(os.urandom(900_000)).decode()  # 1.2 MB of JSON
    memory_store.put(("big",), "k", {"blob": blob, "n": 1})
    got = memory_store.get(("big",), "k")
    assert got is not None and got.value == {"blob": blob, "n": 1}
    assert [i.value["n"] for i in memory_store.search(("big",))] == [1]
    other = base64.b64encode(os.urandom(900_000)).decode()
    memory_store.put(("big",), "gone", {"blob": other})
    memory_store.delete(("big",), "gone")
    assert len(memory_store.gc(grace_seconds=0, dry_run=True).deleted) == 1
    report = memory_store.gc(grace_seconds=0)
    assert len(report.deleted) == 1 and report.referenced == 1
    got = memory_store.get(("big",), "k")  # the live memory's blob was kept
    assert got is not None and got.value["blob"] == blob


# -- store calls ----------------------------------------------------------------------------
async def _counting(store: FoundryStore) -> CountingStore:
    core = store._core
    scope = await core.arun(core.scope(None))
    counting = CountingStore(scope.store)
    scope.store = counting
    return counting


async def test_store_calls_of_get_put_delete(memory_store: FoundryStore) -> None:
    await memory_store.aput(("c",), "first", {"v": 0})  # the namespace's first put
    calls = await _counting(memory_store)
    await memory_store.aput(("c",), "k", {"v": 1})
    assert calls.calls == {"set_item": 1}
    calls.calls.clear()
    assert await memory_store.aget(("c",), "k") is not None
    assert calls.calls == {"get_item": 1}
    calls.calls.clear()
    await memory_store.adelete(("c",), "k")
    assert calls.calls == {"delete_item": 1}
    calls.calls.clear()
    await memory_store.abatch([GetOp(("c",), "first"), GetOp(("c",), "k"), GetOp(("d",), "x")])
    assert calls.calls == {"get_item": 3}


async def test_tag_fields_serve_equality_filters(
    make_memory_store: Callable[..., FoundryStore],
) -> None:
    tagged = make_memory_store(tag_fields=("kind",), store_prefix="tagged")
    plain = make_memory_store(store_prefix="plain")
    for store in (tagged, plain):
        ops = [
            PutOp(("m",), f"k{i}", {"kind": "note" if i % 10 == 0 else "other", "i": i})
            for i in range(50)
        ]
        await store.abatch(ops)
    reads = []
    for store in (tagged, plain):
        calls = await _counting(store)
        found = await store.asearch(("m",), filter={"kind": "note"}, limit=10)
        assert sorted(i.value["i"] for i in found) == [0, 10, 20, 30, 40]
        same = await store.asearch(("m",), filter={"kind": {"$eq": "note"}, "i": {"$gte": 20}})
        assert sorted(i.value["i"] for i in same) == [20, 30, 40]
        reads.append(calls.calls["get_item"])
    assert reads[0] == 5 + 5  # only the items that carry the tag are read
    assert reads[1] == 50 + 50  # evaluated on read: every item under the prefix
    # 1, 1.0 and True are equal in a filter, as in InMemoryStore
    await tagged.aput(("eq",), "a", {"kind": 1})
    await tagged.aput(("eq",), "b", {"kind": True})
    await tagged.aput(("eq",), "c", {"kind": "1"})
    assert sorted(i.key for i in await tagged.asearch(("eq",), filter={"kind": 1.0})) == ["a", "b"]


# -- identity -------------------------------------------------------------------------------
async def test_one_store_serves_each_request_its_own_users_memory(
    store_env: Any, make_memory_store: Callable[..., FoundryStore]
) -> None:
    from azure.ai.agentserver.core import FoundryAgentRequestContext

    store = make_memory_store()

    async def request(user: str) -> None:
        context = FoundryAgentRequestContext(call_id=store_env.call_id(user), user_id=user)
        with in_request(context):
            await store.aput(("prefs",), "name", {"user": user})
            got = await store.aget(("prefs",), "name")
            assert got is not None and got.value == {"user": user}
            assert [i.value for i in await store.asearch(("prefs",))] == [{"user": user}]

    await asyncio.gather(*(request(f"user-{i}") for i in range(20)))
    for i in range(20):
        context = FoundryAgentRequestContext(
            call_id=store_env.call_id(f"user-{i}"), user_id=f"user-{i}"
        )
        with in_request(context):
            got = store.get(("prefs",), "name")
            assert got is not None and got.value == {"user": f"user-{i}"}


# -- semantic search through the store ------------------------------------------------------
async def test_semantic_search_through_the_store_answers_as_in_memory_store(
    make_memory_store: Callable[..., FoundryStore], clock: _Clock
) -> None:
    config: IndexConfig = {"dims": 32, "embed": HashingEmbeddings(32), "fields": ["text"]}
    store = make_memory_store(index=config, ttl={"default_ttl": 5})
    reference = InMemoryStore(index={**config, "embed": HashingEmbeddings(32)})
    texts = ["red apple pie", "green apple", "blue sky", "red car", "apple tree red", "sky"]
    for target in (store, reference):
        for i, text in enumerate(texts):
            await target.aput(("docs", f"d{i % 2}"), f"k{i}", {"text": text, "i": i}, ttl=None)
        await target.aput(
            ("docs", "d0"), "plain", {"text": "red apple", "i": 9}, index=False, ttl=None
        )
    for query, kwargs in [
        ("red apple", {}),
        ("sky", {"limit": 2}),
        ("apple", {"filter": {"i": {"$gte": 2}}}),
        ("red", {"offset": 1, "limit": 3}),
    ]:
        ours = await store.asearch(("docs",), query=query, **kwargs)  # type: ignore[arg-type]
        theirs = await reference.asearch(("docs",), query=query, **kwargs)  # type: ignore[arg-type]
        scores = [None if i.score is None else round(i.score, 9) for i in theirs]
        assert [None if i.score is None else round(i.score, 9) for i in ours] == scores
        # items of equal score may come in another order (and a page may end inside a tie)
        unique = [n for n, score in enumerate(scores) if scores.count(score) == 1]
        assert [ours[n].key for n in unique] == [theirs[n].key for n in unique]
    await store.adelete(("docs", "d0"), "k0")
    assert "k0" not in {i.key for i in await store.asearch(("docs",), query="red apple pie")}
    # an expired item is never an answer, and the sweep drops it from the vector pages too
    await store.aput(("docs", "d1"), "short", {"text": "red apple pie"}, ttl=1)
    assert (await store.asearch(("docs",), query="red apple pie", limit=1))[0].key == "short"
    clock.at += 120
    assert "short" not in {i.key for i in await store.asearch(("docs",), query="red apple pie")}
    assert await store.asweep_ttl() == 1


# -- filters: the same answers as InMemoryStore's, and the tag split exact ------------------
_VALUES: list[Any] = [
    None, True, False, 0, 1, 1.0, -0.0, 2.5, 10**20, 10**20 + 1, 1e20, "", "1", "a", "b",
    "x" * 300, [1, 2], [1.0, 2], (1, 2), [], {"a": 1}, {"a": {"b": [1, "x"]}}, {},
]  # fmt: skip


def _random_filter(rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in rng.sample(["f", "g", "h"], rng.randint(1, 3)):
        shape = rng.random()
        wanted = rng.choice(_VALUES)
        if shape < 0.4:
            out[field] = wanted
        elif shape < 0.8:
            ops = rng.sample(["$eq", "$ne", "$eq", "$ne"], rng.randint(1, 2))
            out[field] = {op: rng.choice(_VALUES) for op in ops}
        else:
            out[field] = {rng.choice(["$gt", "$gte", "$lt", "$lte"]): rng.choice([0, 1, 2.5, "1"])}
    return out


def test_filters_match_in_memory_store_and_the_tag_split_is_exact() -> None:
    from langgraph.store.memory import _compare_values

    from foundry_checkpoint._memory._filter import matches, split
    from foundry_checkpoint._memory._layout import FIELD_TAG, field_tag

    rng = random.Random(28)
    compared = served = 0
    for _ in range(4000):
        value = {k: rng.choice(_VALUES) for k in rng.sample(["f", "g", "h"], rng.randint(0, 3))}
        flt = _random_filter(rng)
        try:
            expected: object = all(_compare_values(value.get(k), v) for k, v in flt.items())
        except Exception as exc:  # the ordering operators raise on what float() refuses
            expected = type(exc)
        try:
            ours: object = matches(value, flt)
        except Exception as exc:
            ours = type(exc)
        assert ours == expected, (value, flt)
        if isinstance(expected, type):
            continue
        compared += 1
        tags, rest = split(flt, ("f", "g"))
        served += bool(tags)
        carried = {FIELD_TAG + f: t for f in ("f", "g") if (t := field_tag(value.get(f)))}
        by_tags = all(carried.get(k) == v for k, v in tags.items())
        try:
            split_answer: object = by_tags and matches(value, rest)
        except Exception as exc:
            split_answer = type(exc)
        assert split_answer == expected, (value, flt, tags, rest)
    assert compared > 1000 and served > 500
