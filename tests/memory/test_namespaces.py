"""The namespace index behind ``list_namespaces``, in both store modes.

Each test builds a core as an adapter does (``new_core``) and drives the index directly. Which
namespaces hold live items is the test's own :class:`Live` (the ``has_items``/``exact``
answers a memory store gives, with the questions counted); the expected listings come from
LangGraph's ``InMemoryStore`` holding one item in each live namespace.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest
from langgraph.store.base import ListNamespacesOp, MatchCondition
from langgraph.store.memory import InMemoryStore

from foundry_checkpoint._memory import _layout
from foundry_checkpoint._memory import _namespaces as nsx
from foundry_checkpoint._memory._namespaces import NamespaceIndex, past, separator
from foundry_checkpoint.adapter import CheckpointCore, Scope, new_core
from foundry_checkpoint.errors import CorruptPayloadError
from tests._counting_store import CountingStore

Namespace = tuple[str, ...]


class Live:
    """Which namespaces hold live items, answering as a memory store does (calls counted)."""

    def __init__(self, namespaces: Iterable[Namespace] = ()) -> None:
        self.namespaces = set(namespaces)
        self.calls = 0
        self._lock = threading.Lock()

    def _count(self) -> None:
        with self._lock:
            self.calls += 1

    async def has_items(self, prefix: Namespace) -> bool:
        self._count()
        return any(ns[: len(prefix)] == prefix for ns in self.namespaces)

    async def exact(self, namespace: Namespace) -> bool:
        self._count()
        return namespace in self.namespaces


def _op(
    prefix: Namespace | None = None,
    suffix: Namespace | None = None,
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
) -> ListNamespacesOp:
    """The op ``BaseStore.list_namespaces`` builds from these arguments."""
    conditions = []
    if prefix:
        conditions.append(MatchCondition(match_type="prefix", path=prefix))
    if suffix:
        conditions.append(MatchCondition(match_type="suffix", path=suffix))
    return ListNamespacesOp(tuple(conditions), max_depth=max_depth, limit=limit, offset=offset)


def reference(namespaces: Iterable[Namespace], **kwargs: Any) -> list[Namespace]:
    """InMemoryStore's answer with one item in each of ``namespaces``."""
    store = InMemoryStore()
    for ns in namespaces:
        store.put(ns, "k", {"v": 1})
    return store.list_namespaces(**kwargs)


class Index:
    """One process's index on one core: sync helpers around :class:`NamespaceIndex`."""

    def __init__(self, core: CheckpointCore, *, leaf_bytes: int = nsx.LEAF_BYTES) -> None:
        self.core = core
        self.index = NamespaceIndex(leaf_bytes=leaf_bytes)
        self.scope: Scope = core.run(core.scope(None))

    def add(self, *namespaces: Namespace) -> None:
        self.core.run(self.index.add_many(self.scope, namespaces))

    def add_one(self, namespace: Namespace) -> None:
        self.core.run(self.index.add(self.scope, namespace))

    def listing(self, live: Live, *, exact: bool = True, **kwargs: Any) -> list[Namespace]:
        return self.core.run(
            self.index.list(
                self.scope, _op(**kwargs), live.has_items, exact=live.exact if exact else None
            )
        )

    def held(self) -> list[Namespace]:
        """Every namespace the index holds (all confirmed live)."""

        async def always(_: Namespace) -> bool:
            return True

        return self.core.run(self.index.list(self.scope, _op(limit=10**9), always))

    def sweep(self, live: Live, **kwargs: Any) -> int:
        return self.core.run(
            self.index.sweep(self.scope, live.has_items, exact=live.exact, **kwargs)
        )

    def counting(self) -> CountingStore:
        """Count this scope's store calls from now on."""
        counting = CountingStore(self.scope.store)
        self.scope.store = counting
        return counting

    def leaf_keys(self) -> set[str]:
        async def keys() -> set[str]:
            page = await self.scope.store.list_keys(tags={"k": "n"}, limit=100)
            assert not page.has_more
            return {k.key for k in page.keys if k.key.startswith("n/l/")}

        return self.core.run(keys())

    def first_leaf(self) -> nsx._Leaf:
        async def read() -> nsx._Leaf:
            root = await NamespaceIndex._read_root(self.scope.store)
            leaf = await nsx._Reader(self.scope.store, root).find(())
            assert leaf is not None
            return leaf

        return self.core.run(read())

    def root_ids(self) -> tuple[str, ...]:
        return self.core.run(NamespaceIndex._read_root(self.scope.store)).ids


@pytest.fixture
def make_core(store_env: Any) -> Iterator[Callable[..., CheckpointCore]]:
    """Cores for ``store_env`` built as an adapter builds its own (closed at teardown)."""
    made: list[CheckpointCore] = []

    def factory(user: str = "alice", **extra: Any) -> CheckpointCore:
        kwargs = store_env.kwargs(user=user)
        arguments = {
            "store_prefix": kwargs.pop("store_prefix", store_env.prefix),
            "credential": kwargs.pop("credential", None),
            "endpoint": kwargs.pop("endpoint", None),
            "user_id": kwargs.pop("user_id", None),
            "trusted_delegation": False,
            "item_ttl_seconds": -1,
            "spill": None,
            "local_backend": "sqlite",
            "client_kwargs": kwargs,
            **extra,
        }
        core = new_core(arguments, scope_word="memory")
        made.append(core)
        return core

    yield factory
    for core in made:
        core.close()


LABELS = ["a", "b", "ab", "a!", "é", "users", "u1", "u10", "u2", "*", "docs", "v1", "x" * 40]


def _namespaces(seed: int, count: int) -> list[Namespace]:
    rng = random.Random(seed)
    out: set[Namespace] = set()
    while len(out) < count:
        out.add(tuple(rng.choice(LABELS) for _ in range(rng.randint(1, 4))))
    return sorted(out)


QUERIES: list[dict[str, Any]] = [
    {},
    {"prefix": ("a",)},
    {"prefix": ("users",)},
    {"prefix": ("a", "*")},
    {"prefix": ("*", "b")},
    {"prefix": ("*",)},
    {"prefix": ("a", "b", "ab", "a!")},
    {"suffix": ("v1",)},
    {"suffix": ("*", "b")},
    {"suffix": ("*",)},
    {"prefix": ("a",), "suffix": ("b",)},
    {"prefix": ("*",), "suffix": ("*", "*", "*")},
]


# -- order, paging, conditions ------------------------------------------------------------------
def test_separator_and_past_bound_what_they_say() -> None:
    rng = random.Random(3)
    pool = _namespaces(5, 300)
    for _ in range(500):
        left, right = sorted(rng.sample(pool, 2))
        cut = separator(left, right)
        assert left < cut <= right
    assert separator(("a", "b"), ("a", "b", "c")) == ("a", "b", "")
    for group in [("a",), ("a", "b"), ("é", "x" * 40)]:
        bound = past(group)
        assert bound is not None
        assert all(ns < bound for ns in pool if ns[: len(group)] == group)
        assert all(ns >= bound for ns in pool if ns > group and ns[: len(group)] != group)


def test_sorted_order_paging_depth_and_wildcards(make_core: Callable[..., CheckpointCore]) -> None:
    index = Index(make_core(), leaf_bytes=400)  # small leaves: many splits, a real root
    namespaces = _namespaces(1, 120)
    shuffled = namespaces[:]
    random.Random(2).shuffle(shuffled)
    for ns in shuffled[:60]:
        index.add_one(ns)
    index.add(*shuffled[60:])
    assert len(index.root_ids()) > 5
    live = Live(namespaces)
    assert index.listing(live, limit=1000) == sorted(namespaces)
    for query in QUERIES:
        for depth in (None, 0, 1, 2, 3):
            expected = reference(namespaces, **query, max_depth=depth, limit=1000)
            got = index.listing(live, **query, max_depth=depth, limit=1000)
            assert got == expected, (query, depth)
            if depth not in (None, 1):
                continue
            pages = [
                index.listing(live, **query, max_depth=depth, limit=7, offset=offset)
                for offset in range(0, len(expected) + 7, 7)
            ]
            assert [ns for page in pages for ns in page] == expected, (query, depth)


def test_namespaces_without_live_items_are_hidden(make_core: Callable[..., CheckpointCore]) -> None:
    index = Index(make_core(), leaf_bytes=400)
    namespaces = _namespaces(7, 80)
    index.add(*namespaces)
    live = Live(ns for i, ns in enumerate(namespaces) if i % 3)
    for query in QUERIES[:8]:
        for depth in (None, 1, 2):
            expected = reference(live.namespaces, **query, max_depth=depth, limit=1000)
            assert index.listing(live, **query, max_depth=depth, limit=1000) == expected
            assert (
                index.listing(live, **query, max_depth=depth, limit=4, offset=4) == (expected[4:8])
            )
    # ("p",) emptied while ("p", "q") keeps items: hidden when the store answers exactly,
    # confirmed by its prefix (listed, as InMemoryStore lists emptied namespaces) otherwise
    index.add(("p",), ("p", "q"))
    only_deeper = Live([("p", "q")])
    assert index.listing(only_deeper, prefix=("p",)) == [("p", "q")]
    assert index.listing(only_deeper, prefix=("p",), exact=False) == [("p",), ("p", "q")]
    assert index.listing(only_deeper, prefix=("p",), max_depth=1) == [("p",)]


# -- store calls ------------------------------------------------------------------------------
def _page_calls(
    make_core: Callable[..., CheckpointCore], namespaces: Sequence[Namespace], **query: Any
) -> tuple[int, int, list[Namespace]]:
    index = Index(make_core(), leaf_bytes=4000)
    for start in range(0, len(namespaces), 1000):
        index.add(*namespaces[start : start + 1000])
    live = Live(namespaces)
    counting = index.counting()
    page = index.listing(live, **query, limit=10)
    return sum(counting.calls.values()), live.calls, page


@pytest.mark.slow
def test_a_page_costs_the_same_at_10_and_10_000_namespaces(
    make_core: Callable[..., CheckpointCore],
) -> None:
    many = 10_000
    small = [("users", f"u{i:05d}") for i in range(10)]
    big = [("users", f"u{i:05d}") for i in range(many)]
    rng = random.Random(4)
    rng.shuffle(big)
    calls_small, checks_small, page_small = _page_calls(make_core, small)
    calls_big, checks_big, page_big = _page_calls(make_core, big)
    assert page_small == page_big == sorted(small)
    assert (calls_small, checks_small) == (calls_big, checks_big) == (2, 10)  # root, leaf

    # max_depth: each group costs one check and one jump, however many namespaces it holds
    groups_small = [(f"g{g:02d}", "n00000") for g in range(12)]
    per_group = many // 12
    groups_big = [(f"g{g:02d}", f"n{j:05d}") for g in range(12) for j in range(per_group)]
    calls_small, checks_small, page_small = _page_calls(make_core, groups_small, max_depth=1)
    calls_big, checks_big, page_big = _page_calls(make_core, groups_big, max_depth=1)
    assert page_small == page_big == [(f"g{g:02d}",) for g in range(10)]
    assert checks_small == checks_big == 10
    assert calls_small == 2  # one leaf holds everything
    assert calls_big <= 2 + 10  # the root, then one leaf per group at most


def test_adding_a_known_namespace_costs_nothing(make_core: Callable[..., CheckpointCore]) -> None:
    index = Index(make_core())
    counting = index.counting()
    index.add_one(("users", "ann"))
    first = sum(counting.calls.values())
    assert first <= 4  # root, first leaf (created), its write
    counting.calls.clear()
    index.add_one(("users", "ann"))
    assert sum(counting.calls.values()) == 0
    index.add_one(("users", "bo"))
    assert sum(counting.calls.values()) == 2  # the leaf read, its conditional write


# -- sweep ----------------------------------------------------------------------------------------
def test_sweep_marks_then_removes_empty_namespaces(
    make_core: Callable[..., CheckpointCore], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1_000_000.0]
    monkeypatch.setattr(_layout, "now", lambda: clock[0])
    index = Index(make_core(), leaf_bytes=400)
    namespaces = _namespaces(9, 40)
    index.add(*namespaces, ("p",), ("p", "q"))
    gone = set(namespaces[::4]) | {("p",)}
    live = Live(set(namespaces) - gone | {("p", "q")})
    assert index.sweep(live) == 0  # found empty: marked, kept for the grace period
    assert index.held() == sorted([*namespaces, ("p",), ("p", "q")])
    back = namespaces[0]
    live.namespaces.add(back)  # a write into a marked namespace (its writer knew it)
    clock[0] += nsx.TOMBSTONE_SECONDS + 1
    assert index.sweep(live) == len(gone) - 1
    assert index.held() == sorted(live.namespaces)
    assert index.listing(live, limit=1000) == reference(live.namespaces, limit=1000)
    index.add_one(("p",))  # removed: known no longer, so added again
    assert ("p",) in index.held()
    live.namespaces.discard(back)
    assert index.sweep(live, grace_seconds=0) == 2  # back and ("p",), at once
    assert index.held() == sorted(live.namespaces)


# -- crash safety and concurrency ------------------------------------------------------------------
def _overflowing(index: Index, extra: Sequence[Namespace]) -> nsx._Split:
    """The split a writer adding ``extra`` to the first leaf would make."""
    leaf = index.first_leaf()
    grown = replace(leaf, entries=tuple(sorted({*leaf.entries, *extra})))
    return index.index.plan_split(grown)


def test_a_crash_after_the_first_split_step_loses_and_duplicates_nothing(
    make_core: Callable[..., CheckpointCore],
) -> None:
    core = make_core()
    index = Index(core, leaf_bytes=600)
    before = [("users", f"u{i:03d}") for i in range(10)]
    index.add(*before)
    assert index.root_ids() == ("0",) and len(index.leaf_keys()) == 1
    extra = [("users", f"u{i:03d}") for i in range(10, 30)]
    plan = _overflowing(index, extra)
    core.run(index.index.create_leaves(index.scope, plan))  # ...and the writer dies here
    assert len(index.leaf_keys()) == 1 + len(plan.new)
    assert index.held() == before  # the new leaves' copies are seen by nobody

    other = Index(core, leaf_bytes=600)  # another process adds the same namespaces
    other.add(*extra)
    assert index.held() == sorted(before + extra)
    assert other.sweep(Live(before + extra), orphan_seconds=0) == 0
    linked = index.leaf_keys()
    assert not any(leaf.id in {k.rsplit("/", 1)[1] for k in linked} for leaf in plan.new)
    assert index.held() == sorted(before + extra)


def test_a_crash_before_the_root_learns_the_split_is_followed_by_links(
    make_core: Callable[..., CheckpointCore],
) -> None:
    core = make_core()
    index = Index(core, leaf_bytes=600)
    before = [("users", f"u{i:03d}") for i in range(10)]
    index.add(*before)
    extra = [("users", f"u{i:03d}") for i in range(10, 30)]
    plan = _overflowing(index, extra)
    core.run(index.index.create_leaves(index.scope, plan))
    core.run(index.index.link(index.scope, plan))  # ...and the writer dies before the root
    assert index.root_ids() == ("0",)
    assert index.held() == sorted(before + extra)
    other = Index(core, leaf_bytes=600)
    late = ("users", "u999")  # past the new leaves: reached through the links
    other.add_one(late)
    assert index.held() == sorted([*before, *extra, late])
    live = Live([*before, *extra, late])
    assert other.sweep(live) == 0
    assert index.root_ids() == ("0", *(leaf.id for leaf in plan.new))
    counting = index.counting()
    assert index.listing(live, prefix=("users", "u999")) == [late]
    assert counting.calls["get_item"] == 2  # the root, then straight to the last leaf


def test_two_processes_adding_at_once_lose_nothing(
    make_core: Callable[..., CheckpointCore],
) -> None:
    first, second = Index(make_core(), leaf_bytes=500), Index(make_core(), leaf_bytes=500)
    shared = [("shared", f"s{i:02d}") for i in range(20)]
    mine = {
        0: [("users", f"a{i:03d}") for i in range(80)] + shared,
        1: [("users", f"b{i:03d}") for i in range(80)] + shared[::-1],
    }
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(which: int, index: Index) -> None:
        try:
            start.wait()
            for ns in mine[which]:
                index.add_one(ns)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, ix)) for i, ix in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    everything = sorted(set(mine[0]) | set(mine[1]))
    fresh = Index(make_core(), leaf_bytes=500)
    assert fresh.held() == everything
    assert len(fresh.root_ids()) > 3


def test_one_process_adding_many_at_once_writes_in_rounds(
    make_core: Callable[..., CheckpointCore],
) -> None:
    index = Index(make_core(), leaf_bytes=500)
    namespaces = [("batch", f"n{i:03d}") for i in range(150)]

    async def all_at_once() -> None:
        import asyncio

        await asyncio.gather(*(index.index.add(index.scope, ns) for ns in namespaces))

    counting = index.counting()
    index.core.run(all_at_once())
    assert index.held() == namespaces
    assert counting.calls["set_item"] < 40  # joined rounds, not one racing write each


# -- users, lost leaves, damage --------------------------------------------------------------------
def test_one_index_keeps_users_apart(make_core: Callable[..., CheckpointCore]) -> None:
    index = NamespaceIndex()
    alice, bob = make_core("alice"), make_core("bob")
    scopes = {name: core.run(core.scope(None)) for name, core in (("a", alice), ("b", bob))}
    alice.run(index.add(scopes["a"], ("notes", "alice")))
    bob.run(index.add(scopes["b"], ("notes", "bob")))
    live = Live([("notes", "alice"), ("notes", "bob")])
    assert alice.run(index.list(scopes["a"], _op(), live.has_items)) == [("notes", "alice")]
    assert bob.run(index.list(scopes["b"], _op(), live.has_items)) == [("notes", "bob")]


def test_a_leaf_that_is_gone_is_skipped_then_recreated(
    make_core: Callable[..., CheckpointCore],
) -> None:
    core = make_core()
    index = Index(core, leaf_bytes=400)
    namespaces = [("users", f"u{i:03d}") for i in range(60)]
    index.add(*namespaces)
    ids = index.root_ids()
    assert len(ids) >= 4
    middle = ids[2]

    async def lose() -> None:
        await index.scope.store.delete_item(nsx._leaf_key(middle))

    core.run(lose())  # as if it expired under a store TTL
    held = index.held()
    assert held and len(held) < len(namespaces) and held == sorted(held)
    lost = sorted(set(namespaces) - set(held))
    other = Index(core, leaf_bytes=400)
    other.add(*lost)
    assert index.held() == namespaces


def test_a_damaged_leaf_is_refused(make_core: Callable[..., CheckpointCore]) -> None:
    core = make_core()
    index = Index(core)
    index.add(("a",))

    async def damage() -> None:
        await index.scope.store.set_item(nsx._leaf_key("0"), {"lo": "x"}, tags={"k": "n"})

    core.run(damage())
    with pytest.raises(CorruptPayloadError, match="namespace index"):
        index.held()


def test_a_retried_split_finds_its_own_write(make_core: Callable[..., CheckpointCore]) -> None:
    core = make_core()
    index = Index(core, leaf_bytes=600)
    before = [("users", f"u{i:03d}") for i in range(10)]
    index.add(*before)
    extra = [("users", f"u{i:03d}") for i in range(10, 30)]
    plan = _overflowing(index, extra)
    core.run(index.index.create_leaves(index.scope, plan))
    core.run(index.index.link(index.scope, plan))
    # the same conditional write again, as a retried request whose first attempt went through:
    # a 412, but the old leaf already links to the new ones, so nothing is undone
    core.run(index.index.link(index.scope, plan))
    assert index.held() == sorted(before + extra)
    assert len(index.leaf_keys()) == 1 + len(plan.new)


def test_under_a_store_ttl_adds_keep_the_index_written(
    make_core: Callable[..., CheckpointCore], monkeypatch: pytest.MonkeyPatch
) -> None:
    core = make_core(item_ttl_seconds=3600)
    Index(core).add_one(("a",))
    other = Index(core)  # another process, which knows nothing yet
    counting = other.counting()
    other.add_one(("a",))
    assert counting.calls["set_item"] == 0  # written moments ago: nothing to do
    later = time.time() + 3600 / 4 + 60
    monkeypatch.setattr(nsx, "_wall", lambda: later)
    third = Index(core)
    counting = third.counting()
    third.add_one(("a",))
    assert counting.calls["set_item"] == 1  # the leaf written again before the store's TTL
    assert third.held() == [("a",)]
