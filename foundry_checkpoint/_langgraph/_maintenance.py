"""Thread maintenance of the LangGraph saver: delete, prune, delete by run, copy, count, gc.

Deleting checkpoints follows :func:`._prune.plan` (the rules of PostgresSaver): the subgraph
calls they end go too, and the survivors they orphan become roots carrying their
``DeltaChannel`` history, rewritten before anything is deleted. Spilled blobs that nothing
references any more are deleted once older than the ``gc`` grace.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from azure.ai.agentserver.core.storage import FoundryStoragePreconditionError

from ..adapter import (
    DEFAULT_GC_GRACE_SECONDS,
    ItemKey,
    Scope,
    bounded,
    spilled_digest,
    tag_value,
    unescape,
)
from ..errors import ConcurrentWriteError, InvalidArgumentError, MissingBlobError
from ._config import check_thread
from ._context import Context
from ._history import raw_history
from ._prune import Entry, call_owner, is_call_namespace, newest, plan
from ._read import read_record
from ._records import (
    KIND_CHECKPOINT,
    KIND_WRITES,
    TAG_KIND,
    TAG_NS,
    TAG_OUT_OF_ORDER,
    TAG_OWNER,
    TAG_PARENT,
    TAG_RUN,
    TAG_SPILL,
    CheckpointRecord,
    cid_of,
    in_order,
    key_tags,
    ns_tag,
    pack_checkpoint,
    pair_of,
    unpack_checkpoint,
)

__all__ = [
    "copy_thread",
    "count_checkpoints",
    "delete_for_runs",
    "delete_thread",
    "list_threads",
    "prune",
    "referenced",
]

_PER_RUN_LISTINGS: Final = 4
"""Up to this many run ids, ``delete_for_runs`` lists each run's checkpoints by tag; past it,
it lists every checkpoint once."""


async def list_threads(ctx: Context) -> list[str]:
    """The current user's thread ids, sorted, from the thread index."""
    return sorted(t for t in await ctx.core.scope_ids() if t is not None)


async def count_checkpoints(ctx: Context, thread_id: str, ns: str | None) -> int:
    """How many checkpoints a thread holds (in ``ns``, or in every namespace), from tags."""
    scope = await ctx.core.scope(check_thread(thread_id), create=False)
    if scope is None:
        return 0
    tags = {TAG_KIND: KIND_CHECKPOINT}
    if ns is not None:
        tags[TAG_NS] = ns_tag(ns)
    return len(await scope.keys(tags))


async def delete_thread(ctx: Context, thread_id: str) -> None:
    """Delete a thread's store (items and spilled blobs) and its index entry."""
    thread_id = check_thread(thread_id)
    ctx.drop_state(thread_id)
    scope = await ctx.core.scope(thread_id, create=False)
    if scope is None:
        await ctx.core.unregister(thread_id)
        return
    await scope.purge()
    ctx.drop_state(thread_id)


async def delete_for_runs(ctx: Context, run_ids: Sequence[str]) -> None:
    """Delete the checkpoints tagged with one of ``run_ids`` (and what goes with them)."""
    wanted = {tag_value(str(r)) for r in run_ids}
    if not wanted:
        return
    for thread_id in await ctx.core.scope_ids():
        if thread_id is None:
            continue
        scope = await ctx.core.scope(thread_id, create=False)
        if scope is None:
            continue
        if len(wanted) <= _PER_RUN_LISTINGS:
            checkpoints: list[ItemKey] = []
            for run in sorted(wanted):
                checkpoints += await scope.keys({TAG_KIND: KIND_CHECKPOINT, TAG_RUN: run})
        else:
            checkpoints = await scope.keys({TAG_KIND: KIND_CHECKPOINT})
        doomed = {k.key for k in checkpoints if key_tags(k).get(TAG_RUN) in wanted}
        if doomed:
            await _retire(ctx, scope, thread_id, await scope.keys(), doomed)


async def prune(ctx: Context, thread_ids: Sequence[str], strategy: str, keep: int) -> None:
    """``FoundryCheckpointer.prune``: keep the newest ``keep`` per namespace, or delete.

    Raises:
        InvalidArgumentError: an unknown ``strategy`` or a ``keep`` below 1.
    """
    if strategy not in ("keep_latest", "delete"):
        raise InvalidArgumentError(
            f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'"
        )
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise InvalidArgumentError(f"keep must be a positive number of checkpoints, got {keep!r}")
    for raw in thread_ids:
        thread_id = check_thread(raw)
        if strategy == "delete":
            await delete_thread(ctx, thread_id)
            continue
        scope = await ctx.core.scope(thread_id, create=False)
        if scope is None:
            continue
        keys = await scope.keys()
        checkpoints = [k for k in keys if key_tags(k).get(TAG_KIND) == KIND_CHECKPOINT]
        # As "latest": by checkpoint id once a copy put checkpoints out of order.
        copied = not all(in_order(k) for k in checkpoints)
        order = {k.key: (0 if copied else k.created_at, cid_of(k)) for k in checkpoints}
        entries = await _entries(ctx, scope, checkpoints)
        kept = newest(entries, keep, order)
        doomed = {k.key for k in checkpoints if k.key not in kept}
        await _retire(ctx, scope, thread_id, keys, doomed, entries)


async def _retire(
    ctx: Context,
    scope: Scope,
    thread_id: str,
    keys: list[ItemKey],
    doomed: set[str],
    entries: list[Entry] | None = None,
) -> None:
    """Delete the checkpoints ``doomed`` (item keys) of a thread, with the rules of
    :func:`~foundry_checkpoint._langgraph._prune.plan`: the subgraph calls they end go too, and
    the survivors they orphan become roots that carry their ``DeltaChannel`` history.

    Every orphan is rewritten before anything is deleted, so a failure leaves the thread
    whole. Spilled blobs are collected with the ``gc`` grace.
    """
    cutoff = time.time() - DEFAULT_GC_GRACE_SECONDS
    checkpoints = [k for k in keys if key_tags(k).get(TAG_KIND) == KIND_CHECKPOINT]
    if entries is None:
        entries = await _entries(ctx, scope, checkpoints)
    todo = plan(entries, doomed)
    ctx.drop_state(thread_id)
    if todo.orphans:
        tags_of = {k.key: key_tags(k) for k in checkpoints}
        detached = [await _detach(scope, e, tags_of[e.key]) for e in todo.orphans]
        await bounded(_write_detached(scope, *d) for d in detached if d is not None)
    gone = {pair_of(k) for k in checkpoints if k.key in todo.doomed}
    items = [
        k
        for k in keys
        if k.key in todo.doomed or (key_tags(k).get(TAG_KIND) == KIND_WRITES and pair_of(k) in gone)
    ]
    if not items:
        return
    await bounded(scope.store.delete_item(k.key) for k in items)
    ctx.drop_state(thread_id)
    if any(key_tags(k).get(TAG_SPILL) == "1" for k in items):
        await _collect_blobs(ctx, scope, cutoff)


async def _entries(ctx: Context, scope: Scope, keys: list[ItemKey]) -> list[Entry]:
    """The :class:`Entry` of each checkpoint key, from tags (items read only when a tag was
    hashed, or a subgraph call's checkpoint predates the owner tag)."""
    records: dict[str, CheckpointRecord | None] = {}

    async def record(key: ItemKey) -> CheckpointRecord | None:
        if key.key not in records:
            records[key.key] = await read_record(scope, key.key)
        return records[key.key]

    owners: dict[str, str | None] = {}
    out: list[Entry] = []
    for key in keys:
        tags = key_tags(key)
        ns_text = unescape(tags.get(TAG_NS, ""))
        parent_tag = tags.get(TAG_PARENT)
        parent = unescape(parent_tag) if parent_tag else None
        cid = cid_of(key)
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
                    md = ctx.loads(rec.metadata) if rec is not None else {}
                    owners[ns] = call_owner(md.get("parents"))
                owner = owners[ns]
        out.append(Entry(key.key, ns, cid, parent, owner))
    return out


async def _detach(
    scope: Scope, entry: Entry, listed_tags: Mapping[str, str]
) -> tuple[str, dict[str, Any], dict[str, str], str] | None:
    """The new value of an orphaned checkpoint: no parent, and the ``DeltaChannel`` history
    of its (still readable) ancestors copied in. None when it is gone already."""
    item = await scope.store.get_item(entry.key)
    if item is None:
        return None
    payload = await scope.decode(item.value, key=entry.key)
    record = unpack_checkpoint(payload, where=scope.where(entry.key))
    history = await raw_history(scope, record, list(record.absent))
    kept = {name: base for name, base in history.items() if base.seed is not None or base.writes}
    new = replace(record, parent_id=None, history=kept)
    tags = dict(listed_tags)
    tags.pop(TAG_PARENT, None)
    tags[TAG_SPILL] = "1" if new.digests() else "0"
    value = await scope.encode(entry.key, pack_checkpoint(new), tags=tags)
    if spilled_digest(value):
        tags[TAG_SPILL] = "1"
    return entry.key, value, tags, item.etag


async def _write_detached(
    scope: Scope, key: str, value: dict[str, Any], tags: dict[str, str], etag: str
) -> None:
    try:
        await scope.store.set_item(key, value, tags=tags, if_match=etag)
    except FoundryStoragePreconditionError:
        raise ConcurrentWriteError(
            f"{scope.where(key)} changed while it was being pruned; nothing was deleted. "
            "Retry the prune."
        ) from None


async def _collect_blobs(ctx: Context, scope: Scope, cutoff: float) -> None:
    """Delete the thread's spilled blobs that no remaining item references.

    Only blobs last modified before ``cutoff`` (the ``gc`` grace before the deletion
    started) are taken. A write in flight stores its blob first and its item second: a
    blob it uploaded (or reused, which refreshes its modification time) before a prune
    started may be referenced by an item written after the prune listed the items; the
    grace leaves such blobs to ``gc``.
    """
    spill = scope.spill
    if spill is None:
        return
    spill_ns = await scope.namespace(create=False)
    if spill_ns is None:
        return
    keep = await referenced(scope)
    doomed = [
        b.digest
        for b in await spill.list(spill_ns)
        if b.digest not in keep and b.last_modified < cutoff
    ]
    if doomed:
        await spill.delete(spill_ns, doomed)


async def referenced(scope: Scope) -> set[str]:
    """Every spilled blob the thread's items reference.

    Items that reference blobs (a spilled item, or spilled channel values) carry the tag
    ``sp=1``, so only those are read.
    """
    holders = [k for k in await scope.keys() if key_tags(k).get(TAG_SPILL) == "1"]

    async def of(key: ItemKey) -> set[str]:
        item = await scope.store.get_item(key.key)
        if item is None:
            return set()
        found: set[str] = set()
        digest = spilled_digest(item.value)
        if digest:
            found.add(digest)
        if key_tags(key).get(TAG_KIND) == KIND_CHECKPOINT:
            payload = await scope.decode(item.value, key=key.key)
            found |= unpack_checkpoint(payload, where=scope.where(key.key)).digests()
        return found

    return set().union(*await bounded(of(k) for k in holders))


async def copy_thread(ctx: Context, source_thread_id: str, target_thread_id: str) -> None:
    """Copy every checkpoint and write of one thread to another (ids and order kept)."""
    source_id = check_thread(source_thread_id)
    target_id = check_thread(target_thread_id)
    if source_id == target_id:
        return
    source = await ctx.core.scope(source_id, create=False)
    if source is None:
        return
    keys = await source.keys()
    if not keys:
        return
    target = await ctx.core.scope(target_id)
    held = [cid_of(k) for k in await target.keys({TAG_KIND: KIND_CHECKPOINT})]
    ceiling = max(held, default="")
    checkpoints = sorted(
        (k for k in keys if key_tags(k).get(TAG_KIND) == KIND_CHECKPOINT), key=cid_of
    )
    writes: dict[tuple[str, str], list[ItemKey]] = {}
    for key in keys:
        if key_tags(key).get(TAG_KIND) == KIND_WRITES:
            writes.setdefault(pair_of(key), []).append(key)
    ctx.drop_state(target_id)
    copied: set[str] = set()
    for key in checkpoints:
        # One at a time, oldest first, so copies above the target's newest id stay in order.
        # One that the target already has a newer checkpoint than is out of order there.
        await _copy_item(ctx, source, target, key, copied, cid_of(key) < ceiling)
        await bounded(
            _copy_item(ctx, source, target, w, copied) for w in writes.get(pair_of(key), [])
        )


async def _copy_item(
    ctx: Context,
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
    tags = dict(key_tags(key))
    tags[TAG_SPILL] = "0"
    tags.pop(TAG_OUT_OF_ORDER, None)
    if out_of_order:
        tags[TAG_OUT_OF_ORDER] = "1"
    if tags.get(TAG_KIND) == KIND_CHECKPOINT:
        digests = unpack_checkpoint(payload, where=source.where(key.key)).digests()
        if digests:
            tags[TAG_SPILL] = "1"
            await _copy_blobs(ctx, source, target, digests - copied)
            copied |= digests
    value = await target.encode(key.key, payload, tags=tags)
    if spilled_digest(value):
        tags[TAG_SPILL] = "1"
    await target.touch()
    await target.store.set_item(key.key, value, tags=tags)


async def _copy_blobs(ctx: Context, source: Scope, target: Scope, digests: set[str]) -> None:
    spill, into = source.spill, target.spill
    if not digests:
        return
    src_ns = await source.namespace(create=False)
    if spill is None or into is None or src_ns is None:
        raise MissingBlobError(
            f"cannot copy {source.where('-')}: its checkpoints reference spilled blobs and "
            "no spill store (or spill namespace) is available"
        )
    dst_ns = await target.namespace(create=True)
    assert dst_ns is not None

    async def one(digest: str) -> None:
        await into.put(dst_ns, await spill.get(src_ns, digest))

    await bounded(one(d) for d in sorted(digests))
