"""Reading the LangGraph saver's items: the latest checkpoint, one checkpoint, its writes.

"Latest" comes from ``list_keys`` tags only (see :func:`latest`); a checkpoint is one item
holding every channel value it needs, inline or by digest from the spill store; its pending
writes are one item per task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    writes_sort_key,
)

from ..adapter import MAX_PAGE, ItemKey, RanksByTag, Scope, bounded, read_newest
from ..errors import MissingBlobError
from ._config import Address
from ._context import Context
from ._records import (
    KIND_CHECKPOINT,
    KIND_WRITES,
    TAG_EARLY,
    TAG_ID,
    TAG_KIND,
    TAG_NS,
    ChannelEntry,
    CheckpointRecord,
    WritesRecord,
    checkpoint_key,
    cid_of,
    id_tag,
    in_order,
    key_tags,
    ns_tag,
    pair_of,
    plain_tag,
    unpack_checkpoint,
    unpack_writes,
)

__all__ = [
    "PAGE",
    "Latest",
    "get_tuple",
    "latest",
    "load_entries",
    "pending_writes",
    "ranked",
    "raw_pending",
    "read_record",
    "to_tuple",
]

PAGE: Final = MAX_PAGE
"""Keys asked for per ``list_keys`` page past the first (the first: the backend's
``first_page``)."""


@dataclass
class Latest:
    """The newest checkpoint key of a namespace and the writes keys listed with it."""

    key: ItemKey
    writes: list[str]
    complete: bool
    """True when ``writes`` are all of its writes (its writer created none before it)."""


async def latest(ctx: Context, scope: Scope, ns: str) -> Latest | None:
    """The newest checkpoint key of ``ns`` and its writes keys, from one listing.

    ``list_keys`` orders by ``(created_at second, id)`` and the id is not write order, so
    every checkpoint key sharing the newest checkpoint's second is compared by checkpoint id
    (uuid6, time-ordered). The listing takes every item of the namespace (checkpoints and
    writes), newest first, down to the end of that second: the writes keys of the newest
    checkpoint created at or after it come with it. A writer tags a checkpoint ``ew=0`` when
    it made no writes for it before the checkpoint item existed (see ``_write.put_writes``);
    otherwise (``ew=1``, or written by an older version) the caller lists its writes on
    their own. Further pages are read only while a page ends inside that second, so the cost
    does not grow with history.

    A checkpoint tagged out of order (``copy_thread`` wrote it behind a newer one) is never
    taken on its second alone: the listing goes on until the newest checkpoint id seen is an
    in-order checkpoint and its second is passed, as an in-order checkpoint has a larger id
    than every checkpoint of an older second.

    A store that ranks by tag (the embedded one, :class:`~.._store._protocol.RanksByTag`)
    answers all of this in one call instead, whatever the number of items in that second.
    """
    by_rank = await ranked(scope, {TAG_KIND: KIND_CHECKPOINT, TAG_NS: ns_tag(ns)}, 1)
    if by_rank is not None:
        newest, index = by_rank
        return Latest(newest[0], index.get(pair_of(newest[0]), []), True) if newest else None
    store = scope.store
    first = ctx.core.backend.first_page
    page = await store.list_keys(tags={TAG_NS: ns_tag(ns)}, limit=first, order="desc")
    best: ItemKey | None = None
    writes: list[ItemKey] = []
    while True:
        for key in page.keys:
            if best is not None and key.created_at < best.created_at and in_order(best):
                break
            kind = key_tags(key).get(TAG_KIND)
            if kind == KIND_CHECKPOINT:
                if best is None or cid_of(key) > cid_of(best):
                    best = key
            elif kind == KIND_WRITES:
                writes.append(key)
        else:
            if page.has_more and page.last_id:
                page = await store.list_keys(
                    tags={TAG_NS: ns_tag(ns)}, limit=PAGE, after=page.last_id, order="desc"
                )
                continue
        break
    if best is None:
        return None
    pair = pair_of(best)
    return Latest(
        best,
        [w.key for w in writes if pair_of(w) == pair],
        key_tags(best).get(TAG_EARLY) == "0",
    )


async def ranked(
    scope: Scope, tags: Mapping[str, str], limit: int
) -> tuple[list[ItemKey], dict[tuple[str, str], list[str]]] | None:
    """The ``limit`` newest checkpoint keys matching ``tags`` (``kind``, perhaps one namespace
    and tagged metadata) and every writes key of them, by ``(namespace, id)`` tags, from one
    call of a store that ranks by tag; None when the store cannot answer.

    Without a namespace tag the ranking spans every namespace of the thread: the greatest
    ids are the newest checkpoints of any namespace (the order ``list`` returns), and their
    writes items share their id tags.

    The greatest checkpoint id tags are the newest checkpoints (the rule :func:`latest` walks
    the listing for), and every writes item of them carries the same namespace and id tags.
    Escaping keeps the order of plain ids (uuid6 ones, all that LangGraph makes) but not of
    every id: when an answered id is not plain, an escaped id may rank out of place, so the
    answer is None and the caller lists instead.
    """
    store = scope.store
    if not isinstance(store, RanksByTag) or limit > PAGE or TAG_ID in tags:
        return None
    among = {k: v for k, v in tags.items() if k != TAG_NS}
    group = await store.greatest(
        TAG_ID,
        tags={TAG_NS: tags[TAG_NS]} if TAG_NS in tags else {},
        among=among,
        count=limit,
    )
    # Across namespaces an id may be shared by a checkpoint that does not match ``among``.
    keys = [k for k in group if among.items() <= key_tags(k).items()]
    if any(not plain_tag(key_tags(k).get(TAG_ID, "")) for k in keys):
        return None
    writes: dict[tuple[str, str], list[str]] = {}
    for key in group:
        if key_tags(key).get(TAG_KIND) == KIND_WRITES:
            writes.setdefault(pair_of(key), []).append(key.key)
    return keys, writes


async def read_record(scope: Scope, key: str) -> CheckpointRecord | None:
    """The checkpoint record stored under ``key`` (None when absent)."""
    found = await read_item(scope, key)
    return None if found is None else found[0]


async def read_item(scope: Scope, key: str) -> tuple[CheckpointRecord, str] | None:
    """A checkpoint item's record and etag (None when absent)."""
    item = await scope.store.get_item(key)
    if item is None:
        return None
    payload = await scope.decode(item.value, key=key)
    return unpack_checkpoint(payload, where=scope.where(key)), item.etag


async def get_tuple(ctx: Context, address: Address) -> CheckpointTuple | None:
    """The checkpoint ``address`` names, or the latest of its namespace (see ``get_tuple``)."""
    thread_id, ns, wanted = address.thread_id, address.ns, address.checkpoint_id
    scope = await ctx.core.scope(thread_id, create=False)
    if scope is None:
        return None
    state = ctx.state(thread_id)
    found: tuple[CheckpointRecord, str] | None = None
    known: list[str] | None = None
    if wanted:
        found = await read_item(scope, checkpoint_key(ns, wanted))
        if found is not None and (found[0].ns, found[0].checkpoint_id) != (ns, wanted):
            found = None  # a hashed key that is not ours
    else:

        async def find() -> Latest | None:
            return await latest(ctx, scope, ns)

        async def read(newest: Latest) -> tuple[CheckpointRecord, str] | None:
            head = state.heads.get(ns)
            if (
                head is not None
                and state.etags.get(ns) == newest.key.etag
                and checkpoint_key(ns, head.checkpoint_id) == newest.key.key
            ):
                # Items are replaced only with a new etag: this is the item as stored.
                return head, newest.key.etag
            return await read_item(scope, newest.key.key)

        got = await read_newest(find, read)  # the newest may go between listing and reading
        if got is not None:
            newest, found = got
            known = newest.writes if newest.complete else None
    if found is None:
        return None
    record, etag = found
    writes = await pending_writes(ctx, scope, ns, record.checkpoint_id, known)
    metadata = ctx.loads_dict(record.metadata, "metadata")
    result = await to_tuple(ctx, scope, thread_id, record, metadata, writes)
    state.set_head(ns, record, etag)
    return result


async def to_tuple(
    ctx: Context,
    scope: Scope,
    thread_id: str,
    record: CheckpointRecord,
    metadata: CheckpointMetadata,
    writes: list[PendingWrite],
) -> CheckpointTuple:
    """The ``CheckpointTuple`` of a record: its checkpoint with every channel value loaded."""
    checkpoint: Checkpoint = ctx.loads_dict(record.checkpoint, "checkpoint")
    checkpoint["channel_values"] = await load_entries(ctx, scope, record, record.channels)
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


async def load_entries(
    ctx: Context, scope: Scope, record: CheckpointRecord, entries: Mapping[str, ChannelEntry]
) -> dict[str, Any]:
    """The values of ``entries`` (channel entries of ``record``, or of its history).

    Raises:
        MissingBlobError: a spilled value's blob (or the spill store) is not there.
        CorruptPayloadError: a value cannot be decoded.
    """
    spilled = {e.digest for e in entries.values() if e.digest is not None}
    blobs: dict[str, bytes] = {}
    if spilled:
        spill = scope.spill
        spill_ns = await scope.namespace(create=False)
        where = scope.where(checkpoint_key(record.ns, record.checkpoint_id))
        if spill is None or spill_ns is None:
            raise MissingBlobError(
                f"{where} keeps channel values in the spill store, but "
                + ("no spill store is configured" if spill is None else "its namespace is gone")
                + ". Configure the spill store the checkpoint was written with."
            )
        ordered = sorted(spilled)
        try:
            got = await bounded(scope.read_blob(spill, spill_ns, d) for d in ordered)
        except MissingBlobError as exc:
            raise MissingBlobError(f"{where}: {exc}") from exc
        blobs = dict(zip(ordered, got, strict=True))
    values: dict[str, Any] = {}
    for name, entry in entries.items():
        data = entry.data if entry.digest is None else blobs[entry.digest]
        assert data is not None
        values[name] = ctx.loads((entry.type, data))
    return values


async def pending_writes(
    ctx: Context, scope: Scope, ns: str, checkpoint_id: str, known: list[str] | None
) -> list[PendingWrite]:
    """The pending writes of a checkpoint in ``(task_path, task_id, idx)`` order.

    ``known`` is the list of its writes keys when the caller already listed them.
    """
    rows = await raw_pending(scope, ns, checkpoint_id, known)
    return [(task_id, channel, ctx.loads((type_, data))) for task_id, channel, type_, data in rows]


async def raw_pending(
    scope: Scope, ns: str, checkpoint_id: str, known: list[str] | None
) -> list[tuple[str, str, str, bytes]]:
    """``(task_id, channel, type, bytes)`` of a checkpoint's writes, in pending-writes order."""
    if known is None:
        tags = {TAG_KIND: KIND_WRITES, TAG_NS: ns_tag(ns), TAG_ID: id_tag(checkpoint_id)}
        known = [k.key for k in await scope.keys(tags)]
    if not known:
        return []
    records = await bounded(_read_writes(scope, key) for key in known)
    rows: list[tuple[tuple[str, str, int], tuple[str, str, str, bytes]]] = []
    for rec in records:
        if rec is None or (rec.ns, rec.checkpoint_id) != (ns, checkpoint_id):
            continue
        for idx, (channel, type_, data) in rec.writes.items():
            order = writes_sort_key(rec.task_path, rec.task_id, idx)
            rows.append((order, (rec.task_id, channel, type_, data)))
    rows.sort(key=lambda row: row[0])
    return [write for _, write in rows]


async def _read_writes(scope: Scope, key: str) -> WritesRecord | None:
    item = await scope.store.get_item(key)
    if item is None:
        return None
    payload = await scope.decode(item.value, key=key)
    return unpack_writes(payload, where=scope.where(key))
