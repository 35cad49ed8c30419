"""``DeltaChannel`` history of the LangGraph saver: the writes since a channel's stored value.

:func:`raw_history` is the walk of ``BaseCheckpointSaver.get_delta_channel_history`` over the
items, as bytes (``prune`` copies it into a checkpoint that loses its parent);
:func:`delta_history` decodes it for ``get_delta_channel_history``.
"""

from __future__ import annotations

from collections.abc import Sequence

from langgraph.checkpoint.base import DeltaChannelHistory

from ..adapter import Scope
from ._config import Address
from ._context import Context
from ._read import latest, load_entries, raw_pending, read_record
from ._records import ChannelEntry, CheckpointRecord, DeltaBase, checkpoint_key

__all__ = ["delta_history", "raw_history"]


async def raw_history(
    scope: Scope, record: CheckpointRecord, channels: Sequence[str]
) -> dict[str, DeltaBase]:
    """What ``get_delta_channel_history`` collects for ``channels`` above ``record``, raw.

    The walk of ``BaseCheckpointSaver.get_delta_channel_history``: from the parent of
    ``record`` up, each checkpoint's pending writes (newest first), stopping per channel at
    the first checkpoint that stores a value for it. A checkpoint carrying the history of
    deleted ancestors (``record.history``) ends the walk for those channels.
    """
    remaining = dict.fromkeys(channels)
    seeds: dict[str, ChannelEntry] = {}
    collected: dict[str, list[tuple[str, str, bytes]]] = {c: [] for c in channels}

    def absorb(rec: CheckpointRecord) -> None:
        for name in list(remaining):
            base = rec.history.get(name)
            if base is not None:
                collected[name].extend(reversed(base.writes))
                if base.seed is not None:
                    seeds[name] = base.seed
                del remaining[name]

    absorb(record)
    cursor = record.parent_id
    seen: set[str] = set()
    while cursor and remaining and cursor not in seen:
        seen.add(cursor)
        rec = await read_record(scope, checkpoint_key(record.ns, cursor))
        if rec is None or (rec.ns, rec.checkpoint_id) != (record.ns, cursor):
            break
        for task_id, channel, type_, data in reversed(
            await raw_pending(scope, rec.ns, rec.checkpoint_id, None)
        ):
            if channel in remaining:
                collected[channel].append((task_id, type_, data))
        for name in list(remaining):
            if name in rec.channels:
                seeds[name] = rec.channels[name]
                del remaining[name]
        absorb(rec)
        cursor = rec.parent_id
    return {name: DeltaBase(seeds.get(name), tuple(reversed(collected[name]))) for name in channels}


async def delta_history(
    ctx: Context, address: Address, channels: Sequence[str]
) -> dict[str, DeltaChannelHistory]:
    """Per channel, the seed and the writes since it, for the checkpoint ``address`` names."""
    if not channels:
        return {}
    thread_id, ns, wanted = address.thread_id, address.ns, address.checkpoint_id
    scope = await ctx.core.scope(thread_id, create=False)
    if scope is None:
        return {name: {"writes": []} for name in channels}
    record: CheckpointRecord | None = None
    if wanted:
        record = await read_record(scope, checkpoint_key(ns, wanted))
        if record is not None and (record.ns, record.checkpoint_id) != (ns, wanted):
            record = None
    else:
        newest = await latest(ctx, scope, ns)
        record = await read_record(scope, newest.key.key) if newest is not None else None
    if record is None:
        return {name: {"writes": []} for name in channels}
    raw = await raw_history(scope, record, channels)
    seeds = await load_entries(
        ctx, scope, record, {n: b.seed for n, b in raw.items() if b.seed is not None}
    )
    out: dict[str, DeltaChannelHistory] = {}
    for name in channels:
        entry: DeltaChannelHistory = {
            "writes": [
                (task_id, name, ctx.loads((type_, data)))
                for task_id, type_, data in raw[name].writes
            ]
        }
        if name in seeds:
            entry["seed"] = seeds[name]
        out[name] = entry
    return out
