"""What :class:`~foundry_checkpoint_maf.FoundryCheckpointStorage` offers beyond MAF's protocol.

Inspection (``list_contexts``, ``list_stored``, ``inspect``) and clean-up (``delete_context``,
``prune``, ``gc``), decided from keys and tags without decoding a checkpoint, so they work on
checkpoints that would not decode too. :class:`Maintenance` also runs every coroutine of the
storage on the core's loop, with the identity captured at the call (from the storage's
request context when hosting handed it one: ``CheckpointCore.capture``).

Example:
    >>> import asyncio
    >>> from foundry_checkpoint_maf import FoundryCheckpointStorage
    >>> async def demo() -> list[str]:
    ...     async with FoundryCheckpointStorage(context_id="conv-m") as storage:
    ...         return [c.checkpoint_id for c in await storage.list_stored()]
    >>> asyncio.run(demo())
    []
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from foundry_checkpoint.adapter import DEFAULT_GC_GRACE_SECONDS, Call, CoreOwner, GcReport
from foundry_checkpoint.errors import InvalidArgumentError

from ._items import ContextItems, referenced
from ._records import (
    StoredCheckpoint,
    checked_checkpoint_id,
    checked_workflow_name,
    kind_filter,
    oldest_first,
    stored,
)

if TYPE_CHECKING:
    from agent_framework import CheckpointID
    from azure.ai.agentserver.core import FoundryAgentRequestContext

__all__ = ["Maintenance"]

T = TypeVar("T")


class Maintenance(CoreOwner):
    """Inspection and clean-up of one context's checkpoints (and the prefix's contexts).

    Example:
        >>> import asyncio
        >>> from foundry_checkpoint_maf import FoundryCheckpointStorage
        >>> async def demo() -> int:
        ...     async with FoundryCheckpointStorage(context_id="conv-m2") as storage:
        ...         return await storage.delete_context()
        >>> asyncio.run(demo())
        0
    """

    _items: ContextItems
    _request_context: FoundryAgentRequestContext | None = None

    def _capture(self) -> Call:
        """This call's identity: from the request context hosting bound the storage to, else
        from the caller's own (the core's one mechanism for both)."""
        return self._core.capture(self._request_context)

    async def _run(
        self, coro: Coroutine[Any, Any, T], *, shield: bool = False, call: Call | None = None
    ) -> T:
        """Run ``coro`` on the core's loop as ``call`` (default: captured now)."""
        who = call if call is not None else self._capture()
        return await self._core.arun(coro, shield=shield, call=who)

    async def list_contexts(self) -> list[str | None]:
        """Every context this user has checkpoints in under the prefix (None: the default
        store), from the context index: no checkpoint is read.

        Returns:
            The context ids, sorted, with None first when the default store has checkpoints.

        Example:
            >>> import asyncio
            >>> from agent_framework import WorkflowCheckpoint
            >>> from foundry_checkpoint_maf import FoundryCheckpointStorage
            >>> async def demo() -> list[str | None]:
            ...     async with FoundryCheckpointStorage(context_id="conv-lc") as storage:
            ...         await storage.save(WorkflowCheckpoint(workflow_name="w",
            ...                                               graph_signature_hash="h"))
            ...         return await storage.list_contexts()
            >>> "conv-lc" in asyncio.run(demo())
            True
        """
        ids = await self._run(self._core.scope_ids())
        named = sorted(i for i in ids if i is not None)
        return [None, *named] if None in ids else list(named)

    async def list_stored(self, *, workflow_name: str | None = None) -> list[StoredCheckpoint]:
        """This context's checkpoints (of ``workflow_name``; default: every workflow), oldest
        first per the order :meth:`get_latest` uses, from the key listing alone: nothing is
        read or decoded, so it is cheap and lists checkpoints that would not decode too.

        Raises:
            WorkflowCheckpointException: ``workflow_name`` is not a string.

        Example:
            >>> import asyncio
            >>> from agent_framework import WorkflowCheckpoint
            >>> from foundry_checkpoint_maf import FoundryCheckpointStorage
            >>> async def demo() -> list[bool]:
            ...     async with FoundryCheckpointStorage(context_id="conv-ls") as storage:
            ...         first = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h")
            ...         second = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h",
            ...                                     previous_checkpoint_id=first.checkpoint_id)
            ...         await storage.save(first)
            ...         await storage.save(second)
            ...         listed = await storage.list_stored()
            ...         return [c.previous == first.checkpoint_id for c in listed]
            >>> asyncio.run(demo())
            [False, True]
        """
        return await self._listed(workflow_name, self._capture())

    async def _listed(self, workflow_name: str | None, call: Call) -> list[StoredCheckpoint]:
        """:meth:`list_stored` as ``call``."""
        name = None if workflow_name is None else checked_workflow_name(workflow_name)
        keys = await self._run(self._items.keys(kind_filter(name)), call=call)
        return [stored(key) for key in oldest_first(keys)]

    async def inspect(self, checkpoint_id: CheckpointID) -> StoredCheckpoint:
        """:meth:`list_stored`'s record of one checkpoint with its ``size`` and ``spilled``
        filled in: the item is read, not decoded.

        Raises:
            WorkflowCheckpointException: the checkpoint does not exist in this context.

        Example:
            >>> import asyncio
            >>> from agent_framework import WorkflowCheckpoint
            >>> from foundry_checkpoint_maf import FoundryCheckpointStorage
            >>> async def demo() -> tuple[bool | None, bool]:
            ...     async with FoundryCheckpointStorage(context_id="conv-in") as storage:
            ...         cp = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h")
            ...         record = await storage.inspect(await storage.save(cp))
            ...         return record.spilled, (record.size or 0) > 0
            >>> asyncio.run(demo())
            (False, True)
        """
        checked = checked_checkpoint_id(checkpoint_id)
        return await self._run(self._items.inspect(checked))

    async def delete_context(self) -> int:
        """Delete every checkpoint of this context (and its spilled blobs).

        Returns:
            How many checkpoints there were (counted from the key listing).

        Example:
            >>> import asyncio
            >>> from agent_framework import WorkflowCheckpoint
            >>> from foundry_checkpoint_maf import FoundryCheckpointStorage
            >>> async def demo() -> tuple[int, int]:
            ...     async with FoundryCheckpointStorage(context_id="conv-dc") as storage:
            ...         for _ in range(2):
            ...             await storage.save(WorkflowCheckpoint(workflow_name="w",
            ...                                                   graph_signature_hash="h"))
            ...         return await storage.delete_context(), len(await storage.list_stored())
            >>> asyncio.run(demo())
            (2, 0)
        """
        return await self._run(self._items.delete_context())

    async def prune(self, *, keep: int = 1, workflow_name: str | None = None) -> int:
        """Delete all but the newest ``keep`` checkpoints of each workflow of this context (or
        of ``workflow_name`` only), newest as :meth:`get_latest` decides. Which to keep is
        decided from keys and tags, without reading a checkpoint.

        Returns:
            How many checkpoints were deleted.

        Raises:
            InvalidArgumentError: ``keep`` is not a positive int (also a ``ValueError``).

        Example:
            >>> import asyncio
            >>> from agent_framework import WorkflowCheckpoint
            >>> from foundry_checkpoint_maf import FoundryCheckpointStorage
            >>> async def demo() -> tuple[int, int]:
            ...     async with FoundryCheckpointStorage(context_id="conv-pr") as storage:
            ...         for _ in range(3):
            ...             await storage.save(WorkflowCheckpoint(workflow_name="w",
            ...                                                   graph_signature_hash="h"))
            ...         return await storage.prune(keep=1), len(await storage.list_stored())
            >>> asyncio.run(demo())
            (2, 1)
        """
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise InvalidArgumentError(
                f"keep must be a positive number of checkpoints, got {keep!r}"
            )
        call = self._capture()  # one identity for the listing and every delete
        by_workflow: dict[str, list[StoredCheckpoint]] = {}
        for record in await self._listed(workflow_name, call):
            by_workflow.setdefault(record.workflow_name, []).append(record)
        deleted = 0
        for records in by_workflow.values():
            for record in records[: max(0, len(records) - keep)]:
                deleted += await self._run(self._items.delete(record.checkpoint_id), call=call)
        return deleted

    async def gc(
        self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, dry_run: bool = False
    ) -> GcReport:
        """Delete this user's spilled checkpoint blobs (every context under the prefix) that no
        checkpoint references any more, once older than ``grace_seconds`` (a save in flight
        uploads its blob first). ``delete`` removes a checkpoint's blob at once; this finds
        what expired items or crashed writers left behind.

        Returns:
            What was scanned, kept and (unless ``dry_run``) deleted.

        Example:
            >>> import asyncio
            >>> from foundry_checkpoint_maf import FoundryCheckpointStorage
            >>> async def demo() -> int:
            ...     async with FoundryCheckpointStorage() as storage:
            ...         return len((await storage.gc(dry_run=True)).deleted)
            >>> asyncio.run(demo())
            0
        """
        return await self._run(
            self._core.gc(referenced, grace_seconds=grace_seconds, dry_run=dry_run)
        )
