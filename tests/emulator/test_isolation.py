"""User isolation through the real client: partitions by token user, or ``x-ms-user-id`` from a
trusted caller."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import FoundryStateStore, FoundryStoragePreconditionError
from azure.core.credentials import AccessToken

from foundry_checkpoint.emulator import FoundryEmulator

from ._harness import client_kwargs, hosted_env


@pytest.fixture
def open_as(emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    hosted_env(monkeypatch)

    @asynccontextmanager
    async def _open(name: str, user: str, **extra: Any) -> AsyncIterator[Any]:
        store = await FoundryStateStore.get_or_create(
            name,
            user_isolation=extra.pop("user_isolation", True),
            **client_kwargs(emu, user, **extra),
        )
        try:
            yield store
        finally:
            await store.aclose()

    return _open


class _OpaqueCredential:
    """A credential whose token the emulator did not mint."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self._token, int(time.time()) + 3600)

    async def close(self) -> None:
        return None


async def test_two_users_cannot_read_list_or_delete_each_other(open_as: Any) -> None:
    name = f"iso/{uuid.uuid4().hex}"
    async with open_as(name, "alice") as alice, open_as(name, "bob") as bob:
        mine = await alice.set_item("shared-key", {"owner": "alice"}, tags={"t": "x"})
        await alice.set_item("alice-only", {"owner": "alice"})

        assert await bob.get_item("shared-key") is None
        assert (await bob.list_keys()).keys == []
        assert (await bob.list_keys(tags={"t": "x"})).keys == []
        assert (await bob.list_keys(after=mine.id)).keys == []
        deleted = await bob.delete_item("shared-key")
        assert deleted.id is None  # a no-op in bob's partition
        with pytest.raises(FoundryStoragePreconditionError) as info:
            await bob.set_item("shared-key", {"owner": "bob"}, if_match=mine.etag)
        assert info.value.current_etag is None
        with pytest.raises(FoundryStoragePreconditionError):
            await bob.delete_item("shared-key", if_match=mine.etag)

        theirs = await bob.create_item("shared-key", {"owner": "bob"})  # no conflict
        assert theirs.id != mine.id

        item = await alice.get_item("shared-key")
        assert item is not None and item.value == {"owner": "alice"} and item.etag == mine.etag
        assert sorted(k.key for k in (await alice.list_keys()).keys) == ["alice-only", "shared-key"]
        bob_item = await bob.get_item("shared-key")
        assert bob_item is not None and bob_item.value == {"owner": "bob"}
        assert [k.key for k in (await bob.list_keys()).keys] == ["shared-key"]


async def test_store_without_isolation_is_shared(open_as: Any) -> None:
    name = f"shared/{uuid.uuid4().hex}"
    async with (
        open_as(name, "alice", user_isolation=False) as alice,
        open_as(name, "bob", user_isolation=False) as bob,
    ):
        await alice.set_item("k", {"owner": "alice"})
        item = await bob.get_item("k")
        assert item is not None and item.value == {"owner": "alice"}
        await bob.delete_item("k")
        assert await alice.get_item("k") is None


async def test_delegated_user_header_selects_the_partition(
    open_as: Any, trusted_caller: str
) -> None:
    name = f"deleg/{uuid.uuid4().hex}"
    async with (
        open_as(name, trusted_caller, user_id="carol") as for_carol,
        open_as(name, "carol") as carol,
        open_as(name, trusted_caller) as service,
    ):
        await for_carol.set_item("k", {"for": "carol"})
        item = await carol.get_item("k")
        assert item is not None and item.value == {"for": "carol"}
        assert await service.get_item("k") is None


async def test_delegated_user_header_of_an_untrusted_caller_is_ignored(open_as: Any) -> None:
    name = f"deleg/{uuid.uuid4().hex}"
    async with (
        open_as(name, "service", user_id="carol") as for_carol,
        open_as(name, "carol") as carol,
        open_as(name, "service") as service,
    ):
        await for_carol.set_item("k", {"for": "carol"})
        assert await carol.get_item("k") is None
        item = await service.get_item("k")
        assert item is not None and item.value == {"for": "carol"}


async def test_foreign_tokens_get_partitions_of_their_own(
    emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosted_env(monkeypatch)
    name = f"opaque/{uuid.uuid4().hex}"
    opened = []
    try:
        for token in ("opaque-token-1", "opaque-token-2", "opaque-token-1"):
            kwargs = client_kwargs(emu)
            kwargs["credential"] = _OpaqueCredential(token)
            opened.append(
                await FoundryStateStore.get_or_create(name, user_isolation=True, **kwargs)
            )
        first, second, first_again = opened
        await first.set_item("k", {"token": 1})
        assert await second.get_item("k") is None
        again = await first_again.get_item("k")
        assert again is not None and again.value == {"token": 1}
    finally:
        for store in opened:
            await store.aclose()
