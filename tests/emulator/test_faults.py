"""Injected faults against the real client's retry policy, and the fault plan itself."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import FoundryStateStore, FoundryStorageApiError

from foundry_checkpoint.emulator import CALL_TYPES, Fault, FoundryEmulator
from foundry_checkpoint.emulator._faults import FaultPlan

from ._harness import client_kwargs, hosted_env


@pytest.fixture
async def store(emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    hosted_env(monkeypatch)
    client = await FoundryStateStore.get_or_create(
        f"faults/{uuid.uuid4().hex}", user_isolation=True, **client_kwargs(emu)
    )
    emu.reset_counts()
    yield client
    await client.aclose()


async def test_429_with_retry_after_then_success_creates_once(
    store: Any, emu: FoundryEmulator
) -> None:
    # POST is retried on 429 only because of Retry-After (azure-core's rule).
    emu.inject("create_item", status=429, retry_after=0)
    ref = await store.create_item("k", {"v": 1})
    assert emu.requests["create_item"] == 2 and emu.faults_served["create_item"] == 1
    page = await store.list_keys()
    assert [entry.key for entry in page.keys] == ["k"] and page.keys[0].id == ref.id
    item = await store.get_item("k")
    assert item is not None and item.value == {"v": 1}


async def test_429_on_put_twice_then_success(store: Any, emu: FoundryEmulator) -> None:
    emu.inject("put_item", status=429, retry_after=0, times=2)
    await store.set_item("k", {"v": 1})
    assert emu.requests["put_item"] == 3 and emu.faults_served["put_item"] == 2
    assert emu.pending_faults() == []
    assert [entry.key for entry in (await store.list_keys()).keys] == ["k"]


async def test_dropped_connection_on_get_is_retried(store: Any, emu: FoundryEmulator) -> None:
    await store.set_item("k", {"v": 1})
    emu.inject("get_item", drop=True)
    item = await store.get_item("k")
    assert item is not None and item.value == {"v": 1}
    assert emu.requests["get_item"] == 2 and emu.faults_served["get_item"] == 1


async def test_503_on_post_is_retried_without_retry_after(store: Any, emu: FoundryEmulator) -> None:
    emu.inject("create_item", status=503)
    await store.create_item("k", {"v": 1})
    assert emu.requests["create_item"] == 2


async def test_faulted_writes_change_nothing(store: Any, emu: FoundryEmulator) -> None:
    await store.set_item("k", {"v": "original"})
    emu.reset_counts()
    emu.inject("put_item", status=500, times=None)
    with pytest.raises(FoundryStorageApiError) as info:
        await store.set_item("k", {"v": "changed"})
    assert info.value.status_code == 500
    assert emu.requests["put_item"] == 4  # the first attempt and three retries
    emu.clear_faults()
    item = await store.get_item("k")
    assert item is not None and item.value == {"v": "original"}


async def test_wildcard_route_and_clear(store: Any, emu: FoundryEmulator) -> None:
    emu.inject("*", status=503, times=None)
    with pytest.raises(FoundryStorageApiError):
        await store.list_keys()
    with pytest.raises(FoundryStorageApiError):
        await store.get_item("k")
    assert emu.faults_served["list_keys"] == 4 and emu.faults_served["get_item"] == 4
    emu.clear_faults()
    assert (await store.list_keys()).keys == []
    assert emu.faults_served["list_keys"] == 4


async def test_delay_only_fault_serves_the_request(store: Any, emu: FoundryEmulator) -> None:
    await store.set_item("k", {"v": 1})
    emu.inject("get_item", status=None, delay=0.01)
    item = await store.get_item("k")
    assert item is not None and emu.faults_served["get_item"] == 1
    assert emu.requests["get_item"] == 1


async def test_a_fault_for_another_route_is_not_used(store: Any, emu: FoundryEmulator) -> None:
    emu.inject("delete_store", status=500)
    await store.set_item("k", {})
    assert sum(emu.faults_served.values()) == 0
    assert len(emu.pending_faults()) == 1


def test_probabilistic_faults_replay_from_the_seed() -> None:
    def pattern(seed: int) -> list[bool]:
        plan = FaultPlan(seed=seed)
        plan.add(Fault("get_item", status=500, times=None, probability=0.5))
        return [plan.take("get_item") is not None for _ in range(64)]

    assert pattern(3) == pattern(3)
    assert pattern(3) != pattern(4)
    assert 0 < sum(pattern(3)) < 64


def test_rules_apply_in_order_and_run_out() -> None:
    plan = FaultPlan()
    first = plan.add(Fault("put_item", status=429, times=1))
    second = plan.add(Fault("*", status=503, times=2))
    assert plan.take("put_item") is first
    assert plan.take("put_item") is second
    assert plan.take("get_store") is second
    assert plan.take("put_item") is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"route": "nope"},
        {"status": 200},
        {"retry_after": -1.0},
        {"delay": -0.1},
        {"times": 0},
        {"probability": 0.0},
        {"probability": 1.5},
    ],
)
def test_invalid_faults_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Fault(**kwargs)


def test_retry_after_header_spelling() -> None:
    assert Fault(retry_after=0.0).retry_after_header() == "0"
    assert Fault(retry_after=2).retry_after_header() == "2"
    assert Fault(retry_after=0.25).retry_after_header() == "0.25"
    assert Fault().retry_after_header() is None
    assert len(CALL_TYPES) == 10 and "list_stores" in CALL_TYPES
