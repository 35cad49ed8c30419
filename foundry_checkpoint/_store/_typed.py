"""The store seam's errors: the SDK's ``FoundryStorage*Error`` passed on as typed errors.

Every client a backend hands to the layers above is wrapped in :func:`typed`, so a storage
failure reaches the adapters (and their users) as a
:class:`~foundry_checkpoint.errors.StoreError` subclass: still the SDK's class (code that
catches ``FoundryStorageNotFoundError`` or ``FoundryStoragePreconditionError`` keeps working,
with the same ``status_code``, ``param``, ``current_etag``), also a
``FoundryCheckpointError``, with a message that says what to do and names no store and no item
key (a host may show ``str(error)`` to its client), and the SDK's error as ``__cause__``. Where
it happened stays for logs: the store name in the error's ``store``, the SDK's own text (which
may name both) in its ``message`` and in ``__cause__``. ``tests/backends/test_typed_errors.py``
shows each case on the hosted path against the emulator.

Example:
    >>> import asyncio
    >>> from foundry_checkpoint._store._embedded import EngineStore
    >>> from foundry_checkpoint._store._engine import StateEngine
    >>> from foundry_checkpoint.errors import StoreConflictError
    >>> async def demo() -> str:
    ...     engine = StateEngine(None)
    ...     inner = await EngineStore.get_or_create(
    ...         engine, "s", user_isolation=True, item_ttl_seconds=-1)
    ...     store = typed(inner)
    ...     await store.create_item("k", {})
    ...     try:
    ...         await store.create_item("k", {})
    ...     except StoreConflictError as exc:
    ...         return type(exc.__cause__).__name__
    ...     finally:
    ...         engine.close()
    ...     return "no error"
    >>> asyncio.run(demo())
    'FoundryStorageConflictError'
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Final, TypeVar, cast

from azure.ai.agentserver.core.storage import (
    DeletedStateStore,
    DeletedStateStoreItem,
    FoundryStorageApiError,
    FoundryStorageBadRequestError,
    FoundryStorageConflictError,
    FoundryStorageError,
    FoundryStorageNotFoundError,
    FoundryStoragePreconditionError,
    JSONObject,
    Order,
    StateStore,
)

from foundry_checkpoint.errors import (
    StoreBadRequestError,
    StoreConflictError,
    StoreError,
    StoreNotFoundError,
    StorePreconditionError,
    StoreServiceError,
)

from ._protocol import (
    Described,
    ItemKey,
    ItemRef,
    KeyPage,
    RanksByTag,
    StateStoreLike,
    StoredItem,
    WritesSoon,
)

__all__ = ["TypedErrors", "typed", "typed_error"]

_T = TypeVar("_T")

#: The SDK's class -> ours and what to do; the first match wins (a subclass before its base).
_TYPED: Final[tuple[tuple[type[FoundryStorageError], type[StoreError], str], ...]] = (
    (
        FoundryStorageConflictError,
        StoreConflictError,
        "the state store refused to create what exists already",
    ),
    (
        FoundryStorageBadRequestError,
        StoreBadRequestError,
        "the state store refused the request as invalid (a name, key or tag over a documented "
        "limit); nothing was written",
    ),
    (
        FoundryStorageNotFoundError,
        StoreNotFoundError,
        "the state store has no such store or item: it was deleted, or expired under the "
        "store's TTL",
    ),
    (
        FoundryStoragePreconditionError,
        StorePreconditionError,
        "another writer changed the item first; read it again before writing",
    ),
    (
        FoundryStorageApiError,
        StoreServiceError,
        "the state store failed or refused the call: retry later (429, 5xx), or check the "
        "agent's identity and the project endpoint (401, 403)",
    ),
)


def typed_error(exc: FoundryStorageError, store: str) -> StoreError:
    """Our typed error for the SDK's ``exc`` on ``store`` (raise it ``from exc``).

    Args:
        exc: the SDK's error.
        store: the store name, for the message.

    Returns:
        The matching :class:`~foundry_checkpoint.errors.StoreError`, with ``exc``'s
        attributes (``message``, ``status_code``, ``param``, ...) and ``store``. Its own
        message names neither the store nor the SDK's text (which does: a host may show
        ``str(error)`` to its client); both stay in its attributes and ``__cause__``.

    Example:
        >>> error = typed_error(FoundryStorageApiError("busy", status_code=503), "s")
        >>> type(error).__name__, error.status_code, error.message, error.store
        ('StoreServiceError', 503, 'busy', 's')
        >>> str(error).startswith("the state store failed or refused the call")
        True
    """
    ours, hint = next(
        ((cls, text) for sdk_class, cls, text in _TYPED if isinstance(exc, sdk_class)),
        (StoreError, "the state store failed the call"),
    )
    text = f"{hint} (HTTP {exc.status_code})" if exc.status_code else hint
    error = ours(text)
    error.__dict__.update(exc.__dict__)  # the SDK's fields (and its platform-error tag)
    error.store = store  # for logs, never in the message
    error.args = (text,)
    return error


class TypedErrors:
    """A store client whose failures are typed errors (see the module docstring).

    Args:
        inner: the backend's own client.

    Example:
        >>> from foundry_checkpoint._store._embedded import EngineStore
        >>> from foundry_checkpoint._store._engine import StateEngine
        >>> engine = StateEngine(None)
        >>> TypedErrors(EngineStore(engine, "s")).name
        's'
        >>> engine.close()
    """

    def __init__(self, inner: StateStoreLike) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        """The store's name."""
        return self.inner.name

    async def _call(self, call: Awaitable[_T]) -> _T:
        try:
            return await call
        except StoreError:
            raise
        except FoundryStorageError as exc:
            raise typed_error(exc, self.inner.name) from exc

    async def get(self) -> StateStore:
        """The store's descriptor."""
        return await self._call(self.inner.get())

    @property
    def opened_descriptor(self) -> StateStore | None:
        """The descriptor the inner client's open answered with, when it has one
        (:class:`~._protocol.Described`); None otherwise."""
        inner = self.inner
        return inner.opened_descriptor if isinstance(inner, Described) else None

    async def create_item(
        self, key: str, value: JSONObject, *, tags: Mapping[str, str] | None = None
    ) -> ItemRef:
        """Create an item (``StoreConflictError`` when the key exists)."""
        return await self._call(self.inner.create_item(key, value, tags=tags))

    async def set_item(
        self,
        key: str,
        value: JSONObject,
        *,
        tags: Mapping[str, str] | None = None,
        if_match: str | None = None,
        require_exists: bool = False,
    ) -> ItemRef:
        """Create or replace an item (conditionally with ``if_match``/``require_exists``)."""
        return await self._call(
            self.inner.set_item(
                key, value, tags=tags, if_match=if_match, require_exists=require_exists
            )
        )

    async def get_item(self, key: str) -> StoredItem | None:
        """The item, or None."""
        return await self._call(self.inner.get_item(key))

    async def delete_item(self, key: str, *, if_match: str | None = None) -> DeletedStateStoreItem:
        """Delete an item."""
        return await self._call(self.inner.delete_item(key, if_match=if_match))

    async def list_keys(
        self,
        *,
        tags: Mapping[str, str] | None = None,
        limit: int | None = None,
        after: str | None = None,
        before: str | None = None,
        order: Order = "desc",
    ) -> KeyPage:
        """One page of keys."""
        return await self._call(
            self.inner.list_keys(tags=tags, limit=limit, after=after, before=before, order=order)
        )

    async def delete(self) -> DeletedStateStore:
        """Delete the store."""
        return await self._call(self.inner.delete())

    async def aclose(self) -> None:
        """Release the client's resources."""
        await self.inner.aclose()


class _RankedTypedErrors(TypedErrors):
    """:class:`TypedErrors` of a store that ranks by tag (``RanksByTag``)."""

    def __init__(self, inner: StateStoreLike) -> None:
        super().__init__(inner)
        self._ranked = cast(RanksByTag, inner)

    async def greatest(
        self,
        by: str,
        *,
        tags: Mapping[str, str],
        among: Mapping[str, str] | None = None,
        count: int = 1,
        below: str | None = None,
    ) -> Sequence[ItemKey]:
        """The items with the greatest values of tag ``by`` (see ``RanksByTag``)."""
        return await self._call(
            self._ranked.greatest(by, tags=tags, among=among, count=count, below=below)
        )


class _SoonTypedErrors(_RankedTypedErrors):
    """:class:`_RankedTypedErrors` of a store that also takes writes from any loop
    (``WritesSoon``: the embedded store)."""

    def __init__(self, inner: StateStoreLike) -> None:
        super().__init__(inner)
        self._soon = cast(WritesSoon, inner)

    def put_soon(
        self, key: str, value: JSONObject, *, tags: Mapping[str, str] | None = None
    ) -> Awaitable[ItemRef]:
        """Start the write now (see ``WritesSoon``); awaiting it raises typed errors."""
        return self._call(self._soon.put_soon(key, value, tags=tags))


def typed(store: StateStoreLike) -> StateStoreLike:
    """``store`` with typed errors (ranking by tag still, when it does).

    Args:
        store: the backend's own client.

    Returns:
        The wrapped client.

    Example:
        >>> from foundry_checkpoint._store._embedded import EngineStore
        >>> from foundry_checkpoint._store._engine import StateEngine
        >>> engine = StateEngine(None)
        >>> isinstance(typed(EngineStore(engine, "s")), RanksByTag)
        True
        >>> engine.close()
    """
    if isinstance(store, TypedErrors):
        return store
    if isinstance(store, RanksByTag):
        both = isinstance(store, WritesSoon)
        return _SoonTypedErrors(store) if both else _RankedTypedErrors(store)
    return TypedErrors(store)
