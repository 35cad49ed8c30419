"""``FoundryStore``: LangGraph's long-term memory (``BaseStore``) on Foundry's state store.

Design, in short (the mapping is in :mod:`._layout`):

* all memory of one user is one store, ``<store_prefix>/default``, isolated per user; one item
  per memory, its key built from the namespace and key, its namespace prefixes in tags;
* ``get`` is one store call, ``delete`` one (plus the vector page's update when indexed), ``put``
  one (plus, the first time this process writes into a namespace, the namespace index's entry
  (:mod:`._namespaces`), and the vector page's update when indexed (:mod:`._vectors`));
* ``search`` without a query lists keys by tags (the prefix, the declared tag fields' equality),
  skips ``offset`` keys from the listing alone and reads only the page: its cost grows with
  ``offset`` and ``limit``, not with the items under the prefix. A filter the tags cannot answer
  is evaluated on each item read, so its cost grows with the items examined. A query goes to the
  vector index;
* ``list_namespaces`` walks the namespace index, each candidate confirmed live by one short key
  listing (its prefix or namespace tag);
* TTL (minutes, LangGraph's): the expiry is kept in the value (``exp``) and in tag ``x``, so a
  listing skips expired items without reading them; a read that refreshes rewrites both
  (``if_match``: a lost race with a writer is ignored); :meth:`FoundryStore.sweep_ttl` deletes
  what expired. The state store's own per-store TTL (``item_ttl_seconds``) is an outer bound
  renewed only by writes, off by default;
* reads of a batch see the state before its writes, independent operations run concurrently;
* one async implementation: sync faces block on the core's private loop, async ones await it,
  with the caller's identity captured once per call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

from azure.ai.agentserver.core.storage import (
    FoundryStorageNotFoundError,
    FoundryStoragePreconditionError,
    JSONObject,
)
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from foundry_checkpoint.adapter import (
    DEFAULT_GC_GRACE_SECONDS,
    MAX_PAGE,
    Call,
    CoreOwner,
    GcReport,
    ItemKey,
    LocalBackend,
    Scope,
    StoredItem,
    bounded,
    check_text,
    new_core,
    spilled_digest,
    unescape,
)
from foundry_checkpoint.errors import CorruptPayloadError, InvalidArgumentError

from . import _layout
from ._filter import matches, split
from ._items import Record, decode, dump, encode, parse, timestamp
from ._layout import (
    EXPIRY_TAG,
    KIND_TAG,
    MAX_PREFIX_TAGS,
    MAX_TAG_FIELDS,
    MEMORY_KIND,
    NAMESPACE_TAG,
    expired,
    expiry,
    expiry_tag,
    field_tag,
    may_have_expired,
    memory_key,
    memory_tags,
    memory_value,
    prefix_tag,
    prefix_tag_key,
)
from ._namespaces import HasItems, NamespaceIndex

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from foundry_checkpoint.spill import SpillStore

    from ._vectors import Readback, VectorIndex

__all__ = ["FoundryStore"]

_SCOPE: Final = None
"""Every memory of a user lives in the core's default scope (``<store_prefix>/default``)."""
_FIELD_RE_CHARS: Final = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
)
_MAX_FIELD: Final = 62  # tag keys are at most 64 characters, "f." included
_READ_CHUNK: Final = 16
"""Items read at once while a filter is evaluated on read (at least)."""
_LIVENESS_PAGE: Final = 5
"""Keys the first page of a liveness check lists (most answer from the first key)."""


def _check_tag_fields(tag_fields: object) -> tuple[str, ...]:
    if isinstance(tag_fields, str) or not isinstance(tag_fields, Iterable):
        raise InvalidArgumentError(
            f"tag_fields must be a sequence of field names, got {tag_fields!r}; "
            "e.g. tag_fields=('kind',)"
        )
    fields = tuple(tag_fields)
    for name in fields:
        if (
            not isinstance(name, str)
            or not 1 <= len(name) <= _MAX_FIELD
            or not set(name) <= _FIELD_RE_CHARS
        ):
            raise InvalidArgumentError(
                f"tag_fields entry {name!r} must be a top-level field name of 1-{_MAX_FIELD} "
                "characters of [A-Za-z0-9_.-] (it becomes a tag key); filter other fields "
                "without declaring them"
            )
    if len(set(fields)) != len(fields):
        raise InvalidArgumentError(f"tag_fields {fields!r} names a field twice")
    if len(fields) > MAX_TAG_FIELDS:
        raise InvalidArgumentError(
            f"tag_fields names {len(fields)} fields; at most {MAX_TAG_FIELDS} fit an item's 16 "
            "tags. Declare the ones filtered by equality most often; the rest are evaluated "
            "on read"
        )
    return fields


def _check_namespace(namespace: object, what: str, *, empty: bool) -> tuple[str, ...]:
    """``namespace`` as a tuple of labels (a list is taken too, as SqliteStore and
    PostgresStore take one), checked."""
    if isinstance(namespace, list):
        namespace = tuple(namespace)
    if not isinstance(namespace, tuple):
        raise InvalidNamespaceError(f"{what} must be a tuple of strings, got {namespace!r}")
    if not namespace and not empty:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    for label in namespace:
        if not isinstance(label, str) or not label:
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} found in {namespace}: labels must be "
                "non-empty strings."
            )
        if "." in label or "\x00" in label:
            # LangGraph's rule for every store (BaseStore's methods check it; SqliteStore and
            # PostgresStore check ops handed to batch too): "a.b" must not address ("a", "b")
            # in a store that joins labels with dots.
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} found in {namespace}: labels cannot contain "
                "periods ('.') or NUL bytes."
            )
        check_text(label, "namespace label")
    return namespace


def _check_ttl(ttl: object) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0:
        raise InvalidArgumentError(
            f"ttl must be a positive number of minutes or None (no expiry), got {ttl!r}"
        )
    return float(ttl)


def _check_ttl_config(ttl: object) -> TTLConfig | None:
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping):
        raise InvalidArgumentError(
            f"ttl must be a TTLConfig dict, e.g. {{'default_ttl': 60}}, got {ttl!r}"
        )
    known = {"default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired"}
    unknown = sorted(set(ttl) - known)
    if unknown:
        raise InvalidArgumentError(
            f"ttl has unknown keys {unknown}; TTLConfig takes {sorted(known)}"
        )
    _check_ttl(ttl.get("default_ttl"))
    interval = ttl.get("sweep_interval_minutes")
    if interval is not None and (
        isinstance(interval, bool) or not isinstance(interval, int | float) or not interval > 0
    ):
        raise InvalidArgumentError(
            f"ttl['sweep_interval_minutes'] must be a positive number or None, got {interval!r}"
        )
    return cast(TTLConfig, dict(ttl))


class _Candidate:
    """One listed key of a search: whether the tags alone say it belongs to the result."""

    __slots__ = ("key", "sure")

    def __init__(self, key: ItemKey, sure: bool) -> None:
        self.key = key
        self.sure = sure


class FoundryStore(CoreOwner, BaseStore):
    """LangGraph long-term memory (a ``BaseStore``) on Azure AI Foundry's durable state store.

    Pass it to ``builder.compile(store=...)`` (next to a
    :class:`~foundry_checkpoint.FoundryCheckpointer`); nodes and tools reach it as
    ``get_store()`` / ``runtime.store``. With no arguments it works everywhere: on a laptop the
    memory lives in the embedded SQLite store under ``AGENTSERVER_STATE_ROOT``; inside a
    Foundry-hosted agent in the hosted state store, isolated per end user (the request's own
    identity, captured once per call, as the checkpointer does: one store object serves every
    user). Sync (``put``/``get``/``search``...) and async (``aput``/``aget``...) faces both
    work from any thread or event loop.

    All memory of one user is one store, ``<store_prefix>/default``; each memory one item whose
    tags hold its namespace prefixes, so ``search`` under a prefix and ``get``/``put``/
    ``delete`` cost a few store calls however many memories exist (``docs/memory.md``
    has the mapping and the costs). Values are JSON objects; anything else raises
    :class:`~foundry_checkpoint.errors.NonJsonValueError` before anything is written. Values
    over the 1 MB item limit go to the spill store, as checkpoints do.

    Args:
        store_prefix: first segment of the store name (default ``"langgraph-store"``).
        credential: hosted mode only (default ``DefaultAzureCredential``).
        endpoint: hosted mode only (default ``FOUNDRY_PROJECT_ENDPOINT``).
        user_id: the end user to partition by outside a request (within a request the
            request's own identity always wins; hosted mode needs ``trusted_delegation=True``).
        trusted_delegation: declare this agent a trusted delegating caller.
        item_ttl_seconds: the state store's own idle expiry of items, fixed when the store is
            created and renewed only by writes (default ``-1``: long-term memory does not
            expire unless asked; use ``ttl=`` for LangGraph's per-item TTL).
        spill: where values over the item limit go (a
            :class:`~foundry_checkpoint.spill.SpillStore`).
        local_backend: ``"sqlite"`` (default) or ``"sdk"``.
        index: LangGraph's ``IndexConfig`` for semantic search.
        ttl: LangGraph's ``TTLConfig``: ``default_ttl`` (minutes), ``refresh_on_read``
            (default True), ``sweep_interval_minutes`` (for :meth:`start_ttl_sweeper`).
        tag_fields: up to 5 top-level value fields whose equality filters the store answers
            from tags (``search(filter={"kind": "note"})`` then lists only matching items);
            declare them from the first write on.
        **client_kwargs: passed to the state-store client (e.g. ``connection_verify``).

    Example:
        >>> with FoundryStore() as store:
        ...     store.put(("users", "ann"), "food", {"likes": "pizza", "n": 2})
        ...     store.get(("users", "ann"), "food").value
        ...     [item.key for item in store.search(("users",), filter={"n": {"$gte": 2}})]
        {'likes': 'pizza', 'n': 2}
        ['food']
    """

    supports_ttl: bool = True

    def __init__(
        self,
        *,
        store_prefix: str = "langgraph-store",
        credential: AsyncTokenCredential | None = None,
        endpoint: str | None = None,
        user_id: str | None = None,
        trusted_delegation: bool = False,
        item_ttl_seconds: int = -1,
        spill: SpillStore | None = None,
        local_backend: LocalBackend = "sqlite",
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        tag_fields: Sequence[str] = (),
        **client_kwargs: Any,
    ) -> None:
        fields = _check_tag_fields(tag_fields)
        ttl_config = _check_ttl_config(ttl)
        vectors: VectorIndex | None = None
        if index is not None:
            from ._vectors import VectorIndex  # numpy and the embeddings only when indexed

            vectors = VectorIndex(index)
        self._core = new_core(locals(), scope_word="memory")
        self._owns_core = True
        self._tag_fields = fields
        self.ttl_config = ttl_config
        self.index_config = index
        self._vectors = vectors
        self._namespaces = NamespaceIndex()
        self._sweeper: threading.Thread | None = None
        self._sweeper_done: concurrent.futures.Future[None] | None = None
        self._sweeper_stop = threading.Event()

    @property
    def tag_fields(self) -> tuple[str, ...]:
        """The value fields whose equality filters are answered from tags."""
        return self._tag_fields

    def __repr__(self) -> str:
        return f"FoundryStore({self._core.describe()}, tag_fields={self._tag_fields!r})"

    def close(self) -> None:
        """Stop the TTL sweeper, close the store clients and stop the private loop.

        Idempotent; the store reopens on its next use.
        """
        self.stop_ttl_sweeper()
        super().close()

    async def aclose(self) -> None:
        """Async form of :meth:`close` (never blocks the caller's loop)."""
        await asyncio.to_thread(self.stop_ttl_sweeper)
        await super().aclose()

    # -- the batch faces ----------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` (get, search, list_namespaces, put/delete) as one batch; their results.

        Reads see the state before the batch's writes; of several writes to one item, the last
        wins; independent operations run concurrently. Every value is checked before anything
        is written. See :meth:`abatch`.
        """
        call = self._core.capture()
        checked, payloads = self._prepare(ops)
        return self._core.run(self._batch(checked, payloads), call=call)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async form of :meth:`batch` (a batch that writes goes on if its caller is cancelled).

        Example:
            >>> import asyncio
            >>> from langgraph.store.base import GetOp, PutOp
            >>> async def demo() -> list[object]:
            ...     async with FoundryStore() as store:
            ...         return await store.abatch([
            ...             PutOp(("docs",), "a", {"x": 1}), GetOp(("docs",), "a")])
            >>> asyncio.run(demo())[1] is None  # the read saw the state before the write
            True
        """
        call = self._core.capture()
        checked, payloads = self._prepare(ops)
        writes = any(isinstance(op, PutOp) for op in checked)
        return await self._core.arun(self._batch(checked, payloads), shield=writes, call=call)

    def _prepare(self, ops: Iterable[Op]) -> tuple[list[Op], dict[int, bytes]]:
        """The ops, checked before any I/O (so a bad one leaves the store as it was), and the
        JSON bytes of each put's value (by the op's ``id``)."""
        out: list[Op] = []
        payloads: dict[int, bytes] = {}
        for op in ops:
            if isinstance(op, GetOp):
                op = op._replace(namespace=_check_namespace(op.namespace, "namespace", empty=True))
                check_text(op.key, "key")
            elif isinstance(op, SearchOp):
                prefix = _check_namespace(op.namespace_prefix, "namespace_prefix", empty=True)
                op = op._replace(namespace_prefix=prefix)
            elif isinstance(op, ListNamespacesOp):
                conditions = []
                for condition in op.match_conditions or ():
                    if condition.match_type not in ("prefix", "suffix"):
                        raise ValueError(f"Unsupported match type: {condition.match_type}")
                    # A string path is a sequence of one-character labels, as LangGraph's own
                    # stores read it (it matches only such namespaces).
                    raw = condition.path
                    path = _check_namespace(
                        tuple(raw) if isinstance(raw, str) else raw,
                        "a match condition's path",
                        empty=True,
                    )
                    conditions.append(condition._replace(path=path))
                if op.match_conditions:
                    op = op._replace(match_conditions=tuple(conditions))
            elif isinstance(op, PutOp):
                op = op._replace(namespace=_check_namespace(op.namespace, "namespace", empty=False))
                check_text(op.key, "key")
                if op.value is not None:
                    payloads[id(op)] = dump(op.value, op.namespace, op.key)
                    _check_ttl(op.ttl)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
            out.append(op)
        return out, payloads

    async def _batch(self, ops: list[Op], payloads: Mapping[int, bytes]) -> list[Result]:
        results: list[Result] = [None] * len(ops)
        reads: list[tuple[int, Op]] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for i, op in enumerate(ops):
            if isinstance(op, PutOp):
                puts.pop((op.namespace, op.key), None)  # the last write wins, in its place
                puts[(op.namespace, op.key)] = op
            else:
                reads.append((i, op))
        if reads:
            scope = await self._core.scope(_SCOPE, create=False)

            async def read(op: Op) -> Result:
                if scope is None:
                    return [] if not isinstance(op, GetOp) else None
                if isinstance(op, GetOp):
                    return await self._get(scope, op)
                if isinstance(op, SearchOp):
                    return await self._search(scope, op)
                return await self._list_namespaces(scope, cast(ListNamespacesOp, op))

            answers = await asyncio.gather(*(read(op) for _, op in reads))
            for (i, _), answer in zip(reads, answers, strict=True):
                results[i] = answer
        if puts:
            await self._write(list(puts.values()), payloads)
        return results

    async def _write(self, puts: list[PutOp], payloads: Mapping[int, bytes]) -> None:
        """Apply a batch's writes: embed (when indexed), index the namespaces, write items.

        The namespaces are recorded before their items (a listing confirms each one live, so
        an entry whose item never came is never listed; an item never lacks its entry).
        """
        writes = [op for op in puts if op.value is not None]
        scope = await self._core.scope(_SCOPE, create=bool(writes))
        if scope is None:
            return
        vectors = {}
        if self._vectors is not None and writes:
            vectors = await self._vectors.embed_puts(writes)
        if writes:
            # Keeps the store's spill namespace (and its index entry) alive under a store TTL;
            # rate-limited: the first write of the process, then at most every quarter TTL.
            await scope.touch()
            await self._namespaces.add_many(scope, {op.namespace for op in writes})
        await bounded(
            self._put(scope, op, payloads.get(id(op)), vectors.get((op.namespace, op.key)))
            for op in puts
        )

    # -- get ----------------------------------------------------------------------------------
    async def _read(self, scope: Scope, key: str) -> tuple[StoredItem, Record] | None:
        """A memory item and its checked fields; None when absent or expired."""
        stored = await scope.store.get_item(key)
        if stored is None:
            return None
        record = parse(stored)
        if expired(record.expires, _layout.now()):
            return None
        return stored, record

    async def _get(self, scope: Scope, op: GetOp) -> Item | None:
        key = memory_key(op.namespace, op.key)
        found = await self._read(scope, key)
        if found is None:
            return None
        stored, record = found
        if record.namespace != op.namespace or record.key != op.key:
            raise CorruptPayloadError(
                f"memory item {op.key!r} in namespace {op.namespace!r}: the stored item names "
                f"{record.key!r} in {record.namespace!r} (it was changed outside "
                "foundry-checkpoint); delete it and put it again",
                store=scope.name,
                key=key,
            )
        item = await self._item(scope, stored, record, Item)
        if op.refresh_ttl:
            await self._refresh(scope, stored, record)
        return item

    async def _item(
        self,
        scope: Scope,
        stored: StoredItem,
        record: Record,
        kind: type[Item],
        value: dict[str, Any] | None = None,
    ) -> Item:
        """The LangGraph item of a stored memory (``value``: already decoded, if it was)."""
        if value is None:
            value = await decode(scope, stored, record)
        # created_at is kept on update: the store keeps the second of the item's first write;
        # the value's own (precise) time is the creating put's when it is not past that second
        # (taken just before the write), else a later put's: then the store's second stands.
        first = float(stored.created_at)
        created = min(record.created if record.created < first + 1 else first, record.updated)
        return kind(
            value=value,
            key=record.key,
            namespace=record.namespace,
            created_at=timestamp(created),
            updated_at=timestamp(record.updated),
        )

    async def _refresh(self, scope: Scope, stored: StoredItem, record: Record) -> None:
        """Move an item's expiry on read (one write; a lost race with a writer is ignored)."""
        if record.ttl is None:
            return
        expires = expiry(record.ttl, _layout.now())
        if expires is None or expires == record.expires:
            return
        tags = dict(stored.tags or {})
        tags[EXPIRY_TAG] = expiry_tag(expires)
        # written or deleted meanwhile: that write's expiry stands
        with contextlib.suppress(FoundryStoragePreconditionError, FoundryStorageNotFoundError):
            await scope.store.set_item(
                stored.key,
                cast(JSONObject, record.value(exp=expires)),
                tags=tags,
                if_match=stored.etag,
            )

    # -- put / delete ---------------------------------------------------------------------
    async def _put(
        self,
        scope: Scope,
        op: PutOp,
        payload: bytes | None,
        vectors: dict[str, list[float]] | None,
    ) -> None:
        key = memory_key(op.namespace, op.key)
        if op.value is None:
            await scope.store.delete_item(key)
            if self._vectors is not None:
                await self._vectors.remove(scope, op.namespace, op.key)
            return
        if payload is None:
            payload = dump(op.value, op.namespace, op.key)
        ttl = _check_ttl(op.ttl)
        at = time.time()
        expires = expiry(ttl, _layout.now())
        fields = {
            name: tag
            for name in self._tag_fields
            if (tag := field_tag(op.value.get(name))) is not None
        }
        tags = memory_tags(op.namespace, expires=expires, fields=fields)
        meta = memory_value(
            op.namespace, op.key, encoded={}, created=at, updated=at, ttl=ttl, expires=expires
        )
        if vectors:
            from ._vectors import pack_vectors

            meta["vec"] = pack_vectors(vectors)
        encoded = await encode(scope, key, payload, tags=tags, meta=meta)
        meta["v"] = encoded
        await scope.store.set_item(key, cast(JSONObject, meta), tags=tags)
        if self._vectors is not None:
            await self._vectors.upsert(scope, op.namespace, op.key, vectors or {})

    # -- search -----------------------------------------------------------------------------
    async def _keys(
        self, scope: Scope, tags: Mapping[str, str], first: int
    ) -> AsyncIterator[ItemKey]:
        """Every key carrying ``tags``, newest first, the first page of ``first`` keys."""
        after: str | None = None
        limit = max(1, min(first, MAX_PAGE))
        while True:
            page = await scope.store.list_keys(tags=tags, limit=limit, after=after, order="desc")
            for key in page.keys:
                yield key
            if not page.has_more or not page.last_id or not page.keys:
                return
            after = page.last_id
            limit = MAX_PAGE

    @staticmethod
    def _prefix_listing(prefix: tuple[str, ...]) -> tuple[dict[str, str], str | None]:
        """The tags that list a prefix's items, and the prefix tag a key's ``n`` tag must
        start with when the prefix is deeper than the prefix tags (else None).

        The kind tag comes last: the embedded engine (local mode, the emulator) drives a
        listing from its first tag and checks the others per row, and every memory item
        carries ``k``, so a listing led by it would walk all of the user's memories."""
        if not prefix:
            return {KIND_TAG: MEMORY_KIND}, None
        depth = min(len(prefix), MAX_PREFIX_TAGS)
        tags = {prefix_tag_key(depth): prefix_tag(prefix[:depth]), KIND_TAG: MEMORY_KIND}
        return tags, prefix_tag(prefix) if len(prefix) > MAX_PREFIX_TAGS else None

    @staticmethod
    def _under(key: ItemKey, deep: str | None) -> bool | None:
        """Whether ``key`` lies under the deep prefix ``deep`` by its ``n`` tag (None: the tag
        was hashed, read the item to know)."""
        if deep is None:
            return True
        ns = (key.tags or {}).get(NAMESPACE_TAG, "")
        if ns.startswith("!") or deep.startswith("!"):
            return None
        return ns == deep or ns.startswith(deep + "/")

    async def _search(self, scope: Scope, op: SearchOp) -> list[SearchItem]:
        if op.query and self._vectors is not None:
            return await self._semantic(scope, self._vectors, op)
        prefix = op.namespace_prefix
        offset, limit = max(op.offset, 0), op.limit
        if limit <= 0:
            return []
        field_tags, rest = split(op.filter, self._tag_fields)
        tags, deep = self._prefix_listing(prefix)
        tags.update(field_tags)
        tags[KIND_TAG] = tags.pop(KIND_TAG)  # last: see _prefix_listing
        at = _layout.now()
        results: list[SearchItem] = []
        skipped = 0
        depth = len(prefix)
        window: list[_Candidate] = []

        async def flush() -> bool:
            """Read the window's items in order; True when the page is full."""
            nonlocal skipped
            found = await bounded(self._read(scope, c.key.key) for c in window)
            window.clear()
            live = [got for got in found if got is not None and got[1].namespace[:depth] == prefix]
            values: list[dict[str, Any] | None] = [None] * len(live)
            if rest:  # evaluated on read: decode them all at once (their blobs too)
                values = list(await bounded(decode(scope, s, r) for s, r in live))
            ready: list[tuple[StoredItem, Record, dict[str, Any] | None]] = []
            for (stored, record), value in zip(live, values, strict=True):
                if value is not None and not matches(value, rest):
                    continue
                if skipped < offset:
                    skipped += 1
                    continue
                ready.append((stored, record, value))
                if len(ready) + len(results) >= limit:
                    break
            items = await bounded(self._item(scope, s, r, SearchItem, value=v) for s, r, v in ready)
            results.extend(cast(list[SearchItem], items))
            if op.refresh_ttl:
                await bounded(self._refresh(scope, s, r) for s, r, _ in ready)
            return len(results) >= limit

        sure_filter = not rest
        first = offset + limit if sure_filter else MAX_PAGE
        async for key in self._keys(scope, tags, first):
            until = (key.tags or {}).get(EXPIRY_TAG)
            if expired(until, at):
                continue
            under = self._under(key, deep)
            if under is False:
                continue
            # an item expiring within this second is read: only its value's expiry tells
            sure = sure_filter and under is True and not may_have_expired(until, at)
            if sure and not window and skipped < offset:
                skipped += 1
                continue
            window.append(_Candidate(key, sure))
            need = limit - len(results) + max(offset - skipped, 0)
            full = len(window) >= (need if sure_filter else max(need, _READ_CHUNK))
            if full and await flush():
                return results
        if window:
            await flush()
        return results

    async def _semantic(self, scope: Scope, vectors: VectorIndex, op: SearchOp) -> list[SearchItem]:
        """A search with a query: the vector index's answer (see :mod:`._vectors`)."""
        seen: dict[tuple[tuple[str, ...], str], tuple[StoredItem, Record]] = {}

        async def read(namespace: tuple[str, ...], key: str) -> Readback:
            found = await self._read(scope, memory_key(namespace, key))
            if found is None:
                return None
            stored, record = found
            if record.namespace != namespace or record.key != key:
                return None
            seen[(namespace, key)] = found
            packed = record.extra.get("vec")
            if packed is not None and not isinstance(packed, Mapping):
                raise CorruptPayloadError(
                    f"memory item {key!r} in namespace {namespace!r}: its stored vectors are "
                    "not the shape foundry-checkpoint writes; put the item again",
                    store=scope.name,
                    key=stored.key,
                )
            return await self._item(scope, stored, record, Item), packed

        def passes(item: Item) -> bool:
            return matches(item.value, op.filter)

        results = await vectors.search(scope, op, read, passes)
        if op.refresh_ttl:
            fresh = [seen[(i.namespace, i.key)] for i in results if (i.namespace, i.key) in seen]
            await bounded(self._refresh(scope, s, r) for s, r in fresh)
        return results

    # -- list_namespaces ----------------------------------------------------------------------
    def _liveness(self, scope: Scope) -> tuple[HasItems, HasItems]:
        """``has_items(prefix)`` and ``exact(namespace)`` for the namespace index: whether a
        live memory lies under a prefix / in a namespace (a short listing by tags each)."""

        async def has_items(prefix: tuple[str, ...]) -> bool:
            tags, deep = self._prefix_listing(prefix)
            return await self._any_live(scope, tags, deep, prefix)

        async def exact(namespace: tuple[str, ...]) -> bool:
            tags = {NAMESPACE_TAG: prefix_tag(namespace), KIND_TAG: MEMORY_KIND}  # k last
            return await self._any_live(scope, tags, None, namespace)

        return has_items, exact

    async def _any_live(
        self,
        scope: Scope,
        tags: Mapping[str, str],
        deep: str | None,
        prefix: tuple[str, ...],
    ) -> bool:
        at = _layout.now()
        async for key in self._keys(scope, tags, _LIVENESS_PAGE):
            until = (key.tags or {}).get(EXPIRY_TAG)
            if expired(until, at):
                continue
            under = self._under(key, deep)
            if under is True and not may_have_expired(until, at):
                return True
            if under is not False:  # a hashed namespace tag, or expiring now: the item says
                found = await self._read(scope, key.key)
                if found is not None and found[1].namespace[: len(prefix)] == prefix:
                    return True
        return False

    async def _list_namespaces(self, scope: Scope, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        has_items, exact = self._liveness(scope)
        return await self._namespaces.list(scope, op, has_items, exact=exact)

    # -- TTL ----------------------------------------------------------------------------------
    def sweep_ttl(self) -> int:
        """Delete this user's expired memories; returns how many. See :meth:`asweep_ttl`."""
        call = self._core.capture()
        return self._core.run(self._sweep(call), call=call)

    async def asweep_ttl(self) -> int:
        """Delete the current user's expired memories (their ``ttl`` passed); how many.

        Expired memories are never returned anyway; the sweep frees their space. It lists keys
        by tags alone (one call per 100 memories) and deletes each expired one (one call each;
        one refreshed meanwhile is kept). It sweeps the partition of the call's identity (the
        request's user, else ``user_id=``).

        Example:
            >>> import asyncio
            >>> async def demo() -> int:
            ...     async with FoundryStore() as store:
            ...         return await store.asweep_ttl()
            >>> asyncio.run(demo())
            0
        """
        call = self._core.capture()
        return await self._core.arun(self._sweep(call), shield=True, call=call)

    async def _sweep(self, call: Call) -> int:
        del call  # the identity is the running call's (captured by the face)
        scope = await self._core.scope(_SCOPE, create=False)
        if scope is None:
            return 0
        at = _layout.now()
        doomed = [
            key
            async for key in self._keys(scope, {KIND_TAG: MEMORY_KIND}, MAX_PAGE)
            if expired((key.tags or {}).get(EXPIRY_TAG), at)
        ]

        vectors = self._vectors

        async def drop(key: ItemKey) -> int:
            ident = _identity(key) if vectors is not None else None
            if vectors is not None and ident is None:  # a hashed key: the item names itself
                found = await scope.store.get_item(key.key)
                if found is not None:
                    record = parse(found)
                    ident = record.namespace, record.key
            try:
                await scope.store.delete_item(key.key, if_match=key.etag)
            except (FoundryStoragePreconditionError, FoundryStorageNotFoundError):
                return 0  # refreshed or deleted meanwhile
            if vectors is not None and ident is not None:
                await vectors.remove(scope, *ident)
            return 1

        dropped = sum(await bounded(drop(key) for key in doomed))
        has_items, exact = self._liveness(scope)
        await self._namespaces.sweep(scope, has_items, exact=exact)
        return dropped

    # -- spilled blobs --------------------------------------------------------------------
    def gc(
        self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, dry_run: bool = False
    ) -> GcReport:
        """Delete this user's spilled blobs that no memory references any more.

        A value over the item limit is a blob in the spill store (content-addressed, so equal
        values share one); deleting or replacing the memory leaves the blob until this runs.
        It reads every memory once. Only blobs last modified more than ``grace_seconds`` ago
        are taken, so a put still in flight (blob first, item second) is safe. Give the store
        a ``store_prefix`` of its own (not the checkpointer's): collection works per prefix.

        Args:
            grace_seconds: the age below which an unreferenced blob is kept.
            dry_run: report what would be deleted, delete nothing.

        Returns:
            What was scanned, kept and deleted.

        Example:
            >>> with FoundryStore(store_prefix="ex-store-gc") as store:
            ...     report = store.gc(dry_run=True)
            >>> report.deleted
            []
        """
        call = self._core.capture()
        return self._core.run(
            self._core.gc(self._referenced, grace_seconds=grace_seconds, dry_run=dry_run),
            call=call,
        )

    async def agc(
        self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, dry_run: bool = False
    ) -> GcReport:
        """Async form of :meth:`gc`."""
        call = self._core.capture()
        return await self._core.arun(
            self._core.gc(self._referenced, grace_seconds=grace_seconds, dry_run=dry_run),
            call=call,
        )

    async def _referenced(self, scope: Scope) -> set[str]:
        """Every blob digest the memories of ``scope`` reference (expired ones included,
        until swept)."""
        if scope.scope_id is not _SCOPE:
            # Another adapter's scope under the same prefix: none of its blobs is ours to take.
            ns = await scope.namespace(create=False)
            spill = scope.spill
            if ns is None or spill is None:
                return set()
            return {blob.digest for blob in await spill.list(ns)}
        keys = [key async for key in self._keys(scope, {KIND_TAG: MEMORY_KIND}, MAX_PAGE)]
        digests: set[str] = set()
        for got in await bounded(scope.store.get_item(key.key) for key in keys):
            encoded = got.value.get("v") if got is not None else None
            if isinstance(encoded, Mapping) and (digest := spilled_digest(encoded)):
                digests.add(digest)
        return digests

    def start_ttl_sweeper(
        self, sweep_interval_minutes: int | None = None
    ) -> concurrent.futures.Future[None]:
        """Sweep expired memories every ``sweep_interval_minutes`` (default: the ``ttl``
        config's) on a background thread, until :meth:`stop_ttl_sweeper` or :meth:`close`.

        The thread sweeps the partition of ``user_id=`` (or the process's own identity): in a
        host serving many users, call :meth:`sweep_ttl` within each user's requests instead.
        Returns a future that completes when the sweeper stops (at once when there is nothing
        to sweep: no ``ttl`` config and no interval). Called while it runs, it answers the
        running sweeper's future.

        Example:
            >>> store = FoundryStore(ttl={"default_ttl": 60, "sweep_interval_minutes": 5})
            >>> done = store.start_ttl_sweeper()
            >>> store.start_ttl_sweeper() is done
            True
            >>> store.stop_ttl_sweeper(timeout=5)
            True
            >>> store.close()
        """
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        interval = sweep_interval_minutes
        if interval is None and self.ttl_config:
            interval = self.ttl_config.get("sweep_interval_minutes")
        if interval is None or interval <= 0:
            future.set_result(None)
            return future
        if self._sweeper is not None and self._sweeper.is_alive() and self._sweeper_done:
            return self._sweeper_done  # already running (as LangGraph's SQL stores answer)
        self._sweeper_stop.clear()
        stop = self._sweeper_stop
        seconds = float(interval) * 60

        def loop() -> None:
            try:
                while not stop.wait(seconds):
                    try:
                        self.sweep_ttl()
                    except Exception:
                        continue
            finally:
                future.set_result(None)

        self._sweeper = threading.Thread(target=loop, name="foundry-store-ttl", daemon=True)
        self._sweeper_done = future
        self._sweeper.start()
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the TTL sweeper thread; True when it stopped (or was not running).

        Example:
            >>> FoundryStore().stop_ttl_sweeper()
            True
        """
        thread = self._sweeper
        if thread is None or not thread.is_alive():
            return True
        self._sweeper_stop.set()
        thread.join(timeout)
        stopped = not thread.is_alive()
        if stopped:
            self._sweeper = None
        return stopped


def _identity(key: ItemKey) -> tuple[tuple[str, ...], str] | None:
    """The namespace and key a memory item's key names (None: hashed, or not a memory key)."""
    parts = key.key.split("/")
    if len(parts) < 3 or parts[0] != MEMORY_KIND:
        return None
    labels = [unescape(part) for part in parts[1:]]
    if any(label is None for label in labels):
        return None
    *namespace, name = cast(list[str], labels)
    return tuple(namespace), name
