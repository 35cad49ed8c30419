"""The embedded local default: :class:`EngineStore` over one shared SQLite :class:`StateEngine`.

With no configuration the adapters keep their checkpoints in one SQLite file,
``<state root>/foundry_checkpoint/state.sqlite3``, where the state root is
``$AGENTSERVER_STATE_ROOT`` or ``~/.agentserver`` (the same default as
``FoundryStateStore``'s own local mode). :func:`default_engine` opens that file once per process;
:class:`EngineStore` binds one store name and one user partition to it and answers with records
of the SDK's shapes (``foundry_checkpoint._store._protocol``), so the adapters cannot tell it
from the hosted client.

Example:
    >>> import asyncio, tempfile
    >>> from pathlib import Path
    >>> async def demo(root: Path) -> str:
    ...     store = await EngineStore.get_or_create(
    ...         default_engine(root), "threads/t1", user_isolation=True, item_ttl_seconds=-1)
    ...     await store.set_item("latest", {"id": "c1"}, tags={"kind": "pointer"})
    ...     item = await store.get_item("latest")
    ...     return item.value["id"]
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     asyncio.run(demo(Path(tmp)))
    ...     default_engine(Path(tmp)).close()
    'c1'
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from azure.ai.agentserver.core import FoundryAgentRequestContext
from azure.ai.agentserver.core.storage import (
    DeletedStateStore,
    DeletedStateStoreItem,
    FoundryStorageConflictError,
    FoundryStorageNotFoundError,
    JSONObject,
    Order,
    StateStore,
)

from foundry_checkpoint.errors import InvalidArgumentError

from ._backend import DEFAULT_USER, BackendSettings, Caller, local_caller
from ._engine import StateEngine
from ._engine_db import DRAIN_SECONDS
from ._limits import DEFAULT_ROOT_DIRNAME, STATE_ROOT_ENV
from ._protocol import StateStoreLike
from ._records import ItemRecord, KeyRecord, PageRecord, RefRecord

__all__ = [
    "DEFAULT_USER",
    "EmbeddedBackend",
    "EngineStore",
    "default_engine",
    "default_state_root",
    "shared_engine",
]

_T = TypeVar("_T")


_SUBDIR = "foundry_checkpoint"
_FILENAME = "state.sqlite3"


_ENGINES: dict[tuple[int, Path], StateEngine] = {}
_RESOLVED: dict[tuple[int, Path], Path] = {}
"""An absolute database path as given (before symbolic links are resolved) -> the resolved
one, so that finding an engine already open touches no file."""

_ENGINES_GUARD = threading.Lock()


def default_state_root() -> Path:
    """``$AGENTSERVER_STATE_ROOT``, else ``~/.agentserver`` (the SDK's own default).

    Example:
        >>> isinstance(default_state_root(), Path)
        True
    """
    configured = os.environ.get(STATE_ROOT_ENV)
    if configured:
        return Path(configured)
    return Path.home() / DEFAULT_ROOT_DIRNAME


def default_engine(state_root: Path | None = None) -> StateEngine:
    """The process-wide engine on ``<state_root>/foundry_checkpoint/state.sqlite3``.

    One engine per database file per process (thread-safe); a closed engine is replaced by a
    fresh one on the next call, and a forked child never reuses its parent's connection.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     engine = default_engine(Path(tmp))
        ...     same = engine is default_engine(Path(tmp))
        ...     engine.close()
        >>> same, engine.path.name
        (True, 'state.sqlite3')
    """
    given = _database_path(state_root)
    known = _open_engine(given)
    if known is not None:
        return known
    path = given.resolve()
    pid = os.getpid()
    with _ENGINES_GUARD:
        engine = _ENGINES.get((pid, path))
        if engine is None or engine.closed:
            engine = StateEngine(path)
            _ENGINES[(pid, path)] = engine
        if given.is_absolute():
            _RESOLVED[(pid, given)] = path
        return engine


def _database_path(state_root: Path | None) -> Path:
    """The database path under ``state_root`` (default: :func:`default_state_root`), not
    resolved (no file is touched)."""
    root = default_state_root() if state_root is None else Path(state_root)
    return (root / _SUBDIR / _FILENAME).expanduser()


def _open_engine(given: Path) -> StateEngine | None:
    """The open engine of ``given`` when this process already has one; no file is touched (a
    relative path, which depends on the working directory, is never answered here)."""
    if not given.is_absolute():
        return None
    pid = os.getpid()
    path = _RESOLVED.get((pid, given))
    engine = None if path is None else _ENGINES.get((pid, path))
    return None if engine is None or engine.closed else engine


async def shared_engine(state_root: Path | None = None) -> StateEngine:
    """:func:`default_engine`, awaited: finding and opening the file runs in a worker thread.

    Resolving the path, creating the folder and opening the database are blocking file work;
    an event loop never runs them (the adapters call this on their private loop). An engine
    this process already opened is answered at once.

    Example:
        >>> import asyncio, tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     engine = asyncio.run(shared_engine(Path(tmp)))
        ...     same = engine is default_engine(Path(tmp))
        ...     engine.close()
        >>> same
        True
    """
    known = _open_engine(_database_path(state_root))
    if known is not None:
        return known
    return await asyncio.to_thread(default_engine, state_root)


class EngineStore:
    """One store name and one user partition of a :class:`StateEngine`, as ``StateStoreLike``.

    ``user`` is the partition used when the store has ``user_isolation`` (local mode: the
    ``user_id`` option, else ``"local"``). Results are light records (:mod:`._records`) with
    the attributes of the SDK's model objects, not the models themselves (building those cost
    more than SQLite). Failures are the
    SDK's ``FoundryStorage*Error`` classes, mirroring the hosted client: ``get_item`` answers
    None when the item (or the whole store) is missing, and ``set_item``/``list_keys`` raise
    :class:`~foundry_checkpoint.errors.InvalidArgumentError` (a ``ValueError``) for the same
    argument combinations the client refuses before sending.

    Every engine call runs on the engine's own :attr:`~StateEngine.worker`, a thread without
    an event loop: SQLite's blocking work (and a wait for its write lock, 5-60 ms at the 99th
    percentile with four processes writing at once) never runs on a loop, neither the caller's
    nor the adapter's private one, which is what ``langgraph dev`` (blockbuster) checks. One
    thread per engine keeps the engine's one connection on one thread, and calls run in the
    order they were made. Each operation of this class is one hand-off to that thread (the
    records are built there too); the hand-off costs ~60-70 µs of CPU on 2 cores, against
    uncontended engine calls of ~0.03 ms (``get_item``) to ~0.35 ms (a 100-key ``list_keys``).

    Example:
        >>> import asyncio
        >>> async def demo() -> list[str]:
        ...     store = await EngineStore.get_or_create(
        ...         StateEngine(), "s", user_isolation=True, item_ttl_seconds=-1, user="ann")
        ...     await store.create_item("a", {"n": 1}, tags={"kind": "x"})
        ...     page = await store.list_keys(tags={"kind": "x"})
        ...     return [key.key for key in page.keys]
        >>> asyncio.run(demo())
        ['a']
    """

    def __init__(self, engine: StateEngine, name: str, *, user: str = DEFAULT_USER) -> None:
        self._engine = engine
        self._name = name
        self._user = user
        #: The descriptor :meth:`get_or_create` read or created (None: not opened that way).
        self.opened_descriptor: StateStore | None = None

    @classmethod
    async def get_or_create(
        cls,
        engine: StateEngine,
        name: str,
        *,
        user_isolation: bool,
        item_ttl_seconds: int,
        user: str = DEFAULT_USER,
        description: str | None = None,
    ) -> EngineStore:
        """Bind ``name``, creating the store when it does not exist.

        Like the SDK, an existing store keeps its own settings: its descriptor, as read or
        created, is :attr:`opened_descriptor` (``Described``), which the isolation check reads
        instead of asking again.
        """
        store = cls(engine, name, user=user)

        def get_or_create() -> dict[str, Any]:
            try:
                return engine.get_store(name)
            except FoundryStorageNotFoundError:
                try:
                    return engine.create_store(
                        name,
                        user_isolation=user_isolation,
                        item_ttl_seconds=item_ttl_seconds,
                        description=description,
                    )
                except FoundryStorageConflictError:
                    return engine.get_store(name)

        store.opened_descriptor = StateStore(await store._run(get_or_create))
        return store

    @property
    def name(self) -> str:
        """The store's name."""
        return self._name

    @property
    def user(self) -> str:
        """The user partition this face reads and writes."""
        return self._user

    async def get(self) -> StateStore:
        """The store's descriptor; ``FoundryStorageNotFoundError`` when it was deleted."""
        return await self._run(lambda: StateStore(self._engine.get_store(self._name)))

    async def create_item(
        self, key: str, value: JSONObject, *, tags: Mapping[str, str] | None = None
    ) -> RefRecord:
        """Create an item; ``FoundryStorageConflictError`` when the key exists."""
        return await self._run(
            lambda: RefRecord.of(
                self._engine.create_item(self._name, key, value, tags, user=self._user)
            )
        )

    async def set_item(
        self,
        key: str,
        value: JSONObject,
        *,
        tags: Mapping[str, str] | None = None,
        if_match: str | None = None,
        require_exists: bool = False,
    ) -> RefRecord:
        """Create or replace an item; ``require_exists`` is ``if_match="*"``.

        Args:
            key: The item key.
            value: The item value (a JSON object).
            tags: The item's tags (None: no tags).
            if_match: Replace only the item with this ETag (``"*"``: any existing item).
            require_exists: Replace only an existing item.

        Returns:
            The reference of the item written.

        Raises:
            InvalidArgumentError: Both ``if_match`` and ``require_exists`` were given.
            FoundryStoragePreconditionError: The precondition failed.
        """
        if if_match is not None and require_exists:
            raise InvalidArgumentError("if_match and require_exists are mutually exclusive")
        return await self._run(self._put(key, value, tags, "*" if require_exists else if_match))

    def put_soon(
        self, key: str, value: JSONObject, *, tags: Mapping[str, str] | None = None
    ) -> asyncio.Future[RefRecord]:
        """:meth:`set_item` (no precondition) handed to the engine's thread now, from any
        event loop; the write runs even when the future is cancelled before it starts.

        Example:
            >>> async def demo() -> str:
            ...     store = await EngineStore.get_or_create(
            ...         StateEngine(), "s", user_isolation=True, item_ttl_seconds=-1)
            ...     await store.put_soon("a", {"n": 1})
            ...     item = await store.get_item("a")
            ...     return item.value["n"] if item else "missing"
            >>> asyncio.run(demo())
            1
        """
        put = self._put(key, value, tags, None)
        if self._engine.closed:
            future: asyncio.Future[RefRecord] = asyncio.get_running_loop().create_future()
            try:
                future.set_result(put())
            except Exception as exc:  # the engine's "closed" error
                future.set_exception(exc)
            return future
        return self._engine.worker.submit(put, keep=True)

    def _put(
        self, key: str, value: JSONObject, tags: Mapping[str, str] | None, if_match: str | None
    ) -> Callable[[], RefRecord]:
        def put() -> RefRecord:
            ref, _created = self._engine.put_item(
                self._name, key, value, tags, user=self._user, if_match=if_match
            )
            return RefRecord.of(ref)

        return put

    async def get_item(self, key: str) -> ItemRecord | None:
        """The item, or None when it does not exist, has expired, or the store is gone."""

        def get() -> ItemRecord | None:
            try:
                item = self._engine.get_item(self._name, key, user=self._user)
            except FoundryStorageNotFoundError:
                return None
            return None if item is None else ItemRecord.of(item)

        return await self._run(get)

    async def delete_item(self, key: str, *, if_match: str | None = None) -> DeletedStateStoreItem:
        """Delete an item (idempotent unless ``if_match`` is given)."""
        return await self._run(
            lambda: DeletedStateStoreItem(
                self._engine.delete_item(self._name, key, user=self._user, if_match=if_match)
            )
        )

    async def list_keys(
        self,
        *,
        tags: Mapping[str, str] | None = None,
        limit: int | None = None,
        after: str | None = None,
        before: str | None = None,
        order: Order = "desc",
    ) -> PageRecord:
        """One page of keys ordered by ``(created_at, id)``, filtered by exact tags.

        Args:
            tags: Exact tag filter (every pair must match).
            limit: Page size (None: the store's default).
            after: Item id to list after, in the chosen order.
            before: Item id to list before (from the start of the list).
            order: ``"desc"`` (newest first) or ``"asc"``.

        Returns:
            The page.

        Raises:
            InvalidArgumentError: Both ``after`` and ``before`` were given.
            FoundryStorageBadRequestError: An argument the store refuses.
        """
        if after is not None and before is not None:
            raise InvalidArgumentError("after and before are mutually exclusive")
        return await self._run(
            lambda: PageRecord.of_wire(
                self._engine.list_keys(
                    self._name,
                    user=self._user,
                    tags=tags,
                    limit=limit,
                    after=after,
                    before=before,
                    order=order,
                )
            )
        )

    async def greatest(
        self,
        by: str,
        *,
        tags: Mapping[str, str],
        among: Mapping[str, str] | None = None,
        count: int = 1,
        below: str | None = None,
    ) -> list[KeyRecord]:
        """The keys carrying ``tags`` and one of the ``count`` greatest values of tag ``by``
        (one engine call). See :class:`~._protocol.RanksByTag`.

        Raises:
            FoundryStorageBadRequestError: A bad tag name or value, or a bad ``count``.
        """

        def rank() -> list[KeyRecord]:
            found = self._engine.greatest(
                self._name,
                user=self._user,
                by=by,
                tags=tags,
                among=among,
                count=count,
                below=below,
            )
            return [KeyRecord.of(entry) for entry in found]

        return await self._run(rank)

    async def delete(self) -> DeletedStateStore:
        """Delete the store and every item in it (every user's)."""
        return await self._run(lambda: DeletedStateStore(self._engine.delete_store(self._name)))

    async def aclose(self) -> None:
        """Nothing to release: the engine is shared and closed by its owner."""

    async def _run(self, func: Callable[[], _T]) -> _T:
        """``func`` (engine calls) on the engine's worker thread, never on the awaiting loop.

        A closed engine answers at once with its "closed" error: ``func`` fails before
        touching the database, and no thread is started again for it.
        """
        engine = self._engine
        if engine.closed:
            return func()
        return await engine.worker.call(func)


class EmbeddedBackend:
    """The embedded default (``local_backend="sqlite"``): :class:`EngineStore` on the
    process-wide engine of the state root's ``foundry_checkpoint/state.sqlite3``.

    Its clients are bound to the caller's partition (the engine partitions by user itself);
    values are stored uncompressed (SQLite pays nothing for their size, and compressing costs
    CPU on every write); large values go to the local spill folder beside the database.

    Args:
        settings: The adapter's options (the TTL of the stores it creates).

    Example:
        >>> from foundry_checkpoint._options import StoreOptions
        >>> backend = EmbeddedBackend(StoreOptions(store_prefix="x"))
        >>> backend.kind, backend.location.endswith("state.sqlite3"), backend.compresses
        ('local-sqlite', True, False)
    """

    kind = "local-sqlite"
    compresses = False
    chunks_in_store = False
    first_page = 20

    def __init__(self, settings: BackendSettings) -> None:
        self._ttl = settings.item_ttl_seconds
        root = default_state_root()
        self.location = str(root / _SUBDIR / _FILENAME)
        self.spill_root: Path | None = root / _SUBDIR / "spill"

    @staticmethod
    def caller(user_id: str | None, context: FoundryAgentRequestContext) -> Caller:
        """The local rule, bound to the user's partition."""
        return local_caller(user_id, context, partitioned=True)

    async def open(self, name: str, partition: str, *, create: bool) -> StateStoreLike | None:
        """A client of ``name`` in ``partition`` (created isolated first when ``create``)."""
        engine = await shared_engine()  # opened off the loop on first use
        if not create:
            return EngineStore(engine, name, user=partition)
        return await EngineStore.get_or_create(
            engine, name, user_isolation=True, item_ttl_seconds=self._ttl, user=partition
        )

    def bind(self, name: str, partition: str) -> StateStoreLike:
        """A client of a store already opened; no I/O."""
        return EngineStore(default_engine(), name, user=partition)

    async def aclose(self) -> None:
        """Wait for the writes already handed to the engine's thread (``put_soon`` ones whose
        caller stopped waiting included); the engine itself is the process's, left open."""
        engine = _open_engine(Path(self.location))
        if engine is not None:
            await asyncio.to_thread(engine.worker.drain, DRAIN_SECONDS)
