"""One scripted suite on ``FoundryStore`` (local and hosted, sync and async) and on LangGraph's
``InMemoryStore``: identical answers.

The scenarios (``tests/memory/_scenarios.py``) are seeded random sequences of puts, re-puts,
deletes, gets, filtered page walks, namespace listings and batches, plus hand-written edge
cases: every filter operator (``$eq $ne $gt $gte $lt $lte``), nested and list filters, missing
fields, numbers against bools and numeric strings, unicode, long (over 128 characters) and
deep (over 8 labels) namespaces and keys, labels that hold or sort around the separator, many
namespaces, ``list_namespaces`` with prefix, suffix, ``*`` wildcards, ``max_depth``, ``limit``
and ``offset``, delete and re-put, the batch API with mixed ops (reads see the state before the
batch's puts, the last put to a key wins), and TTL expiry and refresh on a clock the test moves
(``foundry_checkpoint._memory._layout.now``). Filters run with and without tag fields, so the
part served from tags answers as the part evaluated on read.

Compared exactly: values, keys, namespaces, errors (by kind), ``list_namespaces`` (order
included). ``created_at``/``updated_at`` only for sanity (``updated_at >= created_at``). Search
without a query orders differently by design (InMemoryStore: insertion order; ``FoundryStore``:
the store listing's), so a search answer is compared as a set and a page walk by its page sizes
and union, its pages disjoint.

The reference is ``InMemoryStore`` with two changes (``_scenarios.ReferenceStore``): it lists
only namespaces that hold an item (InMemoryStore also lists a namespace a ``get`` touched, or
whose items were all deleted: its ``defaultdict`` keeps the empty entry; PostgresStore does not,
and neither does ``FoundryStore``), and it applies LangGraph's TTL rules on the test clock
(InMemoryStore has no TTL). :func:`test_reference_is_inmemorystore` checks that, apart from
those, it answers as InMemoryStore itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore

from foundry_checkpoint import FoundryStore
from foundry_checkpoint._memory import _layout
from tests.memory import _scenarios as sc

SCENARIOS = {s.name: s for s in sc.scenarios()}
#: The async face runs these in both modes (every scenario runs on the sync face).
ASYNC_SCENARIOS = ("filters-tagged", "names", "namespace-churn", "lifecycle", "batch", "ttl",
                   "random-1", "random-2")  # fmt: skip


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> sc.Clock:
    """The store's clock, moved only by the scenario's ``Advance`` steps."""
    clock = sc.Clock()
    monkeypatch.setattr(_layout, "now", clock.now)
    return clock


@pytest.fixture
def make_store(make_memory_store: Callable[..., FoundryStore]) -> Callable[..., FoundryStore]:
    """``FoundryStore`` for a scenario (its TTL config and tag fields) in the test's mode."""

    def factory(scenario: sc.Scenario) -> FoundryStore:
        return make_memory_store(ttl=scenario.ttl, tag_fields=scenario.tag_fields)

    return factory


def _uses_ttl(scenario: sc.Scenario) -> bool:
    return scenario.ttl is not None or any(
        isinstance(step, sc.Call) and "ttl" in step.kwargs for step in scenario.steps
    )


def _diff(name: str, ours: list[Any], ref: list[Any]) -> None:
    scenario = SCENARIOS[name]
    assert len(ours) == len(ref)
    for i, (step, got, want) in enumerate(zip(scenario.steps, ours, ref, strict=True)):
        assert got == want, f"{name} step {i}: {step}"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_sync(name: str, make_store: Any, clock: sc.Clock) -> None:
    """Every scenario on the sync face answers as the reference."""
    scenario = SCENARIOS[name]
    _diff(name, sc.run(make_store(scenario), scenario, clock), sc.reference_outcomes(scenario))


@pytest.mark.parametrize("name", ASYNC_SCENARIOS)
def test_async(name: str, make_store: Any, clock: sc.Clock) -> None:
    """The async face answers as the reference."""
    scenario = SCENARIOS[name]
    ours = asyncio.run(sc.arun(make_store(scenario), scenario, clock))
    _diff(name, ours, sc.reference_outcomes(scenario))


@pytest.mark.parametrize("name", [n for n, s in SCENARIOS.items() if not _uses_ttl(s)])
def test_reference_is_inmemorystore(name: str) -> None:
    """Without TTL the reference answers as InMemoryStore, but for namespaces holding nothing."""
    scenario = SCENARIOS[name]
    plain = sc.run(InMemoryStore(), scenario, sc.Clock())
    ref = sc.reference_outcomes(scenario)
    listing = [
        i
        for i, step in enumerate(scenario.steps)
        if isinstance(step, sc.Call) and step.method in ("list_namespaces", "batch")
    ]
    for i, (got, want) in enumerate(zip(plain, ref, strict=True)):
        if i not in listing:
            assert got == want, f"{name} step {i}: {scenario.steps[i]}"


def test_inmemorystore_lists_namespaces_holding_nothing() -> None:
    """The quirk the reference leaves out: InMemoryStore lists a namespace a get touched."""
    plain, ref = InMemoryStore(), sc.ReferenceStore()
    for store in (plain, ref):
        store.get(("touched",), "k")
        store.put(("emptied",), "k", {"v": 1})
        store.delete(("emptied",), "k")
    assert plain.list_namespaces() == [("emptied",), ("touched",)]
    assert ref.list_namespaces() == []
