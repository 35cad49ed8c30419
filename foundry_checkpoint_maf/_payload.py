"""Checkpoint <-> payload bytes, the restricted decoder, and the ordering tags.

A checkpoint is stored as one compact JSON document: MAF's own encoding
(``encode_checkpoint_value(checkpoint.to_dict())``: JSON for plain values, pickle envelopes
for everything else) dumped with sorted keys and compact separators. Those bytes are exactly
what Foundry hosting hashes to pin a checkpoint to a response, so the sha256 of the stored
payload is the integrity hash ``load_with_hash`` returns.

Decoding always goes through MAF's restricted unpickler: the allow-list passed to
``decode_checkpoint_value`` is a frozenset, never ``None`` (``None`` would mean plain
``pickle.loads``).

Example:
    >>> from agent_framework import WorkflowCheckpoint
    >>> cp = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h", state={"n": 1})
    >>> payload = encode_payload(cp)
    >>> decode_payload(payload, allowed=frozenset(), checkpoint_id=cp.checkpoint_id).state
    {'n': 1}
    >>> type_keys([dict, "my_app.models:MyState"]) == frozenset(
    ...     {"builtins:dict", "my_app.models:MyState"})
    True
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any, Final

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from agent_framework._workflows._checkpoint_encoding import (
    decode_checkpoint_value,
    encode_checkpoint_value,
)

__all__ = [
    "TS_WIDTH",
    "decode_payload",
    "encode_payload",
    "payload_hash",
    "sortable_timestamp",
    "type_keys",
]

TS_WIDTH: Final = 20
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)


def type_keys(types: Iterable[type | str] | None) -> frozenset[str]:
    """The ``"module:qualname"`` keys of ``types`` (classes or such strings).

    Raises ``TypeError`` for anything else and ``ValueError`` for a string without ``:``.
    """
    if types is None:
        return frozenset()
    if isinstance(types, (str, type)):
        types = [types]
    keys: set[str] = set()
    for item in types:
        if isinstance(item, type):
            keys.add(f"{item.__module__}:{item.__qualname__}")
        elif isinstance(item, str):
            module, sep, qualname = item.partition(":")
            if not sep or not module or not qualname:
                raise ValueError(
                    f"allowed_checkpoint_types entry {item!r} must be 'module:qualname', "
                    "for example 'my_app.models:MyState', or the class itself"
                )
            keys.add(item)
        else:
            raise TypeError(
                "allowed_checkpoint_types entries must be classes or 'module:qualname' strings, "
                f"got {type(item).__name__}: {item!r}"
            )
    return frozenset(keys)


def encode_payload(checkpoint: WorkflowCheckpoint) -> bytes:
    """The stored bytes of ``checkpoint`` (a snapshot: nothing refers back to the object)."""
    encoded = encode_checkpoint_value(checkpoint.to_dict())
    text = json.dumps(encoded, sort_keys=True, separators=(",", ":"))
    return text.encode("utf-8")


def payload_hash(payload: bytes) -> str:
    """The sha256 (hex) of a stored payload: Foundry hosting's checkpoint integrity hash."""
    return hashlib.sha256(payload).hexdigest()


def decode_payload(
    payload: bytes, *, allowed: frozenset[str], checkpoint_id: str
) -> WorkflowCheckpoint:
    """A new :class:`WorkflowCheckpoint` from stored bytes, through the restricted unpickler.

    Raises :class:`WorkflowCheckpointException` naming ``checkpoint_id`` when the bytes are not
    a checkpoint, hold a type outside the allow-list, or belong to another checkpoint id.
    """
    try:
        encoded: Any = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id!r} is stored in an unreadable form (not UTF-8 JSON): {exc}"
        ) from exc
    try:
        decoded = decode_checkpoint_value(encoded, allowed_types=allowed)
    except WorkflowCheckpointException as exc:
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id!r} cannot be decoded under this storage's allowed types: "
            f"{exc}. If the type is yours and trusted, pass it in allowed_checkpoint_types=[...] "
            "or register it with agent_framework.register_checkpoint_type()."
        ) from exc
    except Exception as exc:  # a damaged envelope can fail in many ways inside the decoder
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id!r} cannot be decoded: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(decoded, dict):
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id!r} is stored as {type(decoded).__name__}, not a checkpoint"
        )
    try:
        checkpoint = WorkflowCheckpoint.from_dict(decoded)
    except WorkflowCheckpointException as exc:
        raise WorkflowCheckpointException(f"Checkpoint {checkpoint_id!r}: {exc}") from exc
    if checkpoint.checkpoint_id != checkpoint_id:
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id!r} holds checkpoint {checkpoint.checkpoint_id!r}; "
            "the item was changed outside this storage"
        )
    return checkpoint


def sortable_timestamp(timestamp: str, checkpoint_id: str) -> str:
    """``timestamp`` (ISO 8601) as zero-padded UTC microseconds since the epoch.

    Naive timestamps are read as UTC. Strings of equal width sort like the instants they stand
    for, so the tag orders checkpoints without reading them.

    Example:
        >>> sortable_timestamp("1970-01-01T00:00:01.5+00:00", "cp")
        '00000000000001500000'
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
        raise WorkflowCheckpointException(
            f"Checkpoint {checkpoint_id!r} has timestamp {timestamp!r}, before 1970; not stored"
        )
    return f"{micros:0{TS_WIDTH}d}"
