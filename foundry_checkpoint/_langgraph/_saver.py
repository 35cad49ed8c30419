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
  (same key and etag: see :func:`._read.latest`);
* channel values over 256 KiB serialized go to the spill store as content-addressed blobs,
  uploaded once per thread while unchanged;
* one async implementation: sync methods block on the core's private loop, async methods await
  it, so ``invoke``, ``ainvoke``, sync subgraphs, threads and Jupyter all work.
"""

from __future__ import annotations

import builtins
import random
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from azure.ai.agentserver.core.storage import DEFAULT_ITEM_TTL_SECONDS
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._core import DEFAULT_GC_GRACE_SECONDS, CheckpointCore, GcReport, LocalBackend
from .._lifecycle import CoreOwner
from .._serde import StrictSerializer
from . import _history, _list, _maintenance, _read, _write
from ._context import Caches, Context

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from ..spill import SpillStore

__all__ = ["FoundryCheckpointer"]


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
        self._caches = Caches()  # shared with with_allowlist clones, like the core

    # -- lifecycle ------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"FoundryCheckpointer({self._core.describe()})"

    def _reset(self) -> None:
        self._caches.threads.clear()

    def _ctx(self) -> Context:
        """The core, this saver's serializer and the caches, for one call."""
        return Context(self._core, self.serde, self._caches)

    # -- public API: sync faces -------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (the thread's latest without ``checkpoint_id``)."""
        return self._core.run(_read.get_tuple(self._ctx(), config))

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
        plan = self._core.run(_list.plan(self._ctx(), config, filter, before, limit))
        while not plan.done:
            yield from self._core.run(_list.next_page(self._ctx(), plan))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint as one self-contained item; returns its config."""
        return self._core.run(_write.put(self._ctx(), config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes on the checkpoint named by ``config``."""
        self._core.run(_write.put_writes(self._ctx(), config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write and spilled blob of ``thread_id`` (for this user)."""
        self._core.run(_maintenance.delete_thread(self._ctx(), thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose ``metadata["run_id"]`` is in ``run_ids``,
        across every thread of this user."""
        self._core.run(_maintenance.delete_for_runs(self._ctx(), run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another (ids and order kept)."""
        self._core.run(_maintenance.copy_thread(self._ctx(), source_thread_id, target_thread_id))

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
        self._core.run(_maintenance.prune(self._ctx(), thread_ids, strategy, keep))

    def list_threads(self) -> builtins.list[str]:
        """The ids of this user's threads, sorted (from the thread index; no checkpoint is read).

        Example:
            >>> with FoundryCheckpointer() as saver:  # doctest: +SKIP
            ...     saver.list_threads()
            ['support-42', 't-1']
        """
        return self._core.run(_maintenance.list_threads(self._ctx()))

    def count_checkpoints(self, thread_id: str, *, checkpoint_ns: str | None = None) -> int:
        """How many checkpoints ``thread_id`` holds (in ``checkpoint_ns``; default: every
        namespace), counted from the store's key listing: no checkpoint is read or decoded.

        Example:
            >>> with FoundryCheckpointer() as saver:  # doctest: +SKIP
            ...     saver.count_checkpoints("t-1")
            3
        """
        return self._core.run(_maintenance.count_checkpoints(self._ctx(), thread_id, checkpoint_ns))

    # -- public API: async faces ------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async form of :meth:`get_tuple`."""
        return await self._core.arun(_read.get_tuple(self._ctx(), config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async form of :meth:`list`."""
        plan = await self._core.arun(_list.plan(self._ctx(), config, filter, before, limit))
        while not plan.done:
            for item in await self._core.arun(_list.next_page(self._ctx(), plan)):
                yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async form of :meth:`put`."""
        return await self._core.arun(
            _write.put(self._ctx(), config, checkpoint, metadata, new_versions)
        )

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async form of :meth:`put_writes`."""
        await self._core.arun(_write.put_writes(self._ctx(), config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """Async form of :meth:`delete_thread`."""
        await self._core.arun(_maintenance.delete_thread(self._ctx(), thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async form of :meth:`delete_for_runs`."""
        await self._core.arun(_maintenance.delete_for_runs(self._ctx(), run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async form of :meth:`copy_thread`."""
        await self._core.arun(
            _maintenance.copy_thread(self._ctx(), source_thread_id, target_thread_id)
        )

    async def aprune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1
    ) -> None:
        """Async form of :meth:`prune`."""
        await self._core.arun(_maintenance.prune(self._ctx(), thread_ids, strategy, keep))

    async def alist_threads(self) -> builtins.list[str]:
        """Async form of :meth:`list_threads`."""
        return await self._core.arun(_maintenance.list_threads(self._ctx()))

    async def acount_checkpoints(self, thread_id: str, *, checkpoint_ns: str | None = None) -> int:
        """Async form of :meth:`count_checkpoints`."""
        return await self._core.arun(
            _maintenance.count_checkpoints(self._ctx(), thread_id, checkpoint_ns)
        )

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel, the writes since its nearest stored value along the parent chain.

        The result of ``BaseCheckpointSaver``'s default walk, read from the items directly
        (no channel value is loaded but the seeds). A checkpoint that ``prune`` or
        ``delete_for_runs`` made a root carries the history of its deleted ancestors, and the
        walk continues into it, so the channel rebuilds as it did before.
        """
        return self._core.run(_history.delta_history(self._ctx(), config, channels))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async form of :meth:`get_delta_channel_history`."""
        return await self._core.arun(_history.delta_history(self._ctx(), config, channels))

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
            self._core.gc(_maintenance.referenced, grace_seconds=grace_seconds, dry_run=dry_run)
        )

    async def agc(
        self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, dry_run: bool = False
    ) -> GcReport:
        """Async form of :meth:`gc`."""
        return await self._core.arun(
            self._core.gc(_maintenance.referenced, grace_seconds=grace_seconds, dry_run=dry_run)
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
