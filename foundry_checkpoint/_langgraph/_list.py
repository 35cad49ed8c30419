"""``list`` of the LangGraph saver: a plan from key listings, then pages of read items.

:func:`plan` lists the candidate checkpoint keys (by tags: kind, namespace, id and the
metadata filters that are tags), newest first by checkpoint id; :func:`next_page` reads the
items of the next candidates, applies the rest of the filter and attaches pending writes,
listing a thread's writes keys once when many checkpoints need them.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from langgraph.checkpoint.base import CheckpointMetadata, CheckpointTuple

from ..adapter import ItemKey, Scope, bounded, tag_value
from . import _config
from ._config import Address
from ._context import Context
from ._read import PAGE, pending_writes, ranked, read_record, to_tuple
from ._records import (
    KIND_CHECKPOINT,
    KIND_WRITES,
    TAG_EARLY,
    TAG_ID,
    TAG_KIND,
    TAG_NS,
    TAG_RUN,
    TAG_SOURCE,
    TAG_STEP,
    CheckpointRecord,
    cid_of,
    id_tag,
    in_order,
    key_tags,
    ns_tag,
    pair_of,
    step_tag,
)

__all__ = ["ListPlan", "next_page", "plan"]

_LIST_CHUNK: Final = 16
_WRITES_INDEX_FROM: Final = 4
"""Past this many checkpoints, listing all writes keys once beats one listing per checkpoint."""


@dataclass
class _Candidate:
    thread_id: str
    key: ItemKey
    checkpoint_id: str


@dataclass
class ListPlan:
    """The state of one ``list`` call between batches."""

    candidates: list[_Candidate]
    filter: dict[str, Any]
    limit: int | None
    covered: bool
    position: int = 0
    returned: int = 0
    done: bool = False
    writes_index: dict[str, dict[tuple[str, str], list[str]]] = field(default_factory=dict)
    writes_floor: dict[str, int | None] = field(default_factory=dict)
    """Per thread: the oldest ``created_at`` second its ``writes_index`` covers (None: all)."""
    writes_tags: dict[str, str] = field(default_factory=dict)
    bounded: bool = False
    """True when ``candidates`` came from an early-stopped listing (see :func:`_newest_keys`)."""
    writes_known: bool = False
    """True when ``writes_index`` holds every writes key of every candidate (see
    :func:`~._read.ranked`)."""
    scopes: dict[str, Scope] = field(default_factory=dict)


async def plan(
    ctx: Context,
    address: Address | None,
    filter: Mapping[str, Any] | None,
    before_id: str | None,
    limit: int | None,
) -> ListPlan:
    """The candidates of one ``list`` call, from key listings (no item is read)."""
    wanted = dict(filter or {})
    tags = {TAG_KIND: KIND_CHECKPOINT}
    covered = True
    for name, value in wanted.items():
        if name == "source" and isinstance(value, str):
            tags[TAG_SOURCE] = tag_value(value)
        elif name == "step" and step_tag(value) is not None:
            tags[TAG_STEP] = str(step_tag(value))
        elif name == "run_id" and isinstance(value, str):
            tags[TAG_RUN] = tag_value(value)
        else:
            covered = False
    if address is not None:
        threads = [address.thread_id]
        if address.ns_given:
            tags[TAG_NS] = ns_tag(address.ns)
        if address.checkpoint_id:
            tags[TAG_ID] = id_tag(address.checkpoint_id)
    else:
        threads = [t for t in await ctx.core.scope_ids() if t is not None]
    result = ListPlan([], wanted, limit, covered)
    if limit is not None and limit <= 0:
        result.done = True
        return result
    if TAG_NS in tags:
        result.writes_tags[TAG_NS] = tags[TAG_NS]
    # Early stop within one namespace only: puts of one namespace are ordered, while a
    # subgraph's puts may land concurrently with its caller's.
    flat = TAG_NS in tags and covered and limit is not None
    for thread_id in threads:
        scope = await ctx.core.scope(thread_id, create=False)
        if scope is None:
            continue
        result.scopes[thread_id] = scope
        by_rank = None
        # A store that ranks by tag answers across namespaces too (the listing cannot).
        if address is not None and covered and limit is not None and before_id is None:
            by_rank = await ranked(scope, tags, limit)
        if by_rank is not None:
            keys, result.writes_index[thread_id] = by_rank
            result.writes_known = True
        elif flat and limit is not None:
            keys, result.bounded = await _newest_keys(
                result, scope, thread_id, tags, limit, before_id
            )
        else:
            keys = await scope.keys(tags)
        found = [_Candidate(thread_id, k, cid_of(k)) for k in keys]
        if before_id:
            found = [c for c in found if c.checkpoint_id < before_id]
        found.sort(key=lambda c: c.checkpoint_id, reverse=True)
        result.candidates.extend(found)
    result.done = not result.candidates
    return result


async def _newest_keys(
    plan: ListPlan,
    scope: Scope,
    thread_id: str,
    tags: Mapping[str, str],
    limit: int,
    before_id: str | None,
) -> tuple[list[ItemKey], bool]:
    """The checkpoint keys matching ``tags`` that can be among the ``limit`` newest (by
    checkpoint id, below ``before_id``), and whether the listing stopped early.

    The listing is in ``created_at`` seconds, newest first. Once ``limit`` candidates are
    in hand and the listing has passed the second of the ``limit``-th of them by id, and
    that one is in order (no ``TAG_OUT_OF_ORDER``), no unlisted key can rank above it: an
    in-order checkpoint has a larger id than every checkpoint of an older second. Otherwise
    the listing goes on, to the end at worst.

    Filtered by kind and namespace only, the listing takes the namespace's writes keys too,
    as :func:`~._read.latest` does, and keeps them as the thread's writes index down to the
    last second it listed whole: the writes of the candidates tagged ``ew=0`` are in it, so
    no second listing is made for them.
    """
    with_writes = tags.keys() == {TAG_KIND, TAG_NS}
    listed = {TAG_NS: tags[TAG_NS]} if with_writes else tags
    found: list[ItemKey] = []
    writes: dict[tuple[str, str], list[str]] = {}
    after: str | None = None
    stopped = False
    while True:
        page = await scope.store.list_keys(tags=listed, limit=PAGE, after=after, order="desc")
        for key in page.keys:
            kind = key_tags(key).get(TAG_KIND)
            if kind == KIND_CHECKPOINT:
                if before_id is None or cid_of(key) < before_id:
                    found.append(key)
            elif kind == KIND_WRITES:
                writes.setdefault(pair_of(key), []).append(key.key)
        if not page.has_more or not page.last_id:
            break
        if len(found) >= limit:
            cut = heapq.nlargest(limit, found, key=cid_of)[-1]
            if in_order(cut) and page.keys and page.keys[-1].created_at < cut.created_at:
                stopped = True
                break
        after = page.last_id
    if with_writes:
        plan.writes_index[thread_id] = writes
        # Every second after the last key's was listed whole.
        plan.writes_floor[thread_id] = page.keys[-1].created_at + 1 if stopped else None
    return found, stopped


async def next_page(ctx: Context, plan: ListPlan) -> list[CheckpointTuple]:
    """The next batch of ``list`` results (reads items only for candidates it needs)."""
    if plan.done:
        return []
    remaining = None if plan.limit is None else plan.limit - plan.returned
    size = _LIST_CHUNK
    if plan.covered and remaining is not None:
        size = min(size, remaining)
    chunk = plan.candidates[plan.position : plan.position + size]
    plan.position += len(chunk)
    scopes = plan.scopes
    records = await bounded(read_record(scopes[c.thread_id], c.key.key) for c in chunk)
    matched: list[tuple[_Candidate, CheckpointRecord, CheckpointMetadata]] = []
    for cand, record in zip(chunk, records, strict=True):
        if record is None:
            continue
        metadata: CheckpointMetadata = ctx.loads_dict(record.metadata, "metadata")
        if _config.matches(metadata, plan.filter):
            matched.append((cand, record, metadata))
    if remaining is not None:
        matched = matched[:remaining]
    # Listing a thread's writes keys once beats one listing per checkpoint past a few.
    expected = len(plan.candidates) - plan.position + len(matched)
    if remaining is not None:
        expected = min(expected, remaining)
    use_index = expected > _WRITES_INDEX_FROM and not plan.writes_known
    # After an early-stopped listing, the writes index is listed down to the oldest second
    # of the checkpoints it serves: those tagged ew=0 have all their writes at or after it.
    floors: dict[str, int | None] = {}
    if use_index:
        for cand, _, _ in matched:
            if not plan.bounded:
                floors[cand.thread_id] = None
            elif key_tags(cand.key).get(TAG_EARLY) == "0":
                old = floors.get(cand.thread_id, cand.key.created_at)
                floors[cand.thread_id] = None if old is None else min(old, cand.key.created_at)
        for thread_id, floor in floors.items():
            await _writes_index(plan, scopes[thread_id], thread_id, floor)

    async def build(
        cand: _Candidate, record: CheckpointRecord, metadata: CheckpointMetadata
    ) -> CheckpointTuple:
        scope = scopes[cand.thread_id]
        known = None
        indexed = not plan.bounded or key_tags(cand.key).get(TAG_EARLY) == "0"
        if plan.writes_known:
            index = plan.writes_index[cand.thread_id]
            known = index.get((ns_tag(record.ns), id_tag(record.checkpoint_id)), [])
        elif indexed and (cand.thread_id in floors or cand.thread_id in plan.writes_floor):
            floor = floors.get(cand.thread_id, cand.key.created_at)
            index = await _writes_index(plan, scope, cand.thread_id, floor)
            known = index.get((ns_tag(record.ns), id_tag(record.checkpoint_id)), [])
        writes = await pending_writes(ctx, scope, record.ns, record.checkpoint_id, known)
        return await to_tuple(ctx, scope, cand.thread_id, record, metadata, writes)

    results = await bounded(build(*row) for row in matched)
    plan.returned += len(results)
    if plan.position >= len(plan.candidates) or (
        plan.limit is not None and plan.returned >= plan.limit
    ):
        plan.done = True
    return results


async def _writes_index(
    plan: ListPlan, scope: Scope, thread_id: str, floor: int | None
) -> dict[tuple[str, str], list[str]]:
    """The writes keys of a thread by (namespace, checkpoint id) tags: all of them, or (with
    ``floor``) at least those created at or after that second."""
    index = plan.writes_index.get(thread_id)
    if index is not None and thread_id in plan.writes_floor:
        have = plan.writes_floor[thread_id]
        if have is None or (floor is not None and have <= floor):
            return index
    index = {}
    tags = {TAG_KIND: KIND_WRITES, **plan.writes_tags}
    after: str | None = None
    while True:
        page = await scope.store.list_keys(tags=tags, limit=PAGE, after=after, order="desc")
        for key in page.keys:
            index.setdefault(pair_of(key), []).append(key.key)
        if not page.has_more or not page.last_id:
            break
        if floor is not None and page.keys and page.keys[-1].created_at < floor:
            break
        after = page.last_id
    plan.writes_index[thread_id] = index
    plan.writes_floor[thread_id] = floor
    return index
