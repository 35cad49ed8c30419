"""``FoundryStateStore``'s own local mode, hardened for several processes (``local_backend="sdk"``).

The SDK's local mode keeps one JSON file per store,
``<state root>/state_stores/<base64url(name) without padding>.json``, rewrites it whole on every
write and guards it with a per-process lock only: three processes writing 60 distinct keys
each to one store kept 76 of 180 items. :class:`LockedSdkStore` runs every call of the SDK
client under an inter-process :class:`filelock.FileLock` on ``<that file>.lock`` and off the
event loop: a worker thread acquires the lock and drives the SDK call, which in local mode
never suspends (it reads and writes the file synchronously). Every other file access (the
folder, the lock, whether a store's file exists) runs in a worker thread too, so no event loop
ever blocks on the file system (``langgraph dev`` checks that with blockbuster).

Example:
    >>> import asyncio, os, tempfile
    >>> async def demo() -> dict:
    ...     store = await LockedSdkStore.get_or_create(
    ...         "threads/t1", user_isolation=True, item_ttl_seconds=-1)
    ...     await store.set_item("latest", {"id": "c1"})
    ...     return (await store.get_item("latest")).value
    >>> from unittest import mock
    >>> with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(
    ...         os.environ, {"AGENTSERVER_STATE_ROOT": tmp}):
    ...     asyncio.run(demo())
    {'id': 'c1'}
"""

from __future__ import annotations

import asyncio
import base64
import os
import threading
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

from azure.ai.agentserver.core import FoundryAgentRequestContext
from azure.ai.agentserver.core.storage import (
    DeletedStateStore,
    DeletedStateStoreItem,
    FoundryStateStore,
    FoundryStorageNotFoundError,
    JSONObject,
    Order,
    StateStore,
    StateStoreItem,
    StateStoreItemKeyPage,
    StateStoreItemRef,
)
from filelock import FileLock

from foundry_checkpoint.errors import FoundryCheckpointError

from ._backend import BackendSettings, Caller, local_caller
from ._limits import DEFAULT_ROOT_DIRNAME, HOSTING_ENV, STATE_ROOT_ENV
from ._private import private_dir
from ._protocol import StateStoreLike

__all__ = ["LockedSdkStore", "SdkLocalBackend"]

_SDK_SUBDIR = "state_stores"

_T = TypeVar("_T")


def _state_root() -> Path:
    """``$AGENTSERVER_STATE_ROOT``, else ``~/.agentserver`` (the SDK's rule)."""
    configured = os.environ.get(STATE_ROOT_ENV)
    return Path(configured) if configured else Path.home() / DEFAULT_ROOT_DIRNAME


def _store_file(name: str) -> Path:
    """The JSON file the SDK's local mode uses for ``name`` (same rule as the SDK)."""
    root = _state_root()
    segment = base64.urlsafe_b64encode(name.encode("utf-8")).decode("ascii").rstrip("=")
    return root / _SDK_SUBDIR / f"{segment}.json"


def _lock_file(name: str) -> Path:
    """The inter-process lock file guarding ``name``'s store file."""
    path = _store_file(name)
    return path.with_name(path.name + ".lock")


def _drive(call: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a local-mode SDK coroutine to completion without an event loop.

    Local mode does all its work synchronously inside the coroutine, so it finishes on the
    first step. A coroutine that suspends would be waiting for network I/O, i.e. hosted mode,
    which this wrapper never drives.
    """
    coroutine = call()
    try:
        coroutine.send(None)
    except StopIteration as finished:
        result: _T = finished.value
        return result
    coroutine.close()
    raise FoundryCheckpointError(
        "The SDK state store tried to do network I/O; LockedSdkStore only wraps its local "
        f"mode. Unset {HOSTING_ENV} or use the hosted client directly."
    )


class _LazyLock:
    """The inter-process lock of one store file, built on first use (in a worker thread)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock: FileLock | None = None
        self._guard = threading.Lock()

    def get(self) -> FileLock:
        with self._guard:
            if self._lock is None:
                self._lock = FileLock(self._path)
            return self._lock


def _locked(lock: _LazyLock, call: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    with lock.get():
        return _drive(call)


def _create_folder(name: str) -> None:
    private_dir(_store_file(name).parent)


class LockedSdkStore:
    """``FoundryStateStore`` in local mode, every call under an inter-process file lock.

    Satisfies ``StateStoreLike``. The SDK's local mode does not enforce ``user_isolation``
    (any caller reads any item) and checks TTL in whole seconds; this wrapper keeps those
    semantics and adds only the cross-process lock. ``get_item`` answers None when the store
    itself is missing, as the hosted client does.

    Example:
        >>> import asyncio, os, tempfile
        >>> async def demo() -> bool:
        ...     store = await LockedSdkStore.get_or_create(
        ...         "s", user_isolation=True, item_ttl_seconds=-1)
        ...     await store.create_item("a", {"n": 1})
        ...     return (await store.list_keys()).keys[0].key == "a"
        >>> from unittest import mock
        >>> with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(
        ...         os.environ, {"AGENTSERVER_STATE_ROOT": tmp}):
        ...     asyncio.run(demo())
        True
    """

    def __init__(self, store: FoundryStateStore, lock: _LazyLock) -> None:
        self._store = store
        self._lock = lock

    @staticmethod
    def exists(name: str) -> bool:
        """Whether the local-mode store ``name`` has a file (reads need not create one).

        Example:
            >>> LockedSdkStore.exists("a-store-nobody-made")
            False
        """
        return _store_file(name).is_file()

    @classmethod
    def bind(cls, name: str, *, user_isolation: bool, item_ttl_seconds: int) -> LockedSdkStore:
        """A client of the existing local-mode store ``name``, built without any file I/O."""
        store = FoundryStateStore(
            name, user_isolation=user_isolation, item_ttl_seconds=item_ttl_seconds
        )
        return cls(store, _LazyLock(_lock_file(name)))

    @classmethod
    async def get_or_create(
        cls, name: str, *, user_isolation: bool, item_ttl_seconds: int, **kwargs: Any
    ) -> LockedSdkStore:
        """Open (or create) the local-mode store ``name``; extra keywords go to the SDK.

        Raises ``FoundryCheckpointError`` when ``FOUNDRYHOSTING_ENVIRONMENT`` is set: the SDK
        would then talk to the hosted service, which needs no file lock.
        """
        if os.environ.get(HOSTING_ENV):
            raise FoundryCheckpointError(
                f"{HOSTING_ENV} is set, so FoundryStateStore runs in hosted mode; the SDK's "
                "local backend is only available when it is unset."
            )
        lock = _LazyLock(_lock_file(name))

        def create() -> FoundryStateStore:
            _create_folder(name)
            return _locked(
                lock,
                lambda: FoundryStateStore.get_or_create(
                    name,
                    user_isolation=user_isolation,
                    item_ttl_seconds=item_ttl_seconds,
                    **kwargs,
                ),
            )

        return cls(await asyncio.to_thread(create), lock)

    @classmethod
    async def open(
        cls, name: str, *, user_isolation: bool, item_ttl_seconds: int, create: bool
    ) -> LockedSdkStore | None:
        """:meth:`get_or_create` when ``create``; else the store when its file exists, or None.

        Looking for the file runs in a worker thread, like every other file access.

        Example:
            >>> import asyncio
            >>> asyncio.run(LockedSdkStore.open(
            ...     "a-store-nobody-made", user_isolation=True, item_ttl_seconds=-1, create=False))
        """
        if not create and not await asyncio.to_thread(cls.exists, name):
            return None
        return await cls.get_or_create(
            name, user_isolation=user_isolation, item_ttl_seconds=item_ttl_seconds
        )

    @property
    def name(self) -> str:
        """The store's name."""
        return self._store.name

    async def get(self) -> StateStore:
        """The store's descriptor; ``FoundryStorageNotFoundError`` when it was deleted."""
        return await self._run(self._store.get)

    async def create_item(
        self, key: str, value: JSONObject, *, tags: Mapping[str, str] | None = None
    ) -> StateStoreItemRef:
        """Create an item; ``FoundryStorageConflictError`` when the key exists."""
        return await self._run(lambda: self._store.create_item(key, value, tags=tags))

    async def set_item(
        self,
        key: str,
        value: JSONObject,
        *,
        tags: Mapping[str, str] | None = None,
        if_match: str | None = None,
        require_exists: bool = False,
    ) -> StateStoreItemRef:
        """Create or replace an item; ``require_exists`` is ``if_match="*"``."""
        return await self._run(
            lambda: self._store.set_item(
                key, value, tags=tags, if_match=if_match, require_exists=require_exists
            )
        )

    async def get_item(self, key: str) -> StateStoreItem | None:
        """The item, or None when it does not exist, has expired, or the store is gone."""
        try:
            return await self._run(lambda: self._store.get_item(key))
        except FoundryStorageNotFoundError:
            return None

    async def delete_item(self, key: str, *, if_match: str | None = None) -> DeletedStateStoreItem:
        """Delete an item (idempotent unless ``if_match`` is given)."""
        return await self._run(lambda: self._store.delete_item(key, if_match=if_match))

    async def list_keys(
        self,
        *,
        tags: Mapping[str, str] | None = None,
        limit: int | None = None,
        after: str | None = None,
        before: str | None = None,
        order: Order = "desc",
    ) -> StateStoreItemKeyPage:
        """One page of keys ordered by ``(created_at, id)``, filtered by exact tags."""
        return await self._run(
            lambda: self._store.list_keys(
                tags=tags, limit=limit, after=after, before=before, order=order
            )
        )

    async def delete(self) -> DeletedStateStore:
        """Delete the store's file (every item in it)."""
        return await self._run(self._store.delete)

    async def aclose(self) -> None:
        """Release the SDK client (nothing is held open in local mode); idempotent."""
        await self._store.aclose()

    async def _run(self, call: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        return await asyncio.to_thread(_locked, self._lock, call)


class SdkLocalBackend:
    """The SDK's own local mode (``local_backend="sdk"``): :class:`LockedSdkStore` clients.

    The SDK's local mode keeps no user partition (every client sees one), so the caller's
    partition is ``""`` and only the cache key carries the user; values are compressed when
    that pays (the SDK rewrites its whole file on each write).

    Args:
        settings: The adapter's options (the TTL of the stores it creates).

    Example:
        >>> from foundry_checkpoint._options import StoreOptions
        >>> backend = SdkLocalBackend(StoreOptions(store_prefix="x"))
        >>> backend.kind, backend.location.endswith("state_stores"), backend.compresses
        ('local-sdk', True, True)
    """

    kind = "local-sdk"
    compresses = True
    chunks_in_store = False
    first_page = 20

    def __init__(self, settings: BackendSettings) -> None:
        self._ttl = settings.item_ttl_seconds
        root = _state_root()
        self.location = str(root / _SDK_SUBDIR)
        self.spill_root: Path | None = root / "foundry_checkpoint" / "spill"

    @staticmethod
    def caller(user_id: str | None, context: FoundryAgentRequestContext) -> Caller:
        """The local rule; the SDK's local mode has no partition to bind."""
        return local_caller(user_id, context, partitioned=False)

    async def open(self, name: str, partition: str, *, create: bool) -> StateStoreLike | None:
        """A client of ``name`` (created isolated first when ``create``; else None when the
        store has no file)."""
        return await LockedSdkStore.open(
            name, user_isolation=True, item_ttl_seconds=self._ttl, create=create
        )

    def bind(self, name: str, partition: str) -> StateStoreLike:
        """A client of a store already opened; no I/O."""
        return LockedSdkStore.bind(name, user_isolation=True, item_ttl_seconds=self._ttl)

    async def aclose(self) -> None:
        """Nothing to close: each client holds only its file lock."""
