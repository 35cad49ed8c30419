"""``FoundryCheckpointStorage``: MAF's ``CheckpointStorage`` on Foundry's durable state store.

Mapping (one store per context, isolated per end user):

* context id -> one store ``<store_prefix>/t/<context id>`` (``None``: ``<store_prefix>/default``),
  always ``user_isolation=True``;
* checkpoint id -> item key ``k/<checkpoint id>``; the item value is one compact string (MAF's
  encoding dumped as compact JSON, compressed when it pays), spilled to the spill store when it
  would exceed the 1 MB item limit;
* tags: ``kind``, ``wf`` (workflow name), ``id``, ``prev`` (previous checkpoint id) and ``ts``
  (the checkpoint timestamp as zero-padded UTC microseconds). Values that had to be hashed are
  kept in full in the item value.

The layout itself (keys, tags, ordering) is :mod:`foundry_checkpoint_maf._records`; the item
I/O of one context is :mod:`foundry_checkpoint_maf._items`; the payload encoding and the
restricted decoder are :mod:`foundry_checkpoint_maf._payload`.

``get_latest`` lists keys newest first and reads only the keys that share the newest
``created_at`` second (one more page per 100 of them), orders them by ``ts`` and, on equal
timestamps, by ``previous_checkpoint_id`` lineage, then reads one item: its cost does not grow
with the history.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agent_framework import CheckpointID, WorkflowCheckpoint, WorkflowCheckpointException

from foundry_checkpoint.adapter import (
    DEFAULT_ITEM_TTL_SECONDS,
    Call,
    CheckpointCore,
    LocalBackend,
    check_identifier,
    new_core,
)

from ._items import ContextItems
from ._maintenance import Maintenance
from ._payload import (
    CheckpointTamperedError,
    decode_payload,
    encode_document,
    payload_hash,
    type_keys,
    verify_document,
)
from ._records import (
    StoredCheckpoint,
    checked_checkpoint_id,
    checked_workflow_name,
    checkpoint_tags,
)

if TYPE_CHECKING:
    from azure.ai.agentserver.core import FoundryAgentRequestContext
    from azure.core.credentials_async import AsyncTokenCredential

    from foundry_checkpoint.spill import SpillStore

__all__ = ["FoundryCheckpointStorage", "StoredCheckpoint"]

logger = logging.getLogger("foundry_checkpoint_maf")


def _prepared(
    checkpoint: WorkflowCheckpoint, checkpoint_id: str, allowed: frozenset[str]
) -> tuple[bytes, dict[str, str], dict[str, str]]:
    """The payload, tags and extra fields to store ``checkpoint`` under, once it is known to
    decode again under ``allowed``."""
    try:
        encoded, payload = encode_document(checkpoint)
    except Exception as exc:
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id!r} of workflow {checkpoint.workflow_name!r} cannot be "
            f"encoded ({type(exc).__name__}: {exc}); nothing was stored"
        ) from exc
    try:
        verify_document(encoded, allowed=allowed, checkpoint_id=checkpoint_id)
    except WorkflowCheckpointException as exc:
        raise WorkflowCheckpointException(
            f"Refusing to save checkpoint {checkpoint_id!r} of workflow "
            f"{checkpoint.workflow_name!r}: it could not be restored. {exc} Nothing was stored."
        ) from exc
    workflow_name = checked_workflow_name(checkpoint.workflow_name)
    tags, extra = checkpoint_tags(
        checkpoint_id, workflow_name, checkpoint.timestamp, checkpoint.previous_checkpoint_id
    )
    return payload, tags, extra


class FoundryCheckpointStorage(Maintenance):
    """Microsoft Agent Framework checkpoint storage on Foundry's durable state store.

    Pass it to ``WorkflowBuilder(checkpoint_storage=...)``: the workflow checkpoints every
    superstep and resumes with ``workflow.run(checkpoint_id=...)``, in another process too.
    With no configuration it uses the embedded local store under ``AGENTSERVER_STATE_ROOT``;
    inside a Foundry-hosted agent (``FOUNDRY_HOSTING_ENVIRONMENT`` set) the hosted service.

    Args:
        context_id: The conversation (or other context) whose checkpoints this object holds;
            one store per context. ``None`` uses the prefix's default store.
        store_prefix: First segment of every store name (default ``"maf"``).
        credential: Async token credential for hosted mode (default: the SDK's
            ``DefaultAzureCredential``).
        endpoint: Foundry project endpoint for hosted mode (default:
            ``FOUNDRY_PROJECT_ENDPOINT``).
        user_id: The end user whose partition to use outside a request (local: the partition
            name unless the request context names a user). Within a request the request's own
            identity always wins (``docs/concepts/isolation.md``). Hosted mode forwards it as
            ``x-ms-user-id``, honoured only for trusted callers, so it needs
            ``trusted_delegation=True`` there.
        trusted_delegation: Declare this agent a trusted delegating caller (required for
            ``user_id=`` in hosted mode).
        item_ttl_seconds: Idle lifetime of items in stores this object creates (-1: never).
        spill: Where checkpoints over the 1 MB item limit go (default: a directory under the
            state root in local mode, ``FOUNDRY_CHECKPOINT_BLOB_*`` blob storage if set).
        local_backend: ``"sqlite"`` (embedded, default) or ``"sdk"`` (the SDK's local mode).
        allowed_checkpoint_types: Classes, or ``"module:qualname"`` strings, that may be
            unpickled besides MAF's built-in safe set, ``agent_framework.*``, ``openai.types.*``
            and ``register_checkpoint_type`` registrations.
        **client_kwargs: Passed to the ``FoundryStateStore`` client (hosted mode), for example
            ``connection_verify=``.

    Every method is async (MAF's protocol) and runs its I/O on the storage's own loop, so it
    can be awaited from any loop. ``save`` refuses, with ``WorkflowCheckpointException`` and an
    error log line, a checkpoint that could not be restored under the allowed types (MAF's
    runner only logs save failures as warnings); nothing is stored then.

    Raises:
        InvalidIdentifierError: ``context_id``, ``store_prefix`` or ``user_id`` cannot be used.
        UntrustedDelegationError: ``user_id=`` in hosted mode without ``trusted_delegation``.
        InvalidArgumentError: ``item_ttl_seconds``, ``local_backend`` or an
            ``allowed_checkpoint_types`` entry is out of range (also a ``ValueError``).

    Example:
        >>> import asyncio
        >>> from agent_framework import WorkflowCheckpoint
        >>> async def demo() -> str:
        ...     async with FoundryCheckpointStorage(context_id="conv-42") as storage:
        ...         cp = WorkflowCheckpoint(workflow_name="triage", graph_signature_hash="h")
        ...         await storage.save(cp)
        ...         latest = await storage.get_latest(workflow_name="triage")
        ...         return "same" if latest and latest.checkpoint_id == cp.checkpoint_id else "?"
        >>> asyncio.run(demo())
        'same'
    """

    def __init__(
        self,
        context_id: str | None = None,
        *,
        store_prefix: str = "maf",
        credential: AsyncTokenCredential | None = None,
        endpoint: str | None = None,
        user_id: str | None = None,
        trusted_delegation: bool = False,
        item_ttl_seconds: int = DEFAULT_ITEM_TTL_SECONDS,
        spill: SpillStore | None = None,
        local_backend: LocalBackend = "sqlite",
        allowed_checkpoint_types: Iterable[type | str] | None = None,
        **client_kwargs: Any,
    ) -> None:
        allowed = type_keys(allowed_checkpoint_types)
        if context_id is not None:
            check_identifier(context_id, "context_id")
        core = new_core(locals(), scope_word="context")
        self._setup(core, context_id, allowed, owns_core=True, request_context=None)

    def _setup(
        self,
        core: CheckpointCore,
        context_id: str | None,
        allowed: frozenset[str],
        *,
        owns_core: bool,
        request_context: FoundryAgentRequestContext | None,
    ) -> None:
        self._core = core
        self._context_id = context_id
        self._items = ContextItems(core, context_id)
        self._allowed = allowed
        self._owns_core = owns_core
        self._request_context = request_context
        self._save_failures = 0

    @classmethod
    def _on_core(
        cls,
        core: CheckpointCore,
        context_id: str | None,
        *,
        allowed: frozenset[str],
        request_context: FoundryAgentRequestContext | None = None,
    ) -> FoundryCheckpointStorage:
        """A storage on a shared core (closing it leaves the core open)."""
        if context_id is not None:
            check_identifier(context_id, "context_id")
        storage = cls.__new__(cls)
        storage._setup(core, context_id, allowed, owns_core=False, request_context=request_context)
        return storage

    def for_context(self, context_id: str | None) -> FoundryCheckpointStorage:
        """A storage for another context on this one's clients and loop (closing it leaves
        them open; close this one when done).

        Example:
            >>> import asyncio
            >>> from agent_framework import WorkflowCheckpoint
            >>> async def demo() -> bool:
            ...     async with FoundryCheckpointStorage() as storage:
            ...         other = storage.for_context("conv-fc")
            ...         cp = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h")
            ...         await other.save(cp)
            ...         listed = [c.checkpoint_id for c in await other.list_stored()]
            ...         return listed == [cp.checkpoint_id] and other.context_id == "conv-fc"
            >>> asyncio.run(demo())
            True
        """
        return type(self)._on_core(
            self._core,
            context_id,
            allowed=self._allowed,
            request_context=self._request_context,
        )

    # -- introspection ----------------------------------------------------------------------
    @property
    def context_id(self) -> str | None:
        """The context whose checkpoints this storage holds (None: the default store)."""
        return self._context_id

    @property
    def allowed_checkpoint_types(self) -> frozenset[str]:
        """The extra ``"module:qualname"`` types the restricted unpickler admits."""
        return self._allowed

    @property
    def save_failures(self) -> int:
        """How many ``save`` calls failed on this object (MAF's runner only logs them)."""
        return self._save_failures

    def __repr__(self) -> str:
        return f"FoundryCheckpointStorage(context_id={self._context_id!r}, {self._core.describe()})"

    # -- the CheckpointStorage protocol -----------------------------------------------------
    async def save(self, checkpoint: WorkflowCheckpoint) -> CheckpointID:
        """Store a snapshot of ``checkpoint`` and return its id.

        The snapshot is taken before the first ``await``, so later changes to ``checkpoint``
        do not reach the store. Raises :class:`WorkflowCheckpointException` (and logs at error
        level) when the checkpoint cannot be encoded, would not decode under
        ``allowed_checkpoint_types``, is too large with no spill store, or the write fails.
        """
        if not isinstance(checkpoint, WorkflowCheckpoint):
            raise WorkflowCheckpointException(
                f"save() takes a WorkflowCheckpoint, got {type(checkpoint).__name__}"
            )
        checkpoint_id = checked_checkpoint_id(checkpoint.checkpoint_id)
        try:
            payload, tags, extra = _prepared(checkpoint, checkpoint_id, self._allowed)
            # Once started, a save is not cancelled with its caller (a host stopping the
            # workflow at shutdown): close(), or the exit of the process, waits for it. A
            # save into a context already open starts here when its store allows, without
            # the two hops to the core's loop and back.
            call = self._capture()
            started = self._items.write_now(checkpoint_id, payload, tags, extra, call)
            if started is None:
                write = self._items.write(checkpoint_id, payload, tags, extra)
                started = self._run(write, shield=True, call=call)
            await started
        except Exception as exc:
            self._save_failures += 1
            if isinstance(exc, WorkflowCheckpointException):
                logger.error("%s", exc)
                raise
            error = WorkflowCheckpointException(
                f"Checkpoint {checkpoint_id!r} of workflow {checkpoint.workflow_name!r} was not "
                f"saved in context {self._context_id!r}: {type(exc).__name__}: {exc}"
            )
            logger.error("%s", error)
            raise error from exc
        return checkpoint_id

    async def load(self, checkpoint_id: CheckpointID) -> WorkflowCheckpoint:
        """A new copy of checkpoint ``checkpoint_id``.

        Raises :class:`WorkflowCheckpointException` naming the id when it does not exist in
        this context (for this user) or cannot be decoded.
        """
        checkpoint, _ = await self.load_with_hash(checkpoint_id)
        return checkpoint

    async def load_with_hash(self, checkpoint_id: CheckpointID) -> tuple[WorkflowCheckpoint, str]:
        """The checkpoint and the sha256 (hex) of its stored encoding, for Foundry hosting.

        The hash is ``sha256`` of MAF's encoding of the checkpoint dumped as compact JSON with
        sorted keys: the same value Foundry hosting's own store computes, and stable across
        processes and Python versions because it hashes what was stored, not a re-encoding.
        """
        checkpoint_id = checked_checkpoint_id(checkpoint_id)
        payload = await self._run(self._items.read(checkpoint_id))
        checkpoint = decode_payload(payload, allowed=self._allowed, checkpoint_id=checkpoint_id)
        return checkpoint, payload_hash(payload)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """New copies of every checkpoint of ``workflow_name`` in this context, oldest first.

        A checkpoint that cannot be read or decoded (damaged, or holding a type outside
        ``allowed_checkpoint_types``, for example after the context is reopened with a narrower
        list) is left out and logged at error level; ``load`` of its id raises.
        :meth:`list_checkpoint_ids` and :meth:`get_latest` skip the same checkpoints, as MAF's
        ``FileCheckpointStorage`` does. One holding a pickle no encoder writes raises
        :class:`~foundry_checkpoint_maf.CheckpointTamperedError` (a
        ``WorkflowCheckpointException``) and is logged at WARNING as tampered, since that is a
        sign of tampering.
        """
        workflow_name = checked_workflow_name(workflow_name)
        return await self._decodable(workflow_name, "list_checkpoints")

    async def _decodable(
        self, workflow_name: str, caller: str, call: Call | None = None
    ) -> list[WorkflowCheckpoint]:
        """Every checkpoint of ``workflow_name`` that decodes, oldest first; the rest logged."""
        found = await self._run(self._items.read_all(workflow_name, caller), call=call)
        out: list[WorkflowCheckpoint] = []
        for checkpoint_id, payload in found:
            checkpoint = self._decode_or_skip(payload, checkpoint_id, caller)
            if checkpoint is not None and checkpoint.workflow_name == workflow_name:
                out.append(checkpoint)
        return out

    def _decode_or_skip(
        self, payload: bytes, checkpoint_id: str, caller: str
    ) -> WorkflowCheckpoint | None:
        try:
            return decode_payload(payload, allowed=self._allowed, checkpoint_id=checkpoint_id)
        except CheckpointTamperedError:
            raise  # tampering (already logged as such at WARNING): never skipped quietly
        except WorkflowCheckpointException as exc:  # damaged, or a type that is not allowed
            logger.error("%s skips undecodable checkpoint %s: %s", caller, checkpoint_id, exc)
            return None

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        """Delete checkpoint ``checkpoint_id`` (and its spilled blob); False when absent."""
        checkpoint_id = checked_checkpoint_id(checkpoint_id)
        return await self._run(self._items.delete(checkpoint_id))

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        """A new copy of the newest checkpoint of ``workflow_name``, or None.

        Candidates are the checkpoints first written within the newest second the store
        records (its ``created_at``); among them the largest timestamp wins and, on equal
        timestamps, the one no other tied checkpoint names as ``previous_checkpoint_id``. This
        matches MAF's "largest timestamp" whenever checkpoints are saved in timestamp order, as
        the runner does; a checkpoint saved later with an older timestamp (a copied history)
        counts as newer here. Costs one key listing (plus one page per 100 checkpoints written
        within the newest second) and one item read, whatever the history.

        When that checkpoint cannot be read or decoded (for example it holds a type outside
        ``allowed_checkpoint_types``), it is logged and skipped, and the newest checkpoint that
        decodes is returned (in :meth:`list_checkpoints` order), as MAF's
        ``FileCheckpointStorage`` does; None when none decodes.
        """
        workflow_name = checked_workflow_name(workflow_name)
        call = self._capture()  # one identity for the newest and, if need be, the fallback
        try:
            found = await self._run(self._items.read_latest(workflow_name), call=call)
        except WorkflowCheckpointException as exc:
            logger.error("get_latest skips a checkpoint: %s", exc)
        else:
            if found is None:
                return None
            checkpoint_id, payload = found
            checkpoint = self._decode_or_skip(payload, checkpoint_id, "get_latest")
            if checkpoint is not None and checkpoint.workflow_name == workflow_name:
                return checkpoint
        decodable = await self._decodable(workflow_name, "get_latest", call)
        return decodable[-1] if decodable else None

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        """The ids of every checkpoint of ``workflow_name`` in this context, oldest first.

        The ids of :meth:`list_checkpoints`: a checkpoint that cannot be read or decoded under
        ``allowed_checkpoint_types`` is left out (and logged), as in MAF's
        ``FileCheckpointStorage``, so every id listed loads. This reads every checkpoint.
        """
        workflow_name = checked_workflow_name(workflow_name)
        checkpoints = await self._decodable(workflow_name, "list_checkpoint_ids")
        return [checkpoint.checkpoint_id for checkpoint in checkpoints]
