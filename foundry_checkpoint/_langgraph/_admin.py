"""The thread-level calls of ``FoundryCheckpointer``: delete, prune, copy, list, count, gc.

:class:`ThreadAdmin` is the part of the saver that manages whole threads (LangGraph's
``delete_thread``, ``delete_for_runs``, ``copy_thread`` and ``prune``, and this package's
``list_threads``, ``count_checkpoints`` and ``gc``); each call runs one coroutine of
:mod:`._maintenance` on the saver's core.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol

from ..adapter import DEFAULT_GC_GRACE_SECONDS, CoreOwner, GcReport
from . import _maintenance
from ._context import Caches, Context

__all__ = ["ThreadAdmin"]

P = ParamSpec("P")
T = TypeVar("T")


class ThreadAdmin(CoreOwner):
    """Whole-thread calls of a LangGraph saver on a ``CheckpointCore``.

    The saver that derives from it sets ``_core``, ``serde`` and ``_caches``.

    Example:
        >>> from foundry_checkpoint import FoundryCheckpointer
        >>> issubclass(FoundryCheckpointer, ThreadAdmin)
        True
    """

    serde: SerializerProtocol
    _caches: Caches

    def _reset(self) -> None:
        self._caches.threads.clear()

    def _ctx(self) -> Context:
        """The core, this saver's serializer and the caches, for one call (its identity
        captured now, once)."""
        return Context(self._core, self.serde, self._caches, self._core.capture())

    def _run(
        self,
        op: Callable[Concatenate[Context, P], Coroutine[Any, Any, T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run ``op(context, ...)`` on the core's loop, as the call it captured."""
        ctx = self._ctx()
        return self._core.run(op(ctx, *args, **kwargs), call=ctx.call)

    async def _arun(
        self,
        op: Callable[Concatenate[Context, P], Coroutine[Any, Any, T]],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Async form of :meth:`_run`."""
        ctx = self._ctx()
        return await self._core.arun(op(ctx, *args, **kwargs), call=ctx.call)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write and spilled blob of ``thread_id`` (for this user).

        Args:
            thread_id: the thread to delete; one that does not exist is fine.

        Raises:
            InvalidIdentifierError: ``thread_id`` is empty or not text.

        Example:
            >>> from foundry_checkpoint import FoundryCheckpointer
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> config = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
            >>> with FoundryCheckpointer(store_prefix="ex-delete") as saver:
            ...     _ = saver.put(config, empty_checkpoint(), {}, {})
            ...     saver.delete_thread("t-1")
            ...     saver.get_tuple(config) is None
            True
        """
        self._run(_maintenance.delete_thread, thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose ``metadata["run_id"]`` is in
        ``run_ids``, across every thread of this user, with the rules of :meth:`prune`.

        Args:
            run_ids: the run ids whose checkpoints go.

        Raises:
            CheckpointTooLargeError: a surviving checkpoint cannot hold the history of its
                deleted parent (no spill store); nothing was deleted.
            ConcurrentWriteError: a surviving checkpoint changed while it was rewritten;
                nothing was deleted, retry.

        Example:
            >>> from foundry_checkpoint import FoundryCheckpointer
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> config = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
            >>> with FoundryCheckpointer(store_prefix="ex-runs") as saver:
            ...     _ = saver.put(config, empty_checkpoint(), {"run_id": "run-1"}, {})
            ...     saver.delete_for_runs(["run-1"])
            ...     saver.count_checkpoints("t-1")
            0
        """
        self._run(_maintenance.delete_for_runs, run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another (ids and order kept).

        Args:
            source_thread_id: the thread to copy; one that does not exist copies nothing.
            target_thread_id: the thread to copy into (created when needed).

        Raises:
            InvalidIdentifierError: a thread id is empty or not text.
            MissingBlobError: the source references spilled blobs that cannot be read.

        Example:
            >>> from foundry_checkpoint import FoundryCheckpointer
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> config = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
            >>> with FoundryCheckpointer(store_prefix="ex-copy") as saver:
            ...     _ = saver.put(config, empty_checkpoint(), {}, {})
            ...     saver.copy_thread("t-1", "t-2")
            ...     saver.count_checkpoints("t-2")
            1
        """
        self._run(_maintenance.copy_thread, source_thread_id, target_thread_id)

    def prune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1
    ) -> None:
        """Keep the newest checkpoints of each thread, or delete the threads.

        The rules are PostgresSaver's: a finished subgraph call's namespace (``"child:<task>"``)
        is deleted with the checkpoint it started from, and a kept checkpoint whose parent is
        deleted gets ``parent_config`` ``None``. Before its parent goes, the history that its
        ``DeltaChannel`` values are rebuilt from (the nearest stored value and the writes since,
        what ``get_delta_channel_history`` returns) is copied into it byte for byte, so
        ``get_state`` and the next turn see the whole conversation. Spilled blobs nothing
        references any more are deleted once older than the ``gc`` grace (a write in flight
        stores its blob first); younger ones are left to ``gc``.

        Args:
            thread_ids: the threads to prune.
            strategy: ``"keep_latest"`` keeps the newest ``keep`` checkpoints (and their
                writes) of the root namespace and of each ``checkpointer=True`` subgraph;
                ``"delete"`` deletes the threads.
            keep: how many checkpoints ``"keep_latest"`` keeps per namespace (at least 1).

        Raises:
            InvalidArgumentError: an unknown ``strategy`` or a ``keep`` below 1.
            InvalidIdentifierError: a thread id is empty or not text.
            CheckpointTooLargeError: a kept checkpoint cannot hold the history of its deleted
                parent (no spill store); nothing was deleted.
            ConcurrentWriteError: a kept checkpoint changed while it was rewritten;
                nothing was deleted, retry.

        Example:
            >>> from foundry_checkpoint import FoundryCheckpointer
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> config = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
            >>> with FoundryCheckpointer(store_prefix="ex-prune") as saver:
            ...     for _ in range(3):
            ...         config = saver.put(config, empty_checkpoint(), {}, {})
            ...     saver.prune(["t-1"])  # one checkpoint left per namespace
            ...     saver.count_checkpoints("t-1")
            1
        """
        self._run(_maintenance.prune, thread_ids, strategy, keep)

    def list_threads(self) -> list[str]:
        """The ids of this user's threads, sorted (from the thread index; no checkpoint is read).

        Returns:
            The thread ids.

        Example:
            >>> from foundry_checkpoint import FoundryCheckpointer
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> with FoundryCheckpointer(store_prefix="ex-threads") as saver:
            ...     for thread in ("t-1", "support-42"):
            ...         config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            ...         _ = saver.put(config, empty_checkpoint(), {}, {})
            ...     saver.list_threads()
            ['support-42', 't-1']
        """
        return self._run(_maintenance.list_threads)

    def count_checkpoints(self, thread_id: str, *, checkpoint_ns: str | None = None) -> int:
        """How many checkpoints ``thread_id`` holds, counted from the store's key listing: no
        checkpoint is read or decoded.

        Args:
            thread_id: the thread.
            checkpoint_ns: count this namespace only (default: every namespace).

        Returns:
            The number of checkpoints (0 for a thread that does not exist).

        Raises:
            InvalidIdentifierError: ``thread_id`` is empty or not text.

        Example:
            >>> from foundry_checkpoint import FoundryCheckpointer
            >>> from langgraph.checkpoint.base import empty_checkpoint
            >>> config = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
            >>> with FoundryCheckpointer(store_prefix="ex-count") as saver:
            ...     for _ in range(3):
            ...         config = saver.put(config, empty_checkpoint(), {}, {})
            ...     root = saver.count_checkpoints("t-1", checkpoint_ns="")
            ...     other = saver.count_checkpoints("t-1", checkpoint_ns="x")
            >>> root, other
            (3, 0)
        """
        return self._run(_maintenance.count_checkpoints, thread_id, checkpoint_ns)

    def gc(
        self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, dry_run: bool = False
    ) -> GcReport:
        """Delete this user's spilled blobs that no checkpoint or write references any more.

        Only blobs last modified more than ``grace_seconds`` ago are taken, so a write still in
        flight (blob first, item second) is safe. ``delete_thread`` deletes a thread's blobs at
        once; ``prune`` and ``delete_for_runs`` delete those they orphan once older than the
        default grace, and leave younger ones to this; it also finds what expired items
        (``item_ttl_seconds``) or crashed writers left behind.

        Args:
            grace_seconds: the age below which an unreferenced blob is kept.
            dry_run: report what would be deleted, delete nothing.

        Returns:
            What was scanned, kept and deleted.

        Example:
            >>> from foundry_checkpoint import FoundryCheckpointer
            >>> with FoundryCheckpointer(store_prefix="ex-gc") as saver:
            ...     report = saver.gc(dry_run=True)
            >>> print(len(report.deleted), "blobs would be deleted")
            0 blobs would be deleted
        """
        return self._core.run(
            self._core.gc(_maintenance.referenced, grace_seconds=grace_seconds, dry_run=dry_run)
        )

    async def adelete_thread(self, thread_id: str) -> None:
        """Async form of :meth:`delete_thread`."""
        await self._arun(_maintenance.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async form of :meth:`delete_for_runs`."""
        await self._arun(_maintenance.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async form of :meth:`copy_thread`."""
        await self._arun(_maintenance.copy_thread, source_thread_id, target_thread_id)

    async def aprune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1
    ) -> None:
        """Async form of :meth:`prune`."""
        await self._arun(_maintenance.prune, thread_ids, strategy, keep)

    async def alist_threads(self) -> list[str]:
        """Async form of :meth:`list_threads`."""
        return await self._arun(_maintenance.list_threads)

    async def acount_checkpoints(self, thread_id: str, *, checkpoint_ns: str | None = None) -> int:
        """Async form of :meth:`count_checkpoints`."""
        return await self._arun(_maintenance.count_checkpoints, thread_id, checkpoint_ns)

    async def agc(
        self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, dry_run: bool = False
    ) -> GcReport:
        """Async form of :meth:`gc`."""
        return await self._core.arun(
            self._core.gc(_maintenance.referenced, grace_seconds=grace_seconds, dry_run=dry_run)
        )
