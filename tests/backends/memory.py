"""A backend in one file: every store in memory, gone with the process.

It is the recipe of CONTRIBUTING's "Adding a store backend" followed to the letter, for a
backend outside the package: one class satisfying ``foundry_checkpoint.adapter.Backend`` and one
``register_backend`` call (made by the tests that use it); what it needs of the package comes
from ``foundry_checkpoint.adapter``, except the embedded store it wraps. Its stores are the
SQLite engine's in-memory database, seen through :class:`MemoryStore`, which exposes only the
item API (no ranking by tag), so the adapters read "latest" from listings as they do against the
service. Its settings differ from the embedded default's on purpose: values are compressed,
values over the item limit go into the scope's own store as chunks (there is no spill folder),
and the first listing page is small, so that the paths the other backends take only in hosted
mode run here locally.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from azure.ai.agentserver.core import FoundryAgentRequestContext
from azure.ai.agentserver.core.storage import (
    DeletedStateStore,
    DeletedStateStoreItem,
    JSONObject,
    Order,
    StateStore,
)

from foundry_checkpoint._store._embedded import EngineStore
from foundry_checkpoint._store._engine import StateEngine
from foundry_checkpoint._store._protocol import ItemRef, KeyPage
from foundry_checkpoint.adapter import (
    BackendSettings,
    Caller,
    StateStoreLike,
    StoredItem,
    local_caller,
)

__all__ = ["NAME", "MemoryBackend", "MemoryStore"]

#: The ``local_backend=`` name the tests register it under.
NAME: Final = "memory"

_ENGINE: StateEngine | None = None


def _shared_engine() -> StateEngine:
    """The process's in-memory engine (made on first use)."""
    global _ENGINE
    if _ENGINE is None or _ENGINE.closed:
        _ENGINE = StateEngine(None)
    return _ENGINE


class MemoryStore:
    """One store of the in-memory engine, with the item API only."""

    def __init__(self, inner: EngineStore) -> None:
        self._inner = inner

    @property
    def name(self) -> str:
        return self._inner.name

    async def get(self) -> StateStore:
        return await self._inner.get()

    async def create_item(
        self, key: str, value: JSONObject, *, tags: Mapping[str, str] | None = None
    ) -> ItemRef:
        return await self._inner.create_item(key, value, tags=tags)

    async def set_item(
        self,
        key: str,
        value: JSONObject,
        *,
        tags: Mapping[str, str] | None = None,
        if_match: str | None = None,
        require_exists: bool = False,
    ) -> ItemRef:
        return await self._inner.set_item(
            key, value, tags=tags, if_match=if_match, require_exists=require_exists
        )

    async def get_item(self, key: str) -> StoredItem | None:
        return await self._inner.get_item(key)

    async def delete_item(self, key: str, *, if_match: str | None = None) -> DeletedStateStoreItem:
        return await self._inner.delete_item(key, if_match=if_match)

    async def list_keys(
        self,
        *,
        tags: Mapping[str, str] | None = None,
        limit: int | None = None,
        after: str | None = None,
        before: str | None = None,
        order: Order = "desc",
    ) -> KeyPage:
        return await self._inner.list_keys(
            tags=tags, limit=limit, after=after, before=before, order=order
        )

    async def delete(self) -> DeletedStateStore:
        return await self._inner.delete()

    async def aclose(self) -> None:
        await self._inner.aclose()


class MemoryBackend:
    """Stores in memory, partitioned by user like the embedded store."""

    kind = "memory"
    location = "(memory)"
    compresses = True
    chunks_in_store = True
    spill_root: Path | None = None
    first_page = 3

    def __init__(self, settings: BackendSettings, *, engine: StateEngine | None = None) -> None:
        self._ttl = settings.item_ttl_seconds
        self._engine = engine

    @property
    def engine(self) -> StateEngine:
        """The engine its stores live in (the process's, unless one was given)."""
        return self._engine if self._engine is not None else _shared_engine()

    @staticmethod
    def caller(user_id: str | None, context: FoundryAgentRequestContext) -> Caller:
        return local_caller(user_id, context, partitioned=True)

    async def open(self, name: str, partition: str, *, create: bool) -> StateStoreLike | None:
        if not create:
            return MemoryStore(EngineStore(self.engine, name, user=partition))
        inner = await EngineStore.get_or_create(
            self.engine, name, user_isolation=True, item_ttl_seconds=self._ttl, user=partition
        )
        return MemoryStore(inner)

    def bind(self, name: str, partition: str) -> StateStoreLike:
        return MemoryStore(EngineStore(self.engine, name, user=partition))

    async def aclose(self) -> None:
        """Nothing to close: the stores outlive the adapter object, as a server's would."""
