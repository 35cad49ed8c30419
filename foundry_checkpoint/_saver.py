"""``FoundryCheckpointer``: a LangGraph checkpoint saver on Foundry's durable state store.

Design, in short (the reasons are in the docstrings below):

* one store per thread (``<store_prefix>/t/<thread>``), opened once per process with
  ``user_isolation=True``;
* one **self-contained** item per checkpoint: every channel value the checkpoint needs is in it
  (or referenced by sha256 from the spill store), so an expired older item never breaks a newer
  one, and resuming reads one item;
* one item per ``put_writes`` call (per task), merged with ``if_match`` when the task writes again;
* "latest" from ``list_keys`` tags only: every key of the newest ``created_at`` second is
  compared by checkpoint id (uuid6), never by list position, and no item is read to compare;
  the same listing (every item of the namespace, newest first) yields the writes keys of the
  newest checkpoint, and the checkpoint itself is not read again when this process holds it
  (same key and etag: see :meth:`FoundryCheckpointer._latest`);
* channel values over 256 KiB serialized go to the spill store as content-addressed blobs,
  uploaded once per thread while unchanged;
* one async implementation: sync methods block on the core's private loop, async methods await
  it, so ``invoke``, ``ainvoke``, sync subgraphs, threads and Jupyter all work.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import heapq
import random
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, TypeVar
from uuid import UUID

from azure.ai.agentserver.core.storage import (
    DEFAULT_ITEM_TTL_SECONDS,
    FoundryStoragePreconditionError,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from . import _codec
from ._core import (
    DEFAULT_GC_GRACE_SECONDS,
    CheckpointCore,
    GcReport,
    LocalBackend,
    Scope,
    create_item,
)
from ._lg_prune import Entry, call_owner, is_call_namespace, newest, plan
from ._lg_records import (
    KIND_CHECKPOINT,
    KIND_WRITES,
    TAG_EARLY,
    TAG_ID,
    TAG_KIND,
    TAG_NS,
    TAG_OUT_OF_ORDER,
    TAG_OWNER,
    TAG_PARENT,
    TAG_RUN,
    TAG_SOURCE,
    TAG_SPILL,
    TAG_STEP,
    ChannelEntry,
    CheckpointRecord,
    DeltaBase,
    WritesRecord,
    checkpoint_key,
    id_tag,
    ns_tag,
    pack_checkpoint,
    pack_writes,
    step_tag,
    unpack_checkpoint,
    unpack_writes,
    writes_key,
)
from ._lifecycle import CoreOwner
from ._naming import check_identifier, check_text, tag_value, unescape
from ._protocol import ItemKey
from ._serde import StrictSerializer
from .errors import (
    CorruptPayloadError,
    FoundryCheckpointError,
    InvalidIdentifierError,
    MissingBlobError,
)

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from .spill import SpillStore

__all__ = ["SPILL_THRESHOLD", "FoundryCheckpointer"]

T = TypeVar("T")

SPILL_THRESHOLD: Final = 256 * 1024
"""A channel value whose serialized form is larger than this goes to the spill store (when one
is configured) as its own content-addressed blob."""

_PAGE: Final = 100
_LIST_CHUNK: Final = 16
_CONCURRENCY: Final = 16
_MERGE_ATTEMPTS: Final = 16
_THREAD_CACHE: Final = 256
_WRITES_INDEX_FROM: Final = 4
_EARLY_BOUND: Final = 4096
_FIRST_PAGE_LOCAL: Final = 20
_FIRST_PAGE_HOSTED: Final = 100


@dataclass
class _ThreadState:
    """What this process knows about one thread, kept to avoid reads.

    ``heads`` maps a namespace to the last checkpoint written or read there and its channel
    table; a ``put`` whose parent is that checkpoint carries unchanged channels from it (inline
    bytes or blob references) without a read, so an unchanged large value is neither
    serialized nor uploaded again.
    """

    heads: dict[str, CheckpointRecord] = field(default_factory=dict)
    etags: dict[str, str] = field(default_factory=dict)
    """The etag of each head's item as this process wrote or read it: a listing that shows the
    same key with the same etag proves the head current, so it is not read again."""

    def set_head(self, ns: str, record: CheckpointRecord, etag: str | None) -> None:
        """Remember ``record`` as the head of ``ns`` (with its item's etag when known)."""
        self.heads[ns] = record
        if etag:
            self.etags[ns] = etag
        else:
            self.etags.pop(ns, None)


_Token = tuple[str, str, str, str]
"""(user key, thread id, namespace, checkpoint id): one checkpoint as this process sees it."""


@dataclass
class _Latest:
    """The newest checkpoint key of a namespace and the writes keys listed with it."""

    key: ItemKey
    writes: list[str]
    complete: bool
    """True when ``writes`` are all of its writes (its writer created none before it)."""


@dataclass
class _Candidate:
    thread_id: str
    key: ItemKey
    checkpoint_id: str


@dataclass
class _ListPlan:
    """The state of one ``list`` call between batches."""

    candidates: list[_Candidate]
    filter: dict[str, Any]
    limit: int | None
    covered: bool
    position: int = 0
    returned: int = 0
    done: bool = False
    writes_index: dict[str, dict[tuple[str, str], list[str]]] = field(default_factory=dict)
    writes_floor: dict[str, int | None] = field(default_factory=dict)
    """Per thread: the oldest ``created_at`` second its ``writes_index`` covers (None: all)."""
    writes_tags: dict[str, str] = field(default_factory=dict)
    bounded: bool = False
    """True when ``candidates`` came from an early-stopped listing (see :meth:`_newest_keys`)."""
    scopes: dict[str, Scope] = field(default_factory=dict)


def _tags(key: ItemKey) -> Mapping[str, str]:
    return key.tags or {}


def _cid_of(key: ItemKey) -> str:
    tag = _tags(key).get(TAG_ID, "")
    return unescape(tag) or tag


def _in_order(key: ItemKey) -> bool:
    """True unless the checkpoint was copied behind a newer one (``TAG_OUT_OF_ORDER``)."""
    return _tags(key).get(TAG_OUT_OF_ORDER) != "1"


def _pair(key: ItemKey) -> tuple[str, str]:
    tags = _tags(key)
    return tags.get(TAG_NS, ""), tags.get(TAG_ID, "")


def _configurable(config: RunnableConfig | None) -> Mapping[str, Any]:
    conf = (config or {}).get("configurable")
    if not isinstance(conf, Mapping):
        raise InvalidIdentifierError(
            "the config has no 'configurable' section; pass "
            "{'configurable': {'thread_id': '<your thread id>'}}"
        )
    return conf


def _thread_id(config: RunnableConfig | None) -> str:
    conf = _configurable(config)
    if "thread_id" not in conf or conf["thread_id"] is None:
        raise InvalidIdentifierError(
            "config['configurable']['thread_id'] is missing: a checkpointer stores state per "
            "thread, so pass {'configurable': {'thread_id': '<your thread id>'}}"
        )
    return _check_thread(conf["thread_id"])


def _check_thread(thread_id: object) -> str:
    if isinstance(thread_id, (int, UUID)) and not isinstance(thread_id, bool):
        thread_id = str(thread_id)
    return check_identifier(thread_id, "thread_id")


def _wanted_id(config: RunnableConfig) -> str | None:
    """The config's ``checkpoint_id`` (None when absent), checked to be encodable text."""
    wanted = get_checkpoint_id(config)
    return None if wanted is None else check_text(wanted, "checkpoint_id")


def _namespace(conf: Mapping[str, Any]) -> str:
    return check_text(conf.get("checkpoint_ns") or "", "checkpoint_ns")


def _matches(metadata: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(metadata.get(k) == v for k, v in wanted.items())


async def _bounded(coros: Iterable[Awaitable[T]], limit: int = _CONCURRENCY) -> list[T]:
    """Await ``coros`` concurrently, at most ``limit`` at a time, results in order."""
    semaphore = asyncio.Semaphore(limit)

    async def one(aw: Awaitable[T]) -> T:
        async with semaphore:
            return await aw

    return list(await asyncio.gather(*(one(c) for c in coros)))


class FoundryCheckpointer(CoreOwner, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer backed by Azure AI Foundry's durable state store.

    With no arguments it works everywhere: on a laptop (``FOUNDRY_HOSTING_ENVIRONMENT`` unset) the
    data lives in an embedded SQLite store under ``AGENTSERVER_STATE_ROOT`` (default
    ``~/.agentserver``); inside a Foundry-hosted agent it talks to the hosted state store with
    ``DefaultAzureCredential``. Sync (``invoke``/``stream``) and async (``ainvoke``/``astream``)
    graphs are both supported, from any thread or event loop.

    Each thread is one store named ``<store_prefix>/t/<thread id>``, always created with
    ``user_isolation=True``. Each checkpoint is one self-contained item, so with an
    ``item_ttl_seconds`` older checkpoints may expire while the newest stays resumable. Channel
    values larger than 256 KiB serialized are kept in the spill store (``LocalSpill`` by default
    in local mode; ``AzureBlobSpill`` when configured) and uploaded once per thread while they do
    not change. Without a spill store a checkpoint over the 1 MB item limit raises
    :class:`~foundry_checkpoint.errors.CheckpointTooLargeError` before anything is written.

    What the store must list on is kept in item tags, in clear: the namespace, checkpoint and
    parent ids, and the metadata ``source``, ``step`` and ``run_id``. Everything else
    (checkpoint, metadata, channel values, writes) goes through ``serde``, so an
    ``EncryptedSerializer`` encrypts it.

    Keyword arguments:
        store_prefix: prefix of every store name (default ``"langgraph"``).
        credential, endpoint: hosted mode only (defaults: ``DefaultAzureCredential`` and
            ``FOUNDRY_PROJECT_ENDPOINT``).
        user_id: the end user to partition by (hosted: sent as ``x-ms-user-id``; local: the
            partition of the embedded store). Leave it unset in a host serving many users: each
            call is then for the user of its request context (``docs/hosted.md``).
        item_ttl_seconds: idle expiry of items, fixed when a store is created (default 30 days;
            ``-1`` never expires).
        spill: where large values go (a :class:`~foundry_checkpoint.spill.SpillStore`).
        local_backend: ``"sqlite"`` (default, the embedded store) or ``"sdk"`` (the SDK's own
            local mode under an inter-process file lock).
        serde: the serializer. The default, :class:`~foundry_checkpoint.StrictSerializer`,
            decodes only LangGraph's safe types plus the allow-list the compiled graph adds
            through ``with_allowlist`` and refuses anything else with a
            :class:`~foundry_checkpoint.errors.CorruptPayloadError`, so whoever can write to the
            store cannot make a reader call arbitrary code. To encrypt, wrap it:
            ``EncryptedSerializer(cipher, StrictSerializer())``. To restore LangGraph's
            permissive decoding (trusted stores only), pass
            ``JsonPlusSerializer(allowed_msgpack_modules=True)``.
        **client_kwargs: passed to the state-store client (e.g. ``connection_verify``).

    Example:
        >>> from langgraph.graph import StateGraph, START, END
        >>> from typing_extensions import TypedDict
        >>> class State(TypedDict):
        ...     n: int
        >>> builder = StateGraph(State)
        >>> _ = builder.add_node("inc", lambda s: {"n": s["n"] + 1})
        >>> _ = builder.add_edge(START, "inc")
        >>> _ = builder.add_edge("inc", END)
        >>> with FoundryCheckpointer() as saver:  # doctest: +SKIP
        ...     graph = builder.compile(checkpointer=saver)
        ...     graph.invoke({"n": 1}, {"configurable": {"thread_id": "t-1"}})
        {'n': 2}
    """

    def __init__(
        self,
        *,
        store_prefix: str = "langgraph",
        credential: AsyncTokenCredential | None = None,
        endpoint: str | None = None,
        user_id: str | None = None,
        item_ttl_seconds: int = DEFAULT_ITEM_TTL_SECONDS,
        spill: SpillStore | None = None,
        local_backend: LocalBackend = "sqlite",
        serde: SerializerProtocol | None = None,
        **client_kwargs: Any,
    ) -> None:
        super().__init__(serde=StrictSerializer() if serde is None else serde)
        self._core = CheckpointCore(
            store_prefix=store_prefix,
            scope_word="thread",
            credential=credential,
            endpoint=endpoint,
            user_id=user_id,
            item_ttl_seconds=item_ttl_seconds,
            spill=spill,
            local_backend=local_backend,
            client_kwargs=client_kwargs,
        )
        # (user key, thread id) -> what this process knows; see _core.user_key
        self._threads: OrderedDict[tuple[str, str], _ThreadState] = OrderedDict()
        # checkpoints whose put is running in this process, and those that got writes before
        # their put started (LangGraph's async loop may submit put_writes first)
        self._pending: dict[_Token, asyncio.Future[None]] = {}
        self._early: OrderedDict[_Token, None] = OrderedDict()

    # -- lifecycle ------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"FoundryCheckpointer({self._core.describe()})"

    def _reset(self) -> None:
        self._threads.clear()

    # -- public API: sync faces -------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (the thread's latest without ``checkpoint_id``)."""
        return self._core.run(self._get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first; ``filter`` (metadata equality), then ``before``/``limit``.

        ``config=None`` lists every thread of this user (from the index).
        """
        plan = self._core.run(self._list_plan(config, filter, before, limit))
        while not plan.done:
            yield from self._core.run(self._list_next(plan))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint as one self-contained item; returns its config."""
        return self._core.run(self._put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes on the checkpoint named by ``config``."""
        self._core.run(self._put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write and spilled blob of ``thread_id`` (for this user)."""
        self._core.run(self._delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose ``metadata["run_id"]`` is in ``run_ids``,
        across every thread of this user."""
        self._core.run(self._delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another (ids and order kept)."""
        self._core.run(self._copy_thread(source_thread_id, target_thread_id))

    def prune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1
    ) -> None:
        """``"keep_latest"``: keep the newest ``keep`` checkpoints (and their writes) of the root
        namespace and of each ``checkpointer=True`` subgraph; ``"delete"``: delete the threads.

        The rules are PostgresSaver's: a finished subgraph call's namespace (``"child:<task>"``)
        is deleted with the checkpoint it started from, and a kept checkpoint whose parent is
        deleted gets ``parent_config`` ``None``. Before its parent goes, the history that its
        ``DeltaChannel`` values are rebuilt from (the nearest stored value and the writes since,
        what ``get_delta_channel_history`` returns) is copied into it byte for byte, so
        ``get_state`` and the next turn see the whole conversation. If that copy cannot be
        written (too large with no spill store), the call raises before anything is deleted.
        Spilled blobs nothing references any more are deleted once older than the ``gc``
        grace (a write in flight stores its blob first); younger ones are left to ``gc``.

        Example:
            >>> with FoundryCheckpointer() as saver:  # doctest: +SKIP
            ...     saver.prune(["t-1"])  # one checkpoint left per namespace
        """
        self._core.run(self._prune(thread_ids, strategy, keep))

    def list_threads(self) -> builtins.list[str]:
        """The ids of this user's threads, sorted (from the thread index; no checkpoint is read).

        Example:
            >>> with FoundryCheckpointer() as saver:  # doctest: +SKIP
            ...     saver.list_threads()
            ['support-42', 't-1']
        """
        return self._core.run(self._list_threads())

    def count_checkpoints(self, thread_id: str, *, checkpoint_ns: str | None = None) -> int:
        """How many checkpoints ``thread_id`` holds (in ``checkpoint_ns``; default: every
        namespace), counted from the store's key listing: no checkpoint is read or decoded.

        Example:
            >>> with FoundryCheckpointer() as saver:  # doctest: +SKIP
            ...     saver.count_checkpoints("t-1")
            3
        """
        return self._core.run(self._count_checkpoints(thread_id, checkpoint_ns))

    # -- public API: async faces ------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async form of :meth:`get_tuple`."""
        return await self._core.arun(self._get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async form of :meth:`list`."""
        plan = await self._core.arun(self._list_plan(config, filter, before, limit))
        while not plan.done:
            for item in await self._core.arun(self._list_next(plan)):
                yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async form of :meth:`put`."""
        return await self._core.arun(self._put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async form of :meth:`put_writes`."""
        await self._core.arun(self._put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """Async form of :meth:`delete_thread`."""
        await self._core.arun(self._delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async form of :meth:`delete_for_runs`."""
        await self._core.arun(self._delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async form of :meth:`copy_thread`."""
        await self._core.arun(self._copy_thread(source_thread_id, target_thread_id))

    async def aprune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1
    ) -> None:
        """Async form of :meth:`prune`."""
        await self._core.arun(self._prune(thread_ids, strategy, keep))

    async def alist_threads(self) -> builtins.list[str]:
        """Async form of :meth:`list_threads`."""
        return await self._core.arun(self._list_threads())

    async def acount_checkpoints(self, thread_id: str, *, checkpoint_ns: str | None = None) -> int:
        """Async form of :meth:`count_checkpoints`."""
        return await self._core.arun(self._count_checkpoints(thread_id, checkpoint_ns))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel, the writes since its nearest stored value along the parent chain.

        The result of ``BaseCheckpointSaver``'s default walk, read from the items directly
        (no channel value is loaded but the seeds). A checkpoint that ``prune`` or
        ``delete_for_runs`` made a root carries the history of its deleted ancestors, and the
        walk continues into it, so the channel rebuilds as it did before.
        """
        return self._core.run(self._delta_history(config, channels))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async form of :meth:`get_delta_channel_history`."""
        return await self._core.arun(self._delta_history(config, channels))

    def gc(
        self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, dry_run: bool = False
    ) -> GcReport:
        """Delete this user's spilled blobs that no checkpoint or write references any more.

        Only blobs last modified more than ``grace_seconds`` ago are taken, so a write still in
        flight (blob first, item second) is safe. ``delete_thread`` deletes a thread's blobs at
        once; ``prune`` and ``delete_for_runs`` delete those they orphan once older than the
        default grace, and leave younger ones to this; it also finds what expired items
        (``item_ttl_seconds``) or crashed writers left behind.

        Example:
            >>> with FoundryCheckpointer() as saver:  # doctest: +SKIP
            ...     report = saver.gc(dry_run=True)
            ...     print(len(report.deleted), "blobs would be deleted")
        """
        return self._core.run(
            self._core.gc(self._referenced, grace_seconds=grace_seconds, dry_run=dry_run)
        )

    async def agc(
        self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, dry_run: bool = False
    ) -> GcReport:
        """Async form of :meth:`gc`."""
        return await self._core.arun(
            self._core.gc(self._referenced, grace_seconds=grace_seconds, dry_run=dry_run)
        )

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``f"{n:032}.{random():016}"`` with ``n`` one more than the current version's.

        Example:
            >>> FoundryCheckpointer().get_next_version(None, None).startswith("0" * 31 + "1.")
            True
        """
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- implementation (runs on the core's private loop) -------------------------------------
    def _state(self, thread_id: str) -> _ThreadState:
        """The current user's cached knowledge of ``thread_id`` (bounded, least recent out)."""
        key = (self._core.user_key(), thread_id)
        state = self._threads.get(key)
        if state is None:
            state = self._threads[key] = _ThreadState()
            while len(self._threads) > _THREAD_CACHE:
                self._threads.popitem(last=False)
        else:
            self._threads.move_to_end(key)
        return state

    def _drop_state(self, thread_id: str) -> None:
        """Forget the current user's cached knowledge of ``thread_id``."""
        self._threads.pop((self._core.user_key(), thread_id), None)

    async def _list_threads(self) -> builtins.list[str]:
        return sorted(t for t in await self._core.scope_ids() if t is not None)

    async def _count_checkpoints(self, thread_id: str, ns: str | None) -> int:
        scope = await self._core.scope(_check_thread(thread_id), create=False)
        if scope is None:
            return 0
        tags = {TAG_KIND: KIND_CHECKPOINT}
        if ns is not None:
            tags[TAG_NS] = ns_tag(ns)
        return len(await scope.keys(tags))

    async def _latest_key(self, scope: Scope, ns: str) -> ItemKey | None:
        """The key of the newest checkpoint of ``ns``, from keys and tags only."""
        latest = await self._latest(scope, ns)
        return None if latest is None else latest.key

    async def _latest(self, scope: Scope, ns: str) -> _Latest | None:
        """The newest checkpoint key of ``ns`` and its writes keys, from one listing.

        ``list_keys`` orders by ``(created_at second, id)`` and the id is not write order, so
        every checkpoint key sharing the newest checkpoint's second is compared by checkpoint id
        (uuid6, time-ordered). The listing takes every item of the namespace (checkpoints and
        writes), newest first, down to the end of that second: the writes keys of the newest
        checkpoint created at or after it come with it. A writer tags a checkpoint ``ew=0`` when
        it made no writes for it before the checkpoint item existed (see :meth:`_put_writes`);
        otherwise (``ew=1``, or written by an older version) the caller lists its writes on
        their own. Further pages are read only while a page ends inside that second, so the cost
        does not grow with history.

        A checkpoint tagged out of order (``copy_thread`` wrote it behind a newer one) is never
        taken on its second alone: the listing goes on until the newest checkpoint id seen is an
        in-order checkpoint and its second is passed, as an in-order checkpoint has a larger id
        than every checkpoint of an older second.
        """
        first = _FIRST_PAGE_HOSTED if self._core.kind == "hosted" else _FIRST_PAGE_LOCAL
        page = await scope.store.list_keys(tags={TAG_NS: ns_tag(ns)}, limit=first, order="desc")
        best: ItemKey | None = None
        writes: builtins.list[ItemKey] = []
        while True:
            for key in page.keys:
                if best is not None and key.created_at < best.created_at and _in_order(best):
                    break
                kind = _tags(key).get(TAG_KIND)
                if kind == KIND_CHECKPOINT:
                    if best is None or _cid_of(key) > _cid_of(best):
                        best = key
                elif kind == KIND_WRITES:
                    writes.append(key)
            else:
                if page.has_more and page.last_id:
                    page = await scope.store.list_keys(
                        tags={TAG_NS: ns_tag(ns)}, limit=_PAGE, after=page.last_id, order="desc"
                    )
                    continue
            break
        if best is None:
            return None
        newest_key = best
        pair = _pair(newest_key)
        return _Latest(
            newest_key,
            [w.key for w in writes if _pair(w) == pair],
            _tags(newest_key).get(TAG_EARLY) == "0",
        )

    async def _read_record(self, scope: Scope, key: str) -> CheckpointRecord | None:
        found = await self._read_item(scope, key)
        return None if found is None else found[0]

    async def _read_item(self, scope: Scope, key: str) -> tuple[CheckpointRecord, str] | None:
        """A checkpoint item's record and etag (None when absent)."""
        item = await scope.store.get_item(key)
        if item is None:
            return None
        payload = await scope.decode(item.value, key=key)
        return unpack_checkpoint(payload, where=scope.where(key)), item.etag

    async def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = _thread_id(config)
        conf = _configurable(config)
        ns = _namespace(conf)
        wanted = _wanted_id(config)
        scope = await self._core.scope(thread_id, create=False)
        if scope is None:
            return None
        state = self._state(thread_id)
        found: tuple[CheckpointRecord, str] | None = None
        known: builtins.list[str] | None = None
        if wanted:
            found = await self._read_item(scope, checkpoint_key(ns, wanted))
            if found is not None and (found[0].ns, found[0].checkpoint_id) != (ns, wanted):
                found = None  # a hashed key that is not ours
        else:
            for _ in range(3):  # the newest may be deleted between listing and reading
                latest = await self._latest(scope, ns)
                if latest is None:
                    return None
                known = latest.writes if latest.complete else None
                head = state.heads.get(ns)
                if (
                    head is not None
                    and state.etags.get(ns) == latest.key.etag
                    and checkpoint_key(ns, head.checkpoint_id) == latest.key.key
                ):
                    # Items are replaced only with a new etag: this is the item as stored.
                    found = head, latest.key.etag
                else:
                    found = await self._read_item(scope, latest.key.key)
                if found is not None:
                    break
        if found is None:
            return None
        record, etag = found
        writes = await self._pending_writes(scope, ns, record.checkpoint_id, known)
        metadata = self._loads_dict(record.metadata, "metadata")
        result = await self._tuple(scope, thread_id, record, metadata, writes)
        state.set_head(ns, record, etag)
        return result

    def _loads(self, typed: tuple[str, bytes]) -> Any:
        """``serde.loads_typed``; whatever it raises becomes a ``CorruptPayloadError``."""
        try:
            return self.serde.loads_typed(typed)
        except CorruptPayloadError:
            raise
        except Exception as exc:  # the serializer's errors are as varied as its inputs
            raise CorruptPayloadError(
                f"A stored {typed[0]!r} value cannot be decoded by {type(self.serde).__name__}: "
                f"{type(exc).__name__}: {exc}. Nothing was called from it."
            ) from exc

    def _loads_dict(self, typed: tuple[str, bytes], what: str) -> Any:
        """:meth:`_loads` of a value that must be a mapping (a checkpoint, its metadata)."""
        value = self._loads(typed)
        if not isinstance(value, dict):
            raise CorruptPayloadError(
                f"A stored {what} decodes to a {type(value).__name__}, not a mapping; the item "
                "was changed outside foundry-checkpoint"
            )
        return value

    async def _tuple(
        self,
        scope: Scope,
        thread_id: str,
        record: CheckpointRecord,
        metadata: CheckpointMetadata,
        writes: builtins.list[PendingWrite],
    ) -> CheckpointTuple:
        checkpoint: Checkpoint = self._loads_dict(record.checkpoint, "checkpoint")
        checkpoint["channel_values"] = await self._load_values(scope, record)
        ns = record.ns
        parent: RunnableConfig | None = None
        if record.parent_id:
            parent = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": record.parent_id,
                }
            }
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": record.checkpoint_id,
                }
            },
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=parent,
            pending_writes=writes,
        )

    async def _load_values(self, scope: Scope, record: CheckpointRecord) -> dict[str, Any]:
        return await self._load_entries(scope, record, record.channels)

    async def _load_entries(
        self, scope: Scope, record: CheckpointRecord, entries: Mapping[str, ChannelEntry]
    ) -> dict[str, Any]:
        """The values of ``entries`` (channel entries of ``record``, or of its history)."""
        spilled = {e.digest for e in entries.values() if e.digest is not None}
        blobs: dict[str, bytes] = {}
        if spilled:
            spill = self._core.spill
            namespace = await scope.namespace(create=False)
            where = scope.where(checkpoint_key(record.ns, record.checkpoint_id))
            if spill is None or namespace is None:
                raise MissingBlobError(
                    f"{where} keeps channel values in the spill store, but "
                    + ("no spill store is configured" if spill is None else "its namespace is gone")
                    + ". Configure the spill store the checkpoint was written with."
                )
            ordered = sorted(spilled)
            try:
                got = await _bounded(spill.get(namespace, d) for d in ordered)
            except MissingBlobError as exc:
                raise MissingBlobError(f"{where}: {exc}") from exc
            blobs = dict(zip(ordered, got, strict=True))
        values: dict[str, Any] = {}
        for name, entry in entries.items():
            data = entry.data if entry.digest is None else blobs[entry.digest]
            assert data is not None
            values[name] = self._loads((entry.type, data))
        return values

    async def _pending_writes(
        self, scope: Scope, ns: str, checkpoint_id: str, known: builtins.list[str] | None
    ) -> builtins.list[PendingWrite]:
        """The pending writes of a checkpoint in ``(task_path, task_id, idx)`` order.

        ``known`` is the list of its writes keys when the caller already listed them.
        """
        rows = await self._raw_pending(scope, ns, checkpoint_id, known)
        return [
            (task_id, channel, self._loads((type_, data))) for task_id, channel, type_, data in rows
        ]

    async def _raw_pending(
        self, scope: Scope, ns: str, checkpoint_id: str, known: builtins.list[str] | None
    ) -> builtins.list[tuple[str, str, str, bytes]]:
        """``(task_id, channel, type, bytes)`` of a checkpoint's writes, in pending-writes order."""
        if known is None:
            tags = {TAG_KIND: KIND_WRITES, TAG_NS: ns_tag(ns), TAG_ID: id_tag(checkpoint_id)}
            known = [k.key for k in await scope.keys(tags)]
        if not known:
            return []
        records = await _bounded(self._read_writes(scope, key) for key in known)
        rows: builtins.list[tuple[tuple[str, str, int], tuple[str, str, str, bytes]]] = []
        for rec in records:
            if rec is None or (rec.ns, rec.checkpoint_id) != (ns, checkpoint_id):
                continue
            for idx, (channel, type_, data) in rec.writes.items():
                order = writes_sort_key(rec.task_path, rec.task_id, idx)
                rows.append((order, (rec.task_id, channel, type_, data)))
        rows.sort(key=lambda row: row[0])
        return [write for _, write in rows]

    async def _read_writes(self, scope: Scope, key: str) -> WritesRecord | None:
        item = await scope.store.get_item(key)
        if item is None:
            return None
        payload = await scope.decode(item.value, key=key)
        return unpack_writes(payload, where=scope.where(key))

    # -- list -------------------------------------------------------------------------------
    async def _list_plan(
        self,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> _ListPlan:
        wanted = dict(filter or {})
        tags = {TAG_KIND: KIND_CHECKPOINT}
        covered = True
        for name, value in wanted.items():
            if name == "source" and isinstance(value, str):
                tags[TAG_SOURCE] = tag_value(value)
            elif name == "step" and step_tag(value) is not None:
                tags[TAG_STEP] = str(step_tag(value))
            elif name == "run_id" and isinstance(value, str):
                tags[TAG_RUN] = tag_value(value)
            else:
                covered = False
        if config is not None:
            threads = [_thread_id(config)]
            conf = _configurable(config)
            ns = conf.get("checkpoint_ns")
            if ns is not None:
                tags[TAG_NS] = ns_tag(_namespace(conf))
            if wanted_id := _wanted_id(config):
                tags[TAG_ID] = id_tag(wanted_id)
        else:
            threads = [t for t in await self._core.scope_ids() if t is not None]
        before_id = _wanted_id(before) if before else None
        plan = _ListPlan([], wanted, limit, covered)
        if limit is not None and limit <= 0:
            plan.done = True
            return plan
        if TAG_NS in tags:
            plan.writes_tags[TAG_NS] = tags[TAG_NS]
        # Early stop within one namespace only: puts of one namespace are ordered, while a
        # subgraph's puts may land concurrently with its caller's.
        flat = TAG_NS in tags and covered and limit is not None
        for thread_id in threads:
            scope = await self._core.scope(thread_id, create=False)
            if scope is None:
                continue
            plan.scopes[thread_id] = scope
            if flat and limit is not None:
                keys, plan.bounded = await self._newest_keys(scope, tags, limit, before_id)
            else:
                keys = await scope.keys(tags)
            found = [_Candidate(thread_id, k, _cid_of(k)) for k in keys]
            if before_id:
                found = [c for c in found if c.checkpoint_id < before_id]
            found.sort(key=lambda c: c.checkpoint_id, reverse=True)
            plan.candidates.extend(found)
        plan.done = not plan.candidates
        return plan

    async def _newest_keys(
        self, scope: Scope, tags: Mapping[str, str], limit: int, before_id: str | None
    ) -> tuple[builtins.list[ItemKey], bool]:
        """The checkpoint keys matching ``tags`` that can be among the ``limit`` newest (by
        checkpoint id, below ``before_id``), and whether the listing stopped early.

        The listing is in ``created_at`` seconds, newest first. Once ``limit`` candidates are
        in hand and the listing has passed the second of the ``limit``-th of them by id, and
        that one is in order (no ``TAG_OUT_OF_ORDER``), no unlisted key can rank above it: an
        in-order checkpoint has a larger id than every checkpoint of an older second. Otherwise
        the listing goes on, to the end at worst.
        """
        found: builtins.list[ItemKey] = []
        after: str | None = None
        while True:
            page = await scope.store.list_keys(tags=tags, limit=_PAGE, after=after, order="desc")
            found.extend(k for k in page.keys if before_id is None or _cid_of(k) < before_id)
            if not page.has_more or not page.last_id:
                return found, False
            if len(found) >= limit:
                cut = heapq.nlargest(limit, found, key=_cid_of)[-1]
                if _in_order(cut) and page.keys and page.keys[-1].created_at < cut.created_at:
                    return found, True
            after = page.last_id

    async def _list_next(self, plan: _ListPlan) -> builtins.list[CheckpointTuple]:
        """The next batch of ``list`` results (reads items only for candidates it needs)."""
        if plan.done:
            return []
        remaining = None if plan.limit is None else plan.limit - plan.returned
        size = _LIST_CHUNK
        if plan.covered and remaining is not None:
            size = min(size, remaining)
        chunk = plan.candidates[plan.position : plan.position + size]
        plan.position += len(chunk)
        scopes = plan.scopes
        records = await _bounded(self._read_record(scopes[c.thread_id], c.key.key) for c in chunk)
        matched: builtins.list[tuple[_Candidate, CheckpointRecord, CheckpointMetadata]] = []
        for cand, record in zip(chunk, records, strict=True):
            if record is None:
                continue
            metadata: CheckpointMetadata = self._loads_dict(record.metadata, "metadata")
            if _matches(metadata, plan.filter):
                matched.append((cand, record, metadata))
        if remaining is not None:
            matched = matched[:remaining]
        # Listing a thread's writes keys once beats one listing per checkpoint past a few.
        expected = len(plan.candidates) - plan.position + len(matched)
        if remaining is not None:
            expected = min(expected, remaining)
        use_index = expected > _WRITES_INDEX_FROM
        # After an early-stopped listing, the writes index is listed down to the oldest second
        # of the checkpoints it serves: those tagged ew=0 have all their writes at or after it.
        floors: dict[str, int | None] = {}
        if use_index:
            for cand, _, _ in matched:
                if not plan.bounded:
                    floors[cand.thread_id] = None
                elif _tags(cand.key).get(TAG_EARLY) == "0":
                    old = floors.get(cand.thread_id, cand.key.created_at)
                    floors[cand.thread_id] = None if old is None else min(old, cand.key.created_at)
            for thread_id, floor in floors.items():
                await self._writes_index(plan, scopes[thread_id], thread_id, floor)

        async def build(
            cand: _Candidate, record: CheckpointRecord, metadata: CheckpointMetadata
        ) -> CheckpointTuple:
            scope = scopes[cand.thread_id]
            known = None
            indexed = not plan.bounded or _tags(cand.key).get(TAG_EARLY) == "0"
            if cand.thread_id in floors and indexed:
                index = await self._writes_index(
                    plan, scope, cand.thread_id, floors[cand.thread_id]
                )
                known = index.get((ns_tag(record.ns), id_tag(record.checkpoint_id)), [])
            writes = await self._pending_writes(scope, record.ns, record.checkpoint_id, known)
            return await self._tuple(scope, cand.thread_id, record, metadata, writes)

        results = await _bounded(build(*row) for row in matched)
        plan.returned += len(results)
        if plan.position >= len(plan.candidates) or (
            plan.limit is not None and plan.returned >= plan.limit
        ):
            plan.done = True
        return results

    async def _writes_index(
        self, plan: _ListPlan, scope: Scope, thread_id: str, floor: int | None
    ) -> dict[tuple[str, str], builtins.list[str]]:
        """The writes keys of a thread by (namespace, checkpoint id) tags: all of them, or (with
        ``floor``) at least those created at or after that second."""
        index = plan.writes_index.get(thread_id)
        if index is not None and thread_id in plan.writes_floor:
            have = plan.writes_floor[thread_id]
            if have is None or (floor is not None and have <= floor):
                return index
        index = {}
        tags = {TAG_KIND: KIND_WRITES, **plan.writes_tags}
        after: str | None = None
        while True:
            page = await scope.store.list_keys(tags=tags, limit=_PAGE, after=after, order="desc")
            for key in page.keys:
                index.setdefault(_pair(key), []).append(key.key)
            if not page.has_more or not page.last_id:
                break
            if floor is not None and page.keys and page.keys[-1].created_at < floor:
                break
            after = page.last_id
        plan.writes_index[thread_id] = index
        plan.writes_floor[thread_id] = floor
        return index

    # -- put --------------------------------------------------------------------------------
    async def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id = _thread_id(config)
        conf = _configurable(config)
        ns = _namespace(conf)
        parent_id = conf.get("checkpoint_id") or None
        checkpoint_id = check_identifier(checkpoint.get("id"), "checkpoint id")
        # Before any await: a put_writes of this checkpoint from now on waits for the item.
        token = (self._core.user_key(), thread_id, ns, checkpoint_id)
        early = token in self._early
        self._early.pop(token, None)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending[token] = done
        try:
            return await self._put_item(
                config,
                thread_id,
                ns,
                parent_id,
                checkpoint_id,
                checkpoint,
                metadata,
                new_versions,
                early=early,
            )
        finally:
            if self._pending.get(token) is done:
                del self._pending[token]
            done.set_result(None)

    async def _put_item(
        self,
        config: RunnableConfig,
        thread_id: str,
        ns: str,
        parent_id: str | None,
        checkpoint_id: str,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        *,
        early: bool,
    ) -> RunnableConfig:
        scope = await self._core.scope(thread_id)
        state = self._state(thread_id)
        rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        md = get_serializable_checkpoint_metadata(config, metadata)
        channels, absent = await self._channel_table(
            scope, state, ns, parent_id, checkpoint, new_versions
        )
        record = CheckpointRecord(
            ns=ns,
            checkpoint_id=checkpoint_id,
            parent_id=parent_id,
            checkpoint=self.serde.dumps_typed(rest),
            metadata=self.serde.dumps_typed(md),
            channels=channels,
            absent=absent,
        )
        key = checkpoint_key(ns, checkpoint_id)
        tags = {
            TAG_KIND: KIND_CHECKPOINT,
            TAG_NS: ns_tag(ns),
            TAG_ID: id_tag(checkpoint_id),
            TAG_SPILL: "1" if record.digests() else "0",
            TAG_EARLY: "1" if early else "0",
        }
        if parent_id:
            tags[TAG_PARENT] = id_tag(parent_id)
        owner = call_owner(md.get("parents")) if is_call_namespace(ns) else None
        if owner:
            tags[TAG_OWNER] = id_tag(owner)
        source = md.get("source")
        if isinstance(source, str):
            tags[TAG_SOURCE] = tag_value(source)
        step = step_tag(md.get("step"))
        if step is not None:
            tags[TAG_STEP] = step
        run_id = md.get("run_id")
        if run_id is not None and str(run_id):
            tags[TAG_RUN] = tag_value(str(run_id))
        value = await scope.encode(key, pack_checkpoint(record), tags=tags)
        if _codec.spilled_digest(value):
            tags[TAG_SPILL] = "1"
        await scope.touch()
        ref = await scope.store.set_item(key, value, tags=tags)
        state.set_head(ns, record, ref.etag)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    async def _channel_table(
        self,
        scope: Scope,
        state: _ThreadState,
        ns: str,
        parent_id: str | None,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
    ) -> tuple[dict[str, ChannelEntry], dict[str, str | int | float]]:
        """Every channel value the checkpoint needs, at the versions it names, and the channels
        it versions without a value.

        Channels in ``new_versions`` are serialized from ``channel_values`` (a channel without a
        value there is absent). Unchanged channels are carried from the parent checkpoint: from
        memory when this process wrote or read it last, else by reading the parent item; a
        channel found nowhere at its version falls back to ``channel_values``.
        """
        values = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        head = state.heads.get(ns)
        known = [head] if head is not None and parent_id and head.checkpoint_id == parent_id else []
        table: dict[str, ChannelEntry] = {}
        absent: dict[str, str | int | float] = {}
        fresh: builtins.list[str] = []
        missing = [name for name in versions if name not in new_versions]
        for name in versions:
            if name in new_versions:
                if name in values:
                    fresh.append(name)
                else:
                    absent[name] = versions[name]
        if missing and not known and parent_id:
            parent = await self._read_record(scope, checkpoint_key(ns, parent_id))
            known = [parent] if parent is not None else []
        for source in known:
            for name in builtins.list(missing):
                entry = source.channels.get(name)
                if entry is not None and entry.version == versions[name]:
                    table[name] = entry
                    missing.remove(name)
                elif name in source.absent and source.absent[name] == versions[name]:
                    absent[name] = versions[name]
                    missing.remove(name)
        for name in missing:
            if name in values:
                fresh.append(name)
            else:
                absent[name] = versions[name]
        made = await _bounded(self._entry(scope, versions[name], values[name]) for name in fresh)
        table.update(zip(fresh, made, strict=True))
        return {name: table[name] for name in versions if name in table}, absent

    async def _entry(self, scope: Scope, version: str | int | float, value: Any) -> ChannelEntry:
        type_, data = self.serde.dumps_typed(value)
        spill = self._core.spill
        if spill is None or len(data) <= SPILL_THRESHOLD:
            return ChannelEntry(version, type_, data, None, len(data))
        digest = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())
        namespace = await scope.namespace(create=True)
        if namespace is None:  # pragma: no cover - create=True always yields one
            raise FoundryCheckpointError(f"no spill namespace for {scope.where('-')}")
        # Blob first, item second: an item never references a blob that was not stored. A
        # blob already there (same content) is not uploaded again, only refreshed.
        await spill.put(namespace, digest, data)
        return ChannelEntry(version, type_, None, digest, len(data))

    # -- put_writes -------------------------------------------------------------------------
    async def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        thread_id = _thread_id(config)
        conf = _configurable(config)
        ns = _namespace(conf)
        checkpoint_id = conf.get("checkpoint_id")
        if not checkpoint_id:
            raise InvalidIdentifierError(
                "put_writes needs config['configurable']['checkpoint_id'] (the checkpoint the "
                "writes belong to)"
            )
        check_identifier(checkpoint_id, "checkpoint_id")
        check_identifier(task_id, "task_id")
        if not writes:
            return
        await self._after_own_put(thread_id, ns, checkpoint_id)
        new: dict[int, tuple[str, str, bytes]] = {}
        for idx, (channel, value) in enumerate(writes):
            new[WRITES_IDX_MAP.get(channel, idx)] = (channel, *self.serde.dumps_typed(value))
        scope = await self._core.scope(thread_id)
        key = writes_key(ns, checkpoint_id, task_id)
        tags = {TAG_KIND: KIND_WRITES, TAG_NS: ns_tag(ns), TAG_ID: id_tag(checkpoint_id)}
        record = WritesRecord(ns, checkpoint_id, task_id, task_path, new)
        value, tags = await self._encode_writes(scope, key, record, tags)
        await scope.touch()
        if await create_item(scope.store, key, value, tags=tags):
            return
        for _ in range(_MERGE_ATTEMPTS):
            item = await scope.store.get_item(key)
            if item is None:
                if await create_item(scope.store, key, value, tags=tags):
                    return
                continue
            old = unpack_writes(await scope.decode(item.value, key=key), where=scope.where(key))
            merged = dict(old.writes)
            changed = task_path != old.task_path
            for idx, write in new.items():
                if idx < 0 or idx not in merged:
                    merged[idx] = write
                    changed = True
            if not changed:
                return
            record = WritesRecord(ns, checkpoint_id, task_id, task_path, merged)
            merged_value, merged_tags = await self._encode_writes(scope, key, record, tags)
            try:
                await scope.store.set_item(key, merged_value, tags=merged_tags, if_match=item.etag)
                return
            except FoundryStoragePreconditionError:
                continue
        raise FoundryCheckpointError(
            f"could not merge the writes of task {task_id!r} into {scope.where(key)}: it kept "
            "changing under concurrent writers; retry the step"
        )

    async def _after_own_put(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """Order this write after the put of its checkpoint, as far as this process knows.

        A put of the checkpoint running here is waited for, so the writes item is created after
        the checkpoint item. A checkpoint this process neither wrote nor read may still be on
        its way (LangGraph's async loop submits ``put_writes`` without waiting for ``put``): it
        is noted, and that put then tags its item ``ew=1`` so that readers list its writes on
        their own (see :meth:`_latest`). Run before the writes item is created, with no await
        before the bookkeeping.
        """
        token = (self._core.user_key(), thread_id, ns, checkpoint_id)
        pending = self._pending.get(token)
        if pending is not None:
            await asyncio.shield(pending)
            return
        head = self._state(thread_id).heads.get(ns)
        if head is not None and head.checkpoint_id == checkpoint_id:
            return  # written (or read) here: the item exists
        self._early[token] = None
        self._early.move_to_end(token)
        while len(self._early) > _EARLY_BOUND:
            self._early.popitem(last=False)

    async def _encode_writes(
        self, scope: Scope, key: str, record: WritesRecord, tags: Mapping[str, str]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        out = {**tags, TAG_SPILL: "0"}
        value = await scope.encode(key, pack_writes(record), tags=out)
        if _codec.spilled_digest(value):
            out[TAG_SPILL] = "1"
        return value, out

    # -- deletion, copy, prune ----------------------------------------------------------------
    async def _delete_thread(self, thread_id: str) -> None:
        thread_id = _check_thread(thread_id)
        self._drop_state(thread_id)
        scope = await self._core.scope(thread_id, create=False)
        if scope is None:
            await self._core.unregister(thread_id)
            return
        await scope.purge()
        self._drop_state(thread_id)

    async def _retire(
        self,
        scope: Scope,
        thread_id: str,
        keys: builtins.list[ItemKey],
        doomed: set[str],
        entries: builtins.list[Entry] | None = None,
    ) -> None:
        """Delete the checkpoints ``doomed`` (item keys) of a thread, with the rules of
        :func:`~foundry_checkpoint._lg_prune.plan`: the subgraph calls they end go too, and the
        survivors they orphan become roots that carry their ``DeltaChannel`` history.

        Every orphan is rewritten before anything is deleted, so a failure leaves the thread
        whole. Spilled blobs are collected with the ``gc`` grace.
        """
        cutoff = time.time() - DEFAULT_GC_GRACE_SECONDS
        checkpoints = [k for k in keys if _tags(k).get(TAG_KIND) == KIND_CHECKPOINT]
        if entries is None:
            entries = await self._entries(scope, checkpoints)
        todo = plan(entries, doomed)
        self._drop_state(thread_id)
        if todo.orphans:
            tags_of = {k.key: _tags(k) for k in checkpoints}
            detached = [await self._detach(scope, e, tags_of[e.key]) for e in todo.orphans]
            await _bounded(self._write_detached(scope, *d) for d in detached if d is not None)
        gone = {_pair(k) for k in checkpoints if k.key in todo.doomed}
        items = [
            k
            for k in keys
            if k.key in todo.doomed or (_tags(k).get(TAG_KIND) == KIND_WRITES and _pair(k) in gone)
        ]
        if not items:
            return
        await _bounded(scope.store.delete_item(k.key) for k in items)
        self._drop_state(thread_id)
        if any(_tags(k).get(TAG_SPILL) == "1" for k in items):
            await self._collect_blobs(scope, cutoff)

    async def _entries(self, scope: Scope, keys: builtins.list[ItemKey]) -> builtins.list[Entry]:
        """The :class:`Entry` of each checkpoint key, from tags (items read only when a tag was
        hashed, or a subgraph call's checkpoint predates the owner tag)."""
        records: dict[str, CheckpointRecord | None] = {}

        async def record(key: ItemKey) -> CheckpointRecord | None:
            if key.key not in records:
                records[key.key] = await self._read_record(scope, key.key)
            return records[key.key]

        owners: dict[str, str | None] = {}
        out: builtins.list[Entry] = []
        for key in keys:
            tags = _tags(key)
            ns_text = unescape(tags.get(TAG_NS, ""))
            parent_tag = tags.get(TAG_PARENT)
            parent = unescape(parent_tag) if parent_tag else None
            cid = _cid_of(key)
            if ns_text is None or not ns_text.startswith("n") or (parent_tag and parent is None):
                rec = await record(key)
                if rec is None:
                    continue
                ns, parent, cid = rec.ns, rec.parent_id, rec.checkpoint_id
            else:
                ns = ns_text[1:]
            owner: str | None = None
            if is_call_namespace(ns):
                owner_tag = tags.get(TAG_OWNER)
                owner = unescape(owner_tag) if owner_tag else None
                if owner is None:  # written before the owner tag: one read per call namespace
                    if ns not in owners:
                        rec = await record(key)
                        md = self._loads(rec.metadata) if rec is not None else {}
                        owners[ns] = call_owner(md.get("parents"))
                    owner = owners[ns]
            out.append(Entry(key.key, ns, cid, parent, owner))
        return out

    async def _detach(
        self, scope: Scope, entry: Entry, listed_tags: Mapping[str, str]
    ) -> tuple[str, dict[str, Any], dict[str, str], str] | None:
        """The new value of an orphaned checkpoint: no parent, and the ``DeltaChannel`` history
        of its (still readable) ancestors copied in. None when it is gone already."""
        item = await scope.store.get_item(entry.key)
        if item is None:
            return None
        payload = await scope.decode(item.value, key=entry.key)
        record = unpack_checkpoint(payload, where=scope.where(entry.key))
        history = await self._raw_history(scope, record, builtins.list(record.absent))
        kept = {
            name: base for name, base in history.items() if base.seed is not None or base.writes
        }
        new = replace(record, parent_id=None, history=kept)
        tags = dict(listed_tags)
        tags.pop(TAG_PARENT, None)
        tags[TAG_SPILL] = "1" if new.digests() else "0"
        value = await scope.encode(entry.key, pack_checkpoint(new), tags=tags)
        if _codec.spilled_digest(value):
            tags[TAG_SPILL] = "1"
        return entry.key, value, tags, item.etag

    async def _write_detached(
        self, scope: Scope, key: str, value: dict[str, Any], tags: dict[str, str], etag: str
    ) -> None:
        try:
            await scope.store.set_item(key, value, tags=tags, if_match=etag)
        except FoundryStoragePreconditionError:
            raise FoundryCheckpointError(
                f"{scope.where(key)} changed while it was being pruned; nothing was deleted. "
                "Retry the prune."
            ) from None

    async def _raw_history(
        self, scope: Scope, record: CheckpointRecord, channels: Sequence[str]
    ) -> dict[str, DeltaBase]:
        """What ``get_delta_channel_history`` collects for ``channels`` above ``record``, raw.

        The walk of ``BaseCheckpointSaver.get_delta_channel_history``: from the parent of
        ``record`` up, each checkpoint's pending writes (newest first), stopping per channel at
        the first checkpoint that stores a value for it. A checkpoint carrying the history of
        deleted ancestors (``record.history``) ends the walk for those channels.
        """
        remaining = dict.fromkeys(channels)
        seeds: dict[str, ChannelEntry] = {}
        collected: dict[str, builtins.list[tuple[str, str, bytes]]] = {c: [] for c in channels}

        def absorb(rec: CheckpointRecord) -> None:
            for name in builtins.list(remaining):
                base = rec.history.get(name)
                if base is not None:
                    collected[name].extend(reversed(base.writes))
                    if base.seed is not None:
                        seeds[name] = base.seed
                    del remaining[name]

        absorb(record)
        cursor = record.parent_id
        seen: set[str] = set()
        while cursor and remaining and cursor not in seen:
            seen.add(cursor)
            rec = await self._read_record(scope, checkpoint_key(record.ns, cursor))
            if rec is None or (rec.ns, rec.checkpoint_id) != (record.ns, cursor):
                break
            for task_id, channel, type_, data in reversed(
                await self._raw_pending(scope, rec.ns, rec.checkpoint_id, None)
            ):
                if channel in remaining:
                    collected[channel].append((task_id, type_, data))
            for name in builtins.list(remaining):
                if name in rec.channels:
                    seeds[name] = rec.channels[name]
                    del remaining[name]
            absorb(rec)
            cursor = rec.parent_id
        return {
            name: DeltaBase(seeds.get(name), tuple(reversed(collected[name]))) for name in channels
        }

    async def _delta_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        if not channels:
            return {}
        thread_id = _thread_id(config)
        ns = _namespace(_configurable(config))
        wanted = _wanted_id(config)
        scope = await self._core.scope(thread_id, create=False)
        if scope is None:
            return {name: {"writes": []} for name in channels}
        record: CheckpointRecord | None = None
        if wanted:
            record = await self._read_record(scope, checkpoint_key(ns, wanted))
            if record is not None and (record.ns, record.checkpoint_id) != (ns, wanted):
                record = None
        else:
            key = await self._latest_key(scope, ns)
            record = await self._read_record(scope, key.key) if key is not None else None
        if record is None:
            return {name: {"writes": []} for name in channels}
        raw = await self._raw_history(scope, record, channels)
        seeds = await self._load_entries(
            scope, record, {n: b.seed for n, b in raw.items() if b.seed is not None}
        )
        out: dict[str, DeltaChannelHistory] = {}
        for name in channels:
            entry: DeltaChannelHistory = {
                "writes": [
                    (task_id, name, self._loads((type_, data)))
                    for task_id, type_, data in raw[name].writes
                ]
            }
            if name in seeds:
                entry["seed"] = seeds[name]
            out[name] = entry
        return out

    async def _collect_blobs(self, scope: Scope, cutoff: float) -> None:
        """Delete the thread's spilled blobs that no remaining item references.

        Only blobs last modified before ``cutoff`` (the ``gc`` grace before the deletion
        started) are taken. A write in flight stores its blob first and its item second: a
        blob it uploaded (or reused, which refreshes its modification time) before a prune
        started may be referenced by an item written after the prune listed the items; the
        grace leaves such blobs to ``gc``.
        """
        spill = self._core.spill
        if spill is None:
            return
        namespace = await scope.namespace(create=False)
        if namespace is None:
            return
        keep = await self._referenced(scope)
        doomed = [
            b.digest
            for b in await spill.list(namespace)
            if b.digest not in keep and b.last_modified < cutoff
        ]
        if doomed:
            await spill.delete(namespace, doomed)

    async def _referenced(self, scope: Scope) -> set[str]:
        """Every spilled blob the thread's items reference.

        Items that reference blobs (a spilled item, or spilled channel values) carry the tag
        ``sp=1``, so only those are read.
        """
        holders = [k for k in await scope.keys() if _tags(k).get(TAG_SPILL) == "1"]

        async def of(key: ItemKey) -> set[str]:
            item = await scope.store.get_item(key.key)
            if item is None:
                return set()
            found: set[str] = set()
            digest = _codec.spilled_digest(item.value)
            if digest:
                found.add(digest)
            if _tags(key).get(TAG_KIND) == KIND_CHECKPOINT:
                payload = await scope.decode(item.value, key=key.key)
                found |= unpack_checkpoint(payload, where=scope.where(key.key)).digests()
            return found

        return set().union(*await _bounded(of(k) for k in holders))

    async def _delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {tag_value(str(r)) for r in run_ids}
        if not wanted:
            return
        for thread_id in await self._core.scope_ids():
            if thread_id is None:
                continue
            scope = await self._core.scope(thread_id, create=False)
            if scope is None:
                continue
            if len(wanted) <= _WRITES_INDEX_FROM:
                checkpoints: builtins.list[ItemKey] = []
                for run in sorted(wanted):
                    checkpoints += await scope.keys({TAG_KIND: KIND_CHECKPOINT, TAG_RUN: run})
            else:
                checkpoints = await scope.keys({TAG_KIND: KIND_CHECKPOINT})
            doomed = {k.key for k in checkpoints if _tags(k).get(TAG_RUN) in wanted}
            if doomed:
                await self._retire(scope, thread_id, await scope.keys(), doomed)

    async def _prune(self, thread_ids: Sequence[str], strategy: str, keep: int) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive number of checkpoints, got {keep!r}")
        for raw in thread_ids:
            thread_id = _check_thread(raw)
            if strategy == "delete":
                await self._delete_thread(thread_id)
                continue
            scope = await self._core.scope(thread_id, create=False)
            if scope is None:
                continue
            keys = await scope.keys()
            checkpoints = [k for k in keys if _tags(k).get(TAG_KIND) == KIND_CHECKPOINT]
            # As "latest": by checkpoint id once a copy put checkpoints out of order.
            copied = not all(_in_order(k) for k in checkpoints)
            order = {k.key: (0 if copied else k.created_at, _cid_of(k)) for k in checkpoints}
            entries = await self._entries(scope, checkpoints)
            kept = newest(entries, keep, order)
            doomed = {k.key for k in checkpoints if k.key not in kept}
            await self._retire(scope, thread_id, keys, doomed, entries)

    async def _copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source_id = _check_thread(source_thread_id)
        target_id = _check_thread(target_thread_id)
        if source_id == target_id:
            return
        source = await self._core.scope(source_id, create=False)
        if source is None:
            return
        keys = await source.keys()
        if not keys:
            return
        target = await self._core.scope(target_id)
        held = [_cid_of(k) for k in await target.keys({TAG_KIND: KIND_CHECKPOINT})]
        ceiling = max(held, default="")
        checkpoints = sorted(
            (k for k in keys if _tags(k).get(TAG_KIND) == KIND_CHECKPOINT), key=_cid_of
        )
        writes: dict[tuple[str, str], builtins.list[ItemKey]] = {}
        for key in keys:
            if _tags(key).get(TAG_KIND) == KIND_WRITES:
                writes.setdefault(_pair(key), []).append(key)
        self._drop_state(target_id)
        copied: set[str] = set()
        for key in checkpoints:
            # One at a time, oldest first, so copies above the target's newest id stay in order.
            # One that the target already has a newer checkpoint than is out of order there.
            await self._copy_item(source, target, key, copied, _cid_of(key) < ceiling)
            await _bounded(
                self._copy_item(source, target, w, copied) for w in writes.get(_pair(key), [])
            )

    async def _copy_item(
        self,
        source: Scope,
        target: Scope,
        key: ItemKey,
        copied: set[str],
        out_of_order: bool = False,
    ) -> None:
        item = await source.store.get_item(key.key)
        if item is None:
            return
        payload = await source.decode(item.value, key=key.key)
        tags = dict(_tags(key))
        tags[TAG_SPILL] = "0"
        tags.pop(TAG_OUT_OF_ORDER, None)
        if out_of_order:
            tags[TAG_OUT_OF_ORDER] = "1"
        if tags.get(TAG_KIND) == KIND_CHECKPOINT:
            digests = unpack_checkpoint(payload, where=source.where(key.key)).digests()
            if digests:
                tags[TAG_SPILL] = "1"
                await self._copy_blobs(source, target, digests - copied)
                copied |= digests
        value = await target.encode(key.key, payload, tags=tags)
        if _codec.spilled_digest(value):
            tags[TAG_SPILL] = "1"
        await target.touch()
        await target.store.set_item(key.key, value, tags=tags)

    async def _copy_blobs(self, source: Scope, target: Scope, digests: set[str]) -> None:
        spill = self._core.spill
        if not digests:
            return
        src_ns = await source.namespace(create=False)
        if spill is None or src_ns is None:
            raise MissingBlobError(
                f"cannot copy {source.where('-')}: its checkpoints reference spilled blobs and "
                "no spill store (or spill namespace) is available"
            )
        dst_ns = await target.namespace(create=True)
        assert dst_ns is not None

        async def one(digest: str) -> None:
            await spill.put(dst_ns, digest, await spill.get(src_ns, digest))

        await _bounded(one(d) for d in sorted(digests))
