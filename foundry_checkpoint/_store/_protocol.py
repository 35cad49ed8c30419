"""The store protocol: the subset of ``FoundryStateStore``'s item API the adapters use.

Three implementations satisfy it: the real ``FoundryStateStore`` client (hosted mode), the
embedded SQLite engine's store face (the local default), and the SDK's own local mode wrapped in
an inter-process file lock (``local_backend="sdk"``). Failures are the SDK's
``FoundryStorage*Error`` classes whatever the implementation. Results are described by the
attribute protocols below, which the SDK's model types satisfy; the embedded store answers with
light records of the same shape, since building the SDK's models costs more than the SQLite
call itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from azure.ai.agentserver.core.storage import (
    DeletedStateStore,
    DeletedStateStoreItem,
    JSONObject,
    Order,
    StateStore,
)

__all__ = [
    "Described",
    "ItemKey",
    "ItemRef",
    "KeyPage",
    "RanksByTag",
    "StateStoreLike",
    "StoredItem",
    "WritesSoon",
]


class ItemRef(Protocol):
    """What a write answers: the item's identity and version."""

    @property
    def id(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def etag(self) -> str: ...
    @property
    def created_at(self) -> int: ...
    @property
    def updated_at(self) -> int: ...


class ItemKey(ItemRef, Protocol):
    """One entry of a key listing: the reference plus the item's tags."""

    @property
    def tags(self) -> Mapping[str, str] | None: ...


class StoredItem(ItemKey, Protocol):
    """An item read back: the key entry plus its value."""

    @property
    def value(self) -> Mapping[str, Any]: ...


class KeyPage(Protocol):
    """One page of a key listing."""

    @property
    def keys(self) -> Sequence[ItemKey]: ...
    @property
    def first_id(self) -> str | None: ...
    @property
    def last_id(self) -> str | None: ...
    @property
    def has_more(self) -> bool: ...


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
    ) -> ItemRef:
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
    ) -> ItemRef:
        """Create or replace an item (``if_match``/``require_exists`` make it conditional)."""
        ...

    async def get_item(self, key: str) -> StoredItem | None:
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
    ) -> KeyPage:
        """One page of keys ordered by ``(created_at seconds, id)``; filter by exact tags."""
        ...

    async def delete(self) -> DeletedStateStore:
        """Delete the store and every item in it."""
        ...

    async def aclose(self) -> None:
        """Release the client's resources."""
        ...


@runtime_checkable
class RanksByTag(Protocol):
    """A store that finds the items with the greatest value of a tag in one call.

    The embedded store does (an index on tag values); the service does not, so the adapters
    check for it and otherwise find the newest item from ``list_keys``.
    """

    async def greatest(
        self,
        by: str,
        *,
        tags: Mapping[str, str],
        among: Mapping[str, str] | None = None,
        count: int = 1,
        below: str | None = None,
    ) -> Sequence[ItemKey]:
        """Every item carrying ``tags`` whose tag ``by`` has one of the ``count`` greatest
        values (string order, below ``below`` when given) among the items carrying ``tags``
        and ``among``; empty when there is none."""
        ...


@runtime_checkable
class WritesSoon(Protocol):
    """A store that takes a write from any event loop, without a hop to the adapter's loop.

    The embedded store does (its engine's thread answers whichever loop handed it a call); a
    hosted client is bound to the loop it was built on. The core checks for it on the writes
    that need nothing else first (:meth:`foundry_checkpoint._core.Scope.put_now`).
    """

    def put_soon(
        self, key: str, value: JSONObject, *, tags: Mapping[str, str] | None = None
    ) -> Awaitable[ItemRef]:
        """Start writing the item now (no precondition); the write goes on even when the
        future is cancelled, and the future settles once it is committed."""
        ...


@runtime_checkable
class Described(Protocol):
    """A client that may already hold its store's descriptor, from the open that built it.

    The hosted client's open reads the descriptor (a GET) or creates the store (whose answer is
    the descriptor), and so does the embedded store's ``get_or_create``, so the isolation check
    after the open needs no request of its own.
    """

    @property
    def opened_descriptor(self) -> StateStore | None:
        """The descriptor the open answered with (None: not known, ask :meth:`get`)."""
        ...
