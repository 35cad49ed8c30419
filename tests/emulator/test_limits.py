"""Every documented limit answered with 400 naming the field, through the real client."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import (
    FoundryStateStore,
    FoundryStorageBadRequestError,
    FoundryStorageNotFoundError,
)

from foundry_checkpoint.emulator import FoundryEmulator

from ._harness import client_kwargs, hosted_env

MB = 1_000_000  # the item limit on the stricter reading of "1 MB"


@pytest.fixture
async def store(emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    hosted_env(monkeypatch)
    client = await FoundryStateStore.get_or_create(
        f"limits/{uuid.uuid4().hex}",
        user_isolation=True,
        item_ttl_seconds=-1,
        **client_kwargs(emu),
    )
    emu.reset_counts()
    yield client
    await client.aclose()


def _value_of_size(size: int) -> dict[str, str]:
    """A value whose ``json.dumps`` is exactly ``size`` bytes."""
    overhead = len(json.dumps({"d": ""}))
    value = {"d": "x" * (size - overhead)}
    assert len(json.dumps(value).encode("utf-8")) == size
    return value


async def _bad_request(call: Any) -> str | None:
    with pytest.raises(FoundryStorageBadRequestError) as info:
        await call
    assert info.value.status_code == 400
    return info.value.param


@pytest.mark.parametrize(
    ("key", "value", "tags", "param"),
    [
        ("k" * 129, {}, None, "key"),
        ("big", _value_of_size(MB + 1), None, "value"),
        ("tags17", {}, {f"t{i}": "v" for i in range(17)}, "tags"),
        ("tagkey65", {}, {"k" * 65: "v"}, "tags"),
        ("tagkeychars", {}, {"not allowed": "v"}, "tags"),
        ("tagkeyempty", {}, {"": "v"}, "tags"),
        ("tagvalue257", {}, {"t": "v" * 257}, "tags"),
    ],
    ids=[
        "key-129",
        "value-1MB+1",
        "tags-17",
        "tag-key-65",
        "tag-key-chars",
        "tag-key-empty",
        "tag-value-257",
    ],
)
async def test_item_limits(
    store: Any,
    emu: FoundryEmulator,
    key: str,
    value: dict[str, Any],
    tags: dict[str, str] | None,
    param: str,
) -> None:
    assert await _bad_request(store.set_item(key, value, tags=tags)) == param
    assert await _bad_request(store.create_item(key, value, tags=tags)) == param
    # Rejected once each, never retried (no Retry-After on a 400), nothing written.
    assert emu.requests["put_item"] == 1 and emu.requests["create_item"] == 1
    assert (await store.list_keys()).keys == []


async def test_values_at_the_limits_are_accepted(store: Any) -> None:
    tags = {f"{'t' * 62}{i:02d}": "v" * 256 for i in range(16)}
    await store.set_item("k" * 128, _value_of_size(MB), tags=tags)
    item = await store.get_item("k" * 128)
    assert item is not None and item.tags == tags and len(item.value["d"]) > MB - 16


async def test_key_limit_on_reads_and_deletes(store: Any) -> None:
    assert await _bad_request(store.get_item("k" * 129)) == "key"
    assert await _bad_request(store.delete_item("k" * 129)) == "key"


@pytest.mark.parametrize("limit", [0, 101, -1])
async def test_page_size_limit(store: Any, emu: FoundryEmulator, limit: int) -> None:
    assert await _bad_request(store.list_keys(limit=limit)) == "limit"
    assert emu.requests["list_keys"] == 1


async def test_page_size_bounds_are_accepted(store: Any) -> None:
    for index in range(3):
        await store.set_item(f"k{index}", {})
    assert len((await store.list_keys(limit=1)).keys) == 1
    assert len((await store.list_keys(limit=100)).keys) == 3


async def test_tag_filter_is_validated(store: Any) -> None:
    assert await _bad_request(store.list_keys(tags={"bad key": "v"})) == "tags"


@pytest.mark.parametrize("name", ["n" * 129])
async def test_store_name_limit(
    emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    hosted_env(monkeypatch)
    with pytest.raises(FoundryStorageBadRequestError) as info:
        await FoundryStateStore.get_or_create(name, **client_kwargs(emu))
    assert info.value.param == "name"


async def test_store_name_at_the_limit(
    emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosted_env(monkeypatch)
    name = f"{uuid.uuid4().hex}/" + "n" * 95
    assert len(name) == 128
    store = await FoundryStateStore.get_or_create(name, **client_kwargs(emu))
    try:
        assert (await store.get()).name == name
    finally:
        await store.aclose()


@pytest.mark.parametrize("ttl", [0, -2, 2_147_483_648])
async def test_ttl_limit(emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch, ttl: int) -> None:
    hosted_env(monkeypatch)
    name = f"ttl/{uuid.uuid4().hex}"
    with pytest.raises(FoundryStorageBadRequestError) as info:
        await FoundryStateStore.get_or_create(name, item_ttl_seconds=ttl, **client_kwargs(emu))
    assert info.value.param == "item_ttl_seconds"
    probe = FoundryStateStore(name, **client_kwargs(emu))
    try:
        with pytest.raises(FoundryStorageNotFoundError):
            await probe.get()
    finally:
        await probe.aclose()


@pytest.mark.parametrize("ttl", [-1, 1, 2_147_483_647])
async def test_ttl_bounds_are_accepted(
    emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch, ttl: int
) -> None:
    hosted_env(monkeypatch)
    store = await FoundryStateStore.get_or_create(
        f"ttl/{uuid.uuid4().hex}", item_ttl_seconds=ttl, **client_kwargs(emu)
    )
    try:
        assert (await store.get()).item_ttl_seconds == ttl
    finally:
        await store.aclose()
