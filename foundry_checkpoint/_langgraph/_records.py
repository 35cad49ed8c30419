"""Item layout of the LangGraph saver: keys, tags and payloads.

One store per thread. Two kinds of items live in it:

* a **checkpoint item** per ``(checkpoint_ns, checkpoint_id)``, key ``c/<ns>/<id>``, holding the
  serialized checkpoint, its metadata, its parent id and *every* channel value it needs (either
  inline or as the sha256 of a blob in the spill store), so that it can be resumed on its own;
* a **writes item** per ``(checkpoint_ns, checkpoint_id, task_id)``, key ``w/<ns>/<id>/<task>``,
  holding the pending writes of one task, indexed by write index.

Tags make listing cheap: ``list_keys`` returns them, so "latest", ``list(filter=...)``,
``delete_for_runs`` and ``prune`` decide from tags which items to read or delete.

Payloads are msgpack (``ormsgpack``, a LangGraph dependency); the serialized values inside them
come from the saver's ``serde`` (so an ``EncryptedSerializer`` encrypts them) and the whole
payload then goes through the item codec (:mod:`foundry_checkpoint._codec`).

Example:
    >>> rec = WritesRecord("", "1ef", "task", "", {0: ("ch", "json", b'"v"')})
    >>> unpack_writes(pack_writes(rec), where="example") == rec
    True
    >>> ns_tag("")
    'n'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import ormsgpack

from ..adapter import ItemKey, item_key, tag_value, unescape
from ..errors import CorruptPayloadError

__all__ = [
    "FORMAT",
    "KIND_CHECKPOINT",
    "KIND_WRITES",
    "TAG_EARLY",
    "TAG_ID",
    "TAG_KIND",
    "TAG_NS",
    "TAG_OUT_OF_ORDER",
    "TAG_OWNER",
    "TAG_PARENT",
    "TAG_RUN",
    "TAG_SOURCE",
    "TAG_SPILL",
    "TAG_STEP",
    "ChannelEntry",
    "CheckpointRecord",
    "DeltaBase",
    "WritesRecord",
    "checkpoint_key",
    "cid_of",
    "id_tag",
    "in_order",
    "key_tags",
    "ns_tag",
    "pack_checkpoint",
    "pack_writes",
    "pair_of",
    "plain_tag",
    "step_tag",
    "unpack_checkpoint",
    "unpack_writes",
    "writes_key",
]

FORMAT: Final = 1
KIND_CHECKPOINT: Final = "c"
KIND_WRITES: Final = "w"

TAG_KIND: Final = "k"
TAG_NS: Final = "ns"
TAG_ID: Final = "cid"
TAG_PARENT: Final = "pid"
TAG_SOURCE: Final = "src"
TAG_STEP: Final = "step"
TAG_RUN: Final = "run"
TAG_SPILL: Final = "sp"
TAG_EARLY: Final = "ew"
"""On a checkpoint: ``"0"`` when its writer guarantees that every writes item it made for the
checkpoint was created after the checkpoint item (so a reader finds them in the same listing as
the checkpoint); ``"1"`` (or no tag: older versions) when some may be older, so a reader lists
the checkpoint's writes on their own."""
TAG_OUT_OF_ORDER: Final = "oo"
"""On a checkpoint: ``"1"`` when ``copy_thread`` wrote it into a thread that already held a
checkpoint with a larger id. Every checkpoint without it is *in order*: any checkpoint of an
older ``created_at`` second has a smaller checkpoint id. Readers stop listing early only at an
in-order checkpoint."""
TAG_OWNER: Final = "own"
"""On a checkpoint of a subgraph call's namespace: the id of the caller's checkpoint the call
started from (the deepest entry of ``metadata["parents"]``); the namespace goes with it."""

Version = str | int | float


def ns_tag(ns: str) -> str:
    """The tag value of a checkpoint namespace (prefixed, so the root namespace is not empty)."""
    return tag_value("n" + ns)


def id_tag(value: str) -> str:
    """The tag value of a checkpoint id (uuid6 ids are kept as they are)."""
    return tag_value(value)


def step_tag(step: object) -> str | None:
    """The tag value of a metadata ``step`` (integers only, as ``1 == 1.0 == True`` in filters)."""
    if isinstance(step, int):
        return str(int(step))
    if isinstance(step, float) and step.is_integer():
        return str(int(step))
    return None


def key_tags(key: ItemKey) -> Mapping[str, str]:
    """The tags a listing returned with ``key`` (empty when it has none)."""
    return key.tags or {}


def cid_of(key: ItemKey) -> str:
    """The checkpoint id a listed key is tagged with (its tag as is when not escaped text)."""
    tag = key_tags(key).get(TAG_ID, "")
    return unescape(tag) or tag


def plain_tag(tag: str) -> bool:
    """True when a tag value is the id itself (no ``~`` escape, not hashed): plain ids keep
    their order as tag values, so a store may rank them by tag.

    Example:
        >>> plain_tag("1f0c-22"), plain_tag("x~20y"), plain_tag("!" + "0" * 64)
        (True, False, False)
    """
    return bool(tag) and "~" not in tag and not tag.startswith("!")


def in_order(key: ItemKey) -> bool:
    """True unless the checkpoint was copied behind a newer one (``TAG_OUT_OF_ORDER``)."""
    return key_tags(key).get(TAG_OUT_OF_ORDER) != "1"


def pair_of(key: ItemKey) -> tuple[str, str]:
    """The (namespace, checkpoint id) tags of a listed key: what a checkpoint and its writes
    share."""
    tags = key_tags(key)
    return tags.get(TAG_NS, ""), tags.get(TAG_ID, "")


def checkpoint_key(ns: str, checkpoint_id: str) -> str:
    """The item key of a checkpoint."""
    return item_key(KIND_CHECKPOINT, ns, checkpoint_id)


def writes_key(ns: str, checkpoint_id: str, task_id: str) -> str:
    """The item key of one task's pending writes on a checkpoint."""
    return item_key(KIND_WRITES, ns, checkpoint_id, task_id)


@dataclass(frozen=True)
class ChannelEntry:
    """One channel value of a checkpoint, at one channel version.

    Either ``data`` holds the serialized value inline, or ``digest`` names a spill-store blob
    (in the thread's spill namespace) holding it.
    """

    version: Version
    type: str
    data: bytes | None
    digest: str | None = None
    size: int = 0


@dataclass(frozen=True)
class DeltaBase:
    """The history of one channel above a checkpoint whose ancestors were deleted.

    What ``get_delta_channel_history`` collected from the deleted parent chain: ``seed`` (the
    nearest stored value, if any) and ``writes`` (``(task_id, type, bytes)`` oldest first),
    kept byte for byte so that the channel rebuilds exactly as before.
    """

    seed: ChannelEntry | None
    writes: tuple[tuple[str, str, bytes], ...] = ()


@dataclass
class CheckpointRecord:
    """The payload of a checkpoint item."""

    ns: str
    checkpoint_id: str
    parent_id: str | None
    checkpoint: tuple[str, bytes]
    metadata: tuple[str, bytes]
    channels: dict[str, ChannelEntry] = field(default_factory=dict)
    absent: dict[str, Version] = field(default_factory=dict)
    """Channels the checkpoint versions without a value (so a child need not look further)."""
    history: dict[str, DeltaBase] = field(default_factory=dict)
    """Per channel, the history of its deleted ancestors (written by ``prune`` and
    ``delete_for_runs`` on a checkpoint whose parent they delete)."""

    def digests(self) -> set[str]:
        """The spill-store blobs this checkpoint references."""
        entries = [*self.channels.values()]
        entries += [b.seed for b in self.history.values() if b.seed is not None]
        return {e.digest for e in entries if e.digest is not None}


@dataclass
class WritesRecord:
    """The payload of a writes item: ``writes`` maps write index to (channel, type, bytes)."""

    ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: dict[int, tuple[str, str, bytes]]


def _corrupt(where: str, why: str) -> CorruptPayloadError:
    return CorruptPayloadError(
        f"{where} cannot be decoded: {why}. It was changed outside foundry-checkpoint or "
        "written by an incompatible version."
    )


def _unpack(payload: bytes, kind: str, where: str) -> dict[str, Any]:
    try:
        data = ormsgpack.unpackb(payload)
    except (ormsgpack.MsgpackDecodeError, ValueError) as exc:
        raise _corrupt(where, f"bad msgpack ({exc})") from None
    if not isinstance(data, dict) or data.get("f") != FORMAT or data.get("t") != kind:
        raise _corrupt(where, "unknown payload format")
    return data


def _typed(value: object, where: str) -> tuple[str, bytes]:
    if (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], bytes)
    ):
        return value[0], value[1]
    raise _corrupt(where, "bad serialized value")


def _entry_row(e: ChannelEntry) -> list[Any]:
    return [e.version, e.type, e.data, e.digest, e.size]


def _entry(row: object, name: str, where: str) -> ChannelEntry:
    if not isinstance(row, list) or len(row) != 5:
        raise _corrupt(where, f"bad channel entry {name!r}")
    version, type_, blob, digest, size = row
    if (
        not isinstance(version, (str, int, float))
        or not isinstance(type_, str)
        or not (isinstance(blob, bytes) or (blob is None and isinstance(digest, str)))
        or not isinstance(size, int)
    ):
        raise _corrupt(where, f"bad channel entry {name!r}")
    return ChannelEntry(version, type_, blob, digest, size)


def pack_checkpoint(record: CheckpointRecord) -> bytes:
    """The payload bytes of a checkpoint item."""
    channels = [[name, *_entry_row(e)] for name, e in record.channels.items()]
    data: dict[str, Any] = {
        "f": FORMAT,
        "t": KIND_CHECKPOINT,
        "ns": record.ns,
        "id": record.checkpoint_id,
        "p": record.parent_id,
        "c": list(record.checkpoint),
        "m": list(record.metadata),
        "ch": channels,
        "ab": [[name, version] for name, version in record.absent.items()],
    }
    if record.history:
        data["dh"] = [
            [
                name,
                None if base.seed is None else _entry_row(base.seed),
                [list(w) for w in base.writes],
            ]
            for name, base in record.history.items()
        ]
    return ormsgpack.packb(data)


def _history(raw: object, where: str) -> dict[str, DeltaBase]:
    if not isinstance(raw, list):
        raise _corrupt(where, "bad channel history")
    out: dict[str, DeltaBase] = {}
    for row in raw:
        if not isinstance(row, list) or len(row) != 3 or not isinstance(row[0], str):
            raise _corrupt(where, "bad channel history entry")
        name, seed, writes = row
        if not isinstance(writes, list) or not all(
            isinstance(w, list)
            and len(w) == 3
            and isinstance(w[0], str)
            and isinstance(w[1], str)
            and isinstance(w[2], bytes)
            for w in writes
        ):
            raise _corrupt(where, f"bad history writes of channel {name!r}")
        out[name] = DeltaBase(
            None if seed is None else _entry(seed, name, where),
            tuple((w[0], w[1], w[2]) for w in writes),
        )
    return out


def unpack_checkpoint(payload: bytes, *, where: str) -> CheckpointRecord:
    """Inverse of :func:`pack_checkpoint`; :class:`CorruptPayloadError` on a bad payload."""
    data = _unpack(payload, KIND_CHECKPOINT, where)
    ns, cid, parent = data.get("ns"), data.get("id"), data.get("p")
    if not isinstance(ns, str) or not isinstance(cid, str):
        raise _corrupt(where, "missing namespace or checkpoint id")
    if parent is not None and not isinstance(parent, str):
        raise _corrupt(where, "bad parent id")
    channels: dict[str, ChannelEntry] = {}
    raw = data.get("ch")
    if not isinstance(raw, list):
        raise _corrupt(where, "bad channel table")
    for row in raw:
        if not isinstance(row, list) or len(row) != 6 or not isinstance(row[0], str):
            raise _corrupt(where, "bad channel entry")
        channels[row[0]] = _entry(row[1:], row[0], where)
    absent: dict[str, Version] = {}
    for row in data.get("ab", []):
        if not isinstance(row, list) or len(row) != 2 or not isinstance(row[0], str):
            raise _corrupt(where, "bad absent-channel entry")
        if not isinstance(row[1], (str, int, float)):
            raise _corrupt(where, f"bad version of absent channel {row[0]!r}")
        absent[row[0]] = row[1]
    return CheckpointRecord(
        ns=ns,
        checkpoint_id=cid,
        parent_id=parent,
        checkpoint=_typed(data.get("c"), where),
        metadata=_typed(data.get("m"), where),
        channels=channels,
        absent=absent,
        history=_history(data.get("dh", []), where),
    )


def pack_writes(record: WritesRecord) -> bytes:
    """The payload bytes of a writes item."""
    return ormsgpack.packb(
        {
            "f": FORMAT,
            "t": KIND_WRITES,
            "ns": record.ns,
            "id": record.checkpoint_id,
            "task": record.task_id,
            "path": record.task_path,
            "w": [[idx, ch, t, b] for idx, (ch, t, b) in sorted(record.writes.items())],
        }
    )


def unpack_writes(payload: bytes, *, where: str) -> WritesRecord:
    """Inverse of :func:`pack_writes`; :class:`CorruptPayloadError` on a bad payload."""
    data = _unpack(payload, KIND_WRITES, where)
    ns, cid, task, path = data.get("ns"), data.get("id"), data.get("task"), data.get("path")
    if not all(isinstance(x, str) for x in (ns, cid, task, path)):
        raise _corrupt(where, "missing namespace, checkpoint id, task id or task path")
    writes: dict[int, tuple[str, str, bytes]] = {}
    raw = data.get("w")
    if not isinstance(raw, list):
        raise _corrupt(where, "bad write list")
    for row in raw:
        if (
            not isinstance(row, list)
            or len(row) != 4
            or not isinstance(row[0], int)
            or not isinstance(row[1], str)
            or not isinstance(row[2], str)
            or not isinstance(row[3], bytes)
        ):
            raise _corrupt(where, "bad write entry")
        writes[row[0]] = (row[1], row[2], row[3])
    assert isinstance(ns, str) and isinstance(cid, str)
    assert isinstance(task, str) and isinstance(path, str)
    return WritesRecord(ns, cid, task, path, writes)
