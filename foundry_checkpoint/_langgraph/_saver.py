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

import random
import sys
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

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
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from .._serde import StrictSerializer
from ..adapter import DEFAULT_ITEM_TTL_SECONDS, LocalBackend, new_core
from . import _config, _history, _list, _read, _write
from ._admin import ThreadAdmin
from ._context import Caches, Context
from ._graphs import caller_types

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from ..spill import SpillStore

__all__ = ["FoundryCheckpointer"]


class FoundryCheckpointer(ThreadAdmin, BaseCheckpointSaver[str]):
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

    Args:
        store_prefix: prefix of every store name (default ``"langgraph"``).
        credential: hosted mode only (default ``DefaultAzureCredential``).
        endpoint: hosted mode only (default ``FOUNDRY_PROJECT_ENDPOINT``).
        user_id: the end user to partition by outside a request (local: the embedded store's
            partition unless the request context names a user). Within a request the request's
            own identity always wins (``docs/concepts/isolation.md``). Hosted mode sends it as
            ``x-ms-user-id``, which the service honours only for trusted callers, so it needs
            ``trusted_delegation=True`` there. Leave it unset in a host serving many users.
        trusted_delegation: declare this agent a trusted delegating caller, whose
            ``x-ms-user-id`` the service honours (hosted ``user_id=`` needs it; else
            :class:`~foundry_checkpoint.errors.UntrustedDelegationError`).
        item_ttl_seconds: idle expiry of items, fixed when a store is created (default 30 days;
            ``-1`` never expires).
        spill: where large values go (a :class:`~foundry_checkpoint.spill.SpillStore`).
        local_backend: ``"sqlite"`` (default, the embedded store) or ``"sdk"`` (the SDK's own
            local mode under an inter-process file lock).
        serde: the serializer. The default, :class:`~foundry_checkpoint.StrictSerializer`,
            decodes only LangGraph's safe types, the state types of the graph that is calling
            (what ``LANGGRAPH_STRICT_MSGPACK=true`` would collect from its schemas: see
            ``_graphs``) and what ``with_allowlist`` adds; it refuses anything else with a
            :class:`~foundry_checkpoint.errors.CorruptPayloadError` when reading, so whoever
            can write to the store cannot make a reader call arbitrary code, and with an
            ``UnreadableValueError`` (naming the fix) when saving, so that nothing is stored
            that the next process could not read. To encrypt, wrap it:
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
        >>> with FoundryCheckpointer() as saver:
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
        trusted_delegation: bool = False,
        item_ttl_seconds: int = DEFAULT_ITEM_TTL_SECONDS,
        spill: SpillStore | None = None,
        local_backend: LocalBackend = "sqlite",
        serde: SerializerProtocol | None = None,
        **client_kwargs: Any,
    ) -> None:
        super().__init__(serde=StrictSerializer() if serde is None else serde)
        self._core = new_core(locals(), scope_word="thread")
        self._caches = Caches()  # shared with with_allowlist clones, like the core
        self._graphs: weakref.WeakSet[Any] = weakref.WeakSet()  # that called it (and clones)

    def __repr__(self) -> str:
        return f"FoundryCheckpointer({self._core.describe()})"

    def _call(self, config: RunnableConfig | None, *, read: bool = True) -> Context:
        """The context of one face call: the serializer also admits the calling graph's types,
        and the call's identity is captured, once (the face passes ``ctx.call`` to the core).

        The caller is the frame above the face (for ``list``/``alist``, the one that iterates
        them); see :mod:`._graphs`.
        """
        serde = self.serde
        if isinstance(serde, StrictSerializer) or (
            isinstance(serde, EncryptedSerializer) and isinstance(serde.serde, StrictSerializer)
        ):
            allowed = caller_types(sys._getframe(2), config, self._graphs, read=read)
            if allowed:
                serde = _widened(serde, allowed)
        return Context(self._core, serde, self._caches, self._core.capture())

    # -- sync faces -----------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config``, with its pending writes.

        Args:
            config: ``{"configurable": {"thread_id": ..., "checkpoint_ns": ...,
                "checkpoint_id": ...}}``; without ``checkpoint_id``, the namespace's latest.

        Returns:
            The checkpoint tuple, or None when there is no such checkpoint.

        Raises:
            InvalidIdentifierError: ``config`` names no thread, or an id is not text.
            CorruptPayloadError: the stored checkpoint cannot be decoded.
            MissingBlobError: a spilled channel value's blob is gone.

        Example:
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> config = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
            >>> with FoundryCheckpointer(store_prefix="ex-get") as saver:
            ...     stored = saver.put(config, empty_checkpoint(), {"step": -1}, {})
            ...     latest = saver.get_tuple(config)
            >>> latest.config == stored, latest.metadata["step"]
            (True, -1)
        """
        where = _config.address(config)
        ctx = self._call(config)
        return self._core.run(_read.get_tuple(ctx, where), call=ctx.call)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first; ``filter`` (metadata equality), then ``before``/``limit``.

        Args:
            config: the thread (and namespace or checkpoint id) to list; ``None`` lists every
                thread of this user (from the index).
            filter: metadata keys and the values they must equal.
            before: only checkpoints older than the one this config names.
            limit: at most this many.

        Returns:
            An iterator of checkpoint tuples, read a batch at a time.

        Raises:
            InvalidIdentifierError: ``config`` names no thread, or an id is not text.
            CorruptPayloadError: a stored checkpoint cannot be decoded.
            MissingBlobError: a spilled channel value's blob is gone.

        Example:
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> thread = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
            >>> with FoundryCheckpointer(store_prefix="ex-list") as saver:
            ...     config = thread
            ...     for step in range(3):
            ...         config = saver.put(config, empty_checkpoint(), {"step": step}, {})
            ...     [t.metadata["step"] for t in saver.list(thread, limit=2)]
            [2, 1]
        """
        where, before_id = _list_args(config, before)
        ctx = self._call(config)
        plan = self._core.run(_list.plan(ctx, where, filter, before_id, limit), call=ctx.call)
        while not plan.done:
            yield from self._core.run(_list.next_page(ctx, plan), call=ctx.call)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint as one self-contained item.

        Args:
            config: the thread and namespace; its ``checkpoint_id`` is the parent.
            checkpoint: the checkpoint (its ``id`` names it).
            metadata: its metadata (``source``, ``step``, ``run_id`` are also kept as tags).
            new_versions: the channels whose values changed since the parent.

        Returns:
            The config of the stored checkpoint.

        Raises:
            InvalidIdentifierError: ``config`` names no thread, or an id is not text.
            CheckpointTooLargeError: the item is over the 1 MB limit and no spill store is
                configured; nothing was written.

        Example:
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> checkpoint = empty_checkpoint()
            >>> with FoundryCheckpointer(store_prefix="ex-put") as saver:
            ...     stored = saver.put({"configurable": {"thread_id": "t-1"}}, checkpoint, {}, {})
            >>> stored["configurable"]["checkpoint_id"] == checkpoint["id"]
            True
        """
        where = _config.address(config)
        ctx = self._call(config, read=False)
        return self._core.run(
            _write.put(ctx, where, config, checkpoint, metadata, new_versions), call=ctx.call
        )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes on the checkpoint named by ``config``.

        A task that writes again is merged into its item: a write index already stored keeps
        its value, as in LangGraph's own savers.

        Args:
            config: the checkpoint the writes belong to (``checkpoint_id`` required).
            writes: ``(channel, value)`` pairs.
            task_id: the task that wrote them.
            task_path: the task's path (orders the writes of several tasks).

        Raises:
            InvalidIdentifierError: ``config`` names no checkpoint, or an id is not text.
            CheckpointTooLargeError: the writes are over the 1 MB limit and no spill store is
                configured; nothing was written.
            ConcurrentWriteError: the merge lost against concurrent writers on every attempt;
                nothing was written, retry the step.

        Example:
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> config = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
            >>> with FoundryCheckpointer(store_prefix="ex-writes") as saver:
            ...     config = saver.put(config, empty_checkpoint(), {}, {})
            ...     saver.put_writes(config, [("messages", "hi")], "task-1")
            ...     saver.get_tuple(config).pending_writes
            [('task-1', 'messages', 'hi')]
        """
        where = _config.address(config)
        ctx = self._call(config, read=False)
        self._core.run(_write.put_writes(ctx, where, writes, task_id, task_path), call=ctx.call)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel, the writes since its nearest stored value along the parent chain.

        The result of ``BaseCheckpointSaver``'s default walk, read from the items directly
        (no channel value is loaded but the seeds). A checkpoint that ``prune`` or
        ``delete_for_runs`` made a root carries the history of its deleted ancestors, and the
        walk continues into it, so the channel rebuilds as it did before.

        Args:
            config: the checkpoint (without ``checkpoint_id``: the namespace's latest).
            channels: the channels to collect.

        Returns:
            Per channel, its ``writes`` oldest first and, when one is stored, its ``seed``.

        Raises:
            InvalidIdentifierError: ``config`` names no thread, or an id is not text.
            CorruptPayloadError: a stored value cannot be decoded.
            MissingBlobError: a spilled seed's blob is gone.

        Example:
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> config = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
            >>> with FoundryCheckpointer(store_prefix="ex-delta") as saver:
            ...     first = saver.put(config, empty_checkpoint(), {}, {})
            ...     saver.put_writes(first, [("log", "a")], "task-1")
            ...     second = saver.put(first, empty_checkpoint(), {}, {})
            ...     saver.get_delta_channel_history(config=second, channels=["log"])
            {'log': {'writes': [('task-1', 'log', 'a')]}}
        """
        where = _config.address(config)
        ctx = self._call(config)
        return self._core.run(_history.delta_history(ctx, where, channels), call=ctx.call)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``f"{n:032}.{random():016}"`` with ``n`` one more than the current version's.

        Args:
            current: the channel's current version (None for a new channel).
            channel: unused (LangGraph passes None).

        Returns:
            The next version; versions compare in order as strings.

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

    # -- async faces ----------------------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async form of :meth:`get_tuple`."""
        where = _config.address(config)
        ctx = self._call(config)
        return await self._core.arun(_read.get_tuple(ctx, where), call=ctx.call)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async form of :meth:`list`."""
        where, before_id = _list_args(config, before)
        ctx = self._call(config)
        plan = await self._core.arun(
            _list.plan(ctx, where, filter, before_id, limit), call=ctx.call
        )
        while not plan.done:
            for item in await self._core.arun(_list.next_page(ctx, plan), call=ctx.call):
                yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async form of :meth:`put`.

        Cancelled with its caller, unlike :meth:`aput_writes`: see there.
        """
        where = _config.address(config)
        ctx = self._call(config, read=False)
        return await self._core.arun(
            _write.put(ctx, where, config, checkpoint, metadata, new_versions), call=ctx.call
        )

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async form of :meth:`put_writes`; once started, not cancelled with its caller.

        A task's writes are what make it finished: resuming a checkpoint hands its tasks'
        stored writes back, so a task whose writes are stored never runs again. A host that
        stops (SIGTERM) cancels the run, and with it the saves still being written; these go on
        (the caller stops waiting), and ``close()``, or the exit of the process, waits for them
        (at most ``FLUSH_SECONDS``, 10 s). The checkpoint that would follow the step
        (:meth:`aput`) is cancelled with the run as before: it only applies these writes, and
        had it landed unseen, a host resuming from the checkpoint id it recorded last (the
        Responses hosts do) would address a checkpoint the thread had moved past, which
        LangGraph replays, running the finished task again.
        """
        where = _config.address(config)
        ctx = self._call(config, read=False)
        await self._core.arun(
            _write.put_writes(ctx, where, writes, task_id, task_path), shield=True, call=ctx.call
        )

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async form of :meth:`get_delta_channel_history`."""
        where = _config.address(config)
        ctx = self._call(config)
        return await self._core.arun(_history.delta_history(ctx, where, channels), call=ctx.call)


def _list_args(
    config: RunnableConfig | None, before: RunnableConfig | None
) -> tuple[_config.Address | None, str | None]:
    """``list``'s config parsed once (None: every thread) and the id ``before`` names."""
    where = None if config is None else _config.address(config)
    return where, _config.wanted_id(before) if before else None


def _widened(serde: SerializerProtocol, allowed: frozenset[tuple[str, ...]]) -> SerializerProtocol:
    """``serde`` (a ``StrictSerializer``, bare or encrypted) admitting ``allowed`` as well."""
    if isinstance(serde, StrictSerializer):
        return serde.widened(allowed)
    if isinstance(serde, EncryptedSerializer) and isinstance(serde.serde, StrictSerializer):
        inner = serde.serde.widened(allowed)
        return serde if inner is serde.serde else EncryptedSerializer(serde.cipher, inner)
    return serde
