"""Paging helpers over any ``StateStoreLike``: the newest second, every key, a safe create.

``list_keys`` orders by ``(created_at in whole seconds, id)`` and the id is not write order, so
"latest" must compare every key of the newest second by the caller's own monotonic key:
:func:`newest_second` returns exactly those keys, at a cost that does not grow with history.

Example:
    >>> import asyncio
    >>> from foundry_checkpoint._store._embedded import EngineStore
    >>> from foundry_checkpoint._store._engine import StateEngine
    >>> async def demo() -> list[str]:
    ...     store = await EngineStore.get_or_create(
    ...         StateEngine(), "s", user_isolation=True, item_ttl_seconds=-1)
    ...     for key in ("a", "b"):
    ...         await create_item(store, key, {}, tags={"kind": "x"})
    ...     return sorted(k.key for k in await newest_second(store, {"kind": "x"}))
    >>> asyncio.run(demo())
    ['a', 'b']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from azure.ai.agentserver.core.storage import FoundryStorageConflictError, JSONObject

from ._hosted import transport_retried
from ._limits import MAX_PAGE
from ._protocol import ItemKey, StateStoreLike

__all__ = ["all_keys", "create_item", "newest_second"]

_FIRST_PAGE: Final = 10


async def create_item(
    store: StateStoreLike, key: str, value: JSONObject, *, tags: Mapping[str, str] | None
) -> bool:
    """Create an item; False when the key already exists (perhaps from a lost attempt).

    Dropped connections are retried (see :func:`~._hosted.transport_retried`), so the caller
    must treat False as "the item may be the one this call wrote".

    Args:
        store: The store.
        key: The item key.
        value: The item value.
        tags: The item's tags.

    Returns:
        True when this call created the item.
    """
    try:
        await transport_retried(lambda: store.create_item(key, value, tags=tags))
    except FoundryStorageConflictError:
        return False
    return True


async def newest_second(store: StateStoreLike, tags: Mapping[str, str]) -> list[ItemKey]:
    """Every key matching ``tags`` whose ``created_at`` is the newest second of the listing.

    The first page is small (the newest second usually holds a few keys); further pages of
    ``MAX_PAGE`` are read only while a page ends inside that second.

    Args:
        store: The store.
        tags: Exact tag filter.

    Returns:
        The keys of the newest second, newest first by ``(created_at, id)``.
    """
    page = await store.list_keys(tags=tags, limit=_FIRST_PAGE, order="desc")
    if not page.keys:
        return []
    top = page.keys[0].created_at
    candidates = [k for k in page.keys if k.created_at == top]
    while page.has_more and page.last_id and page.keys[-1].created_at == top:
        page = await store.list_keys(tags=tags, limit=MAX_PAGE, after=page.last_id, order="desc")
        candidates.extend(k for k in page.keys if k.created_at == top)
    return candidates


async def all_keys(store: StateStoreLike, tags: Mapping[str, str] | None = None) -> list[ItemKey]:
    """Every key of ``store`` matching ``tags``, paging with ``after`` only.

    Args:
        store: The store.
        tags: Exact tag filter (None: every key).

    Returns:
        Every matching key, newest first.
    """
    out: list[ItemKey] = []
    after: str | None = None
    while True:
        page = await store.list_keys(tags=tags, limit=MAX_PAGE, after=after, order="desc")
        out.extend(page.keys)
        if not page.has_more or not page.last_id:
            return out
        after = page.last_id
