"""The shared core of both adapters: backend choice, store registry, spill namespaces, codec.

An adapter owns one :class:`CheckpointCore`. It maps a scope (a LangGraph thread id, a MAF
context id) to one store under the adapter's prefix, opens each store once per process with
``user_isolation=True`` (refusing an existing store without it), keeps the spill namespace of
each (user, scope) in that user's own isolated store, and runs all I/O on a private loop.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

from azure.ai.agentserver.core.storage import (
    DEFAULT_ITEM_TTL_SECONDS,
    FoundryStateStore,
    FoundryStorageConflictError,
    JSONObject,
)
from azure.core.exceptions import ServiceRequestError, ServiceResponseError

from . import _codec
from ._local_store import default_state_root
from ._loop import LoopThread
from ._naming import check_identifier, item_key, store_name, validate_prefix
from ._protocol import ItemKey, StateStoreLike
from .errors import CheckpointTooLargeError, InvalidIdentifierError, IsolationRefusedError

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from .spill import SpillStore

__all__ = [
    "BackendKind",
    "CheckpointCore",
    "GcReport",
    "LocalBackend",
    "Scope",
    "all_keys",
    "create_item",
    "hosted",
    "newest_second",
]

T = TypeVar("T")
LocalBackend = Literal["sqlite", "sdk"]
BackendKind = Literal["local-sqlite", "local-sdk", "hosted"]

_HOSTING_ENV: Final = "FOUNDRY_HOSTING_ENVIRONMENT"
_META_KEY: Final = item_key("m", "spill")
_META_TAGS: Final = {"kind": "meta"}
_INDEX_TAGS: Final = {"kind": "scope"}
_PAGE: Final = 100
_FIRST_PAGE: Final = 10
_TRANSPORT_ATTEMPTS: Final = 4
DEFAULT_GC_GRACE_SECONDS: Final = 24 * 3600


@dataclass
class GcReport:
    """What a garbage collection of spilled blobs found and did.

    ``deleted`` lists ``(namespace, digest)`` pairs removed (or that would be, with
    ``dry_run``); ``kept_recent`` counts unreferenced blobs younger than the grace period;
    ``unattributed`` lists namespaces under the prefix that none of the caller's own scopes
    claims (another user's, or a deleted scope's): they are reported, never touched.
    """

    scanned_scopes: int = 0
    referenced: int = 0
    kept_recent: int = 0
    deleted: list[tuple[str, str]] = field(default_factory=list)
    unattributed: list[str] = field(default_factory=list)
    dry_run: bool = False


def hosted() -> bool:
    """True when running inside a Foundry-hosted agent (``FOUNDRY_HOSTING_ENVIRONMENT`` set)."""
    return bool(os.environ.get(_HOSTING_ENV))


class Scope:
    """One scope's store, its spill namespace, and the codec bound to both.

    Adapters keep item keys out of the ``m/`` family, which the core reserves for its own
    metadata (the spill namespace item).
    """

    def __init__(self, core: CheckpointCore, scope_id: str | None, store: StateStoreLike) -> None:
        self.core = core
        self.scope_id = scope_id
        self.store = store
        self._namespace: str | None = None
        self._touched = 0.0
        self._lock = asyncio.Lock()

    @property
    def name(self) -> str:
        """The store name."""
        return self.store.name

    def where(self, key: str) -> str:
        """A human description of an item for error messages."""
        return f"{self.core.scope_word} {self.scope_id!r} (store {self.name!r}, key {key!r})"

    async def namespace(self, *, create: bool) -> str | None:
        """The spill namespace of this (user, scope); created on first need when ``create``."""
        if self._namespace is not None:
            return self._namespace
        async with self._lock:
            if self._namespace is None:
                item = await self.store.get_item(_META_KEY)
                if item is None and create:
                    value: JSONObject = {"ns": f"{self.core.prefix}/{secrets.token_hex(16)}"}
                    # another writer (or a lost first attempt) may have created it first
                    await create_item(self.store, _META_KEY, value, tags=_META_TAGS)
                    item = await self.store.get_item(_META_KEY)
                    # The index entry is part of what a touch keeps fresh: record it too, or
                    # the rate-limited touch() that follows would skip registering the scope.
                    await self.core.register(self.scope_id)
                    self._touched = time.monotonic()
                if item is not None:
                    ns = item.value.get("ns") if item.value else None
                    if isinstance(ns, str):
                        self._namespace = ns
        return self._namespace

    async def encode(
        self,
        key: str,
        payload: bytes,
        *,
        tags: Mapping[str, str] | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> JSONObject:
        """The item value for ``payload``; spills to the spill store (blob first) when too big."""
        where = self.where(key)
        spill = self.core.spill
        try:
            return await _codec.encode(
                payload, key=key, tags=tags, extra=extra, spill=None, namespace=None, where=where
            )
        except CheckpointTooLargeError:
            if spill is None:
                raise
        ns = await self.namespace(create=True)
        return await _codec.encode(
            payload, key=key, tags=tags, extra=extra, spill=spill, namespace=ns, where=where
        )

    async def decode(self, value: Mapping[str, Any], *, key: str) -> bytes:
        """The payload of an item value written by :meth:`encode`."""
        ns = await self.namespace(create=False) if _codec.spilled_digest(value) else None
        return await _codec.decode(
            value, spill=self.core.spill, namespace=ns, where=self.where(key)
        )

    async def touch(self) -> None:
        """Keep the scope's metadata and index entry alive under a TTL (cheap: rate-limited)."""
        ttl = self.core.item_ttl_seconds
        now = time.monotonic()
        if self._touched and (ttl == -1 or now - self._touched < ttl / 4):
            return
        self._touched = now
        await self.core.register(self.scope_id)
        item = await self.store.get_item(_META_KEY)
        if item is not None and ttl != -1:
            await self.store.set_item(_META_KEY, dict(item.value), tags=_META_TAGS)

    async def keys(self, tags: Mapping[str, str] | None = None) -> list[ItemKey]:
        """Every key of this scope matching ``tags`` (all pages)."""
        return await all_keys(self.store, tags)

    async def purge(self) -> None:
        """Delete every item this user has in the scope, its spilled blobs, and its index entry."""
        ns = await self.namespace(create=False)
        for key in await self.keys():
            if key.key != _META_KEY:
                await self.store.delete_item(key.key)
        if ns is not None and self.core.spill is not None:
            await self.core.spill.delete_namespace(ns)
        await self.store.delete_item(_META_KEY)
        self._namespace = None
        self._touched = 0.0
        await self.core.unregister(self.scope_id)


async def _transport_retried(make: Callable[[], Awaitable[T]]) -> T:
    """``make()``, again after a dropped connection or a failed send.

    azure-core retries a POST only on some HTTP statuses, never on a transport error, so a
    create (a store, an item) would fail a whole step on one dropped connection. Callers only
    pass operations that are safe to repeat: a create that did land answers 409 the second
    time, which they treat as "already there".
    """
    for attempt in range(_TRANSPORT_ATTEMPTS):
        try:
            return await make()
        except (ServiceRequestError, ServiceResponseError):
            if attempt == _TRANSPORT_ATTEMPTS - 1:
                raise
            await asyncio.sleep(0.1 * 4**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


async def create_item(
    store: StateStoreLike, key: str, value: JSONObject, *, tags: Mapping[str, str] | None
) -> bool:
    """Create an item; False when the key already exists (perhaps from a lost attempt).

    Dropped connections are retried (see :func:`_transport_retried`), so the caller must treat
    False as "the item may be the one this call wrote".
    """
    try:
        await _transport_retried(lambda: store.create_item(key, value, tags=tags))
    except FoundryStorageConflictError:
        return False
    return True


async def newest_second(store: StateStoreLike, tags: Mapping[str, str]) -> list[ItemKey]:
    """Every key matching ``tags`` whose ``created_at`` is the newest second of the listing.

    ``list_keys`` orders by ``(created_at in whole seconds, id)`` and the id is not write order,
    so "latest" must compare every key of the newest second by the caller's own monotonic key.
    The first page is small (the newest second usually holds a few keys); further pages of 100
    are read only while a page ends inside that second. The cost does not grow with history.
    """
    page = await store.list_keys(tags=tags, limit=_FIRST_PAGE, order="desc")
    if not page.keys:
        return []
    top = page.keys[0].created_at
    candidates = [k for k in page.keys if k.created_at == top]
    while page.has_more and page.last_id and page.keys[-1].created_at == top:
        page = await store.list_keys(tags=tags, limit=_PAGE, after=page.last_id, order="desc")
        candidates.extend(k for k in page.keys if k.created_at == top)
    return candidates


async def all_keys(store: StateStoreLike, tags: Mapping[str, str] | None = None) -> list[ItemKey]:
    """Every key of ``store`` matching ``tags``, paging with ``after`` only."""
    out: list[ItemKey] = []
    after: str | None = None
    while True:
        page = await store.list_keys(tags=tags, limit=_PAGE, after=after, order="desc")
        out.extend(page.keys)
        if not page.has_more or not page.last_id:
            return out
        after = page.last_id


class CheckpointCore:
    """Backend choice, one private loop, and a registry of scopes for one adapter object.

    ``kind`` is ``"local-sqlite"`` (the embedded default), ``"local-sdk"`` (the SDK's own local
    mode, made safe across processes with a file lock) or ``"hosted"`` (the Foundry service).
    """

    def __init__(
        self,
        *,
        store_prefix: str,
        scope_word: str,
        credential: AsyncTokenCredential | None = None,
        endpoint: str | None = None,
        user_id: str | None = None,
        item_ttl_seconds: int = DEFAULT_ITEM_TTL_SECONDS,
        spill: SpillStore | None = None,
        local_backend: LocalBackend = "sqlite",
        client_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.prefix = validate_prefix(store_prefix)
        self.scope_word = scope_word
        if item_ttl_seconds != -1 and not 1 <= item_ttl_seconds <= 2_147_483_647:
            raise InvalidIdentifierError(
                "item_ttl_seconds must be -1 (never expire) or 1..2147483647, "
                f"got {item_ttl_seconds}"
            )
        if local_backend not in ("sqlite", "sdk"):
            raise InvalidIdentifierError(
                f"local_backend must be 'sqlite' or 'sdk', got {local_backend!r}"
            )
        if user_id is not None:
            check_identifier(user_id, "user_id")
        self.item_ttl_seconds = item_ttl_seconds
        self._credential = credential
        self._endpoint = endpoint
        self._user_id = user_id
        self._client_kwargs = dict(client_kwargs or {})
        self.kind: BackendKind = (
            "hosted" if hosted() else ("local-sqlite" if local_backend == "sqlite" else "local-sdk")
        )
        root = default_state_root()
        if self.kind == "hosted":
            self.location = endpoint or os.environ.get("FOUNDRY_PROJECT_ENDPOINT", "(unset)")
        elif self.kind == "local-sqlite":
            self.location = str(root / "foundry_checkpoint" / "state.sqlite3")
        else:
            self.location = str(root / "state_stores")
        self.spill: SpillStore | None = (
            spill if spill is not None else _default_spill(self.kind, root)
        )
        self._loop = LoopThread(f"foundry-checkpoint-{self.prefix}")
        self._scopes: dict[str | None, Scope] = {}
        self._stores: dict[str, StateStoreLike] = {}
        self._opening: dict[str, asyncio.Future[StateStoreLike]] = {}
        self._registered: dict[str | None, float] = {}
        self._sessions: list[Any] = []

    def describe(self) -> str:
        """``kind`` and where the data lives, for ``repr()``."""
        return f"backend={self.kind!r}, location={self.location!r}, store_prefix={self.prefix!r}"

    # -- the loop bridge -------------------------------------------------------------------
    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the private loop, blocking the calling thread."""
        return self._loop.run(coro)

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the private loop, awaited from the caller's loop."""
        return await self._loop.arun(coro)

    def close(self) -> None:
        """Close every client and stop the loop. Idempotent; fine on an object never used."""
        self._loop.close(self._aclose_clients)

    async def aclose(self) -> None:
        """Async form of :meth:`close` (does not block the caller's loop)."""
        if self._loop.running:
            await asyncio.to_thread(self.close)

    async def _aclose_clients(self) -> None:
        stores, self._stores, self._scopes = list(self._stores.values()), {}, {}
        self._opening.clear()
        self._registered.clear()
        for store in stores:
            await store.aclose()
        sessions, self._sessions = self._sessions, []
        for session in sessions:
            await session.close()
        if self.spill is not None:
            await self.spill.aclose()

    # -- stores (call on the private loop) --------------------------------------------------
    def name_for(self, scope_id: str | None) -> str:
        """The store name of a scope (thread or context id; None: the prefix's default store)."""
        if scope_id is None:
            return store_name(self.prefix, "default")
        return store_name(self.prefix, "t", check_identifier(scope_id, self.scope_word))

    async def scope(self, scope_id: str | None) -> Scope:
        """The :class:`Scope` of ``scope_id``, opening its store on first use."""
        found = self._scopes.get(scope_id)
        if found is None:
            store = await self.open(self.name_for(scope_id))
            found = self._scopes.setdefault(scope_id, Scope(self, scope_id, store))
        return found

    async def index(self) -> StateStoreLike:
        """The store that lists this user's scopes under the prefix."""
        return await self.open(store_name(self.prefix, "index"))

    async def register(self, scope_id: str | None) -> None:
        """Record ``scope_id`` in the index (refreshing its TTL); cheap after the first call."""
        ttl = self.item_ttl_seconds
        last = self._registered.get(scope_id)
        now = time.monotonic()
        if last is not None and (ttl == -1 or now - last < ttl / 4):
            return
        index = await self.index()
        await index.set_item(_index_key(scope_id), {"id": scope_id}, tags=_INDEX_TAGS)
        self._registered[scope_id] = now

    async def unregister(self, scope_id: str | None) -> None:
        """Remove ``scope_id`` from the index."""
        index = await self.index()
        await index.delete_item(_index_key(scope_id))
        self._registered.pop(scope_id, None)

    async def scope_ids(self) -> list[str | None]:
        """Every scope id recorded in this user's index (None stands for the default store)."""
        index = await self.index()
        ids: list[str | None] = []
        for key in await all_keys(index, _INDEX_TAGS):
            item = await index.get_item(key.key)
            if item is not None:
                scope_id = item.value.get("id")
                ids.append(scope_id if isinstance(scope_id, str) else None)
        return ids

    async def open(self, name: str) -> StateStoreLike:
        """Open (get or create) the store ``name`` once per core, isolated, and cache it."""
        store = self._stores.get(name)
        if store is not None:
            return store
        pending = self._opening.get(name)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._opening[name] = pending
            try:
                store = await self._open_checked(name)
            except BaseException as exc:
                del self._opening[name]
                pending.set_exception(exc)
                pending.exception()  # mark retrieved
                raise
            self._stores[name] = store
            del self._opening[name]
            pending.set_result(store)
            return store
        return await asyncio.shield(pending)

    async def _open_checked(self, name: str) -> StateStoreLike:
        store = await self._open_raw(name)
        try:
            descriptor = await store.get()
            if not descriptor.user_isolation:
                raise IsolationRefusedError(
                    f"store {name!r} exists without user_isolation, so every end user could read "
                    "every other user's checkpoints; it is refused. Use another store_prefix, or "
                    "move its data and delete the store so that it is re-created isolated."
                )
        except BaseException:
            await store.aclose()
            raise
        return store

    async def _open_raw(self, name: str) -> StateStoreLike:
        if self.kind == "local-sqlite":
            from ._local_store import EngineStore, default_engine

            return await EngineStore.get_or_create(
                default_engine(),
                name,
                user_isolation=True,
                item_ttl_seconds=self.item_ttl_seconds,
                user=self._user_id or "local",
            )
        if self.kind == "local-sdk":
            from ._sdk_local import LockedSdkStore

            return await LockedSdkStore.get_or_create(
                name, user_isolation=True, item_ttl_seconds=self.item_ttl_seconds
            )
        kwargs = self._pipeline_kwargs()
        return await _transport_retried(
            lambda: FoundryStateStore.get_or_create(
                name,
                self._credential,
                self._endpoint,
                user_isolation=True,
                item_ttl_seconds=self.item_ttl_seconds,
                user_id=self._user_id,
                **kwargs,
            )
        )

    def _pipeline_kwargs(self) -> dict[str, Any]:
        """The client keyword arguments, with a CA-file ``connection_verify`` made reusable.

        azure-core turns a CA-file path into a new SSL context on every request, so aiohttp
        opens (and keeps) a new TLS connection per request. One SSL context on one shared
        session per core keeps connections reused, as with the default verification.
        """
        kwargs = dict(self._client_kwargs)
        verify = kwargs.get("connection_verify")
        if not isinstance(verify, str) or "transport" in kwargs:
            return kwargs
        if not self._sessions:
            import ssl

            import aiohttp

            context = ssl.create_default_context(cafile=verify)
            self._sessions.append(
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))
            )
        from azure.core.pipeline.transport import AioHttpTransport

        del kwargs["connection_verify"]
        kwargs["transport"] = AioHttpTransport(session=self._sessions[0], session_owner=False)
        return kwargs

    async def gc(
        self,
        referenced: Callable[[Scope], Awaitable[set[str]]],
        *,
        grace_seconds: float = DEFAULT_GC_GRACE_SECONDS,
        dry_run: bool = False,
    ) -> GcReport:
        """Delete spilled blobs that no item of the caller's scopes references any more.

        Only namespaces attributable through the caller's own (isolated) stores are
        considered, and only blobs last modified more than ``grace_seconds`` ago, so a blob
        uploaded by a write still in flight (blob first, item second) is never taken.
        ``referenced(scope)`` returns every digest the scope's live items use.
        """
        report = GcReport(dry_run=dry_run)
        spill = self.spill
        if spill is None:
            return report
        cutoff = time.time() - grace_seconds
        owned: set[str] = set()
        for scope_id in await self.scope_ids():
            scope = await self.scope(scope_id)
            report.scanned_scopes += 1
            ns = await scope.namespace(create=False)
            if ns is None:
                continue
            owned.add(ns)
            live = await referenced(scope)
            report.referenced += len(live)
            stale: list[str] = []
            for blob in await spill.list(ns):
                if blob.digest in live:
                    continue
                if blob.last_modified > cutoff:
                    report.kept_recent += 1
                else:
                    stale.append(blob.digest)
            if stale and not dry_run:
                await spill.delete(ns, stale)
            report.deleted.extend((ns, digest) for digest in stale)
        mine = f"{self.prefix}/"
        report.unattributed = sorted(
            ns for ns in await spill.namespaces() if ns.startswith(mine) and ns not in owned
        )
        return report

    async def forget(self, scope_id: str | None) -> None:
        """Drop a cached scope (its store client stays cached)."""
        self._scopes.pop(scope_id, None)


def _index_key(scope_id: str | None) -> str:
    return item_key("d") if scope_id is None else item_key("s", scope_id)


def _default_spill(kind: BackendKind, root: Path) -> SpillStore | None:
    from .spill import AzureBlobSpill, LocalSpill

    configured = AzureBlobSpill.from_env()
    if configured is not None:
        return configured
    if kind == "hosted":
        return None
    return LocalSpill(root / "foundry_checkpoint" / "spill")
