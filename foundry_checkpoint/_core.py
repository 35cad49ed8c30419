"""The shared core of both adapters: backend choice, store registry, spill namespaces, codec.

An adapter owns one :class:`CheckpointCore`. It maps a scope (a LangGraph thread id, a MAF
context id) to one store under the adapter's prefix, opens each store once per process with
``user_isolation=True`` (refusing an existing store without it), keeps the spill namespace of
each (user, scope) in that user's own isolated store, and runs all I/O on a private loop.

**One object, many end users.** A Foundry-hosted agent is one process serving many users; the
platform says whose request it is through the request context
(``azure.ai.agentserver.core.get_request_context()``: the call id, which the SDK forwards on
every store call and the service resolves to the caller's isolation partition, and the user
id). So everything the core remembers between calls that depends on the partition (the spill
namespace and TTL touch of a scope, index registration) and the adapters' own caches (the
LangGraph saver's heads) are keyed by :func:`user_key`, the one rule for "who is this call for":

1. the adapter's explicit ``user_id=``, if given;
2. else the request context's ``user_id`` (``x-agent-user-id``);
3. else the request context's ``call_id``: the caller is known only to the service, so nothing
   is reused beyond that one request;
4. else the process's own identity (the credential's user in hosted mode; ``"local"`` or
   ``user_id`` in local mode).

In the embedded local store the same rule picks the partition (explicit ``user_id``, else the
request context's ``user_id``, else ``"local"``), so a host run on a laptop isolates its users
too.

**Bounded resources.** In hosted mode a core holds one credential (the one passed, or one
``DefaultAzureCredential`` created on first use and closed by ``close()``), one HTTP session and
transport shared by every store client (with or without ``connection_verify``), at most
:data:`MAX_OPEN_STORES` store clients (least recently used first out; a client holds no
connection of its own, so dropping one releases nothing but memory) and at most
:data:`MAX_SCOPES` per-(user, scope) entries. Descriptors and memory stay flat however many
threads a process serves. Reads of a scope whose store does not exist do not create it (one
store GET); the first write does.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar, overload

from azure.ai.agentserver.core import get_request_context
from azure.ai.agentserver.core.storage import (
    DEFAULT_ITEM_TTL_SECONDS,
    FoundryStateStore,
    FoundryStorageConflictError,
    FoundryStorageNotFoundError,
    JSONObject,
)
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline import PipelineRequest
from azure.core.pipeline.policies import SansIOHTTPPolicy
from azure.core.rest import AsyncHttpResponse, HttpRequest

from . import _codec
from ._local_store import DEFAULT_USER, default_state_root
from ._loop import LoopThread
from ._naming import (
    check_identifier,
    check_user_id,
    checked_spill_namespace,
    item_key,
    store_name,
    validate_prefix,
)
from ._protocol import ItemKey, StateStoreLike
from .errors import (
    CheckpointTooLargeError,
    FoundryCheckpointError,
    InvalidArgumentError,
    InvalidIdentifierError,
    IsolationRefusedError,
)

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from .spill import SpillStore

__all__ = [
    "MAX_OPEN_STORES",
    "MAX_SCOPES",
    "BackendKind",
    "CheckpointCore",
    "GcReport",
    "LocalBackend",
    "Lru",
    "Scope",
    "all_keys",
    "create_item",
    "hosted",
    "newest_second",
    "user_key",
]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
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
#: Store clients a core keeps open at most (least recently used first out).
MAX_OPEN_STORES: Final = 256
#: Per-(user, scope) entries (spill namespace, TTL touch, index registration) a core keeps.
MAX_SCOPES: Final = 2048
#: Store names a core remembers as checked (exists, isolated): reopening one needs no request.
_MAX_CHECKED: Final = 8192
_SELF: Final = "self"


def user_key(explicit: str | None = None) -> str:
    """Who the current call is for, as a cache key: the one rule every cache uses.

    ``explicit`` (the adapter's ``user_id=``) if given; else the request context's user id;
    else its call id (the caller is known only to the service: no reuse across requests); else
    the process's own identity.

    Example:
        >>> from azure.ai.agentserver.core import (
        ...     FoundryAgentRequestContext, reset_request_context, set_request_context)
        >>> user_key(), user_key("ann")
        ('self', 'user:ann')
        >>> token = set_request_context(FoundryAgentRequestContext(call_id="c-1"))
        >>> user_key()
        'call:c-1'
        >>> reset_request_context(token)
    """
    if explicit is not None:
        return f"user:{explicit}"
    context = get_request_context()
    if context.user_id:
        return f"user:{context.user_id}"
    if context.call_id:
        return f"call:{context.call_id}"
    return _SELF


def _local_partition(explicit: str | None) -> str:
    """The embedded store's partition: ``user_id=``, else the request's user id, else local."""
    if explicit is not None:
        return explicit
    return get_request_context().user_id or DEFAULT_USER


class Lru(Generic[K, V]):
    """A mapping that keeps at most ``bound`` entries, dropping the least recently used.

    Example:
        >>> cache: Lru[str, int] = Lru(2)
        >>> cache.put("a", 1); cache.put("b", 2); cache.get("a"); cache.put("c", 3)
        1
        >>> cache.get("b") is None, len(cache)
        (True, 2)
    """

    def __init__(self, bound: int) -> None:
        if bound < 1:
            raise InvalidArgumentError(f"bound must be positive, got {bound}")
        self.bound = bound
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value of ``key`` (now the most recently used), or None."""
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Set ``key``; drops the least recently used entry beyond the bound."""
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.bound:
            self._data.popitem(last=False)

    def pop(self, key: K) -> V | None:
        """Remove ``key``; its value, or None."""
        return self._data.pop(key, None)

    def values(self) -> list[V]:
        """Every value, least recently used first."""
        return list(self._data.values())

    def clear(self) -> None:
        """Remove everything."""
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


@dataclass
class GcReport:
    """What a garbage collection of spilled blobs found and did.

    ``deleted`` lists ``(namespace, digest)`` pairs removed (or that would be, with
    ``dry_run``); ``kept_recent`` counts unreferenced blobs younger than the grace period;
    ``unattributed`` lists namespaces under the prefix that none of the caller's own scopes
    claims (another user's, or a deleted scope's): they are reported, never touched.

    Example:
        >>> from foundry_checkpoint import GcReport
        >>> report = GcReport(dry_run=True)
        >>> report.deleted, report.unattributed, report.dry_run
        ([], [], True)
    """

    scanned_scopes: int = 0
    referenced: int = 0
    kept_recent: int = 0
    deleted: list[tuple[str, str]] = field(default_factory=list)
    unattributed: list[str] = field(default_factory=list)
    dry_run: bool = False


#: azure-core's retry options that :class:`RetrySettingsPolicy` applies to every request.
RETRY_OPTIONS: Final = (
    "retry_total",
    "retry_connect",
    "retry_read",
    "retry_status",
    "retry_backoff_factor",
    "retry_backoff_max",
)


class RetrySettingsPolicy(SansIOHTTPPolicy[HttpRequest, AsyncHttpResponse]):
    """Hands azure-core retry options to the SDK's own ``AsyncRetryPolicy``, per request.

    ``FoundryStateStore`` builds ``AsyncRetryPolicy()`` with its defaults and ignores
    ``retry_total=`` and the other ``retry_*`` client options. The retry policy reads those
    options from each request's context, though, so this policy (a per-call policy, which
    azure-core places before the retry policy) puts the configured values there unless the
    call already set them.

    Example:
        >>> policy = RetrySettingsPolicy({"retry_total": 0})
        >>> policy.settings
        {'retry_total': 0}
    """

    def __init__(self, settings: Mapping[str, Any]) -> None:
        unknown = set(settings) - set(RETRY_OPTIONS)
        if unknown:
            raise InvalidArgumentError(f"not retry options: {sorted(unknown)}")
        self.settings = dict(settings)

    def on_request(self, request: PipelineRequest[HttpRequest]) -> None:
        """Set the configured retry options on the request unless it carries its own."""
        for key, value in self.settings.items():
            request.context.options.setdefault(key, value)


def hosted() -> bool:
    """True when running inside a Foundry-hosted agent (``FOUNDRY_HOSTING_ENVIRONMENT`` set)."""
    return bool(os.environ.get(_HOSTING_ENV))


class Scope:
    """One scope's store, its spill namespace, and the codec bound to both.

    A scope belongs to one user (``user``, a :func:`user_key`): what it remembers (the spill
    namespace, when it last refreshed the TTL) came from that user's partition. Adapters keep
    item keys out of the ``m/`` family, which the core reserves for its own metadata (the
    spill namespace item).
    """

    def __init__(
        self,
        core: CheckpointCore,
        scope_id: str | None,
        name: str,
        *,
        user: str = _SELF,
        partition: str = "",
    ) -> None:
        self.core = core
        self.scope_id = scope_id
        self.user = user
        self._name = name
        self._partition = partition
        self._pinned: StateStoreLike | None = None
        self._namespace: str | None = None
        self._touched = 0.0
        self._lock = asyncio.Lock()

    @property
    def name(self) -> str:
        """The store name."""
        return self._name

    @property
    def store(self) -> StateStoreLike:
        """The store client, from the core's bounded client cache (the scope holds none)."""
        if self._pinned is not None:
            return self._pinned
        return self.core.client(self._name, self._partition)

    @store.setter
    def store(self, client: StateStoreLike) -> None:
        """Pin a client for this scope (a wrapper around the core's, say)."""
        self._pinned = client

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
                    if ns is not None:
                        where = self.where(_META_KEY)
                        self._namespace = checked_spill_namespace(ns, self.core.prefix, where)
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
        if local_backend == "sdk" and hosted():
            raise FoundryCheckpointError(
                "local_backend='sdk' was asked for, but FOUNDRY_HOSTING_ENVIRONMENT is set "
                "(hosted mode); the SDK's local backend is only available when it is unset. "
                "Drop local_backend='sdk', or unset the variable for local runs."
            )
        if user_id is not None:
            check_user_id(user_id)
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
        self._scopes: Lru[tuple[str, str | None], Scope] = Lru(MAX_SCOPES)
        self._stores: Lru[tuple[str, str], StateStoreLike] = Lru(MAX_OPEN_STORES)
        self._checked: Lru[str, bool] = Lru(_MAX_CHECKED)
        self._opening: dict[tuple[str, str], asyncio.Future[StateStoreLike | None]] = {}
        self._registered: Lru[tuple[str, str | None], float] = Lru(MAX_SCOPES)
        self._owned_credential: AsyncTokenCredential | None = None
        self._session: Any = None
        self._transport: Any = None

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
        stores = self._stores.values()
        self._stores.clear()
        self._checked.clear()
        self._scopes.clear()
        self._opening.clear()
        self._registered.clear()
        for store in stores:
            await store.aclose()
        session, self._session, self._transport = self._session, None, None
        if session is not None:
            await session.close()
        credential, self._owned_credential = self._owned_credential, None
        if credential is not None:
            await credential.close()
        if self.spill is not None:
            await self.spill.aclose()

    # -- who a call is for --------------------------------------------------------------------
    def user_key(self) -> str:
        """:func:`user_key` for this core's explicit ``user_id`` (call on the private loop)."""
        return user_key(self._user_id)

    def _partition(self) -> str:
        """The client-cache partition: the embedded store binds a user; the others do not."""
        return _local_partition(self._user_id) if self.kind == "local-sqlite" else ""

    # -- stores (call on the private loop) --------------------------------------------------
    def name_for(self, scope_id: str | None) -> str:
        """The store name of a scope (thread or context id; None: the prefix's default store)."""
        if scope_id is None:
            return store_name(self.prefix, "default")
        return store_name(self.prefix, "t", check_identifier(scope_id, self.scope_word))

    @overload
    async def scope(self, scope_id: str | None) -> Scope: ...
    @overload
    async def scope(self, scope_id: str | None, *, create: Literal[True]) -> Scope: ...
    @overload
    async def scope(self, scope_id: str | None, *, create: bool) -> Scope | None: ...

    async def scope(self, scope_id: str | None, *, create: bool = True) -> Scope | None:
        """The current user's :class:`Scope` of ``scope_id``, opening its store on first use.

        With ``create=False`` (reads) a store that does not exist is not created: None.
        """
        user = self.user_key()
        key = (user, scope_id)
        found = self._scopes.get(key)
        if found is None:
            name = self.name_for(scope_id)
            if await self.open(name, create=create) is None:
                return None
            found = self._scopes.get(key)
            if found is None:
                found = Scope(self, scope_id, name, user=user, partition=self._partition())
                self._scopes.put(key, found)
        return found

    @overload
    async def index(self) -> StateStoreLike: ...
    @overload
    async def index(self, *, create: bool) -> StateStoreLike | None: ...

    async def index(self, *, create: bool = True) -> StateStoreLike | None:
        """The store that lists this user's scopes under the prefix (None: absent, not created)."""
        return await self.open(store_name(self.prefix, "index"), create=create)

    async def register(self, scope_id: str | None) -> None:
        """Record ``scope_id`` in the current user's index (refreshing its TTL); cheap after the
        first call per user."""
        ttl = self.item_ttl_seconds
        key = (self.user_key(), scope_id)
        last = self._registered.get(key)
        now = time.monotonic()
        if last is not None and (ttl == -1 or now - last < ttl / 4):
            return
        index = await self.index()
        await index.set_item(_index_key(scope_id), {"id": scope_id}, tags=_INDEX_TAGS)
        self._registered.put(key, now)

    async def unregister(self, scope_id: str | None) -> None:
        """Remove ``scope_id`` from the current user's index."""
        self._registered.pop((self.user_key(), scope_id))
        index = await self.index(create=False)
        if index is not None:
            await index.delete_item(_index_key(scope_id))

    async def scope_ids(self) -> list[str | None]:
        """Every scope id recorded in this user's index (None stands for the default store)."""
        index = await self.index(create=False)
        if index is None:
            return []
        ids: list[str | None] = []
        for key in await all_keys(index, _INDEX_TAGS):
            item = await index.get_item(key.key)
            if item is not None:
                scope_id = item.value.get("id")
                ids.append(scope_id if isinstance(scope_id, str) else None)
        return ids

    @overload
    async def open(self, name: str) -> StateStoreLike: ...
    @overload
    async def open(self, name: str, *, create: bool) -> StateStoreLike | None: ...

    async def open(self, name: str, *, create: bool = True) -> StateStoreLike | None:
        """Open the store ``name`` once per core, isolated, and cache the client.

        ``create=True`` gets or creates it; ``create=False`` only looks (one store GET) and
        answers None when it does not exist, caching nothing.
        """
        key = (name, self._partition())
        while True:
            store = self._stores.get(key)
            if store is not None:
                return store
            if self._checked.get(name):
                return self.client(name, key[1])
            pending = self._opening.get(key)
            if pending is None:
                break
            opened = await asyncio.shield(pending)
            if opened is not None or not create:
                return opened
        pending = asyncio.get_running_loop().create_future()
        self._opening[key] = pending
        try:
            store = await self._open_checked(name, key[1], create=create)
        except BaseException as exc:
            del self._opening[key]
            pending.set_exception(exc)
            pending.exception()  # mark retrieved
            raise
        if store is not None:
            self._stores.put(key, store)
            self._checked.put(name, True)
        del self._opening[key]
        pending.set_result(store)
        return store

    async def _open_checked(
        self, name: str, partition: str, *, create: bool
    ) -> StateStoreLike | None:
        store = await self._open_raw(name, partition, create=create)
        if store is None:
            return None
        try:
            try:
                descriptor = await store.get()
            except FoundryStorageNotFoundError:
                if create:
                    raise
                await store.aclose()
                return None
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

    async def _open_raw(self, name: str, partition: str, *, create: bool) -> StateStoreLike | None:
        """A client of ``name``; created first only when ``create`` (else checked by GET)."""
        if self.kind == "local-sqlite":
            from ._local_store import EngineStore, default_engine

            if not create:
                return EngineStore(default_engine(), name, user=partition)
            return await EngineStore.get_or_create(
                default_engine(),
                name,
                user_isolation=True,
                item_ttl_seconds=self.item_ttl_seconds,
                user=partition,
            )
        if self.kind == "local-sdk":
            from ._sdk_local import LockedSdkStore

            if not create and not LockedSdkStore.exists(name):
                return None
            return await LockedSdkStore.get_or_create(
                name, user_isolation=True, item_ttl_seconds=self.item_ttl_seconds
            )
        kwargs = self._pipeline_kwargs()
        credential = self._client_credential()
        if not create:
            return FoundryStateStore(
                name,
                credential,
                self._endpoint,
                user_isolation=True,
                item_ttl_seconds=self.item_ttl_seconds,
                user_id=self._user_id,
                **kwargs,
            )
        return await _transport_retried(
            lambda: FoundryStateStore.get_or_create(
                name,
                credential,
                self._endpoint,
                user_isolation=True,
                item_ttl_seconds=self.item_ttl_seconds,
                user_id=self._user_id,
                **kwargs,
            )
        )

    def client(self, name: str, partition: str) -> StateStoreLike:
        """The cached client of a store already opened (checked) by this core; no I/O.

        A client dropped from the bounded cache is built again: building one sends nothing.
        """
        key = (name, partition)
        store = self._stores.get(key)
        if store is not None:
            return store
        if self.kind == "local-sqlite":
            from ._local_store import EngineStore, default_engine

            store = EngineStore(default_engine(), name, user=partition)
        elif self.kind == "local-sdk":
            from ._sdk_local import LockedSdkStore

            store = LockedSdkStore.bind(
                name, user_isolation=True, item_ttl_seconds=self.item_ttl_seconds
            )
        else:
            store = FoundryStateStore(
                name,
                self._client_credential(),
                self._endpoint,
                user_isolation=True,
                item_ttl_seconds=self.item_ttl_seconds,
                user_id=self._user_id,
                **self._pipeline_kwargs(),
            )
        self._stores.put(key, store)
        return store

    def _client_credential(self) -> AsyncTokenCredential:
        """The one credential every hosted client of this core uses.

        The one passed in, else one ``DefaultAzureCredential`` created on first use and closed
        by :meth:`close` (the SDK would build one per client: one per thread served).
        """
        if self._credential is not None:
            return self._credential
        if self._owned_credential is None:
            try:
                from azure.identity.aio import DefaultAzureCredential
            except ImportError as exc:  # pragma: no cover - azure-identity is a dependency
                raise FoundryCheckpointError(
                    "hosted mode without credential= uses DefaultAzureCredential: install "
                    "azure-identity, or pass an async credential"
                ) from exc
            self._owned_credential = DefaultAzureCredential()
        return self._owned_credential

    def _pipeline_kwargs(self) -> dict[str, Any]:
        """The client keyword arguments, with one transport shared by every client of the core.

        Left to itself each ``FoundryStateStore`` builds its own aiohttp session (a connection
        pool per store: descriptors grow with the threads served), and azure-core turns a CA-file
        ``connection_verify`` into a new SSL context per request (a new TLS connection each
        time). So the core makes one session, with one SSL context built from
        ``connection_verify``/``connection_cert``, and hands every client the same transport,
        which it does not own: closing a client leaves it open; :meth:`close` closes it. A
        ``transport=`` passed by the caller is used as given.

        The SDK builds its retry policy itself and ignores azure-core's ``retry_*`` client
        options, so those are taken out here and applied per request by a
        :class:`RetrySettingsPolicy` placed before the SDK's policy (``per_call_policies``).
        """
        kwargs = dict(self._client_kwargs)
        retry: dict[str, Any] = {k: kwargs.pop(k) for k in RETRY_OPTIONS if k in kwargs}
        if retry:
            extra = kwargs.pop("per_call_policies", None)
            chain = (
                [] if extra is None else list(extra) if isinstance(extra, list | tuple) else [extra]
            )
            kwargs["per_call_policies"] = [RetrySettingsPolicy(retry), *chain]
        if "transport" in kwargs:
            return kwargs
        if self._transport is None:
            import ssl

            import aiohttp
            from azure.core.pipeline.transport import AioHttpTransport

            verify = kwargs.get("connection_verify", True)
            cert = kwargs.get("connection_cert")
            context: ssl.SSLContext | bool
            if verify is False and not cert:
                context = False
            else:
                context = ssl.create_default_context(
                    cafile=verify if isinstance(verify, str) else None
                )
                if verify is False:
                    context.check_hostname = False
                    context.verify_mode = ssl.CERT_NONE
                if cert:
                    context.load_cert_chain(*((cert,) if isinstance(cert, str) else cert))
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=context),
                trust_env=bool(kwargs.get("use_env_settings", True)),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
            )
            transport_kwargs = {
                k: v
                for k, v in kwargs.items()
                if k not in ("connection_verify", "connection_cert", "per_call_policies")
            }
            self._transport = AioHttpTransport(
                session=self._session, session_owner=False, **transport_kwargs
            )
        kwargs.pop("connection_verify", None)
        kwargs.pop("connection_cert", None)
        kwargs["transport"] = self._transport
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
            scope = await self.scope(scope_id, create=False)
            if scope is None:
                continue
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
