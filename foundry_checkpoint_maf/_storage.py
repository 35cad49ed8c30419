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

``get_latest`` lists keys newest first and reads only the keys that share the newest
``created_at`` second (one more page per 100 of them), orders them by ``ts`` and, on equal
timestamps, by ``previous_checkpoint_id`` lineage, then reads one item: its cost does not grow
with the history.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final, TypeVar

from agent_framework import CheckpointID, WorkflowCheckpoint, WorkflowCheckpointException
from azure.ai.agentserver.core.storage import DEFAULT_ITEM_TTL_SECONDS

from foundry_checkpoint import _codec
from foundry_checkpoint._core import (
    DEFAULT_GC_GRACE_SECONDS,
    CheckpointCore,
    GcReport,
    LocalBackend,
    Scope,
    newest_second,
)
from foundry_checkpoint._lifecycle import CoreOwner
from foundry_checkpoint._naming import check_identifier, item_key, tag_value, unescape
from foundry_checkpoint._protocol import ItemKey
from foundry_checkpoint.errors import (
    CorruptPayloadError,
    FoundryCheckpointError,
    InvalidArgumentError,
)

from ._payload import (
    CheckpointDecodeError,
    CheckpointRefusedError,
    decode_payload,
    encode_payload,
    payload_hash,
    sortable_timestamp,
    type_keys,
)

if TYPE_CHECKING:
    from azure.ai.agentserver.core import FoundryAgentRequestContext
    from azure.core.credentials_async import AsyncTokenCredential

    from foundry_checkpoint.spill import SpillStore

__all__ = ["FoundryCheckpointStorage", "StoredCheckpoint"]

logger = logging.getLogger("foundry_checkpoint_maf")

T = TypeVar("T")

_KEY_WORD: Final = "k"
_KIND: Final = "maf.checkpoint"
_TAG_KIND: Final = "kind"
_TAG_WF: Final = "wf"
_TAG_ID: Final = "id"
_TAG_PREV: Final = "prev"
_TAG_TS: Final = "ts"
_EXTRA_ID: Final = "cid"
_EXTRA_WF: Final = "wf"
_EMPTY_TAG: Final = "~"  # escape() never yields a lone "~", so it cannot collide
_READ_CONCURRENCY: Final = 8
_LATEST_ATTEMPTS: Final = 3


def _tag(value: str) -> str:
    return tag_value(value) if value else _EMPTY_TAG


def _second(moment: object) -> int:
    """The whole second of a key's ``created_at`` (epoch int, float or datetime)."""
    if isinstance(moment, datetime):
        return int(moment.timestamp())
    if isinstance(moment, (int, float)):
        return int(moment)
    raise TypeError(f"unexpected created_at {moment!r}")


def _tags_of(key: ItemKey) -> Mapping[str, str]:
    tags: Mapping[str, str] | None = key.tags
    return tags or {}


def _pick_latest(candidates: Sequence[ItemKey]) -> ItemKey:
    """The newest of ``candidates`` by their tags: ``ts``, then ``previous_checkpoint_id`` lineage.

    Among keys with the newest timestamp, the newest is the one no other tied key names as its
    ``prev`` (agent-framework #8513: taking the maximum timestamp alone can return the parent).
    Forks (several such heads) are broken deterministically by checkpoint id tag.
    """
    if not candidates:
        raise ValueError("no candidates")
    top = max(_tags_of(k).get(_TAG_TS, "") for k in candidates)
    tied = [k for k in candidates if _tags_of(k).get(_TAG_TS, "") == top]
    if len(tied) > 1:
        named = {_tags_of(k).get(_TAG_PREV) for k in tied}
        heads = [k for k in tied if _tags_of(k).get(_TAG_ID) not in named]
        tied = heads or tied  # a cycle can only come from edited data: fall back to all
    return max(tied, key=lambda k: (_tags_of(k).get(_TAG_ID, ""), k.key))


def _oldest_first(keys: Iterable[ItemKey]) -> list[ItemKey]:
    """``keys`` by timestamp tag; equal timestamps by lineage depth (parents first)."""
    listed = list(keys)
    by_id = {_tags_of(k).get(_TAG_ID): k for k in listed}
    depth: dict[str, int] = {}

    def _depth(key: ItemKey) -> int:
        chain: list[ItemKey] = []
        seen: set[str] = set()
        current: ItemKey | None = key
        base = 0
        while current is not None and current.key not in seen:
            if current.key in depth:
                base = depth[current.key] + 1
                break
            seen.add(current.key)
            chain.append(current)
            tags = _tags_of(current)
            parent = by_id.get(tags.get(_TAG_PREV))
            same_time = parent is not None and _tags_of(parent).get(_TAG_TS) == tags.get(_TAG_TS)
            current = parent if same_time else None
        for offset, member in enumerate(reversed(chain)):
            depth[member.key] = base + offset
        return depth[key.key]

    return sorted(
        listed,
        key=lambda k: (_tags_of(k).get(_TAG_TS, ""), _depth(k), _second(k.created_at), k.key),
    )


def _checked_checkpoint_id(checkpoint_id: object) -> str:
    if not isinstance(checkpoint_id, str) or not checkpoint_id:
        raise WorkflowCheckpointException(
            f"checkpoint_id must be a non-empty string, got {type(checkpoint_id).__name__}: "
            f"{checkpoint_id!r}"
        )
    return checkpoint_id


def _checked_workflow_name(workflow_name: object) -> str:
    if not isinstance(workflow_name, str):
        raise WorkflowCheckpointException(
            f"workflow_name must be a string, got {type(workflow_name).__name__}: {workflow_name!r}"
        )
    return workflow_name


async def _bound(context: FoundryAgentRequestContext, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` with ``context`` as the request context (task-local: nothing leaks)."""
    from azure.ai.agentserver.core import set_request_context

    set_request_context(context)
    return await coro


def _iso_from_tag(tag: str) -> str | None:
    """The ISO 8601 UTC instant of a ``ts`` tag (see ``sortable_timestamp``), or None."""
    try:
        micros = int(tag) if not tag.startswith("-") else int(tag[1:]) - 10**19
    except ValueError:
        return None
    try:
        moment = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=micros)
    except OverflowError:
        return None
    return moment.isoformat()


def _untag(tag: str | None) -> str | None:
    if tag is None or tag == _EMPTY_TAG:
        return None if tag is None else ""
    return unescape(tag) or tag  # a hashed tag ("!" + sha256) is shown as it is


@dataclass(frozen=True)
class StoredCheckpoint:
    """What the store says about one MAF checkpoint, read from its key and tags only.

    ``size`` (bytes of the stored item value) and ``spilled`` (the checkpoint lives in the
    spill store) are known only from :meth:`FoundryCheckpointStorage.inspect`, which reads the
    item (without decoding it); listings leave them None. ``timestamp`` is the checkpoint's
    own timestamp in ISO 8601 UTC.

    Example:
        >>> StoredCheckpoint("c2", "triage", "c1", "2026-01-01T00:00:00+00:00").previous
        'c1'
    """

    checkpoint_id: str
    workflow_name: str
    previous: str | None
    timestamp: str | None
    size: int | None = None
    spilled: bool | None = None


class FoundryCheckpointStorage(CoreOwner):
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
        user_id: The end user whose isolated partition to use (hosted: forwarded to the
            service, honoured for trusted callers; local: the partition name). Unset, each
            call is for the user of its request context (``docs/hosted.md``).
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

    Example:
        >>> from agent_framework import WorkflowCheckpoint
        >>> async def demo() -> str:
        ...     async with FoundryCheckpointStorage(context_id="conv-42") as storage:
        ...         cp = WorkflowCheckpoint(workflow_name="triage", graph_signature_hash="h")
        ...         await storage.save(cp)
        ...         latest = await storage.get_latest(workflow_name="triage")
        ...         return "same" if latest and latest.checkpoint_id == cp.checkpoint_id else "?"
        >>> asyncio.run(demo())  # doctest: +SKIP
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
        item_ttl_seconds: int = DEFAULT_ITEM_TTL_SECONDS,
        spill: SpillStore | None = None,
        local_backend: LocalBackend = "sqlite",
        allowed_checkpoint_types: Iterable[type | str] | None = None,
        **client_kwargs: Any,
    ) -> None:
        allowed = type_keys(allowed_checkpoint_types)
        if context_id is not None:
            check_identifier(context_id, "context_id")
        core = CheckpointCore(
            store_prefix=store_prefix,
            scope_word="context",
            credential=credential,
            endpoint=endpoint,
            user_id=user_id,
            item_ttl_seconds=item_ttl_seconds,
            spill=spill,
            local_backend=local_backend,
            client_kwargs=client_kwargs,
        )
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
            >>> async def demo() -> list[str]:
            ...     async with FoundryCheckpointStorage() as storage:
            ...         other = storage.for_context("conv-42")
            ...         return [c.checkpoint_id for c in await other.list_stored()]
            >>> asyncio.run(demo())  # doctest: +SKIP
            ['3f2a…']
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
        checkpoint_id = _checked_checkpoint_id(checkpoint.checkpoint_id)
        try:
            payload, tags, extra = self._prepare(checkpoint, checkpoint_id)
            await self._run(self._write(checkpoint_id, payload, tags, extra))
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
        checkpoint_id = _checked_checkpoint_id(checkpoint_id)
        payload = await self._run(self._read(checkpoint_id))
        checkpoint = decode_payload(payload, allowed=self._allowed, checkpoint_id=checkpoint_id)
        return checkpoint, payload_hash(payload)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """New copies of every checkpoint of ``workflow_name`` in this context, oldest first.

        A checkpoint that cannot be read or decoded (damaged, or holding a type outside
        ``allowed_checkpoint_types``, for example after the context is reopened with a narrower
        list) is left out and logged at error level; ``load`` of its id raises.
        :meth:`list_checkpoint_ids` and :meth:`get_latest` skip the same checkpoints, as MAF's
        ``FileCheckpointStorage`` does. One naming a class no encoder writes raises
        :class:`~foundry_checkpoint_maf._payload.CheckpointRefusedError` (a
        ``WorkflowCheckpointException``), since that is a sign of tampering.
        """
        workflow_name = _checked_workflow_name(workflow_name)
        return await self._decodable(workflow_name, "list_checkpoints")

    async def _decodable(self, workflow_name: str, caller: str) -> list[WorkflowCheckpoint]:
        """Every checkpoint of ``workflow_name`` that decodes, oldest first; the rest logged."""
        found = await self._run(self._read_all(workflow_name, caller))
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
        except CheckpointRefusedError:
            raise  # tampering: never skipped quietly
        except WorkflowCheckpointException as exc:
            logger.error("%s skips checkpoint %s: %s", caller, checkpoint_id, exc)
            return None

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        """Delete checkpoint ``checkpoint_id`` (and its spilled blob); False when absent."""
        checkpoint_id = _checked_checkpoint_id(checkpoint_id)
        return await self._run(self._delete(checkpoint_id))

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
        workflow_name = _checked_workflow_name(workflow_name)
        try:
            found = await self._run(self._read_latest(workflow_name))
        except WorkflowCheckpointException as exc:
            logger.error("get_latest skips a checkpoint: %s", exc)
        else:
            if found is None:
                return None
            checkpoint_id, payload = found
            checkpoint = self._decode_or_skip(payload, checkpoint_id, "get_latest")
            if checkpoint is not None and checkpoint.workflow_name == workflow_name:
                return checkpoint
        decodable = await self._decodable(workflow_name, "get_latest")
        return decodable[-1] if decodable else None

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        """The ids of every checkpoint of ``workflow_name`` in this context, oldest first.

        The ids of :meth:`list_checkpoints`: a checkpoint that cannot be read or decoded under
        ``allowed_checkpoint_types`` is left out (and logged), as in MAF's
        ``FileCheckpointStorage``, so every id listed loads. This reads every checkpoint.
        """
        workflow_name = _checked_workflow_name(workflow_name)
        checkpoints = await self._decodable(workflow_name, "list_checkpoint_ids")
        return [checkpoint.checkpoint_id for checkpoint in checkpoints]

    # -- inspection and maintenance (beyond MAF's protocol) ----------------------------------
    async def list_contexts(self) -> list[str | None]:
        """Every context this user has checkpoints in under the prefix (None: the default
        store), from the context index: no checkpoint is read.

        Example:
            >>> async def demo() -> list[str | None]:
            ...     async with FoundryCheckpointStorage() as storage:
            ...         return await storage.list_contexts()
            >>> asyncio.run(demo())  # doctest: +SKIP
            ['conv-42']
        """
        ids = await self._run(self._core.scope_ids())
        named = sorted(i for i in ids if i is not None)
        return [None, *named] if None in ids else list(named)

    async def list_stored(self, *, workflow_name: str | None = None) -> list[StoredCheckpoint]:
        """This context's checkpoints (of ``workflow_name``; default: every workflow), oldest
        first per the order :meth:`get_latest` uses, from the key listing alone: nothing is
        read or decoded, so it is cheap and lists checkpoints that would not decode too.

        Example:
            >>> async def demo() -> list[str]:
            ...     async with FoundryCheckpointStorage(context_id="conv-42") as storage:
            ...         return [c.checkpoint_id for c in await storage.list_stored()]
            >>> asyncio.run(demo())  # doctest: +SKIP
            ['3f2a…', '9c1d…']
        """
        tags = (
            {_TAG_KIND: _KIND}
            if workflow_name is None
            else self._filter(_checked_workflow_name(workflow_name))
        )
        keys = await self._run(self._keys(tags))
        return [self._stored(key) for key in _oldest_first(keys)]

    async def inspect(self, checkpoint_id: CheckpointID) -> StoredCheckpoint:
        """:meth:`list_stored`'s record of one checkpoint with its ``size`` and ``spilled``
        filled in: the item is read, not decoded. Raises ``WorkflowCheckpointException``
        when the checkpoint does not exist.

        Example:
            >>> async def demo(cid: str) -> bool | None:
            ...     async with FoundryCheckpointStorage(context_id="conv-42") as storage:
            ...         return (await storage.inspect(cid)).spilled
            >>> asyncio.run(demo("3f2a"))  # doctest: +SKIP
            False
        """
        checkpoint_id = _checked_checkpoint_id(checkpoint_id)
        return await self._run(self._inspect(checkpoint_id))

    async def delete_context(self) -> int:
        """Delete every checkpoint of this context (and its spilled blobs); returns how many
        checkpoints there were (counted from the key listing).

        Example:
            >>> async def demo() -> int:
            ...     async with FoundryCheckpointStorage(context_id="conv-42") as storage:
            ...         return await storage.delete_context()
            >>> asyncio.run(demo())  # doctest: +SKIP
            4
        """
        return await self._run(self._delete_context())

    async def prune(self, *, keep: int = 1, workflow_name: str | None = None) -> int:
        """Delete all but the newest ``keep`` checkpoints of each workflow of this context (or
        of ``workflow_name`` only), newest as :meth:`get_latest` decides; returns how many were
        deleted. Which to keep is decided from keys and tags, without reading a checkpoint.

        Example:
            >>> async def demo() -> int:
            ...     async with FoundryCheckpointStorage(context_id="conv-42") as storage:
            ...         return await storage.prune(keep=2)
            >>> asyncio.run(demo())  # doctest: +SKIP
            3
        """
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise InvalidArgumentError(
                f"keep must be a positive number of checkpoints, got {keep!r}"
            )
        stored = await self.list_stored(workflow_name=workflow_name)
        by_workflow: dict[str, list[StoredCheckpoint]] = {}
        for record in stored:
            by_workflow.setdefault(record.workflow_name, []).append(record)
        deleted = 0
        for records in by_workflow.values():
            for record in records[: max(0, len(records) - keep)]:
                deleted += await self._run(self._delete(record.checkpoint_id))
        return deleted

    async def gc(
        self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, dry_run: bool = False
    ) -> GcReport:
        """Delete this user's spilled checkpoint blobs (every context under the prefix) that no
        checkpoint references any more, once older than ``grace_seconds`` (a save in flight
        uploads its blob first). ``delete`` removes a checkpoint's blob at once; this finds
        what expired items or crashed writers left behind.

        Example:
            >>> async def demo() -> int:
            ...     async with FoundryCheckpointStorage() as storage:
            ...         return len((await storage.gc(dry_run=True)).deleted)
            >>> asyncio.run(demo())  # doctest: +SKIP
            0
        """
        return await self._run(
            self._core.gc(_referenced, grace_seconds=grace_seconds, dry_run=dry_run)
        )

    def _stored(self, key: ItemKey, value: Mapping[str, Any] | None = None) -> StoredCheckpoint:
        tags = _tags_of(key)
        workflow = value.get(_EXTRA_WF) if value else None
        return StoredCheckpoint(
            checkpoint_id=self._id_from(key, value),
            workflow_name=workflow
            if isinstance(workflow, str)
            else _untag(tags.get(_TAG_WF)) or "",
            previous=_untag(tags.get(_TAG_PREV)),
            timestamp=_iso_from_tag(tags.get(_TAG_TS, "")),
        )

    # -- helpers on the caller's side -------------------------------------------------------
    def _prepare(
        self, checkpoint: WorkflowCheckpoint, checkpoint_id: str
    ) -> tuple[bytes, dict[str, str], dict[str, str]]:
        try:
            payload = encode_payload(checkpoint)
        except Exception as exc:
            raise WorkflowCheckpointException(
                f"Checkpoint {checkpoint_id!r} of workflow {checkpoint.workflow_name!r} cannot be "
                f"encoded ({type(exc).__name__}: {exc}); nothing was stored"
            ) from exc
        try:
            decode_payload(payload, allowed=self._allowed, checkpoint_id=checkpoint_id)
        except WorkflowCheckpointException as exc:
            raise WorkflowCheckpointException(
                f"Refusing to save checkpoint {checkpoint_id!r} of workflow "
                f"{checkpoint.workflow_name!r}: it could not be restored. {exc} Nothing was stored."
            ) from exc
        workflow_name = _checked_workflow_name(checkpoint.workflow_name)
        tags = {
            _TAG_KIND: _KIND,
            _TAG_WF: _tag(workflow_name),
            _TAG_ID: _tag(checkpoint_id),
            _TAG_TS: sortable_timestamp(checkpoint.timestamp, checkpoint_id),
        }
        previous = checkpoint.previous_checkpoint_id
        if previous:
            tags[_TAG_PREV] = _tag(previous)
        extra = {_EXTRA_ID: checkpoint_id, _EXTRA_WF: workflow_name}
        return payload, tags, extra

    async def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._request_context is not None:
            coro = _bound(self._request_context, coro)
        return await self._core.arun(coro)

    def _filter(self, workflow_name: str) -> dict[str, str]:
        return {_TAG_KIND: _KIND, _TAG_WF: _tag(workflow_name)}

    # -- coroutines on the core's loop ------------------------------------------------------
    async def _scope(self) -> Scope:
        return await self._core.scope(self._context_id)

    async def _existing(self) -> Scope | None:
        """The scope for a read: None when the context's store does not exist (not created)."""
        return await self._core.scope(self._context_id, create=False)

    async def _write(
        self, checkpoint_id: str, payload: bytes, tags: dict[str, str], extra: dict[str, str]
    ) -> None:
        scope = await self._scope()
        key = item_key(_KEY_WORD, checkpoint_id)
        value = await scope.encode(key, payload, tags=tags, extra=extra)
        await scope.store.set_item(key, value, tags=tags)
        await scope.touch()

    async def _payload(
        self, scope: Scope, key: str, value: Mapping[str, Any], checkpoint_id: str
    ) -> bytes:
        try:
            return await scope.decode(value, key=key)
        except FoundryCheckpointError as exc:
            typed = isinstance(exc, CorruptPayloadError)
            raise (CheckpointDecodeError if typed else WorkflowCheckpointException)(
                f"Checkpoint {checkpoint_id!r} in context {self._context_id!r} cannot be read: "
                f"{exc}"
            ) from exc

    async def _read(self, checkpoint_id: str) -> bytes:
        scope = await self._existing()
        key = item_key(_KEY_WORD, checkpoint_id)
        item = None if scope is None else await scope.store.get_item(key)
        if item is None:
            # MAF's own wording first (code matches on it), then where this store looked.
            raise WorkflowCheckpointException(
                f"No checkpoint found with ID {checkpoint_id} (context {self._context_id!r} of "
                f"store {self._core.name_for(self._context_id)!r})"
            )
        assert scope is not None
        return await self._payload(scope, key, item.value, checkpoint_id)

    async def _read_latest(self, workflow_name: str) -> tuple[str, bytes] | None:
        scope = await self._existing()
        if scope is None:
            return None
        tags = self._filter(workflow_name)
        for _ in range(_LATEST_ATTEMPTS):
            candidates = await newest_second(scope.store, tags)
            if not candidates:
                return None
            best = _pick_latest(candidates)
            item = await scope.store.get_item(best.key)
            if item is None:  # deleted since it was listed: look again
                continue
            checkpoint_id = self._id_from(best, item.value)
            return checkpoint_id, await self._payload(scope, best.key, item.value, checkpoint_id)
        return None

    @staticmethod
    def _id_from(key: ItemKey, value: Mapping[str, Any] | None) -> str:
        full = value.get(_EXTRA_ID) if value else None
        if isinstance(full, str):
            return full
        return unescape(_tags_of(key).get(_TAG_ID, "")) or ""

    async def _read_all(self, workflow_name: str, caller: str) -> list[tuple[str, bytes]]:
        scope = await self._existing()
        if scope is None:
            return []
        keys = _oldest_first(await scope.keys(self._filter(workflow_name)))
        gate = asyncio.Semaphore(_READ_CONCURRENCY)

        async def _one(key: ItemKey) -> tuple[str, bytes] | None:
            async with gate:
                item = await scope.store.get_item(key.key)
                if item is None:
                    return None
                checkpoint_id = self._id_from(key, item.value)
                try:
                    return checkpoint_id, await self._payload(
                        scope, key.key, item.value, checkpoint_id
                    )
                except WorkflowCheckpointException as exc:
                    logger.error("%s skips a checkpoint: %s", caller, exc)
                    return None

        results = await asyncio.gather(*(_one(k) for k in keys))
        return [r for r in results if r is not None]

    async def _keys(self, tags: Mapping[str, str]) -> list[ItemKey]:
        scope = await self._existing()
        return [] if scope is None else await scope.keys(tags)

    async def _inspect(self, checkpoint_id: str) -> StoredCheckpoint:
        scope = await self._existing()
        key = item_key(_KEY_WORD, checkpoint_id)
        found = (
            []
            if scope is None
            else await scope.keys({_TAG_KIND: _KIND, _TAG_ID: _tag(checkpoint_id)})
        )
        match = next((k for k in found if k.key == key), None)
        item = None if scope is None or match is None else await scope.store.get_item(key)
        if match is None or item is None:
            raise WorkflowCheckpointException(
                f"No checkpoint found with ID {checkpoint_id} (context {self._context_id!r} of "
                f"store {self._core.name_for(self._context_id)!r})"
            )
        record = self._stored(match, item.value)
        size = len(json.dumps(item.value, separators=(",", ":")).encode("utf-8"))
        spilled = _codec.spilled_digest(item.value) is not None
        return StoredCheckpoint(
            record.checkpoint_id,
            record.workflow_name,
            record.previous,
            record.timestamp,
            size=size,
            spilled=spilled,
        )

    async def _delete_context(self) -> int:
        scope = await self._existing()
        if scope is None:
            await self._core.unregister(self._context_id)
            return 0
        count = len(await scope.keys({_TAG_KIND: _KIND}))
        await scope.purge()
        return count

    async def _delete(self, checkpoint_id: str) -> bool:
        scope = await self._existing()
        if scope is None:
            return False
        key = item_key(_KEY_WORD, checkpoint_id)
        item = await scope.store.get_item(key)
        if item is None:
            return False
        await scope.store.delete_item(key)
        digest = _codec.spilled_digest(item.value)
        spill = self._core.spill
        if digest is not None and spill is not None:
            namespace = await scope.namespace(create=False)
            if namespace is not None:
                await spill.delete(namespace, [digest])
        return True


async def _referenced(scope: Scope) -> set[str]:
    """Every blob a context's checkpoints reference (each item is read, none decoded)."""
    found: set[str] = set()
    for key in await scope.keys({_TAG_KIND: _KIND}):
        item = await scope.store.get_item(key.key)
        digest = None if item is None else _codec.spilled_digest(item.value)
        if digest is not None:
            found.add(digest)
    return found
