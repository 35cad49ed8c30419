"""Moving LangGraph threads between savers, and reading langchain-azure-ai's saver.

:func:`copy_thread` (and :func:`acopy_thread`) copies one thread from any LangGraph
``BaseCheckpointSaver`` into another, keeping checkpoint ids, their order (parents before
children), metadata, channel values and pending writes (interrupts included); it is what
``foundry-checkpoint copy`` does thread by thread. A thread the destination already has is
left alone, so calling it again is cheap and changes nothing.

:class:`LangchainAzureSource` reads the stores of langchain-azure-ai's own
``FoundryCheckpointSaver`` (``langchain_azure_ai.agents.hosting``, 1.2), whose layout, read from
its source, is:

* one store per thread, ``{store_name_prefix}/{thread_id}`` (default prefix
  ``langchain_azure_ai.agents.hosting.FoundryCheckpointSaver``; a name over 128 characters
  becomes ``{prefix[:63]}/{sha256 of the name}``), created with ``user_isolation=True`` by
  default;
* a checkpoint is the item ``{checkpoint_ns}/{checkpoint_id}``, tagged ``kind=checkpoint``,
  ``ns`` (and ``source``, ``step``), whose value holds ``checkpoint_id``, ``checkpoint_ns``,
  ``parent_checkpoint_id`` and the ``checkpoint`` and ``metadata`` as ``{"type", "data"}``
  (LangGraph's typed serialization, base64);
* a pending write is the item ``{checkpoint_ns}/writes/{checkpoint_id}/{task_id}/{index}``,
  tagged ``kind=write``, ``ns``, ``ckpt``, whose value holds ``task_id``, ``index``, ``channel``
  and the ``value`` in the same form.

That saver is async-only, and its reads create the thread's store when it is missing (and
refuse a store whose TTL differs from its argument), so the source reads the layout itself: a
read-only, synchronous ``BaseCheckpointSaver`` whose I/O runs on a private loop (hosted mode:
the service, as the current request's caller, like every adapter of this package; local mode:
the SDK's own local files, where that saver keeps them), decoding with
:class:`~foundry_checkpoint.StrictSerializer`. The store keeps no list of its threads, so a
copy names them.

**Per-user partitions.** In hosted mode each end user's threads are in that user's partition
of the store, which the service picks from the request's call id. A copy run outside a request
(the CLI) reads the partition of the identity it runs as; to move end users' threads, copy each
one inside that user's request, before the graph runs (see ``docs/migrating.md``), or let
:class:`MigratingCheckpointer` do it when the graph first reads the thread (for hosts that run
the graph themselves).

**Long-term memory.** :func:`copy_store` (and :func:`acopy_store`) copies the items of a
LangGraph ``BaseStore`` (``PostgresStore``, ``SqliteStore``, ``InMemoryStore``, another
``FoundryStore``) into another, namespace, key and value kept, and each item's TTL where the
source keeps one; a key the target already has is left alone. ``foundry-checkpoint copy
--store`` calls it.

Example:
    >>> from langgraph.checkpoint.memory import InMemorySaver
    >>> from foundry_checkpoint import FoundryCheckpointer
    >>> old, new = InMemorySaver(), FoundryCheckpointer()
    >>> copy_thread(old, new, "never-used"), copy_thread(LangchainAzureSource(), new, "t-0")
    (0, 0)
    >>> new.close()
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.store.base import BaseStore, GetOp, PutOp

from ._langgraph._saver import FoundryCheckpointer
from ._serde import StrictSerializer
from ._store._backends import sdk_client_backend
from ._store._listing import all_keys
from ._store._protocol import StateStoreLike
from .adapter import DEFAULT_ITEM_TTL_SECONDS, new_core
from .errors import CorruptPayloadError, FoundryCheckpointError, InvalidArgumentError

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata

__all__ = [
    "LC_DEFAULT_PREFIX",
    "CheckpointRef",
    "LangchainAzureSource",
    "MigratingCheckpointer",
    "acopy_store",
    "acopy_thread",
    "copy_checkpoint",
    "copy_store",
    "copy_thread",
    "lc_store_name",
    "plan_copy",
]

LC_DEFAULT_PREFIX: Final = "langchain_azure_ai.agents.hosting.FoundryCheckpointSaver"
"""langchain-azure-ai's ``DEFAULT_STORE_NAME_PREFIX``."""

_MAX_NAME: Final = 128
_READ_ONLY: Final = (
    "LangchainAzureSource reads langchain-azure-ai's stores and never writes them: copy into "
    "a FoundryCheckpointer (copy_thread; with the CLI, foundry-lc: is a --from only)"
)
_CHECKPOINT_TAGS: Final = {"kind": "checkpoint"}
STORE_PAGE: Final = 100
"""Items :func:`copy_store` reads from the source, and looks up in the target, per round."""


def lc_store_name(prefix: str, thread_id: str) -> str:
    """The store name that saver gives ``thread_id`` (its ``_store_name``).

    Example:
        >>> lc_store_name("agents/", "t1")
        'agents/t1'
    """
    prefix = prefix.rstrip("/")
    name = f"{prefix}/{thread_id}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()
    return f"{prefix[: _MAX_NAME - len(digest) - 1]}/{digest}"


class LangchainAzureSource(BaseCheckpointSaver[str]):
    """langchain-azure-ai's ``FoundryCheckpointSaver`` stores, read-only and synchronous.

    Args:
        prefix: That saver's ``store_name_prefix`` (default: its default).
        allowlist: Classes (or ``(module, name)`` pairs) of the graph's state to decode
            besides LangGraph's and langchain-core's own, as ``with_allowlist`` takes them.
        **store_kwargs: What a ``FoundryCheckpointer`` takes to reach the store (``endpoint``,
            ``credential``, ``user_id``, ``trusted_delegation``, client options); in local mode
            the SDK's own local files are read.

    Example:
        >>> with LangchainAzureSource() as source:
        ...     list(source.list({"configurable": {"thread_id": "never-written"}}))
        []
    """

    def __init__(
        self,
        prefix: str = LC_DEFAULT_PREFIX,
        *,
        allowlist: Iterable[tuple[str, ...] | type] = (),
        **store_kwargs: Any,
    ) -> None:
        super().__init__(serde=StrictSerializer().with_msgpack_allowlist(allowlist))
        if not isinstance(prefix, str) or not prefix.strip("/"):
            raise InvalidArgumentError(
                f"LangchainAzureSource needs the old saver's non-empty store_name_prefix, "
                f"got {prefix!r}"
            )
        self.prefix = prefix.rstrip("/")
        kwargs = dict(store_kwargs)
        kwargs.pop("store_prefix", None)
        kwargs.pop("local_backend", None)
        self._core = new_core(
            {
                "store_prefix": "langgraph",  # names none of the stores read here
                "credential": kwargs.pop("credential", None),
                "endpoint": kwargs.pop("endpoint", None),
                "user_id": kwargs.pop("user_id", None),
                "trusted_delegation": kwargs.pop("trusted_delegation", False),
                "item_ttl_seconds": DEFAULT_ITEM_TTL_SECONDS,  # creates no store
                "spill": None,
                # the stores the SDK's own client wrote: its local files, or the service
                "local_backend": sdk_client_backend(),
                "client_kwargs": kwargs,
            },
            scope_word="thread",
        )

    def __enter__(self) -> LangchainAzureSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the store clients and stop the private loop (idempotent)."""
        self._core.close()

    # -- what the copy reads -----------------------------------------------------------------
    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """A thread's checkpoints, newest first (``config`` must name the thread)."""
        if config is None or not (config.get("configurable") or {}).get("thread_id"):
            raise InvalidArgumentError(
                "langchain-azure-ai's FoundryCheckpointSaver keeps no list of its threads: "
                "name the thread in the config (with the CLI: --thread ID)"
            )
        conf = config["configurable"]
        ns = conf.get("checkpoint_ns")
        before_id = (before or {}).get("configurable", {}).get("checkpoint_id")
        found = self._core.run(self._list(str(conf["thread_id"]), ns, before_id))
        yielded = 0
        for item in found:
            if filter and not all(item.metadata.get(k) == v for k, v in filter.items()):
                continue
            if limit is not None and yielded >= limit:
                return
            yielded += 1
            yield item

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), or the thread's newest."""
        conf = config.get("configurable") or {}
        thread_id = conf.get("thread_id")
        if not thread_id:
            raise InvalidArgumentError("config has no thread_id")
        checkpoint_id = conf.get("checkpoint_id")
        ns = str(conf.get("checkpoint_ns", ""))
        if not checkpoint_id:
            newest = [*self.list(config, limit=1)]
            return newest[0] if newest else None
        return self._core.run(self._one(str(thread_id), ns, str(checkpoint_id)))

    def put(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        """Refused: the old stores are a copy source only."""
        raise InvalidArgumentError(_READ_ONLY)

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        """Refused: the old stores are a copy source only."""
        raise InvalidArgumentError(_READ_ONLY)

    # -- on the core's loop --------------------------------------------------------------------
    async def _store(self, thread_id: str) -> StateStoreLike | None:
        return await self._core.open(lc_store_name(self.prefix, thread_id), create=False)

    async def _list(
        self, thread_id: str, ns: str | None, before_id: str | None
    ) -> builtins.list[CheckpointTuple]:
        store = await self._store(thread_id)
        if store is None:
            return []
        tags = dict(_CHECKPOINT_TAGS)
        if ns is not None:
            tags["ns"] = ns
        ids: builtins.list[tuple[str, str]] = []
        for key in await all_keys(store, tags):
            item_ns, sep, item_id = key.key.rpartition("/")
            if not sep or not item_id or (ns is not None and item_ns != ns):
                continue
            if before_id is not None and item_id >= before_id:
                continue
            ids.append((item_id, item_ns))
        out = []
        for item_id, item_ns in sorted(ids, reverse=True):
            found = await self._read(store, thread_id, item_ns, item_id)
            if found is not None:
                out.append(found)
        return out

    async def _one(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointTuple | None:
        store = await self._store(thread_id)
        if store is None:
            return None
        return await self._read(store, thread_id, ns, checkpoint_id)

    async def _read(
        self, store: StateStoreLike, thread_id: str, ns: str, checkpoint_id: str
    ) -> CheckpointTuple | None:
        try:
            return await self._read_item(store, thread_id, ns, checkpoint_id)
        except FoundryCheckpointError as error:
            if error.store is None:  # where it happened, for logs (never in the message)
                error.store, error.key = store.name, f"{ns}/{checkpoint_id}"
            raise

    async def _read_item(
        self, store: StateStoreLike, thread_id: str, ns: str, checkpoint_id: str
    ) -> CheckpointTuple | None:
        key = f"{ns}/{checkpoint_id}"
        item = await store.get_item(key)
        if item is None:
            return None
        where = f"checkpoint {checkpoint_id!r} of thread {thread_id!r} in the old saver's stores"
        value = item.value
        checkpoint = cast("Checkpoint", self._decode(value.get("checkpoint"), where))
        metadata = cast("CheckpointMetadata", self._decode(value.get("metadata"), where))
        parent = value.get("parent_checkpoint_id") or ""
        writes: builtins.list[tuple[str, str, Any]] = []
        records: builtins.list[tuple[str, int, str, object, str]] = []
        write_tags = {"kind": "write", "ns": ns, "ckpt": checkpoint_id}
        for wkey in await all_keys(store, write_tags):
            witem = await store.get_item(wkey.key)
            if witem is None:
                continue
            record = witem.value
            task_id, index, channel = (
                record.get("task_id"),
                record.get("index"),
                record.get("channel"),
            )
            if not isinstance(task_id, str) or not isinstance(channel, str):
                raise CorruptPayloadError(f"pending write {wkey.key!r} of {where} is malformed")
            if not isinstance(index, int):
                raise CorruptPayloadError(f"pending write {wkey.key!r} of {where} has no index")
            records.append((task_id, index, channel, record.get("value"), wkey.key))
        for task_id, _, channel, raw, wkey_text in sorted(records, key=lambda r: (r[0], r[1])):
            writes.append((task_id, channel, self._decode(raw, f"write {wkey_text!r} of {where}")))
        return CheckpointTuple(
            config=_config(thread_id, ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=_config(thread_id, ns, str(parent)) if parent else None,
            pending_writes=writes,
        )

    def _decode(self, raw: object, where: str) -> Any:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("type"), str):
            raise CorruptPayloadError(f"{where} holds no serialized value")
        data = raw.get("data")
        if not isinstance(data, str):
            raise CorruptPayloadError(f"{where} holds no base64 data")
        try:
            payload = base64.b64decode(data.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
            raise CorruptPayloadError(f"{where} has bad base64: {exc}") from None
        return self.serde.loads_typed((raw["type"], payload))


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


@dataclass(frozen=True)
class CheckpointRef:
    """One checkpoint of the source, by id only."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str


def plan_copy(
    source: BaseCheckpointSaver[Any], threads: list[str] | None = None
) -> list[CheckpointRef]:
    """Every checkpoint of ``threads`` (all threads when None), each thread oldest first.

    ``list()`` returns a thread's checkpoints newest first, so each thread's run is reversed;
    threads keep the order in which ``list()`` first named them.
    """
    configs: list[RunnableConfig | None] = [None]
    if threads:
        configs = [{"configurable": {"thread_id": t}} for t in threads]
    per_thread: dict[str, list[CheckpointRef]] = {}
    for config in configs:
        for item in source.list(config):
            conf = item.config["configurable"]
            ref = CheckpointRef(
                str(conf["thread_id"]),
                str(conf.get("checkpoint_ns", "")),
                str(conf["checkpoint_id"]),
            )
            per_thread.setdefault(ref.thread_id, []).append(ref)
    out: list[CheckpointRef] = []
    for refs in per_thread.values():
        out.extend(reversed(refs))
    return out


def copy_checkpoint(
    source: BaseCheckpointSaver[Any], destination: BaseCheckpointSaver[Any], ref: CheckpointRef
) -> int:
    """Copy one checkpoint and its pending writes; returns the number of writes copied.

    Raises:
        FoundryCheckpointError: the source no longer has the checkpoint (it changed during the
            copy).
    """
    wanted: RunnableConfig = {
        "configurable": {
            "thread_id": ref.thread_id,
            "checkpoint_ns": ref.checkpoint_ns,
            "checkpoint_id": ref.checkpoint_id,
        }
    }
    found = source.get_tuple(wanted)
    if found is None:
        raise FoundryCheckpointError(
            f"checkpoint {ref.checkpoint_id!r} of thread {ref.thread_id!r} vanished from the "
            "source during the copy"
        )
    conf: dict[str, Any] = {"thread_id": ref.thread_id, "checkpoint_ns": ref.checkpoint_ns}
    parent = (found.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    if parent:
        conf["checkpoint_id"] = parent
    checkpoint = _versions_for(destination, found.checkpoint)
    new_versions = dict(checkpoint["channel_versions"])
    written = destination.put({"configurable": conf}, checkpoint, found.metadata, new_versions)
    tasks: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in found.pending_writes or []:
        tasks.setdefault(task_id, []).append((channel, value))
    for task_id, writes in tasks.items():
        destination.put_writes(written, writes, task_id)
    return sum(len(w) for w in tasks.values())


def copy_thread(
    source: BaseCheckpointSaver[Any], destination: BaseCheckpointSaver[Any], thread_id: str
) -> int:
    """Copy thread ``thread_id`` from ``source`` into ``destination`` unless it has it already.

    Every checkpoint of the thread (all namespaces) is written oldest first with its pending
    writes, ids and parents kept, so the graph resumes in ``destination`` where it stopped in
    ``source`` (an interrupted run with ``Command(resume=...)``). When ``destination`` already
    has a checkpoint of the thread (copied before, or started there), nothing is read from the
    source and nothing is written: one read of ``destination``. Run it before the graph runs
    on the thread, not while it runs.

    Args:
        source: The saver to copy from (for example a :class:`LangchainAzureSource`).
        destination: The saver to copy into (a ``FoundryCheckpointer``).
        thread_id: The thread.

    Returns:
        How many checkpoints were copied (0: already there, or not in the source).

    Example:
        >>> from langgraph.checkpoint.memory import InMemorySaver
        >>> from foundry_checkpoint import FoundryCheckpointer
        >>> old = InMemorySaver()
        >>> first = old.put({"configurable": {"thread_id": "t-c", "checkpoint_ns": ""}},
        ...     {"v": 1, "id": "1", "ts": "", "channel_values": {}, "channel_versions": {},
        ...      "versions_seen": {}}, {}, {})
        >>> with FoundryCheckpointer() as new:
        ...     copy_thread(old, new, "t-c"), copy_thread(old, new, "t-c")
        (1, 0)
    """
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidArgumentError(f"thread_id must be a non-empty string, got {thread_id!r}")
    if destination.get_tuple({"configurable": {"thread_id": thread_id}}) is not None:
        return 0
    refs = plan_copy(source, [thread_id])
    for ref in refs:
        copy_checkpoint(source, destination, ref)
    return len(refs)


async def acopy_thread(
    source: BaseCheckpointSaver[Any], destination: BaseCheckpointSaver[Any], thread_id: str
) -> int:
    """:func:`copy_thread` from async code (a host's request handler): it runs in a worker
    thread with the caller's context (the request's identity), never blocking the loop.

    Example:
        >>> import asyncio
        >>> from langgraph.checkpoint.memory import InMemorySaver
        >>> from foundry_checkpoint import FoundryCheckpointer
        >>> with FoundryCheckpointer() as new:
        ...     asyncio.run(acopy_thread(InMemorySaver(), new, "none"))
        0
    """
    return await asyncio.to_thread(copy_thread, source, destination, thread_id)


def _string_version(version: Any) -> Any:
    """An integer channel version in the string form the string-versioned savers write
    (``f"{n:032}.{fraction:016}"``, ordered by ``n``); anything else unchanged.

    Example:
        >>> _string_version(3)
        '00000000000000000000000000000003.00000000000000.0'
        >>> _string_version("3.x")
        '3.x'
    """
    if isinstance(version, int) and not isinstance(version, bool):
        return f"{version:032}.{0.0:016}"
    return version


def _versions_for(destination: BaseCheckpointSaver[Any], checkpoint: Any) -> Any:
    """``checkpoint`` with integer channel versions written as strings when ``destination``
    makes string versions (FoundryCheckpointer, SqliteSaver and PostgresSaver do; savers built
    on ``BaseCheckpointSaver``'s default, langchain-azure-ai's among them, count in integers).

    LangGraph compares a checkpoint's versions with the ones the saver makes next, and a string
    never compares with an integer, so a thread copied unchanged would fail at its next step.
    The same number is kept (the next version the destination makes is one more); the form is
    fixed, so a copy run twice writes the same checkpoint.
    """
    versions = checkpoint.get("channel_versions") or {}
    if not any(isinstance(v, int) and not isinstance(v, bool) for v in versions.values()):
        return checkpoint
    if not isinstance(destination.get_next_version(None, None), str):
        return checkpoint
    return {
        **checkpoint,
        "channel_versions": {k: _string_version(v) for k, v in versions.items()},
        "versions_seen": {
            node: {k: _string_version(v) for k, v in seen.items()}
            for node, seen in (checkpoint.get("versions_seen") or {}).items()
        },
    }


class MigratingCheckpointer(FoundryCheckpointer):
    """A :class:`~foundry_checkpoint.FoundryCheckpointer` that moves a thread from an old saver
    the first time the graph reads it there and finds nothing.

    For hosts that run the graph themselves (langchain-azure-ai's Responses and Invocations
    hosts): compile the graph with it instead of ``FoundryCheckpointer`` and every conversation
    moves, in its own user's request, when it is next used. When a read (``get_tuple`` /
    ``aget_tuple``, which every run and ``get_state`` start with) finds no checkpoint and the
    thread has none at all here, the thread is copied from ``legacy`` with :func:`copy_thread`
    (all its checkpoints and pending writes, ids kept), and the read is answered from the copy.
    A thread that exists here is never looked up in ``legacy``, so once a thread has moved
    nothing changes; a new thread costs one look-up in ``legacy`` (one store request for a
    :class:`LangchainAzureSource`) on its first read. Replace it with ``FoundryCheckpointer``
    once the old stores have expired.

    Args:
        legacy: The saver to move threads from (a :class:`LangchainAzureSource`). It is
            closed with this object.
        **kwargs: What ``FoundryCheckpointer`` takes.

    Example:
        >>> from langgraph.checkpoint.memory import InMemorySaver
        >>> old = InMemorySaver()
        >>> _ = old.put({"configurable": {"thread_id": "t-m", "checkpoint_ns": ""}},
        ...     {"v": 1, "id": "1", "ts": "", "channel_values": {"n": 1},
        ...      "channel_versions": {"n": 1}, "versions_seen": {}}, {}, {"n": 1})
        >>> with MigratingCheckpointer(legacy=old) as saver:
        ...     saver.get_tuple({"configurable": {"thread_id": "t-m"}}).checkpoint["channel_values"]
        {'n': 1}
    """

    def __init__(self, *, legacy: BaseCheckpointSaver[Any], **kwargs: Any) -> None:
        if not isinstance(legacy, BaseCheckpointSaver):
            raise InvalidArgumentError(
                f"legacy must be a LangGraph checkpoint saver, got {type(legacy).__name__}"
            )
        super().__init__(**kwargs)
        self.legacy = legacy

    def __repr__(self) -> str:
        return (
            f"MigratingCheckpointer({self._core.describe()}, legacy={type(self.legacy).__name__})"
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``FoundryCheckpointer.get_tuple``, moving the thread from ``legacy`` on a miss."""
        found = super().get_tuple(config)
        if found is None and self._moved(config):
            found = super().get_tuple(config)
        return found

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``FoundryCheckpointer.aget_tuple``, moving the thread from ``legacy`` on a miss (in
        a worker thread with the caller's context: the request's identity)."""
        found = await super().aget_tuple(config)
        if found is None and await asyncio.to_thread(self._moved, config):
            found = await super().aget_tuple(config)
        return found

    def _moved(self, config: RunnableConfig) -> bool:
        """Copy the thread of ``config`` from ``legacy`` when this saver has none of it."""
        conf = config.get("configurable") or {}
        thread_id = conf.get("thread_id")
        if not isinstance(thread_id, str) or not thread_id:
            return False
        narrowed = conf.get("checkpoint_id") or conf.get("checkpoint_ns")
        whole: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        if narrowed and FoundryCheckpointer.get_tuple(self, whole) is not None:
            return False  # the thread is here: what config names is simply not
        refs = plan_copy(self.legacy, [thread_id])
        for ref in refs:
            copy_checkpoint(self.legacy, self, ref)
        return bool(refs)

    def close(self) -> None:
        """Close this saver and ``legacy`` (idempotent)."""
        super().close()
        close = getattr(self.legacy, "close", None)
        if callable(close):
            close()

    async def aclose(self) -> None:
        """Async form of :meth:`close`."""
        await super().aclose()
        close = getattr(self.legacy, "close", None)
        if callable(close):
            await asyncio.to_thread(close)


# -- long-term memory (BaseStore) -----------------------------------------------------------------

StoreRow = tuple[tuple[str, ...], str, dict[str, Any], float | None]
"""One item of a source store: namespace, key, value, TTL in minutes (None: none known)."""


def copy_store(
    source: BaseStore,
    target: BaseStore,
    *,
    namespace_prefix: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Copy every item of ``source`` (under ``namespace_prefix``) into ``target``.

    Each item keeps its namespace, key and value. Its TTL is kept where the source keeps one
    per item (``SqliteStore`` and ``PostgresStore``: the ``ttl_minutes`` of the item, read from
    their ``store`` table); it counts from the copy, as any write restarts it. Items without a
    known TTL get the target's ``default_ttl`` (none unless its ``ttl`` config sets one).
    Expired items that the source has not swept yet are not copied. ``created_at`` and
    ``updated_at`` become the time of the copy (``BaseStore.put`` takes no timestamps).

    A key the target already has is left alone (never overwritten: it may have changed there
    since), so running the copy again copies nothing twice and costs one look-up per item.
    The source is read :data:`STORE_PAGE` items at a time, without refreshing its TTLs; each
    page costs one batch of look-ups in the target and one batch of puts of what is missing
    (a ``FoundryStore`` runs the operations of a batch concurrently). ``SqliteStore`` and
    ``PostgresStore`` sources are read from their table in key order; any other store through
    ``search`` pages (``offset``), with the keys seen kept so that no item is copied twice.

    Args:
        source: The store to copy from.
        target: The store to copy into (a ``FoundryStore``).
        namespace_prefix: Only the items whose namespace starts with these labels.
        progress: Called after each page with the items examined and copied so far.

    Returns:
        How many items were copied (0: the target had them all, or the source is empty).

    Raises:
        InvalidArgumentError: ``source`` is ``target``, the prefix is not a tuple of strings,
            or an item has a TTL and ``target`` does not support TTLs (``supports_ttl``);
            the pages before that one are copied.

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> old, new = InMemoryStore(), InMemoryStore()
        >>> old.put(("users", "ann"), "prefs", {"theme": "dark"})
        >>> copy_store(old, new), copy_store(old, new)
        (1, 0)
        >>> new.get(("users", "ann"), "prefs").value
        {'theme': 'dark'}
    """
    prefix = _namespace_prefix(namespace_prefix)
    if source is target:
        raise InvalidArgumentError("copy_store needs two different stores: source is target")
    examined = copied = 0
    for page in _store_pages(source, prefix):
        found = target.batch([GetOp(ns, key, refresh_ttl=False) for ns, key, _, _ in page])
        puts = [
            PutOp(ns, key, value, ttl=_target_ttl(target, ttl, ns, key))
            for (ns, key, value, ttl), have in zip(page, found, strict=True)
            if have is None
        ]
        if puts:
            target.batch(puts)
        examined += len(page)
        copied += len(puts)
        if progress is not None:
            progress(examined, copied)
    return copied


async def acopy_store(
    source: BaseStore,
    target: BaseStore,
    *,
    namespace_prefix: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """:func:`copy_store` from async code: it runs in a worker thread with the caller's
    context (a request's identity), never blocking the loop; an async store
    (``AsyncPostgresStore``, ``AsyncSqliteStore``) is fine as either side there.

    Example:
        >>> import asyncio
        >>> from langgraph.store.memory import InMemoryStore
        >>> old = InMemoryStore()
        >>> old.put(("docs",), "d1", {"text": "hello"})
        >>> asyncio.run(acopy_store(old, InMemoryStore()))
        1
    """
    return await asyncio.to_thread(
        copy_store, source, target, namespace_prefix=namespace_prefix, progress=progress
    )


def _namespace_prefix(labels: Sequence[str]) -> tuple[str, ...]:
    if isinstance(labels, str) or not all(isinstance(label, str) and label for label in labels):
        raise InvalidArgumentError(
            f"namespace_prefix must be a tuple of non-empty strings, got {labels!r}"
        )
    return tuple(labels)


def _target_ttl(target: BaseStore, ttl: float | None, ns: tuple[str, ...], key: str) -> Any:
    """The ``ttl`` of the put into ``target``: the source item's, else the target's default."""
    if ttl is None:
        return (target.ttl_config or {}).get("default_ttl")
    if not target.supports_ttl:
        raise InvalidArgumentError(
            f"item {key!r} of namespace {list(ns)!r} has a TTL of {ttl:g} minutes and the target "
            f"({type(target).__name__}) does not support TTLs: copy into a store that does (a "
            "FoundryStore), or drop the TTLs in the source first. The earlier pages are copied."
        )
    return ttl


def _store_pages(source: BaseStore, prefix: tuple[str, ...]) -> Iterator[list[StoreRow]]:
    """The source's live items under ``prefix``, :data:`STORE_PAGE` at a time."""
    syntax = _sql_syntax(source)
    if syntax is not None:
        yield from _table_pages(source, syntax, prefix)
        return
    seen: set[tuple[tuple[str, ...], str]] = set()
    offset = 0
    while True:
        items = source.search(prefix, limit=STORE_PAGE, offset=offset, refresh_ttl=False)
        page: list[StoreRow] = []
        for item in items:
            ident = (tuple(item.namespace), item.key)
            if ident not in seen:
                seen.add(ident)
                page.append((ident[0], item.key, item.value, None))
        if page:
            yield page
        if len(items) < STORE_PAGE:
            return
        offset += len(items)


def _sql_syntax(source: BaseStore) -> tuple[str, str] | None:
    """The parameter marker and the SQL for "now" of the sync stores whose table is read
    directly (SqliteStore, PostgresStore); None for any other store."""
    try:
        from langgraph.store.sqlite import SqliteStore
    except ImportError:  # pragma: no cover - langgraph-checkpoint-sqlite is optional
        pass
    else:
        if isinstance(source, SqliteStore):
            return "?", "CURRENT_TIMESTAMP"
    try:
        from langgraph.store.postgres import PostgresStore
    except ImportError:  # pragma: no cover - langgraph-checkpoint-postgres is optional
        pass
    else:
        if isinstance(source, PostgresStore):
            return "%s", "NOW()"
    return None


#: A page of a LangGraph SQL store's table, in (prefix, key) order after a (prefix, key).
#: ``prefix`` is the namespace's labels joined by ``.`` (labels never hold one). Live rows
#: only, by the store's own sweep rule (``expires_at < CURRENT_TIMESTAMP`` is expired).
_TABLE_PAGE_SQL: Final = """
SELECT prefix, key, value, ttl_minutes FROM store
WHERE (expires_at IS NULL OR expires_at >= {now})
  AND (prefix, key) > ({p}, {p}){within}
ORDER BY prefix, key
LIMIT {p}
"""
_WITHIN_SQL: Final = "\n  AND (prefix = {p} OR substr(prefix, 1, {p}) = {p})"


def _table_pages(
    source: BaseStore, syntax: tuple[str, str], prefix: tuple[str, ...]
) -> Iterator[list[StoreRow]]:
    p, now = syntax
    within = _WITHIN_SQL.format(p=p) if prefix else ""
    sql = _TABLE_PAGE_SQL.format(p=p, now=now, within=within)
    text = ".".join(prefix)
    loads = getattr(source, "_deserializer", None) or json.loads
    after = ("", "")
    while True:
        params: list[Any] = [*after]
        if prefix:
            params += [text, len(text) + 1, text + "."]
        params.append(STORE_PAGE)
        # SqliteStore's and PostgresStore's own cursor (their lock, their connection pool)
        with source._cursor() as cur:  # type: ignore[attr-defined]
            cur.execute(sql, params)
            rows = cur.fetchall()
        page: list[StoreRow] = []
        for row in rows:
            ns_text, key, raw, ttl = (
                (row["prefix"], row["key"], row["value"], row["ttl_minutes"])
                if isinstance(row, Mapping)
                else tuple(row)
            )
            value = raw if isinstance(raw, dict) else loads(raw)
            page.append((tuple(ns_text.split(".")), key, value, None if ttl is None else ttl))
        if page:
            yield page
        if len(rows) < STORE_PAGE:
            return
        last = rows[-1]
        after = (last["prefix"], last["key"]) if isinstance(last, Mapping) else (last[0], last[1])
