"""The shared core of every adapter: store registry, per-request identity, spill namespaces.

An adapter owns one :class:`CheckpointCore`. It maps a scope (a LangGraph thread id, a MAF
context id) to one store under the adapter's prefix, opens each store once per process with
``user_isolation=True`` (refusing an existing store without it), keeps the spill namespace of
each (user, scope) in that user's own isolated store, and runs all I/O on a private loop.

**One object, many end users.** A Foundry-hosted agent is one process serving many users; the
platform says whose request it is through the request context
(``azure.ai.agentserver.core.get_request_context()``, set by the hosts from the inbound
headers ``x-agent-foundry-call-id`` and ``x-agent-user-id``). Everything the core remembers
between calls that depends on the partition (the spill namespace and TTL touch of a scope,
index registration, the embedded store's client) and the adapters' own caches (the LangGraph
saver's heads) are keyed by one :class:`Caller`, captured once per call by
:meth:`CheckpointCore.capture` (from the backend's rule): the one place that decides who a call
is for.

**What the service partitions by.** The SDK forwards the request context's call id on every
store call, and the service resolves the caller, hence the isolation partition, from it.
Without a call id the service partitions by the caller's token (the agent's managed
identity). ``user_id=`` on the client sends ``x-ms-user-id``, which the SDK's own TypeSpec
(``DelegatedUserIdHeader``) says is "honored only for trusted (S2S/managed-identity) callers;
ignored otherwise (falls back to hash(oid, tid))". So, in hosted mode:

1. within a request (the context carries a call id): the context's ``user_id``, else its
   ``call_id``. Both come from the same inbound request and name the same end user, whatever
   ``user_id=`` the adapter was built with (the service resolves the call id first). The user
   id goes first because it is stable across that user's requests, so a cache filled in one
   request serves the next; the call id changes with every request, so a key built from it
   is reused only within that request (correct, never shared, merely colder);
2. outside a request: the adapter's ``user_id=``, which hosted mode accepts only with
   ``trusted_delegation=True`` (the deployer's statement that the service honours it for this
   agent; otherwise construction raises
   :class:`~foundry_checkpoint.errors.UntrustedDelegationError`);
3. else the process's own identity (its token).

A context with a user id but no call id (a test, a host run off the platform) forwards nothing
the service can see, so it counts as "outside a request".

**Captured once, at the call boundary.** Who a call is for is decided once per call, where it
crosses from the adapter's public method into the core (:meth:`CheckpointCore.run` /
:meth:`CheckpointCore.arun`): :meth:`CheckpointCore.capture` reads the request context once
(or takes the one the adapter was handed, as Foundry hosting hands MAF its
``platform_context``), snapshots it, and derives the :class:`Caller` from that snapshot by the
backend's rule. The pair is one :class:`Call`. Every partition and cache key of the call comes
from its ``Caller``; nothing on the private loop reads the request context to decide who a call
is for.

**How the call's identity travels to the private loop.** All store I/O runs on the core's own
loop thread (:mod:`._loop`). ``run``/``arun`` do not hand over the adapter's coroutine itself
but :func:`_bound` around it, which, as the first thing the task does, installs the
:class:`Call` in two context variables of the task: the core's own (``_CALL``: what
:meth:`CheckpointCore.caller` answers there) and the SDK's request context, set to the
snapshot (the SDK's hosted client reads the call id it forwards as
``x-agent-foundry-call-id`` from the request context of the task that makes the store call).
The task runs in a copy of a context (the one ``loop.call_soon_threadsafe`` copies from the
calling thread when it hands the task over), so both settings are task-local: they reach every
store call the task makes (and tasks it starts, which copy its context), never the loop thread
or another call. So the service, which partitions by the call id the SDK sends, and every
client-side cache, keyed by the ``Caller``, follow one snapshot, even if the caller's context
changes while the call runs. A coroutine started on the loop any other way (a callback, a task
made outside ``run``/``arun``) has no ``Call``: a request's identity must never be read there.

**Local mode** has no service to resolve a call id. The embedded store's partition (and the
cache key, the same value) is the context's ``user_id``, else ``user_id=``, else ``"local"``.
A context with only a call id names no user locally: it changes nothing (``user_id=``, else
``"local"``), since partitioning by a value that changes with every request would lose each
thread at the next turn.

**Bounded resources.** In hosted mode a core holds one credential and one transport shared by
every store client (:class:`~._store._hosted.HostedClients`, closed by ``close()``), at most
:data:`MAX_OPEN_STORES` store clients (least recently used first out; a client holds no
connection of its own) and at most :data:`MAX_SCOPES` per-(user, scope) entries, however many
threads a process serves. Reads of a scope whose store does not exist do not create it (one
store GET); the first write does (one create: the backend remembers the GET that found none).

**The backend** is one object (:class:`~._store._backend.Backend`), chosen once per core by
:func:`~._store._backends.choose_backend`: it opens and binds the clients, says who a call is
for (the rules above are its :meth:`~._store._backend.Backend.caller`), where the data lives,
whether values are compressed and where large values go. Nothing here asks which backend it is.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, cast, overload

from azure.ai.agentserver.core import (
    FoundryAgentRequestContext,
    get_request_context,
    set_request_context,
)
from azure.ai.agentserver.core.storage import JSONObject

from . import _codec
from ._aio import read_newest, together
from ._chunks import ChunkSpill
from ._gc import GcReport, collect_garbage
from ._loop import LoopThread
from ._lru import Lru
from ._options import StoreOptions
from ._store._backend import SELF, Backend, Caller
from ._store._backends import LocalBackend, choose_backend, open_isolated
from ._store._listing import all_keys, create_item, newest_second
from ._store._naming import (
    check_identifier,
    checked_spill_namespace,
    item_key,
    store_name,
    unescape,
)
from ._store._protocol import (
    ItemKey,
    ItemRef,
    RanksByTag,
    StateStoreLike,
    StoredItem,
    WritesSoon,
)
from .errors import (
    FoundryCheckpointError,
    MissingBlobError,
)

if TYPE_CHECKING:
    from .spill import SpillStore

__all__ = [
    "MAX_OPEN_STORES",
    "MAX_SCOPES",
    "Backend",
    "Call",
    "CheckpointCore",
    "GcReport",
    "LocalBackend",
    "Scope",
    "Caller",
    "newest_item",
]

T = TypeVar("T")

_META_KEY: Final = item_key("m", "spill")
_DEFAULT_INDEX_KEY: Final = item_key("d")
"""The index key of the default (None) scope."""
_META_TAGS: Final = {"kind": "meta"}
_INDEX_NAME_PART: Final = "index"
"""The index store's name under the prefix."""
_INDEX_TAGS: Final = {"kind": "scope"}
DEFAULT_GC_GRACE_SECONDS: Final = 24 * 3600
#: Store clients a core keeps open at most (least recently used first out).
MAX_OPEN_STORES: Final = 256
#: Per-(user, scope) entries (spill namespace, TTL touch, index registration) a core keeps.
MAX_SCOPES: Final = 2048
#: Store names a core remembers as checked (exists, isolated): reopening one needs no request.
_MAX_CHECKED: Final = 8192


@dataclass(frozen=True, slots=True)
class Call:
    """One call's identity, captured once at its boundary (:meth:`CheckpointCore.capture`).

    ``context`` is a snapshot of the request context the call was made in (the SDK forwards
    its call id on every store call the call makes); ``caller`` is derived from it by the
    backend's rule and keys every partition and cache of the call.

    Example:
        >>> from azure.ai.agentserver.core import FoundryAgentRequestContext
        >>> call = Call(Caller("call:c-1"), FoundryAgentRequestContext(call_id="c-1"))
        >>> call.caller.key, call.context.call_id
        ('call:c-1', 'c-1')
    """

    caller: Caller
    context: FoundryAgentRequestContext


_CALL: ContextVar[Call | None] = ContextVar("foundry_checkpoint_call", default=None)
"""The :class:`Call` of the task running on a core's loop (set by :func:`_bound` only)."""


def _snapshot(context: FoundryAgentRequestContext) -> FoundryAgentRequestContext:
    """A copy of ``context`` (its fields may be assigned later; the call keeps what it saw)."""
    if context.call_id is None and context.user_id is None and context.session_id is None:
        return context
    return FoundryAgentRequestContext(
        call_id=context.call_id, user_id=context.user_id, session_id=context.session_id
    )


async def _bound(call: Call, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` with ``call`` installed in the task's context (see the module docstring).

    The task runs in its own copy of a context, so neither setting outlives it or leaks into
    the loop thread.
    """
    _CALL.set(call)
    set_request_context(call.context)
    return await coro


async def newest_item(
    store: StateStoreLike,
    tags: Mapping[str, str],
    pick: Callable[[list[ItemKey]], ItemKey],
    *,
    rank: str | None = None,
) -> tuple[ItemKey, StoredItem] | None:
    """The newest item carrying ``tags``, listed again when it went before it was read.

    Args:
        store: the store to look in.
        tags: the tags the item carries.
        pick: chooses the newest among :func:`~._store._listing.newest_second`'s keys (by the
            caller's own monotonic key).
        rank: a tag whose greatest value (in string order) marks the newest items. A store
            that ranks by tag (the embedded one) then gives ``pick`` just the items with that
            value, in one call, however many items share the newest second.

    Returns:
        The chosen key and its item, or None when there is none.
    """

    async def find() -> ItemKey | None:
        if rank is not None and isinstance(store, RanksByTag):
            candidates = list(await store.greatest(rank, tags=tags))
        else:
            candidates = await newest_second(store, tags)
        return pick(candidates) if candidates else None

    async def read(key: ItemKey) -> StoredItem | None:
        return await store.get_item(key.key)

    return await read_newest(find, read)


@functools.cache
def _writes_soon(client: type) -> bool:
    """Whether a client class takes writes from any loop (``WritesSoon``), asked once per
    class (a protocol check on an object costs more than a small write saves)."""
    return issubclass(client, WritesSoon)


class Scope:
    """One scope's store, its spill namespace, and the codec bound to both.

    A scope belongs to one :class:`Caller` (``caller``; ``user`` is its key): what it remembers
    (the spill namespace, when it last refreshed the TTL) came from that caller's partition.
    Adapters keep item keys out of the ``m/`` family, which the core reserves for its own
    metadata (the spill namespace item).
    """

    def __init__(
        self,
        core: CheckpointCore,
        scope_id: str | None,
        name: str,
        *,
        caller: Caller | None = None,
    ) -> None:
        self.core = core
        self.scope_id = scope_id
        self.caller = caller if caller is not None else Caller(SELF)
        self.user = self.caller.key
        self._name = name
        self._pinned: StateStoreLike | None = None
        self._namespace: str | None = None
        self._touched = 0.0
        self._lock = asyncio.Lock()
        self._chunks = ChunkSpill(lambda: self.store)

    @property
    def name(self) -> str:
        """The store name."""
        return self._name

    @property
    def store(self) -> StateStoreLike:
        """The store client, from the core's bounded client cache (the scope holds none)."""
        if self._pinned is not None:
            return self._pinned
        return self.core.client(self._name, self.caller.partition)

    @store.setter
    def store(self, client: StateStoreLike) -> None:
        """Pin a client for this scope (a wrapper around the core's, say)."""
        self._pinned = client

    @property
    def spill(self) -> SpillStore | None:
        """Where this scope's values over the item limit go: the core's spill store when one
        is configured, else (hosted mode) chunk items of the scope's own store."""
        return self._chunks if self.chunked else self.core.spill

    @property
    def chunked(self) -> bool:
        """Whether large values go into the scope's own store (no spill store configured)."""
        return self.core.spill is None and self.core.backend.chunks_in_store

    def where(self, key: str) -> str:
        """A human description of an item for error messages: the scope, never the store
        name or the key (a host may show the message to its client; see :meth:`located`)."""
        return f"{self.core.scope_word} {self.scope_id!r}"

    def located(self, error: FoundryCheckpointError, key: str | None) -> FoundryCheckpointError:
        """``error`` with this scope's store and ``key`` recorded for logs (when it has none)."""
        if error.store is None:
            error.store, error.key = self.name, key
        return error

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
                    await self.core.register(self.scope_id, self.caller)
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
        """The item value for ``payload``; spills to the spill store (blob first) when too big.

        The spill namespace is looked up (and created on first need) only when the value
        spills.
        """
        try:
            return await _codec.encode(
                payload,
                key=key,
                tags=tags,
                extra=extra,
                spill=self.spill,
                namespace=self._spill_namespace,
                where=self.where(key),
                compress=self.core.backend.compresses,
            )
        except FoundryCheckpointError as error:
            self.located(error, key)
            raise

    async def _spill_namespace(self) -> str:
        """The spill namespace, created on first need (for a value that spills)."""
        ns = await self.namespace(create=True)
        if ns is None:  # the namespace item vanished, or holds no namespace
            raise FoundryCheckpointError(
                f"{self.where(_META_KEY)} holds no spill namespace (it was deleted or changed "
                "outside foundry-checkpoint while this value was written); nothing was written"
            )
        return ns

    async def decode(self, value: Mapping[str, Any], *, key: str) -> bytes:
        """The payload of an item value written by :meth:`encode`."""
        ns = await self.namespace(create=False) if _codec.spilled_digest(value) else None
        where = self.where(key)
        try:
            try:
                return await _codec.decode(value, spill=self.spill, namespace=ns, where=where)
            except MissingBlobError:
                if ns is None or not self._chunks_behind():
                    raise
                # Written before a spill store was configured: its chunks are in this store.
                return await _codec.decode(value, spill=self._chunks, namespace=ns, where=where)
        except FoundryCheckpointError as error:
            self.located(error, key)
            raise

    async def read_blob(self, spill: SpillStore, namespace: str, digest: str) -> bytes:
        """Blob ``digest`` from ``spill`` (this scope's :attr:`spill`), or, in hosted mode with a
        spill store configured, from the chunks this scope's store kept before there was one.

        Raises:
            MissingBlobError: in neither place (the spill store's own error).
        """
        try:
            try:
                return await spill.get(namespace, digest)
            except MissingBlobError:
                if not self._chunks_behind():
                    raise
                chunks = self._chunks
                try:
                    return await chunks.get(namespace, digest)
                except MissingBlobError:
                    pass
                raise
        except FoundryCheckpointError as error:
            self.located(error, None)
            raise

    def _chunks_behind(self) -> bool:
        """Whether values may also sit in chunks written before a spill store was configured."""
        return self.core.backend.chunks_in_store and self.core.spill is not None

    def _touch_due(self) -> bool:
        """Whether :meth:`touch` has anything to send (first write here, or the TTL is due)."""
        ttl = self.core.item_ttl_seconds
        touched = self._touched
        return not touched or (ttl != -1 and time.monotonic() - touched >= ttl / 4)

    async def touch(self) -> None:
        """Keep the scope's metadata and index entry alive under a TTL (cheap: rate-limited).

        The index entry and the metadata read are in flight together (one round trip); with
        no TTL (``-1``) the metadata is not read at all, since nothing of it needs refreshing.
        A touch that fails is not counted: the next one tries again.
        """
        if not self._touch_due():
            return
        ttl = self.core.item_ttl_seconds
        self._touched = time.monotonic()
        try:
            if ttl == -1:
                await self.core.register(self.scope_id, self.caller)
                return
            _, item = await together(
                self.core.register(self.scope_id, self.caller), self.store.get_item(_META_KEY)
            )
        except BaseException:
            self._touched = 0.0
            raise
        if item is not None:
            await self.store.set_item(_META_KEY, dict(item.value), tags=_META_TAGS)
            ns = item.value.get("ns") if item.value else None
            if self.chunked and isinstance(ns, str):
                # chunks a live item references outlive the TTL although none is written again
                await self._chunks.refresh(ns, time.time() - ttl / 2)

    async def put(
        self, key: str, value: JSONObject, *, tags: Mapping[str, str] | None = None
    ) -> ItemRef:
        """Write item ``key`` and :meth:`touch` the scope, the two in flight together.

        One round trip instead of two on the first write of a scope in a process (and each
        time the TTL is due), none added otherwise. The item is committed when this returns;
        if either fails, the other is cancelled and awaited and the first error is raised
        (the item may then be written or not, as with any write that fails). The index entry
        may land first: a scope whose first write then failed may be listed by ``scope_ids``
        with no items (a listing of its items finds none), until its next write succeeds.
        """
        if not self._touch_due():  # the common case: no task pair for a touch with nothing to do
            return await self.store.set_item(key, value, tags=tags)
        ref, _ = await together(self.store.set_item(key, value, tags=tags), self.touch())
        return ref

    def put_now(
        self,
        key: str,
        payload: bytes,
        *,
        tags: Mapping[str, str] | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> Awaitable[ItemRef] | None:
        """:meth:`encode` and :meth:`put` started at once, on the calling thread, when nothing
        in them has to wait: the store takes writes from any loop (``WritesSoon``), its client
        is cached, no touch is due, and the value is small enough to encode inline.

        Called from the adapter's caller, off the private loop: a write skips both hops to that
        loop and back. Nothing here changes the core's caches (it only reads them). The write
        goes on when the caller stops waiting, as a shielded one does; the exit of the
        interpreter waits for it.

        Returns:
            What to await for the write's reference; None when a condition does not hold
            (nothing was started: run :meth:`encode` and :meth:`put` on the private loop).
        """
        store = self._pinned or self.core.cached_client(self._name, self.caller.partition)
        if store is None or not _writes_soon(type(store)) or self._touch_due():
            return None
        compress = self.core.backend.compresses
        value = _codec.encode_now(payload, key=key, tags=tags, extra=extra, compress=compress)
        if value is None:
            return None
        return cast(WritesSoon, store).put_soon(key, value, tags=tags)

    async def keys(self, tags: Mapping[str, str] | None = None) -> list[ItemKey]:
        """Every key of this scope matching ``tags`` (all pages)."""
        return await all_keys(self.store, tags)

    async def delete(self, key: str) -> bool:
        """Delete item ``key`` and the blob its value spilled to, if any; False when absent."""
        item = await self.store.get_item(key)
        if item is None:
            return False
        await self.store.delete_item(key)
        digest = _codec.spilled_digest(item.value)
        spill = self.spill
        if digest is not None and spill is not None:
            namespace = await self.namespace(create=False)
            if namespace is not None:
                await spill.delete(namespace, [digest])
        return True

    async def purge(self) -> None:
        """Delete every item this user has in the scope, its spilled blobs, and its index entry."""
        ns = await self.namespace(create=False)
        for key in await self.keys():
            if key.key != _META_KEY:
                await self.store.delete_item(key.key)
        spill = self.core.spill  # chunks are items of this store: deleted above
        if ns is not None and spill is not None:
            await spill.delete_namespace(ns)
        await self.store.delete_item(_META_KEY)
        self._namespace = None
        self._touched = 0.0
        await self.core.unregister(self.scope_id, self.caller)


class CheckpointCore:
    """One backend, one private loop, and a registry of scopes for one adapter object.

    ``backend`` is chosen once from the options (:func:`~._store._backends.choose_backend`);
    ``kind`` is its name (``"local-sqlite"``, the embedded default; ``"local-sdk"``, the SDK's
    own local mode under a file lock; ``"hosted"``, the Foundry service), for display only.
    """

    def __init__(self, options: StoreOptions, *, scope_word: str) -> None:
        self.options = options
        self.prefix = options.store_prefix
        self.scope_word = scope_word
        self.item_ttl_seconds = options.item_ttl_seconds
        self.backend: Backend = choose_backend(options.local_backend, options)
        self.kind: str = self.backend.kind
        self.location: str = self.backend.location
        self.spill: SpillStore | None = (
            options.spill if options.spill is not None else _default_spill(self.backend)
        )
        self._loop = LoopThread(f"foundry-checkpoint-{self.prefix}")
        self._scopes: Lru[tuple[str, str | None], Scope] = Lru(MAX_SCOPES)
        self._stores: Lru[tuple[str, str], StateStoreLike] = Lru(MAX_OPEN_STORES)
        self._checked: Lru[str, bool] = Lru(_MAX_CHECKED)
        self._opening: dict[tuple[str, str], asyncio.Future[StateStoreLike | None]] = {}
        self._registered: Lru[tuple[str, str | None], float] = Lru(MAX_SCOPES)

    def describe(self) -> str:
        """``kind`` and where the data lives, for ``repr()``."""
        return f"backend={self.kind!r}, location={self.location!r}, store_prefix={self.prefix!r}"

    # -- the loop bridge -------------------------------------------------------------------
    def run(self, coro: Coroutine[Any, Any, T], *, call: Call | None = None) -> T:
        """Run ``coro`` on the private loop, blocking the calling thread.

        ``call``: the identity the adapter captured for this call (default: captured now,
        from the calling thread's request context); ``coro`` sees it as the current one.
        """
        bound = _bound(call if call is not None else self.capture(), coro)
        try:
            return self._loop.run(bound)
        except RuntimeError:
            coro.close()  # refused before it started (a call from the loop itself): no warning
            raise

    async def arun(
        self, coro: Coroutine[Any, Any, T], *, shield: bool = False, call: Call | None = None
    ) -> T:
        """Run ``coro`` on the private loop, awaited from the caller's loop.

        ``shield=True`` (the writes): a cancelled caller stops waiting, the write goes on.
        ``call`` as in :meth:`run`.
        """
        bound = _bound(call if call is not None else self.capture(), coro)
        try:
            return await self._loop.arun(bound, shield=shield)
        except RuntimeError:
            coro.close()
            raise

    def close(self) -> None:
        """Let the calls in flight finish (at most ``FLUSH_SECONDS``, 10 s), close every client
        and stop the loop. Idempotent; fine on an object never used."""
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
        await self.backend.aclose()
        if self.spill is not None:
            await self.spill.aclose()

    # -- who a call is for --------------------------------------------------------------------
    def capture(self, context: FoundryAgentRequestContext | None = None) -> Call:
        """The :class:`Call` of a call starting now: the one place a request context is read.

        On the private loop, inside a call, the call's own :class:`Call` (nothing is read).

        Args:
            context: the request context the adapter was handed for this call (Foundry
                hosting's ``platform_context``); None: the calling thread's current one.

        Returns:
            A snapshot of the context and the :class:`Caller` this core's backend derives from
            it and the adapter's ``user_id=``.

        Example:
            >>> from azure.ai.agentserver.core import FoundryAgentRequestContext
            >>> from foundry_checkpoint._options import StoreOptions
            >>> core = CheckpointCore(StoreOptions("docs", user_id="ann"), scope_word="thread")
            >>> core.capture().caller
            Caller(key='user:ann', partition='ann')
            >>> core.capture(FoundryAgentRequestContext(call_id="c", user_id="bo")).caller.key
            'user:bo'
        """
        if context is None:
            running = _CALL.get()
            if running is not None:
                return running
            context = get_request_context()
        snapshot = _snapshot(context)
        return Call(self.backend.caller(self.options.user_id, snapshot), snapshot)

    def caller(self) -> Caller:
        """Who the current call is for: on the private loop, the :class:`Call`'s captured at
        the call's boundary; elsewhere, captured now (:meth:`capture`)."""
        return self.capture().caller

    def user_key(self) -> str:
        """The cache key of :meth:`caller`."""
        return self.caller().key

    # -- stores (call on the private loop) --------------------------------------------------
    def name_for(self, scope_id: str | None) -> str:
        """The store name of a scope (thread or context id; None: the prefix's default store),
        the id checked first (:func:`~._store._naming.check_identifier`)."""
        if scope_id is not None:
            check_identifier(scope_id, self.scope_word)
        return self._name_of(scope_id)

    def _name_of(self, scope_id: str | None) -> str:
        """The store name of a scope id already checked."""
        if scope_id is None:
            return store_name(self.prefix, "default")
        return store_name(self.prefix, "t", scope_id)

    @overload
    async def scope(self, scope_id: str | None, *, indexed: bool = True) -> Scope: ...
    @overload
    async def scope(
        self, scope_id: str | None, *, create: Literal[True], indexed: bool = True
    ) -> Scope: ...
    @overload
    async def scope(
        self, scope_id: str | None, *, create: bool, indexed: bool = True
    ) -> Scope | None: ...

    async def scope(
        self, scope_id: str | None, *, create: bool = True, indexed: bool = True
    ) -> Scope | None:
        """The current user's :class:`Scope` of ``scope_id``, opening its store on first use.

        ``scope_id`` was checked where it entered the adapter (``check_identifier``, under the
        adapter's own name for it: ``thread_id``, ``context_id``...), once; it is not checked
        again here. With ``create=False`` (reads) a store that does not exist is not created:
        None. With ``create=True`` (a write follows, whose :meth:`Scope.touch` registers the
        scope in the index) the index store is opened together with the scope's own, unless
        ``indexed=False`` says the scope's writes never register it.
        """
        caller = self.caller()
        key = (caller.key, scope_id)
        found = self._scopes.get(key)
        if found is None:
            name = self._name_of(scope_id)
            opened: StateStoreLike | None
            if create and indexed and not self._open_already(_INDEX_NAME_PART, caller):
                # A write follows, and it registers the scope in the index: open both stores
                # at once (the index entry itself is written later, by the write's touch).
                opened, _ = await together(
                    self.open(name, caller=caller), self.index(caller=caller)
                )
            else:
                opened = await self.open(name, create=create, caller=caller)
            if opened is None:
                return None
            found = self._scopes.get(key)
            if found is None:
                found = Scope(self, scope_id, name, caller=caller)
                self._scopes.put(key, found)
        return found

    def cached_scope(self, scope_id: str | None, call: Call) -> Scope | None:
        """The :class:`Scope` of ``scope_id`` for ``call`` when this core already opened it;
        changes no cache (safe off the private loop: see :meth:`Scope.put_now`)."""
        return self._scopes.peek((call.caller.key, scope_id))

    def _open_already(self, part: str, caller: Caller) -> bool:
        """Whether the store ``part`` names under the prefix is open (or checked) for
        ``caller``: opening it again sends nothing."""
        name = store_name(self.prefix, part)
        return self._stores.get((name, caller.partition)) is not None or bool(
            self._checked.get(name)
        )

    @overload
    async def index(self, *, caller: Caller | None = None) -> StateStoreLike: ...
    @overload
    async def index(
        self, *, create: bool, caller: Caller | None = None
    ) -> StateStoreLike | None: ...

    async def index(
        self, *, create: bool = True, caller: Caller | None = None
    ) -> StateStoreLike | None:
        """The store that lists this user's scopes under the prefix (None: absent, not created)."""
        return await self.open(
            store_name(self.prefix, _INDEX_NAME_PART), create=create, caller=caller
        )

    async def register(self, scope_id: str | None, caller: Caller | None = None) -> None:
        """Record ``scope_id`` in the caller's index (refreshing its TTL); cheap after the
        first call per caller. ``caller``: the scope's own (default: the current one)."""
        who = caller if caller is not None else self.caller()
        ttl = self.item_ttl_seconds
        key = (who.key, scope_id)
        last = self._registered.get(key)
        now = time.monotonic()
        if last is not None and (ttl == -1 or now - last < ttl / 4):
            return
        index = await self.index(caller=who)
        await index.set_item(_index_key(scope_id), {"id": scope_id}, tags=_INDEX_TAGS)
        self._registered.put(key, now)

    async def unregister(self, scope_id: str | None, caller: Caller | None = None) -> None:
        """Remove ``scope_id`` from the caller's index (default: the current caller's)."""
        who = caller if caller is not None else self.caller()
        self._registered.pop((who.key, scope_id))
        index = await self.index(create=False, caller=who)
        if index is not None:
            await index.delete_item(_index_key(scope_id))

    async def scope_ids(self) -> list[str | None]:
        """Every scope id recorded in this user's index (None stands for the default store)."""
        index = await self.index(create=False, caller=self.caller())
        if index is None:
            return []
        ids: list[str | None] = []
        for key in await all_keys(index, _INDEX_TAGS):
            if key.key == _DEFAULT_INDEX_KEY:
                ids.append(None)
            elif (scope_id := _scope_of_key(key.key)) is not None:
                ids.append(scope_id)
            elif (item := await index.get_item(key.key)) is not None:
                # A hashed key (an id too long to escape into one): the item names it.
                value = item.value.get("id")
                ids.append(value if isinstance(value, str) else None)
        return ids

    @overload
    async def open(self, name: str, *, caller: Caller | None = None) -> StateStoreLike: ...
    @overload
    async def open(
        self, name: str, *, create: bool, caller: Caller | None = None
    ) -> StateStoreLike | None: ...

    async def open(
        self, name: str, *, create: bool = True, caller: Caller | None = None
    ) -> StateStoreLike | None:
        """Open the store ``name`` once per core, isolated, and cache the client.

        ``create=True`` gets or creates it; ``create=False`` only looks (one store GET) and
        answers None when it does not exist, caching nothing. ``caller`` (default: the current
        one) picks the embedded store's partition.
        """
        who = caller if caller is not None else self.caller()
        key = (name, who.partition)
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
            store = await open_isolated(self.backend, name, key[1], create=create)
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

    def cached_client(self, name: str, partition: str) -> StateStoreLike | None:
        """The cached client of a store, or None; changes no cache (safe off the loop)."""
        return self._stores.peek((name, partition))

    def client(self, name: str, partition: str) -> StateStoreLike:
        """The cached client of a store already opened (checked) by this core; no I/O.

        A client dropped from the bounded cache is built again: building one sends nothing.
        """
        key = (name, partition)
        store = self._stores.get(key)
        if store is not None:
            return store
        store = self.backend.bind(name, partition)
        self._stores.put(key, store)
        return store

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
        return await collect_garbage(self, referenced, grace_seconds=grace_seconds, dry_run=dry_run)


def _index_key(scope_id: str | None) -> str:
    return _DEFAULT_INDEX_KEY if scope_id is None else item_key("s", scope_id)


def _scope_of_key(key: str) -> str | None:
    """The scope id an index key spells out (None when hashed: the item holds the id).

    Example:
        >>> _scope_of_key(_index_key("thread 1")), _scope_of_key(_index_key("x" * 200))
        ('thread 1', None)
    """
    kind, _, escaped = key.partition("/")
    return unescape(escaped) if kind == "s" else None


def _default_spill(backend: Backend) -> SpillStore | None:
    """The blob container the environment names, else the backend's local spill folder."""
    from .spill import LocalSpill
    from .spill._env import blob_env_configured

    if blob_env_configured():
        from .spill import AzureBlobSpill

        return AzureBlobSpill.from_env()
    root = backend.spill_root
    return None if root is None else LocalSpill(root)
