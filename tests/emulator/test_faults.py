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


def test_a_user_or_store_rule_matches_only_its_requests() -> None:
    plan = FaultPlan()
    held = plan.add(Fault(status=None, delay=2.0, times=None, user="u-7"))
    one_store = plan.add(Fault("put_item", status=503, times=None, store="threads/t-1"))
    everyone = plan.add(Fault(status=None, delay=0.02, times=None))
    assert plan.scoped
    assert plan.take("get_item", user="u-7", store="threads/t-9") is held
    assert plan.take("put_item", user="u-8", store="threads/t-1") is one_store
    assert plan.take("get_item", user="u-8", store="threads/t-1") is everyone
    assert plan.take("get_item") is everyone  # an unresolved caller matches no user rule
    plan.clear()
    assert not plan.scoped


def test_scoped_rules_that_run_out_leave_the_plan_unscoped() -> None:
    plan = FaultPlan()
    plan.add(Fault("get_item", status=500, times=1, user="ann"))
    assert plan.scoped and plan.take("get_item", user="ann") is not None
    assert not plan.scoped and plan.take("get_item", user="ann") is None


@pytest.mark.parametrize("kwargs", [{"user": ""}, {"store": ""}])
def test_empty_user_or_store_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="non-empty"):
        Fault(**kwargs)


async def test_a_stalled_user_does_not_hold_the_others(
    emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from azure.ai.agentserver.core import (
        FoundryAgentRequestContext,
        reset_request_context,
        set_request_context,
    )

    hosted_env(monkeypatch)
    name = f"faults/{uuid.uuid4().hex}"
    # One client for the container (alice's token); bob's requests carry his call id.
    client = await FoundryStateStore.get_or_create(name, user_isolation=True, **client_kwargs(emu))
    call = emu.mint_call("bob")
    try:
        emu.reset_counts()
        emu.inject("*", status=None, delay=1.0, times=None, user="bob")
        emu.inject("*", status=None, delay=0.01, times=None)

        async def as_bob() -> None:
            token = set_request_context(FoundryAgentRequestContext(call_id=call))
            try:
                await client.set_item("k", {"who": "bob"})
            finally:
                reset_request_context(token)

        bob = asyncio.create_task(as_bob())
        await client.set_item("k", {"who": "alice"})
        assert not bob.done()  # alice's write was served while bob's is held
        await bob
        assert emu.faults_served["put_item"] == 2
        item = await client.get_item("k")
        assert item is not None and item.value == {"who": "alice"}  # partitions stay apart
        token = set_request_context(FoundryAgentRequestContext(call_id=call))
        try:
            started = asyncio.get_running_loop().time()
            item = await client.get_item("k")
            assert asyncio.get_running_loop().time() - started >= 1.0
        finally:
            reset_request_context(token)
        assert item is not None and item.value == {"who": "bob"}
    finally:
        emu.clear_faults()
        await client.aclose()


async def test_a_store_rule_faults_only_that_store(
    emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosted_env(monkeypatch)
    names = [f"faults/{uuid.uuid4().hex}" for _ in range(2)]
    clients = [
        await FoundryStateStore.get_or_create(n, user_isolation=True, **client_kwargs(emu))
        for n in names
    ]
    try:
        emu.reset_counts()
        emu.inject("put_item", status=500, times=None, store=names[0])
        with pytest.raises(FoundryStorageApiError):
            await clients[0].set_item("k", {"v": 1})
        await clients[1].set_item("k", {"v": 1})
        assert emu.faults_served["put_item"] == 4  # the first attempt and three retries
        assert emu.requests["put_item"] == 5
    finally:
        emu.clear_faults()
        for client in clients:
            await client.aclose()
