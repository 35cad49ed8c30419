"""Item layout of the MAF storage: keys, tags, the timestamp tag and the order they give.

One store per context. Each checkpoint is one item:

* key ``k/<checkpoint id>`` (:func:`checkpoint_key`);
* tags ``kind`` (:data:`KIND`), ``wf`` (workflow name), ``id`` (checkpoint id), ``prev``
  (previous checkpoint id, absent for a first checkpoint) and ``ts`` (the checkpoint's own
  timestamp, :func:`sortable_timestamp`). Tag values are escaped; an empty one is ``~``, and a
  value too long for a tag is hashed, so the full checkpoint id and workflow name are also kept
  as extra fields of the item value (``cid``, ``wf``);
* the value is the payload of :mod:`foundry_checkpoint_maf._payload`, through the item codec.

Everything here reads keys and tags only: :func:`pick_latest` chooses the newest checkpoint of
a listing, :func:`oldest_first` orders a listing, :func:`stored` describes a key, all without
reading an item.

Example:
    >>> tags, extra = checkpoint_tags("cp-2", "triage", "2026-01-01T00:00:00+00:00", "cp-1")
    >>> tags["kind"], tags["wf"], tags["prev"], extra
    ('maf.checkpoint', 'triage', 'cp-1', {'cid': 'cp-2', 'wf': 'triage'})
    >>> checkpoint_key("cp-2")
    'k/cp-2'
    >>> iso_from_tag(tags["ts"])
    '2026-01-01T00:00:00+00:00'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Final

from agent_framework import WorkflowCheckpointException

from foundry_checkpoint.adapter import ItemKey, item_key, tag_value, unescape
from foundry_checkpoint.errors import InvalidArgumentError

__all__ = [
    "KIND",
    "TAG_ID",
    "TAG_KIND",
    "TAG_PREV",
    "TAG_TS",
    "TAG_WF",
    "TS_WIDTH",
    "StoredCheckpoint",
    "checked_checkpoint_id",
    "checked_workflow_name",
    "checkpoint_key",
    "checkpoint_tags",
    "id_from",
    "id_filter",
    "iso_from_tag",
    "kind_filter",
    "oldest_first",
    "pick_latest",
    "sortable_timestamp",
    "stored",
]

KIND: Final = "maf.checkpoint"
TAG_KIND: Final = "kind"
TAG_WF: Final = "wf"
TAG_ID: Final = "id"
TAG_PREV: Final = "prev"
TAG_TS: Final = "ts"
TS_WIDTH: Final = 20
_KEY_WORD: Final = "k"
_EXTRA_ID: Final = "cid"
_EXTRA_WF: Final = "wf"
_EMPTY_TAG: Final = "~"  # escape() never yields a lone "~", so it cannot collide
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_NEGATIVE_BASE: Final = 10 ** (TS_WIDTH - 1)  # more than the microseconds from year 1 to 1970


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


def checked_checkpoint_id(checkpoint_id: object) -> str:
    """``checkpoint_id`` when it is a non-empty string.

    Raises:
        WorkflowCheckpointException: it is not (MAF's contract for every storage call).

    Example:
        >>> checked_checkpoint_id("cp-1")
        'cp-1'
    """
    if not isinstance(checkpoint_id, str) or not checkpoint_id:
        raise WorkflowCheckpointException(
            f"checkpoint_id must be a non-empty string, got {type(checkpoint_id).__name__}: "
            f"{checkpoint_id!r}"
        )
    return checkpoint_id


def checked_workflow_name(workflow_name: object) -> str:
    """``workflow_name`` when it is a string (empty included).

    Raises:
        WorkflowCheckpointException: it is not (MAF's contract for every storage call).

    Example:
        >>> checked_workflow_name("")
        ''
    """
    if not isinstance(workflow_name, str):
        raise WorkflowCheckpointException(
            f"workflow_name must be a string, got {type(workflow_name).__name__}: {workflow_name!r}"
        )
    return workflow_name


def checkpoint_key(checkpoint_id: str) -> str:
    """The item key of checkpoint ``checkpoint_id``.

    Example:
        >>> checkpoint_key("a/b")
        'k/a~2fb'
    """
    return item_key(_KEY_WORD, checkpoint_id)


def _tag(value: str) -> str:
    return tag_value(value) if value else _EMPTY_TAG


def _untag(tag: str | None) -> str | None:
    if tag is None or tag == _EMPTY_TAG:
        return None if tag is None else ""
    return unescape(tag) or tag  # a hashed tag ("!" + sha256) is shown as it is


def _tags_of(key: ItemKey) -> Mapping[str, str]:
    tags: Mapping[str, str] | None = key.tags
    return tags or {}


def kind_filter(workflow_name: str | None = None) -> dict[str, str]:
    """The tag filter of every checkpoint, or of those of ``workflow_name``.

    Example:
        >>> kind_filter("triage")
        {'kind': 'maf.checkpoint', 'wf': 'triage'}
    """
    if workflow_name is None:
        return {TAG_KIND: KIND}
    return {TAG_KIND: KIND, TAG_WF: _tag(workflow_name)}


def id_filter(checkpoint_id: str) -> dict[str, str]:
    """The tag filter of the checkpoint ``checkpoint_id``.

    Example:
        >>> id_filter("cp-1")
        {'kind': 'maf.checkpoint', 'id': 'cp-1'}
    """
    return {TAG_KIND: KIND, TAG_ID: _tag(checkpoint_id)}


def checkpoint_tags(
    checkpoint_id: str, workflow_name: str, timestamp: str, previous: str | None
) -> tuple[dict[str, str], dict[str, str]]:
    """The tags and the extra value fields of a checkpoint's item.

    Raises:
        WorkflowCheckpointException: ``timestamp`` is not ISO 8601 (see
            :func:`sortable_timestamp`).

    Example:
        >>> tags, _ = checkpoint_tags("cp-1", "", "2026-01-01T00:00:00Z", None)
        >>> tags["wf"], "prev" in tags
        ('~', False)
    """
    tags = {
        TAG_KIND: KIND,
        TAG_WF: _tag(workflow_name),
        TAG_ID: _tag(checkpoint_id),
        TAG_TS: sortable_timestamp(timestamp, checkpoint_id),
    }
    if previous:
        tags[TAG_PREV] = _tag(previous)
    return tags, {_EXTRA_ID: checkpoint_id, _EXTRA_WF: workflow_name}


def id_from(key: ItemKey, value: Mapping[str, Any] | None) -> str:
    """The checkpoint id of an item: the value's full id, else the (unhashed) ``id`` tag."""
    full = value.get(_EXTRA_ID) if value else None
    if isinstance(full, str):
        return full
    return unescape(_tags_of(key).get(TAG_ID, "")) or ""


def stored(key: ItemKey, value: Mapping[str, Any] | None = None) -> StoredCheckpoint:
    """The :class:`StoredCheckpoint` of a listed key (and of its item value when read)."""
    tags = _tags_of(key)
    workflow = value.get(_EXTRA_WF) if value else None
    return StoredCheckpoint(
        checkpoint_id=id_from(key, value),
        workflow_name=workflow if isinstance(workflow, str) else _untag(tags.get(TAG_WF)) or "",
        previous=_untag(tags.get(TAG_PREV)),
        timestamp=iso_from_tag(tags.get(TAG_TS, "")),
    )


def _second(moment: object) -> int:
    """The whole second of a key's ``created_at`` (epoch int, float or datetime)."""
    if isinstance(moment, datetime):
        return int(moment.timestamp())
    if isinstance(moment, (int, float)):
        return int(moment)
    raise TypeError(f"unexpected created_at {moment!r}")


def pick_latest(candidates: Sequence[ItemKey]) -> ItemKey:
    """The newest of ``candidates`` by their tags: ``ts``, then ``previous_checkpoint_id`` lineage.

    Among keys with the newest timestamp, the newest is the one no other tied key names as its
    ``prev`` (agent-framework #8513: taking the maximum timestamp alone can return the parent).
    Forks (several such heads) are broken deterministically by checkpoint id tag.

    Raises:
        InvalidArgumentError: ``candidates`` is empty.
    """
    if not candidates:
        raise InvalidArgumentError("pick_latest needs at least one candidate key, got none")
    top = max(_tags_of(k).get(TAG_TS, "") for k in candidates)
    tied = [k for k in candidates if _tags_of(k).get(TAG_TS, "") == top]
    if len(tied) > 1:
        named = {_tags_of(k).get(TAG_PREV) for k in tied}
        heads = [k for k in tied if _tags_of(k).get(TAG_ID) not in named]
        tied = heads or tied  # a cycle can only come from edited data: fall back to all
    return max(tied, key=lambda k: (_tags_of(k).get(TAG_ID, ""), k.key))


def oldest_first(keys: Iterable[ItemKey]) -> list[ItemKey]:
    """``keys`` by timestamp tag; equal timestamps by lineage depth (parents first)."""
    listed = list(keys)
    by_id = {_tags_of(k).get(TAG_ID): k for k in listed}
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
            parent = by_id.get(tags.get(TAG_PREV))
            same_time = parent is not None and _tags_of(parent).get(TAG_TS) == tags.get(TAG_TS)
            current = parent if same_time else None
        for offset, member in enumerate(reversed(chain)):
            depth[member.key] = base + offset
        return depth[key.key]

    return sorted(
        listed,
        key=lambda k: (_tags_of(k).get(TAG_TS, ""), _depth(k), _second(k.created_at), k.key),
    )


def sortable_timestamp(timestamp: str, checkpoint_id: str) -> str:
    """``timestamp`` (ISO 8601) as zero-padded UTC microseconds since the epoch.

    Naive timestamps are read as UTC. Strings of equal width sort like the instants they stand
    for, so the tag orders checkpoints without reading them. An instant before 1970 is ``-``
    followed by ``10**19`` plus its (negative) microseconds: ``-`` sorts before every digit,
    and a more negative offset gives a smaller number, so the order holds across the epoch.

    Raises:
        WorkflowCheckpointException: ``timestamp`` is not ISO 8601 (MAF's contract for
            ``save``); nothing is stored.

    Example:
        >>> sortable_timestamp("1970-01-01T00:00:01.5+00:00", "cp")
        '00000000000001500000'
        >>> sortable_timestamp("1969-12-31T23:59:59+00:00", "cp")
        '-9999999999999000000'
    """
    text = timestamp
    if isinstance(text, str) and text.endswith(("Z", "z")):  # fromisoformat of 3.10 wants +00:00
        text = text[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError) as exc:
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id!r} has timestamp {timestamp!r}, which is not ISO 8601; "
            "it cannot be ordered and was not stored"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    delta = moment - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if micros < 0:
        return f"-{_NEGATIVE_BASE + micros:0{TS_WIDTH - 1}d}"
    return f"{micros:0{TS_WIDTH}d}"


def iso_from_tag(tag: str) -> str | None:
    """The ISO 8601 UTC instant of a ``ts`` tag (see :func:`sortable_timestamp`), or None.

    Example:
        >>> iso_from_tag("00000000000001500000")
        '1970-01-01T00:00:01.500000+00:00'
        >>> iso_from_tag("garbage") is None
        True
    """
    try:
        micros = int(tag) if not tag.startswith("-") else int(tag[1:]) - 10**19
    except ValueError:
        return None
    try:
        moment = _EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        return None
    return moment.isoformat()
