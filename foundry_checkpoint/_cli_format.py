"""Turning checkpoints into JSON-able data and short previews for ``foundry-checkpoint``.

Example:
    >>> jsonable({"a": (1, b"x"), "b": {1, 2}})
    {'a': [1, "b'x'"], 'b': [1, 2]}
    >>> preview("x" * 100, width=10)
    "'xxxxxxxx…"
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import uuid
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

__all__ = ["jsonable", "preview", "summary", "tuple_json"]


def jsonable(value: Any, *, depth: int = 0) -> Any:
    """``value`` as plain JSON data: containers recursively, models dumped, the rest ``repr``."""
    if depth > 50:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, depth=depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth=depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [jsonable(v, depth=depth + 1) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, enum.Enum)):
        return str(value.value if isinstance(value, enum.Enum) else value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(), depth=depth + 1)
        except Exception:  # a model that cannot dump itself is shown as repr
            return repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value), depth=depth + 1)
    return repr(value)


def preview(value: Any, *, width: int = 60) -> str:
    """A one-line ``repr`` of ``value`` cut to ``width`` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def summary(item: CheckpointTuple) -> dict[str, Any]:
    """The identifying fields of a checkpoint (no channel values)."""
    conf = item.config["configurable"]
    parent = (item.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    metadata = item.metadata or {}
    return {
        "thread_id": conf.get("thread_id"),
        "checkpoint_ns": conf.get("checkpoint_ns", ""),
        "checkpoint_id": conf.get("checkpoint_id"),
        "parent_checkpoint_id": parent,
        "ts": item.checkpoint.get("ts"),
        "step": metadata.get("step"),
        "source": metadata.get("source"),
        "pending_writes": len(item.pending_writes or []),
    }


def tuple_json(item: CheckpointTuple) -> dict[str, Any]:
    """A whole checkpoint as JSON data: identity, metadata, channel values, pending writes."""
    out = summary(item)
    out["metadata"] = jsonable(item.metadata)
    out["channel_versions"] = jsonable(item.checkpoint.get("channel_versions", {}))
    out["values"] = jsonable(item.checkpoint.get("channel_values", {}))
    out["pending_writes"] = [
        {"task_id": task, "channel": channel, "value": jsonable(value)}
        for task, channel, value in item.pending_writes or []
    ]
    return out
