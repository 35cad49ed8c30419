"""Scripted store scenarios, the reference they are checked against, and their runner.

A :class:`Scenario` is a list of steps (:class:`Call`, :class:`Pages`, :class:`Advance`,
:class:`Sweep`) run on any ``BaseStore`` by :func:`run` (sync or async face), which turns every
answer into a plain, comparable outcome:

* an ``Item`` becomes ``(namespace, key, value)`` (its ``created_at``/``updated_at`` are only
  checked for sanity: timezone-aware, ``updated_at >= created_at``);
* a search answer without query is compared as a set (sorted), since the stores order it
  differently (InMemoryStore: insertion order; ``FoundryStore``: the store listing's): a single
  search must be a complete answer (fewer results than its ``limit``); a :class:`Pages` step walks
  ``offset`` by ``limit`` until a short page and gives the page sizes and the union, after
  checking the pages are disjoint;
* ``list_namespaces`` is compared exactly, order included;
* an exception becomes ``("raised", <kind>)``.

:class:`ReferenceStore` is LangGraph's ``InMemoryStore`` with two changes, so that it answers as
PostgresStore does: ``list_namespaces`` lists only namespaces that hold an item
(``InMemoryStore`` also lists a namespace a ``get`` touched, or whose items were all deleted,
since its ``defaultdict`` keeps the empty entry), and TTL as LangGraph defines it (per-item
``ttl`` in minutes, ``ttl_config`` default and ``refresh_on_read``, expired items never returned)
on a clock the test controls. Without a TTL config and per-item TTLs it is InMemoryStore itself.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
)
from langgraph.store.memory import InMemoryStore

Namespace = tuple[str, ...]


class Clock:
    """A manual clock in epoch seconds (``now`` replaces the store's clock in the tests)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.t = start

    def now(self) -> float:
        """The current time."""
        return self.t

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.t += seconds


@dataclass(frozen=True)
class Call:
    """A public ``BaseStore`` method (``put``, ``get``, ``search``, ``batch``, ...) and its
    arguments; run as ``a<method>`` on the async face."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Pages:
    """``search(prefix, filter=..., limit=limit, offset=k*limit)`` for k = 0, 1, ... until a
    short page."""

    prefix: Namespace
    limit: int
    filter: dict[str, Any] | None = None


@dataclass(frozen=True)
class Advance:
    """Move the test clock forward."""

    seconds: float


@dataclass(frozen=True)
class Sweep:
    """``sweep_ttl()`` where the store has it (removing expired items changes no answer)."""


Step = Call | Pages | Advance | Sweep


@dataclass(frozen=True)
class Scenario:
    """A named list of steps and the store options it needs."""

    name: str
    steps: tuple[Step, ...]
    ttl: TTLConfig | None = None
    tag_fields: tuple[str, ...] = ()


class ReferenceStore(InMemoryStore):
    """InMemoryStore answering ``list_namespaces`` as PostgresStore, with TTL on a test clock."""

    supports_ttl = True

    def __init__(self, *, ttl: TTLConfig | None = None, clock: Clock | None = None) -> None:
        super().__init__()
        self.ttl_config = ttl
        self._clock = clock or Clock()
        #: (namespace, key) -> (ttl minutes, expiry epoch)
        self._expiry: dict[tuple[Namespace, str], tuple[float, float]] = {}

    def _drop_expired(self) -> None:
        now = self._clock.now()
        for (ns, key), (_, exp) in list(self._expiry.items()):
            if exp <= now:
                self._data[ns].pop(key, None)
                del self._expiry[(ns, key)]

    def _after(self, ops: Sequence[Op], results: list[Result]) -> None:
        now = self._clock.now()
        read: list[Item] = []
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, GetOp) and op.refresh_ttl and isinstance(result, Item):
                read.append(result)
            elif isinstance(op, SearchOp) and op.refresh_ttl and isinstance(result, list):
                read.extend(r for r in result if isinstance(r, Item))
        for item in read:
            held = self._expiry.get((item.namespace, item.key))
            if held is not None:
                self._expiry[(item.namespace, item.key)] = (held[0], now + held[0] * 60)
        for op in ops:
            if isinstance(op, PutOp):
                self._expiry.pop((op.namespace, op.key), None)
                if op.value is not None and op.ttl is not None:
                    self._expiry[(op.namespace, op.key)] = (op.ttl, now + op.ttl * 60)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """InMemoryStore's batch after dropping expired items; refreshes and TTLs after it."""
        ops = list(ops)
        self._drop_expired()
        results = super().batch(ops)
        self._after(ops, results)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """The async face of :meth:`batch`."""
        ops = list(ops)
        self._drop_expired()
        results = await super().abatch(ops)
        self._after(ops, results)
        return results

    def _handle_list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        held = [ns for ns, items in self._data.items() if items]
        saved = self._data
        try:
            self._data = {ns: saved[ns] for ns in held}
            return super()._handle_list_namespaces(op)
        finally:
            self._data = saved


# -- outcomes ---------------------------------------------------------------------------------


def _kind(exc: BaseException) -> str:
    for kind in (InvalidNamespaceError, ValueError, TypeError, KeyError):
        if isinstance(exc, kind):
            return kind.__name__
    return type(exc).__name__


def _item(item: Any) -> tuple[Namespace, str, str]:
    assert isinstance(item, Item), item
    assert isinstance(item.created_at, datetime) and item.created_at.tzinfo is not None
    assert isinstance(item.updated_at, datetime) and item.updated_at.tzinfo is not None
    assert item.updated_at >= item.created_at, (item.created_at, item.updated_at)
    assert getattr(item, "score", None) is None
    return (tuple(item.namespace), item.key, json.dumps(item.value, sort_keys=True))


def _search(result: Any, limit: int) -> tuple[Any, ...]:
    assert isinstance(result, list)
    assert len(result) < limit, "a single search must be complete: walk it with Pages"
    return ("search", sorted(_item(r) for r in result))


def _outcome(call: Call, result: Any) -> Any:
    if call.method in ("get",):
        return None if result is None else _item(result)
    if call.method == "search":
        return _search(result, int(call.kwargs.get("limit", 10)))
    if call.method == "list_namespaces":
        assert isinstance(result, list)
        return ("namespaces", [tuple(ns) for ns in result])
    if call.method == "batch":
        (ops,) = call.args
        out: list[Any] = []
        for op, r in zip(ops, result, strict=True):
            if isinstance(op, GetOp):
                out.append(None if r is None else _item(r))
            elif isinstance(op, SearchOp):
                out.append(_search(r, op.limit))
            elif isinstance(op, ListNamespacesOp):
                out.append(("namespaces", [tuple(ns) for ns in r]))
            else:
                assert r is None, r
                out.append(None)
        return ("batch", out)
    assert result is None, (call, result)
    return None


def _pages(pages: list[list[Any]], limit: int) -> tuple[Any, ...]:
    seen: set[tuple[Namespace, str]] = set()
    union = []
    for page in pages:
        for r in page:
            item = _item(r)
            assert (item[0], item[1]) not in seen, f"pages overlap at {item[:2]}"
            seen.add((item[0], item[1]))
            union.append(item)
    assert all(len(p) == limit for p in pages[:-1]) and len(pages[-1]) < limit
    return ("pages", [len(p) for p in pages], sorted(union))


def run(store: BaseStore, scenario: Scenario, clock: Clock) -> list[Any]:
    """Run ``scenario`` on the sync face; one outcome per step."""
    out: list[Any] = []
    for step in scenario.steps:
        try:
            if isinstance(step, Advance):
                clock.advance(step.seconds)
                out.append(None)
            elif isinstance(step, Sweep):
                sweep = getattr(store, "sweep_ttl", None)
                if sweep is not None:
                    sweep()
                out.append(None)
            elif isinstance(step, Pages):
                pages: list[list[Any]] = []
                while not pages or len(pages[-1]) == step.limit:
                    offset = len(pages) * step.limit
                    pages.append(
                        store.search(
                            step.prefix, filter=step.filter, limit=step.limit, offset=offset
                        )
                    )
                out.append(_pages(pages, step.limit))
            else:
                result = getattr(store, step.method)(*step.args, **step.kwargs)
                out.append(_outcome(step, result))
        except AssertionError:
            raise
        except Exception as exc:
            out.append(("raised", _kind(exc)))
    return out


async def arun(store: BaseStore, scenario: Scenario, clock: Clock) -> list[Any]:
    """Run ``scenario`` on the async face; one outcome per step."""
    out: list[Any] = []
    for step in scenario.steps:
        try:
            if isinstance(step, Advance):
                clock.advance(step.seconds)
                out.append(None)
            elif isinstance(step, Sweep):
                sweep = getattr(store, "asweep_ttl", None)
                if sweep is not None:
                    await sweep()
                out.append(None)
            elif isinstance(step, Pages):
                pages: list[list[Any]] = []
                while not pages or len(pages[-1]) == step.limit:
                    offset = len(pages) * step.limit
                    pages.append(
                        await store.asearch(
                            step.prefix, filter=step.filter, limit=step.limit, offset=offset
                        )
                    )
                out.append(_pages(pages, step.limit))
            else:
                result = await getattr(store, f"a{step.method}")(*step.args, **step.kwargs)
                out.append(_outcome(step, result))
        except AssertionError:
            raise
        except Exception as exc:
            out.append(("raised", _kind(exc)))
    return out


# -- the scenarios ----------------------------------------------------------------------------

DEEP: Namespace = tuple(f"level{i}" for i in range(12))
LONG_LABEL = "L" * 140
LONG_KEY = "k" * 150
#: Namespaces whose labels test escaping, injectivity and ordering: a label holding the separator
#: (``a/b`` against ``a``, ``b``), labels sorting below the separator (``a!``, ``a-``, ``a ``),
#: astral and private-use characters (code point order, not UTF-16's), a literal ``*`` label,
#: long labels, a deep namespace.
NAMESPACES: tuple[Namespace, ...] = (
    ("users", "alice"),
    ("users", "alice", "memories"),
    ("users", "bob", "memories"),
    ("users", "bob"),
    ("docs",),
    ("a", "b"),
    ("a/b",),
    ("a", "z"),
    ("a!",),
    ("a-", "x"),
    ("a ", "y"),
    ("a",),
    ("ü", "日本語"),
    ("😀", "x"),
    ("\ue000", "x"),
    ("*", "lit"),
    ("%2F", "!k"),
    (LONG_LABEL, "y"),
    ("users", LONG_LABEL),
    DEEP,
    DEEP[:9],
    DEEP[:3],
)
KEYS = ("k1", "k2", "k/3", "ключ", "😀", LONG_KEY, "!hash", "a%2Fb", " spaced ", "k" * 129)


def _value(rng: random.Random, i: int) -> dict[str, Any]:
    value: dict[str, Any] = {"n": rng.choice([0, 1, 2, 3, 2.5, -1, True, False, 10**12])}
    if rng.random() < 0.8:
        value["s"] = rng.choice(["red", "blue", "グリーン", "", "5", "red blue"])
    if rng.random() < 0.5:
        value["tags"] = rng.choice([["x"], ["x", "y"], ["y", "x"], []])
    if rng.random() < 0.5:
        value["nested"] = {"a": {"b": rng.choice([1, 2, 3])}, "c": rng.choice(["u", "v"])}
    if rng.random() < 0.3:
        value["f"] = rng.choice([None, 1, "1", 1.0])
    value["i"] = i
    return value


def _filter(rng: random.Random) -> dict[str, Any] | None:
    """A filter LangGraph defines, over fields every value has where an operator needs a number
    (``n``), so no answer depends on which items a store happens to examine."""
    choice = rng.randrange(10)
    if choice == 0:
        return None
    if choice == 1:
        return {"s": rng.choice(["red", "blue", "", "5"])}
    if choice == 2:
        op = rng.choice(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"])
        return {"n": {op: rng.choice([0, 1, 2, 2.5, 3])}}
    if choice == 3:
        return {"n": {"$gte": 1, "$lt": 3}}
    if choice == 4:
        return {"nested": {"a": {"b": rng.choice([1, 2])}}}
    if choice == 5:
        return {"tags": rng.choice([["x"], ["x", "y"], []])}
    if choice == 6:
        return {"f": rng.choice([None, 1, "1"])}
    if choice == 7:
        return {"s": {"$ne": "red"}, "n": {"$lte": 2}}
    if choice == 8:
        return {"nested": {"c": "u", "a": {"b": {"$gt": 1}}}}
    return {"missing": None}


def _list_call(rng: random.Random) -> Call:
    kwargs: dict[str, Any] = {}
    pick = rng.randrange(6)
    if pick == 1:
        kwargs["prefix"] = rng.choice([("users",), ("a",), ("users", "*", "memories"), DEEP[:2]])
    elif pick == 2:
        kwargs["suffix"] = rng.choice([("memories",), ("x",), ("*", "x"), ("y",)])
    elif pick == 3:
        kwargs["max_depth"] = rng.choice([1, 2, 3, 9])
    elif pick == 4:
        kwargs["prefix"] = ("users",)
        kwargs["max_depth"] = 2
    kwargs["limit"] = rng.choice([3, 5, 100])
    kwargs["offset"] = rng.choice([0, 0, 2, 4])
    return Call("list_namespaces", (), kwargs)


def random_scenario(seed: int, steps: int = 70, tag_fields: tuple[str, ...] = ()) -> Scenario:
    """Seeded random puts, re-puts, deletes, gets, filtered page walks, listings and batches."""
    rng = random.Random(seed)
    out: list[Step] = []
    live: list[tuple[Namespace, str]] = []
    for i in range(steps):
        roll = rng.random()
        ns = rng.choice(NAMESPACES)
        if roll < 0.45 or not live:
            key = rng.choice(KEYS)
            out.append(Call("put", (ns, key, _value(rng, i))))
            live.append((ns, key))
        elif roll < 0.55:
            out.append(Call("delete", rng.choice(live)))
        elif roll < 0.65:
            out.append(Call("get", rng.choice(live) if rng.random() < 0.8 else (ns, "absent")))
        elif roll < 0.8:
            prefix = rng.choice([(), ("users",), ("a",), ns, ns[:1], DEEP[:9]])
            out.append(Pages(prefix, rng.choice([1, 2, 3, 7]), _filter(rng)))
        elif roll < 0.92:
            out.append(_list_call(rng))
        else:
            target = rng.choice(live)
            ops: list[Op] = [
                GetOp(*target),
                PutOp(target[0], target[1], _value(rng, i)),
                GetOp(*target),
                SearchOp(target[0][:1], filter=_filter(rng), limit=1000),
                ListNamespacesOp(match_conditions=None, max_depth=None, limit=1000, offset=0),
                PutOp(ns, "batch-new", _value(rng, i)),
                PutOp(ns, "batch-new", _value(rng, i + 1000)),
                GetOp(ns, "batch-new"),
            ]
            if rng.random() < 0.5:
                ops.append(PutOp(target[0], target[1], None))
            out.append(Call("batch", (ops,)))
    out.append(Pages((), 5))
    out.append(Call("list_namespaces", (), {"limit": 1000}))
    return Scenario(f"random-{seed}", tuple(out), tag_fields=tag_fields)


def _puts(items: Iterable[tuple[Namespace, str, dict[str, Any]]]) -> list[Step]:
    return [Call("put", (ns, key, value)) for ns, key, value in items]


def _filters_scenario(tag_fields: tuple[str, ...] = ()) -> Scenario:
    ns = ("f",)
    values: list[dict[str, Any]] = [
        {"n": 1, "s": "a", "l": [1, 2], "d": {"x": {"y": 1}}, "b": True},
        {"n": 2, "s": "b", "l": [2, 1], "d": {"x": {"y": 2}}, "b": False},
        {"n": 2.5, "s": "c", "l": [1, 2, 3], "d": {"x": {"y": 3}, "z": 1}},
        {"n": 3, "s": "a", "l": [], "d": {"x": 1}},
        {"n": -1, "s": "", "l": [1, 2], "d": {}, "b": None},
        {"n": "2", "s": "num-string", "d": {"x": {"y": "1"}}},
        {"n": True, "s": "bool", "l": ["1", "2"]},
        {"n": 2.0, "s": "float", "b": 1},
        {"n": 1.0, "s": "a", "b": 0.0},
    ]
    steps = _puts((ns, f"v{i}", v) for i, v in enumerate(values))
    filters: list[dict[str, Any]] = [
        {"s": "a"},
        {"s": {"$eq": "a"}},
        {"s": {"$ne": "a"}},
        {"n": 2},
        {"n": 2.0},
        {"n": 1},
        {"n": True},
        {"b": 1},
        {"b": False},
        {"s": ""},
        {"n": {"$eq": 2}},
        {"n": {"$ne": 2}},
        {"n": {"$gt": 1}},
        {"n": {"$gte": 2}},
        {"n": {"$lt": 2.5}},
        {"n": {"$lte": 1}},
        {"n": {"$gt": 0, "$lt": 3}},
        {"n": {"$gt": "1"}},
        {"l": [1, 2]},
        {"l": []},
        {"l": ["1", "2"]},
        {"d": {"x": {"y": 1}}},
        {"d": {"x": {"y": {"$gte": 2}}}},
        {"d": {"x": 1}},
        {"d": {}},
        {"b": True},
        {"b": None},
        {"b": {"$ne": None}},
        {"missing": None},
        {"missing": {"$ne": 1}},
        {"missing": 1},
        {"s": "a", "n": {"$gt": 1}},
        {"n": 1, "s": "b"},
    ]
    for f in filters:
        steps.append(Call("search", (ns,), {"filter": f, "limit": 50}))
        steps.append(Pages(ns, 2, f))
    # A comparison against a value that is not a number raises (as InMemoryStore's float()).
    steps.append(Call("search", (ns,), {"filter": {"s": {"$gt": 1}}, "limit": 50}))
    steps.append(Call("search", (ns,), {"filter": {"missing": {"$lt": 1}}, "limit": 50}))
    name = "filters-tagged" if tag_fields else "filters"
    return Scenario(name, tuple(steps), tag_fields=tag_fields)


def _names_scenario() -> Scenario:
    steps: list[Step] = []
    for i, ns in enumerate(NAMESPACES):
        for key in KEYS[: 1 + i % 4]:
            steps.append(Call("put", (ns, key, {"ns": list(ns), "key": key, "i": i})))
    steps.append(Call("put", (("a", "b"), LONG_KEY, {"w": 1})))
    steps.append(Call("put", (("a", "b"), "k" * 129, {"w": 2})))
    for ns in NAMESPACES:
        steps.append(Call("get", (ns, KEYS[0])))
        steps.append(Call("get", (ns, LONG_KEY)))
        steps.append(Pages(ns, 3))
    for prefix in [("a",), ("a/b",), ("a!",), ("*",), ("users",), DEEP[:8], DEEP[:9], DEEP]:
        steps.append(Pages(prefix, 4))
    listings: list[dict[str, Any]] = [
        {},
        {"prefix": ("a",)},
        {"prefix": ("a", "*")},
        {"prefix": ("*", "x")},
        {"prefix": ("*",)},
        {"suffix": ("x",)},
        {"suffix": ("*", "x")},
        {"suffix": ("memories",)},
        {"prefix": ("users",), "suffix": ("memories",)},
        {"prefix": ("users", "*", "memories")},
        {"max_depth": 1},
        {"max_depth": 2},
        {"max_depth": 9},
        {"prefix": DEEP[:2], "max_depth": 5},
        {"prefix": ("users",), "max_depth": 2},
        {"suffix": (DEEP[-1],)},
        {"prefix": ("nothing",)},
        {"prefix": (LONG_LABEL,)},
    ]
    for kwargs in listings:
        steps.append(Call("list_namespaces", (), {**kwargs, "limit": 1000}))
        for offset in range(0, 30, 4):
            steps.append(Call("list_namespaces", (), {**kwargs, "limit": 4, "offset": offset}))
    return Scenario("names", tuple(steps))


def _many_namespaces_scenario(count: int = 120) -> Scenario:
    steps: list[Step] = []
    for i in range(count):
        ns = ("many", f"g{i % 7}", f"n{i:03d}")
        steps.append(Call("put", (ns, "k", {"i": i})))
    for limit in (1, 7, 50):
        for offset in range(0, count + limit, max(limit, 11)):
            steps.append(Call("list_namespaces", (), {"limit": limit, "offset": offset}))
    steps.append(Call("list_namespaces", (), {"prefix": ("many", "g3"), "limit": 1000}))
    steps.append(Call("list_namespaces", (), {"max_depth": 2, "limit": 1000}))
    steps.append(Call("list_namespaces", (), {"suffix": ("n007",), "limit": 1000}))
    steps.append(Pages(("many",), 25))
    steps.append(Pages(("many", "g2"), 4))
    return Scenario("many-namespaces", tuple(steps))


def _churn_scenario(count: int = 60) -> Scenario:
    """Namespaces emptied, re-filled and expired between listings (the index's hidden empties)."""
    spaces = [("churn", f"g{i % 4}", f"n{i:02d}") for i in range(count)]
    steps: list[Step] = [
        Call("put", (ns, k, {"i": i})) for i, ns in enumerate(spaces) for k in "ab"
    ]
    steps += [Call("put", (ns, "t", {"i": i}), {"ttl": 1}) for i, ns in enumerate(spaces[:6])]
    steps.append(Call("list_namespaces", (), {"limit": 1000}))
    steps += [Call("delete", (ns, k)) for ns in spaces[::2] for k in "ab"]
    for offset in range(0, count, 7):
        steps.append(Call("list_namespaces", (), {"limit": 7, "offset": offset}))
    steps.append(Call("list_namespaces", (), {"max_depth": 2, "limit": 1000}))
    steps.append(Call("list_namespaces", (), {"prefix": ("churn", "g2"), "limit": 1000}))
    steps.append(Advance(61))  # the TTL items expire: spaces[0, 2, 4] hold nothing live
    steps.append(Call("list_namespaces", (), {"limit": 1000}))
    steps.append(Call("list_namespaces", (), {"suffix": ("n04",), "limit": 1000}))
    steps.append(Sweep())
    steps += [Call("put", (ns, "a", {"again": True})) for ns in spaces[::6]]
    for offset in range(0, count, 9):
        steps.append(Call("list_namespaces", (), {"limit": 9, "offset": offset}))
    steps.append(Pages(("churn",), 8))
    return Scenario("namespace-churn", tuple(steps))


def _lifecycle_scenario() -> Scenario:
    ns = ("life", "cycle")
    steps: list[Step] = [
        Call("get", (ns, "k")),
        Call("list_namespaces", (), {"limit": 100}),  # a get touches no namespace
        Call("put", (ns, "k", {"v": 1})),
        Call("put", (ns, "k", {"v": 2})),
        Call("get", (ns, "k")),
        Call("delete", (ns, "k")),
        Call("get", (ns, "k")),
        Call("search", (ns,), {}),
        Call("list_namespaces", (), {"limit": 100}),  # no item left: not listed
        Call("delete", (ns, "never")),
        Call("put", (ns, "k", {"v": 3})),
        Call("get", (ns, "k")),
        Call("list_namespaces", (), {"limit": 100}),
        Call("put", (ns, "k", None)),  # put None deletes (BaseStore: same as delete)
        Call("get", (ns, "k")),
        Call("put", ((), "k", {"v": 1})),
        Call("put", (("langgraph", "x"), "k", {"v": 1})),
        Call("put", (("a.b",), "k", {"v": 1})),
        Call("put", (("a", ""), "k", {"v": 1})),
        Call("get", (("a.b",), "k")),
        Call("search", (("a.b",),), {}),
        Call("list_namespaces", (), {"prefix": ("a.b",)}),
        Call("put", (ns, "big", {"text": "x" * 300_000, "list": list(range(500))})),
        Call("get", (ns, "big")),
        Call("put", (ns, "spilled", {"text": random.Random(1).randbytes(700_000).hex()})),
        Call("get", (ns, "spilled")),
        Call("search", (ns,), {"filter": {"text": {"$ne": ""}}}),
        Call("put", (ns, "", {"empty-key": True})),
        Call("get", (ns, "")),
        Call("search", (ns,), {}),
    ]
    return Scenario("lifecycle", tuple(steps))


def _batch_scenario() -> Scenario:
    a, b = ("batch", "a"), ("batch", "b")
    ops1: list[Op] = [
        PutOp(a, "k1", {"v": 1}),
        GetOp(a, "k1"),  # reads see the state before the batch's puts
        SearchOp(("batch",), limit=100),
        ListNamespacesOp(match_conditions=None, limit=100),
        PutOp(b, "k1", {"v": 2}),
        PutOp(a, "k1", {"v": 3}),  # the last put to one (namespace, key) wins
    ]
    ops2: list[Op] = [
        GetOp(a, "k1"),
        GetOp(b, "k1"),
        GetOp(b, "absent"),
        SearchOp(("batch",), filter={"v": {"$gt": 1}}, limit=100),
        ListNamespacesOp(
            match_conditions=(MatchCondition("suffix", ("b",)),), max_depth=None, limit=100
        ),
        PutOp(a, "k1", None),
        PutOp(a, "k2", {"v": 4}),
        GetOp(a, "k2"),
    ]
    ops3: list[Op] = [
        GetOp(a, "k1"),
        GetOp(a, "k2"),
        PutOp(a, "k2", None),
        PutOp(a, "k2", {"v": 5}),
        ListNamespacesOp(
            match_conditions=(MatchCondition("prefix", ("batch",)),), max_depth=1, limit=100
        ),
    ]
    ops4: list[Op] = [PutOp(("batch", "many"), f"k{i}", {"i": i}) for i in range(40)]
    ops5: list[Op] = [GetOp(("batch", "many"), f"k{i}") for i in range(0, 45, 3)]
    return Scenario(
        "batch",
        (
            Call("batch", (ops1,)),
            Call("batch", (ops2,)),
            Call("batch", (ops3,)),
            Call("batch", ([],)),
            Call("batch", (ops4,)),
            Call("batch", (ops5,)),
            Pages(("batch",), 6),
            Call("list_namespaces", (), {"limit": 100}),
        ),
    )


def _ttl_scenario() -> Scenario:
    ns = ("ttl", "x")
    other = ("ttl", "gone")
    steps: list[Step] = [
        Call("put", (ns, "default", {"v": 1})),  # default_ttl: 1 minute
        Call("put", (ns, "forever", {"v": 2}), {"ttl": None}),
        Call("put", (ns, "two", {"v": 3}), {"ttl": 2}),
        Call("put", (ns, "unread", {"v": 4})),
        Call("put", (other, "only", {"v": 5}), {"ttl": 0.5}),
        Advance(20),
        Call("list_namespaces", (), {"limit": 100}),
        Advance(20),  # t=40: "only" expired (30 s)
        Call("list_namespaces", (), {"limit": 100}),
        Call("get", (other, "only")),
        Call("get", (ns, "default")),  # refreshed: expires at t=100
        Call("get", (ns, "two"), {"refresh_ttl": False}),
        Advance(35),  # t=75: "unread" expired (60 s), "default" lives
        Call("get", (ns, "unread")),
        Call("search", (ns,), {}),  # refreshes "default" (t=135) and "two" (t=195)
        Pages(("ttl",), 1),
        Advance(50),  # t=125
        Call("get", (ns, "default"), {"refresh_ttl": False}),
        Advance(20),  # t=145: "default" expired
        Call("get", (ns, "default")),
        Call("search", (ns,), {}),
        Sweep(),
        Call("search", (("ttl",),), {}),
        Call("put", (ns, "default", {"v": 6})),  # a new item under an expired key
        Call("get", (ns, "default")),
        Advance(3 * 60),  # t=325: all but "forever" expired
        Call("search", (("ttl",),), {}),
        Call("list_namespaces", (), {"limit": 100}),
        Sweep(),
        Call("list_namespaces", (), {"limit": 100}),
        Call("get", (ns, "forever")),
        Call("put", (ns, "forever", {"v": 7}), {"ttl": 1}),  # a re-put sets a TTL
        Advance(90),
        Call("get", (ns, "forever")),
        Call("put", (ns, "late", {"v": 8}), {"ttl": 1}),
        Call("batch", ([GetOp(ns, "late"), PutOp(ns, "late", {"v": 9}, ttl=None)],)),
        Advance(120),
        Call("get", (ns, "late")),  # the batch's put (no TTL) won over the read's refresh
    ]
    return Scenario("ttl", tuple(steps), ttl={"default_ttl": 1, "refresh_on_read": True})


def _ttl_no_refresh_scenario() -> Scenario:
    ns = ("ttl", "norefresh")
    steps: list[Step] = [
        Call("put", (ns, "a", {"v": 1})),
        Call("put", (ns, "b", {"v": 2}), {"ttl": 3}),
        Advance(50),
        Call("get", (ns, "a")),  # no refresh by default
        Call("get", (ns, "b"), {"refresh_ttl": True}),  # asked for: refreshed to t=230
        Advance(20),  # t=70
        Call("get", (ns, "a")),
        Call("search", (("ttl",),), {"refresh_ttl": True}),
        Advance(200),  # t=270: "b" refreshed at t=70 until t=250
        Call("get", (ns, "b")),
        Call("list_namespaces", (), {"limit": 100}),
    ]
    return Scenario(
        "ttl-no-refresh", tuple(steps), ttl={"default_ttl": 1, "refresh_on_read": False}
    )


def _per_item_ttl_scenario() -> Scenario:
    """Per-item TTLs without a TTL config: refresh on read is the default (BaseStore)."""
    ns = ("ttl", "item")
    steps: list[Step] = [
        Call("put", (ns, "a", {"v": 1}), {"ttl": 1}),
        Call("put", (ns, "b", {"v": 2})),
        Advance(45),
        Call("get", (ns, "a")),
        Advance(45),
        Call("get", (ns, "a")),
        Advance(61),
        Pages(ns, 1),
        Call("get", (ns, "b")),
    ]
    return Scenario("ttl-per-item", tuple(steps))


def scenarios() -> list[Scenario]:
    """Every scenario, hand-written edge cases first."""
    return [
        _filters_scenario(),
        _filters_scenario(tag_fields=("n", "s", "b", "missing")),
        _names_scenario(),
        _many_namespaces_scenario(),
        _churn_scenario(),
        _lifecycle_scenario(),
        _batch_scenario(),
        _ttl_scenario(),
        _ttl_no_refresh_scenario(),
        _per_item_ttl_scenario(),
        *(random_scenario(seed, tag_fields=("s", "n", "f")[: seed % 3]) for seed in range(6)),
    ]


def reference_outcomes(scenario: Scenario) -> list[Any]:
    """The scenario's outcomes on :class:`ReferenceStore` (a fresh one, its own clock)."""
    clock = Clock()
    return run(ReferenceStore(ttl=scenario.ttl, clock=clock), scenario, clock)


Factory = Callable[[Scenario], BaseStore]
