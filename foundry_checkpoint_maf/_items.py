"""The item I/O of one MAF context: write, read, list, inspect and delete checkpoint items.

:class:`ContextItems` runs on the core's loop (its coroutines are handed to
``CheckpointCore.arun``) and deals in payload bytes: encoding and decoding checkpoints is the
storage's job (:mod:`foundry_checkpoint_maf._payload`), the layout of keys and tags is
:mod:`foundry_checkpoint_maf._records`. Reads never create the context's store; a context whose
store does not exist has no checkpoints.

Example:
    >>> from foundry_checkpoint.adapter import CheckpointCore, StoreOptions
    >>> core = CheckpointCore(StoreOptions(store_prefix="maf"), scope_word="context")
    >>> items = ContextItems(core, "conv-1")
    >>> core.run(items.keys({"kind": "maf.checkpoint"}))
    []
    >>> core.close()
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Mapping
from typing import Any, Final

from agent_framework import WorkflowCheckpointException

from foundry_checkpoint.adapter import (
    Call,
    CheckpointCore,
    ItemKey,
    Scope,
    bounded,
    newest_item,
    spilled_digest,
)
from foundry_checkpoint.errors import CorruptPayloadError, FoundryCheckpointError

from ._payload import CheckpointDecodeError
from ._records import (
    TAG_TS,
    StoredCheckpoint,
    checkpoint_key,
    id_filter,
    id_from,
    kind_filter,
    oldest_first,
    pick_latest,
    stored,
)

__all__ = ["ContextItems", "referenced"]

logger = logging.getLogger("foundry_checkpoint_maf")

_READ_CONCURRENCY: Final = 8


class ContextItems:
    """The checkpoint items of one context's store, for the user of the current request.

    Args:
        core: the core whose clients, loop and spill store to use.
        context_id: the context (None: the prefix's default store).

    Example:
        >>> from foundry_checkpoint.adapter import StoreOptions
        >>> core = CheckpointCore(StoreOptions(store_prefix="maf"), scope_word="context")
        >>> ContextItems(core, None).context_id is None
        True
        >>> core.close()
    """

    def __init__(self, core: CheckpointCore, context_id: str | None) -> None:
        self._core = core
        self.context_id = context_id

    def _missing(self, checkpoint_id: str) -> WorkflowCheckpointException:
        # MAF's own wording first (code matches on it), then the context it looked in (not
        # the store's name: a host may show the message to its client).
        return WorkflowCheckpointException(
            f"No checkpoint found with ID {checkpoint_id} (context {self.context_id!r})"
        )

    async def _existing(self) -> Scope | None:
        """The scope for a read: None when the context's store does not exist (not created)."""
        return await self._core.scope(self.context_id, create=False)

    async def write(
        self, checkpoint_id: str, payload: bytes, tags: dict[str, str], extra: dict[str, str]
    ) -> None:
        """Store ``payload`` as checkpoint ``checkpoint_id`` (creating the store if needed)."""
        scope = await self._core.scope(self.context_id)
        key = checkpoint_key(checkpoint_id)
        value = await scope.encode(key, payload, tags=tags, extra=extra)
        await scope.put(key, value, tags=tags)

    def write_now(
        self,
        checkpoint_id: str,
        payload: bytes,
        tags: dict[str, str],
        extra: dict[str, str],
        call: Call,
    ) -> Awaitable[object] | None:
        """:meth:`write` started on the calling thread when the context's store is open and
        nothing in the write has to wait (``Scope.put_now``); None: run :meth:`write`."""
        scope = self._core.cached_scope(self.context_id, call)
        if scope is None:
            return None
        return scope.put_now(checkpoint_key(checkpoint_id), payload, tags=tags, extra=extra)

    async def _payload(
        self, scope: Scope, key: str, value: Mapping[str, Any], checkpoint_id: str
    ) -> bytes:
        try:
            return await scope.decode(value, key=key)
        except FoundryCheckpointError as exc:
            typed = isinstance(exc, CorruptPayloadError)
            raise (CheckpointDecodeError if typed else WorkflowCheckpointException)(
                f"Checkpoint {checkpoint_id!r} in context {self.context_id!r} cannot be read: {exc}"
            ) from exc

    async def read(self, checkpoint_id: str) -> bytes:
        """The payload of checkpoint ``checkpoint_id``.

        Raises:
            WorkflowCheckpointException: it does not exist, or its item cannot be read
                (:class:`CheckpointDecodeError` when the item is damaged).
        """
        scope = await self._existing()
        key = checkpoint_key(checkpoint_id)
        item = None if scope is None else await scope.store.get_item(key)
        if scope is None or item is None:
            raise self._missing(checkpoint_id)
        return await self._payload(scope, key, item.value, checkpoint_id)

    async def read_latest(self, workflow_name: str) -> tuple[str, bytes] | None:
        """The id and payload of the newest checkpoint of ``workflow_name``, or None.

        Raises:
            WorkflowCheckpointException: the newest item cannot be read.
        """
        scope = await self._existing()
        if scope is None:
            return None
        found = await newest_item(scope.store, kind_filter(workflow_name), pick_latest, rank=TAG_TS)
        if found is None:
            return None
        best, item = found
        checkpoint_id = id_from(best, item.value)
        return checkpoint_id, await self._payload(scope, best.key, item.value, checkpoint_id)

    async def read_all(self, workflow_name: str, caller: str) -> list[tuple[str, bytes]]:
        """Ids and payloads of every readable checkpoint of ``workflow_name``, oldest first.

        An item that cannot be read is logged at error level (naming ``caller``) and left out.
        """
        scope = await self._existing()
        if scope is None:
            return []
        keys = oldest_first(await scope.keys(kind_filter(workflow_name)))

        async def _one(key: ItemKey) -> tuple[str, bytes] | None:
            item = await scope.store.get_item(key.key)
            if item is None:
                return None
            checkpoint_id = id_from(key, item.value)
            try:
                return checkpoint_id, await self._payload(scope, key.key, item.value, checkpoint_id)
            except WorkflowCheckpointException as exc:
                logger.error("%s skips a checkpoint: %s", caller, exc)
                return None

        results = await bounded((_one(k) for k in keys), limit=_READ_CONCURRENCY)
        return [r for r in results if r is not None]

    async def keys(self, tags: Mapping[str, str]) -> list[ItemKey]:
        """The keys carrying ``tags`` (none when the store does not exist)."""
        scope = await self._existing()
        return [] if scope is None else await scope.keys(tags)

    async def inspect(self, checkpoint_id: str) -> StoredCheckpoint:
        """The record of one checkpoint with its stored size and whether it is spilled.

        Raises:
            WorkflowCheckpointException: it does not exist.
        """
        scope = await self._existing()
        key = checkpoint_key(checkpoint_id)
        found = [] if scope is None else await scope.keys(id_filter(checkpoint_id))
        match = next((k for k in found if k.key == key), None)
        item = None if scope is None or match is None else await scope.store.get_item(key)
        if match is None or item is None:
            raise self._missing(checkpoint_id)
        record = stored(match, item.value)
        size = len(json.dumps(item.value, separators=(",", ":")).encode("utf-8"))
        spilled = spilled_digest(item.value) is not None
        return StoredCheckpoint(
            record.checkpoint_id,
            record.workflow_name,
            record.previous,
            record.timestamp,
            size=size,
            spilled=spilled,
        )

    async def delete_context(self) -> int:
        """Delete the context's store and blobs; how many checkpoints it held."""
        scope = await self._existing()
        if scope is None:
            await self._core.unregister(self.context_id)
            return 0
        count = len(await scope.keys(kind_filter()))
        await scope.purge()
        return count

    async def delete(self, checkpoint_id: str) -> bool:
        """Delete one checkpoint item and its spilled blob; False when it does not exist."""
        scope = await self._existing()
        if scope is None:
            return False
        return await scope.delete(checkpoint_key(checkpoint_id))


async def referenced(scope: Scope) -> set[str]:
    """Every blob a context's checkpoints reference (each item is read, none decoded)."""
    found: set[str] = set()
    for key in await scope.keys(kind_filter()):
        item = await scope.store.get_item(key.key)
        digest = None if item is None else spilled_digest(item.value)
        if digest is not None:
            found.add(digest)
    return found
