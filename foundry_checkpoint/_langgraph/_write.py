"""Writing the LangGraph saver's items: ``put`` (one self-contained checkpoint item) and
``put_writes`` (one item per task, merged with ``if_match`` when the task writes again).

Channel values over :data:`SPILL_THRESHOLD` serialized go to the spill store as
content-addressed blobs, blob first and item second; unchanged channels are carried from the
parent checkpoint without serializing or uploading them again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from azure.ai.agentserver.core.storage import FoundryStoragePreconditionError
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_serializable_checkpoint_metadata,
)

from ..adapter import (
    INLINE_BUDGET,
    Scope,
    bounded,
    check_identifier,
    create_item,
    spilled_digest,
    tag_value,
)
from ..errors import ConcurrentWriteError, FoundryCheckpointError, InvalidIdentifierError
from ._config import Address
from ._context import Context, ThreadState
from ._prune import call_owner, is_call_namespace
from ._read import read_record
from ._records import (
    KIND_CHECKPOINT,
    KIND_WRITES,
    TAG_EARLY,
    TAG_ID,
    TAG_KIND,
    TAG_NS,
    TAG_OWNER,
    TAG_PARENT,
    TAG_RUN,
    TAG_SOURCE,
    TAG_SPILL,
    TAG_STEP,
    ChannelEntry,
    CheckpointRecord,
    WritesRecord,
    checkpoint_key,
    id_tag,
    ns_tag,
    pack_checkpoint,
    pack_writes,
    step_tag,
    unpack_writes,
    writes_key,
)

if TYPE_CHECKING:
    from ..spill import SpillStore

__all__ = ["SPILL_THRESHOLD", "put", "put_writes"]

SPILL_THRESHOLD: Final = 256 * 1024
"""A channel value whose serialized form is larger than this goes to the spill store (when one
is configured) as its own content-addressed blob."""

_MERGE_ATTEMPTS: Final = 16


async def put(
    ctx: Context,
    address: Address,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> RunnableConfig:
    """Store ``checkpoint`` as one self-contained item; returns its config.

    ``address`` is ``config``'s, parsed (its checkpoint id is the parent); ``config`` itself
    serves only LangGraph's metadata helper.
    """
    thread_id, ns, parent_id = address.thread_id, address.ns, address.checkpoint_id
    checkpoint_id = check_identifier(checkpoint.get("id"), "checkpoint id")
    # Before any await: a put_writes of this checkpoint from now on waits for the item.
    token = ctx.token(thread_id, ns, checkpoint_id)
    caches = ctx.caches
    early = token in caches.early
    caches.early.pop(token, None)
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    caches.pending[token] = done
    try:
        scope = await ctx.core.scope(thread_id)
        state = ctx.state(thread_id)
        md = get_serializable_checkpoint_metadata(config, metadata)
        channels, absent = await _channel_table(
            ctx, scope, state, ns, parent_id, checkpoint, new_versions
        )
        record = CheckpointRecord(
            ns=ns,
            checkpoint_id=checkpoint_id,
            parent_id=parent_id,
            checkpoint=ctx.serde.dumps_typed(
                {k: v for k, v in checkpoint.items() if k != "channel_values"}
            ),
            metadata=ctx.serde.dumps_typed(md),
            channels=channels,
            absent=absent,
        )
        key = checkpoint_key(ns, checkpoint_id)
        tags = _checkpoint_tags(record, md, early=early)
        value = await scope.encode(key, pack_checkpoint(record), tags=tags)
        if spilled_digest(value):
            tags[TAG_SPILL] = "1"
        await scope.touch()
        ref = await scope.store.set_item(key, value, tags=tags)
        state.set_head(ns, record, ref.etag)
    finally:
        if caches.pending.get(token) is done:
            del caches.pending[token]
        done.set_result(None)
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _checkpoint_tags(
    record: CheckpointRecord, md: Mapping[str, Any], *, early: bool
) -> dict[str, str]:
    """The tags of a checkpoint item: what ``list``, "latest", ``prune`` and
    ``delete_for_runs`` decide on without reading it."""
    ns = record.ns
    tags = {
        TAG_KIND: KIND_CHECKPOINT,
        TAG_NS: ns_tag(ns),
        TAG_ID: id_tag(record.checkpoint_id),
        TAG_SPILL: "1" if record.digests() else "0",
        TAG_EARLY: "1" if early else "0",
    }
    if record.parent_id:
        tags[TAG_PARENT] = id_tag(record.parent_id)
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
    return tags


async def _channel_table(
    ctx: Context,
    scope: Scope,
    state: ThreadState,
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
    parent = head if head is not None and parent_id and head.checkpoint_id == parent_id else None
    table: dict[str, ChannelEntry] = {}
    absent: dict[str, str | int | float] = {}
    fresh: list[str] = []
    missing = [name for name in versions if name not in new_versions]
    for name in versions:
        if name in new_versions:
            if name in values:
                fresh.append(name)
            else:
                absent[name] = versions[name]
    if missing and parent is None and parent_id:
        parent = await read_record(scope, checkpoint_key(ns, parent_id))
    if parent is not None:
        for name in list(missing):
            entry = parent.channels.get(name)
            if entry is not None and entry.version == versions[name]:
                table[name] = entry
                missing.remove(name)
            elif name in parent.absent and parent.absent[name] == versions[name]:
                absent[name] = versions[name]
                missing.remove(name)
    for name in missing:
        if name in values:
            fresh.append(name)
        else:
            absent[name] = versions[name]
    spill = scope.spill
    # Chunked into the thread's own store (no spill store): only what cannot fit an item.
    threshold = INLINE_BUDGET if scope.chunked else SPILL_THRESHOLD
    large: list[str] = []
    for name in fresh:
        type_, data = ctx.serde.dumps_typed(values[name])
        table[name] = ChannelEntry(versions[name], type_, data, None, len(data))
        if spill is not None and len(data) > threshold:
            large.append(name)
    if large:
        assert spill is not None
        stored = await bounded(_spilled(scope, spill, table[name]) for name in large)
        table.update(zip(large, stored, strict=True))
    return {name: table[name] for name in versions if name in table}, absent


async def _spilled(scope: Scope, spill: SpillStore, entry: ChannelEntry) -> ChannelEntry:
    """A serialized channel value (over :data:`SPILL_THRESHOLD`) stored as a blob of its own."""
    spill_ns = await scope.namespace(create=True)
    if spill_ns is None:  # pragma: no cover - create=True always yields one
        raise FoundryCheckpointError(f"no spill namespace for {scope.where('-')}")
    assert entry.data is not None
    # Blob first, item second: an item never references a blob that was not stored. A
    # blob already there (same content) is not uploaded again, only refreshed. The store
    # hashes the value (its address) and returns the digest.
    digest = await spill.put(spill_ns, entry.data)
    return ChannelEntry(entry.version, entry.type, None, digest, entry.size)


async def put_writes(
    ctx: Context,
    address: Address,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> None:
    """Store a task's writes on the checkpoint ``config`` names, merged into what the task
    stored there before (a write index already stored keeps its value, as in LangGraph's
    savers; special channels with negative indexes are replaced).

    Raises:
        InvalidIdentifierError: ``config`` names no checkpoint, or an id is not text.
        ConcurrentWriteError: the merge lost against concurrent writers on every attempt.
    """
    thread_id, ns, checkpoint_id = address.thread_id, address.ns, address.checkpoint_id
    if not checkpoint_id:
        raise InvalidIdentifierError(
            "put_writes needs config['configurable']['checkpoint_id'] (the checkpoint the "
            "writes belong to)"
        )
    check_identifier(task_id, "task_id")
    if not writes:
        return
    await _after_own_put(ctx, thread_id, ns, checkpoint_id)
    new: dict[int, tuple[str, str, bytes]] = {}
    for idx, (channel, value) in enumerate(writes):
        new[WRITES_IDX_MAP.get(channel, idx)] = (channel, *ctx.serde.dumps_typed(value))
    scope = await ctx.core.scope(thread_id)
    key = writes_key(ns, checkpoint_id, task_id)
    tags = {TAG_KIND: KIND_WRITES, TAG_NS: ns_tag(ns), TAG_ID: id_tag(checkpoint_id)}
    record = WritesRecord(ns, checkpoint_id, task_id, task_path, new)
    value, tags = await _encode_writes(scope, key, record, tags)
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
        merged_value, merged_tags = await _encode_writes(scope, key, record, tags)
        try:
            await scope.store.set_item(key, merged_value, tags=merged_tags, if_match=item.etag)
            return
        except FoundryStoragePreconditionError:
            continue
    raise ConcurrentWriteError(
        f"could not merge the writes of task {task_id!r} into {scope.where(key)}: it kept "
        "changing under concurrent writers; retry the step"
    )


async def _after_own_put(ctx: Context, thread_id: str, ns: str, checkpoint_id: str) -> None:
    """Order this write after the put of its checkpoint, as far as this process knows.

    A put of the checkpoint running here is waited for, so the writes item is created after
    the checkpoint item. A checkpoint this process neither wrote nor read may still be on
    its way (LangGraph's async loop submits ``put_writes`` without waiting for ``put``): it
    is noted, and that put then tags its item ``ew=1`` so that readers list its writes on
    their own (see ``_read.latest``). Run before the writes item is created, with no await
    before the bookkeeping.
    """
    token = ctx.token(thread_id, ns, checkpoint_id)
    pending = ctx.caches.pending.get(token)
    if pending is not None:
        await asyncio.shield(pending)
        return
    head = ctx.state(thread_id).heads.get(ns)
    if head is not None and head.checkpoint_id == checkpoint_id:
        return  # written (or read) here: the item exists
    ctx.caches.note_early(token)


async def _encode_writes(
    scope: Scope, key: str, record: WritesRecord, tags: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    out = {**tags, TAG_SPILL: "0"}
    value = await scope.encode(key, pack_writes(record), tags=out)
    if spilled_digest(value):
        out[TAG_SPILL] = "1"
    return value, out
