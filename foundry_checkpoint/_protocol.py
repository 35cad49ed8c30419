"""The store protocol: the subset of ``FoundryStateStore``'s item API the adapters use.

Three implementations satisfy it: the real ``FoundryStateStore`` client (hosted mode), the
embedded SQLite engine's store face (the local default), and the SDK's own local mode wrapped in
an inter-process file lock (``local_backend="sdk"``). Return values are the SDK's own model
types and failures are the SDK's ``FoundryStorage*Error`` classes, whatever the implementation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from azure.ai.agentserver.core.storage import (
    DeletedStateStore,
    DeletedStateStoreItem,
    JSONObject,
    Order,
    StateStore,
    StateStoreItem,
    StateStoreItemKeyPage,
    StateStoreItemRef,
)

__all__ = ["StateStoreLike"]


class StateStoreLike(Protocol):
    """One state store bound to one name, as the adapters see it."""

    @property
    def name(self) -> str:
        """The store's name."""
        ...

    async def get(self) -> StateStore:
        """The store's descriptor (``user_isolation``, ``item_ttl_seconds``, ...)."""
        ...

    async def create_item(
        self, key: str, value: JSONObject, *, tags: Mapping[str, str] | None = None
    ) -> StateStoreItemRef:
        """Create an item; ``FoundryStorageConflictError`` when the key exists."""
        ...

    async def set_item(
        self,
        key: str,
        value: JSONObject,
        *,
        tags: Mapping[str, str] | None = None,
        if_match: str | None = None,
        require_exists: bool = False,
    ) -> StateStoreItemRef:
        """Create or replace an item (``if_match``/``require_exists`` make it conditional)."""
        ...

    async def get_item(self, key: str) -> StateStoreItem | None:
        """The item, or None when it does not exist (or has expired)."""
        ...

    async def delete_item(self, key: str, *, if_match: str | None = None) -> DeletedStateStoreItem:
        """Delete an item (idempotent unless ``if_match`` is given)."""
        ...

    async def list_keys(
        self,
        *,
        tags: Mapping[str, str] | None = None,
        limit: int | None = None,
        after: str | None = None,
        before: str | None = None,
        order: Order = "desc",
    ) -> StateStoreItemKeyPage:
        """One page of keys ordered by ``(created_at seconds, id)``; filter by exact tags."""
        ...

    async def delete(self) -> DeletedStateStore:
        """Delete the store and every item in it."""
        ...

    async def aclose(self) -> None:
        """Release the client's resources."""
        ...
