"""Checkpoint <-> payload bytes, and the decoder of stored checkpoints.

A checkpoint is stored as one compact JSON document: MAF's own encoding
(``encode_checkpoint_value(checkpoint.to_dict())``: JSON for plain values, pickle envelopes
for everything else) dumped with sorted keys and compact separators. Those bytes are exactly
what Foundry hosting hashes to pin a checkpoint to a response, so the sha256 of the stored
payload is the integrity hash ``load_with_hash`` returns.

Decoding never calls MAF's own decoder, and no stored stream ever reaches ``pickle``: each
envelope is read by :mod:`foundry_checkpoint_maf._unpickle`, which interprets the opcodes
itself and can only build values (primitives, containers, enums, admitted classes and their
instances, from data). A refusal is typed: :class:`CheckpointTypeBlockedError` for a class
that is not admitted (a configuration matter; MAF's "deserialization blocked" wording),
:class:`CheckpointTamperedError` for a stream no encoder writes (logged at WARNING), and
:class:`CheckpointDecodeError` for damaged bytes.

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

import base64
import binascii
import hashlib
import json
import logging
from collections.abc import Iterable
from typing import Any, Final

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from agent_framework._workflows import _checkpoint_encoding as _maf_encoding

from foundry_checkpoint.errors import (
    CorruptPayloadError,
    InvalidArgumentError,
    TamperedPayloadError,
    TypeBlockedError,
)

from ._unpickle import Blocked, Damaged, Refusal, Tampered, key_of
from ._unpickle import loads as _unpickle_loads

logger = logging.getLogger("foundry_checkpoint_maf")

__all__ = [
    "AllowedTypeEntryError",
    "CheckpointDecodeError",
    "CheckpointTamperedError",
    "CheckpointTypeBlockedError",
    "check_value",
    "decode_payload",
    "encode_document",
    "encode_payload",
    "payload_hash",
    "type_keys",
    "verify_document",
]


def _encode_value(value: Any) -> Any:
    """MAF's own encoding of ``value`` (JSON for plain values, pickle envelopes for the rest).

    This module is the package's only user of MAF's private ``_checkpoint_encoding`` module:
    MAF's encoder and its ``register_checkpoint_type`` registrations are read here, nowhere else.
    """
    return _maf_encoding.encode_checkpoint_value(value)


def _admitted(allowed: frozenset[str]) -> frozenset[str]:
    """``allowed`` plus the types registered with MAF's ``register_checkpoint_type``."""
    return allowed | frozenset(_maf_encoding._REGISTERED_CHECKPOINT_TYPE_KEYS)


class AllowedTypeEntryError(InvalidArgumentError, TypeError):
    """An ``allowed_checkpoint_types`` entry that is neither a class nor a string.

    An :class:`~foundry_checkpoint.errors.InvalidArgumentError`, and still a ``TypeError`` (what
    this case raised before), so either ``except`` keeps catching it.

    Example:
        >>> issubclass(AllowedTypeEntryError, TypeError)
        True
    """


def type_keys(types: Iterable[type | str] | None) -> frozenset[str]:
    """The ``"module:qualname"`` keys of ``types`` (classes or such strings).

    Raises:
        InvalidArgumentError: a string entry is not ``"module:qualname"`` (also a
            ``ValueError``).
        AllowedTypeEntryError: an entry is neither a class nor a string (an
            ``InvalidArgumentError`` that is also a ``TypeError``).

    Example:
        >>> sorted(type_keys([int, "my_app.models:MyState"]))
        ['builtins:int', 'my_app.models:MyState']
    """
    if types is None:
        return frozenset()
    if isinstance(types, (str, type)):
        types = [types]
    keys: set[str] = set()
    for item in types:
        if isinstance(item, type):
            keys.add(key_of(item))
        elif isinstance(item, str):
            module, sep, qualname = item.partition(":")
            if not sep or not module or not qualname:
                raise InvalidArgumentError(
                    f"allowed_checkpoint_types entry {item!r} must be 'module:qualname', "
                    "for example 'my_app.models:MyState', or the class itself"
                )
            keys.add(item)
        else:
            raise AllowedTypeEntryError(
                "allowed_checkpoint_types entries must be classes or 'module:qualname' strings, "
                f"got {type(item).__name__}: {item!r}"
            )
    return frozenset(keys)


def encode_document(checkpoint: WorkflowCheckpoint) -> tuple[dict[str, Any], bytes]:
    """MAF's encoding of ``checkpoint`` and the stored bytes it dumps to (a snapshot: nothing
    refers back to the object).

    The encoding holds only what JSON round-trips (string keys, JSON scalars, lists and pickle
    envelopes), so :func:`verify_document` on it answers what :func:`decode_payload` on the
    bytes would, without parsing them again.

    Example:
        >>> from agent_framework import WorkflowCheckpoint
        >>> cp = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h")
        >>> encoded, payload = encode_document(cp)
        >>> payload == encode_payload(cp), encoded["workflow_name"]
        (True, 'wf')
    """
    encoded = _encode_value(checkpoint.to_dict())
    text = json.dumps(encoded, sort_keys=True, separators=(",", ":"))
    return encoded, text.encode("utf-8")


def encode_payload(checkpoint: WorkflowCheckpoint) -> bytes:
    """The stored bytes of ``checkpoint`` (a snapshot: nothing refers back to the object)."""
    return encode_document(checkpoint)[1]


def payload_hash(payload: bytes) -> str:
    """The sha256 (hex) of a stored payload: Foundry hosting's checkpoint integrity hash."""
    return hashlib.sha256(payload).hexdigest()


class CheckpointDecodeError(WorkflowCheckpointException, CorruptPayloadError):
    """A stored checkpoint is damaged: not a checkpoint, not well-formed, or another's.

    Both a ``WorkflowCheckpointException`` (what MAF's ``CheckpointStorage`` contract raises)
    and a :class:`~foundry_checkpoint.errors.CorruptPayloadError`. A class that is merely not
    allowed is a :class:`CheckpointTypeBlockedError` instead, which is not "damaged".

    Example:
        >>> issubclass(CheckpointDecodeError, CorruptPayloadError)
        True
    """


class CheckpointTamperedError(CheckpointDecodeError, TamperedPayloadError):
    """A stored checkpoint holds a pickle no encoder writes; nothing in it was run.

    A function, a metaclass or ``builtins.type``, a re-exported name, a call of a framework
    class, ``BUILD`` on a class or on a value the decode did not create, out-of-band buffers,
    a memo index it never stored: signs of tampering. Every read path raises it (listings and
    ``get_latest`` too, instead of skipping the checkpoint) and logs a WARNING ("tampered
    checkpoint ... refused") on the ``foundry_checkpoint_maf`` logger. Also a
    :class:`CheckpointDecodeError` (and so a ``CorruptPayloadError``) and a
    :class:`~foundry_checkpoint.errors.TamperedPayloadError`: the bytes are not what this
    storage wrote.

    Example:
        >>> issubclass(CheckpointTamperedError, CheckpointDecodeError)
        True
    """


class CheckpointTypeBlockedError(WorkflowCheckpointException, TypeBlockedError):
    """A checkpoint holds a class that is not admitted: deserialization blocked, nothing run.

    A configuration matter, not damage: name the class in ``allowed_checkpoint_types`` (or
    register it with ``agent_framework.register_checkpoint_type``). The message starts with
    MAF's own wording, "Checkpoint deserialization blocked for type '<module:qualname>'", and
    :attr:`type_key` holds the key. A ``WorkflowCheckpointException``, so MAF callers catch it,
    and a :class:`~foundry_checkpoint.errors.TypeBlockedError` (a ``FoundryCheckpointError``),
    but not a ``CorruptPayloadError``. ``load`` raises it; the listings and ``get_latest`` skip
    such a checkpoint with an error in the log, as MAF's own file storage does.

    Example:
        >>> error = CheckpointTypeBlockedError("Checkpoint deserialization blocked ...", "a:B")
        >>> error.type_key, issubclass(CheckpointTypeBlockedError, CorruptPayloadError)
        ('a:B', False)
    """

    def __init__(self, message: str, type_key: str | None = None) -> None:
        super().__init__(message)
        self.type_key = type_key


_PICKLE_MARKER: Final = "__pickled__"
_TYPE_MARKER: Final = "__type__"
_MAX_DEPTH: Final = 200


def _unpickle(envelope: dict[str, Any], allowed: frozenset[str]) -> Any:
    data, expected = envelope[_PICKLE_MARKER], envelope[_TYPE_MARKER]
    if not isinstance(data, str) or not isinstance(expected, str):
        raise CorruptPayloadError("a pickle envelope holds non-string fields")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as exc:
        raise CorruptPayloadError(f"a pickle envelope is not base64: {exc}") from exc
    value = _unpickle_loads(raw, allowed)
    if key_of(type(value)) != expected:
        raise CorruptPayloadError(
            f"a pickle envelope records type {expected!r} but holds {key_of(type(value))!r}"
        )
    return value


# Pickle envelopes that passed the full check (walked and unpickled) while a save verified its
# checkpoint, by (admitted types, recorded type, sha256 of the data). A later save holding the
# very same envelope (state or history that did not change since the last superstep) is not
# walked and unpickled again. Only passes are kept; loads never consult it.
_VERIFIED: dict[tuple[frozenset[str], str, bytes], None] = {}
_MAX_VERIFIED: Final = 4096


def _verify_envelope(envelope: dict[str, Any], allowed: frozenset[str]) -> Any:
    """:func:`_unpickle` for a save's check: None (not the value) for an envelope already
    checked under ``allowed``."""
    data, expected = envelope[_PICKLE_MARKER], envelope[_TYPE_MARKER]
    if not isinstance(data, str) or not isinstance(expected, str) or not data.isascii():
        return _unpickle(envelope, allowed)  # raises as a load would
    key = (allowed, expected, hashlib.sha256(data.encode("ascii")).digest())
    if key in _VERIFIED:
        return None
    value = _unpickle(envelope, allowed)
    if len(_VERIFIED) >= _MAX_VERIFIED:
        _VERIFIED.clear()
    _VERIFIED[key] = None
    return value


def _decode_value(
    value: Any, allowed: frozenset[str], depth: int = 0, *, verifying: bool = False
) -> Any:
    if depth > _MAX_DEPTH:
        raise CorruptPayloadError(f"values are nested more than {_MAX_DEPTH} levels deep")
    if isinstance(value, dict):
        if _PICKLE_MARKER in value and _TYPE_MARKER in value:
            if verifying:
                return _verify_envelope(value, allowed)
            return _unpickle(value, allowed)
        return {
            k: _decode_value(v, allowed, depth + 1, verifying=verifying) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_decode_value(v, allowed, depth + 1, verifying=verifying) for v in value]
    return value


def _blocked_message(exc: Refusal, where: str) -> str:
    key = exc.type_key or "?"
    return (
        f"Checkpoint deserialization blocked for type {key!r} ({where}): {exc.reason}. "
        "If the type is yours and trusted, pass it in allowed_checkpoint_types=[...] or "
        "register it with agent_framework.register_checkpoint_type()."
    )


def check_value(value: object, allowed: frozenset[str]) -> None:
    """Raise unless ``value`` would decode under ``allowed``, as a checkpoint would hold it.

    Raises:
        CheckpointTypeBlockedError: it holds a class that is not admitted, or one pickled in a
            way the decoder does not rebuild.
        CheckpointDecodeError: it would not come back for another reason.

    Example:
        >>> check_value({"n": 1}, frozenset())
        >>> import functools
        >>> check_value(functools.partial(print), frozenset())
        Traceback (most recent call last):
        ...
        foundry_checkpoint_maf._payload.CheckpointTypeBlockedError: Checkpoint deserialization ...
    """
    where = f"a {type(value).__name__} value"
    try:
        _decode_value(_encode_value(value), _admitted(allowed))
    except (Blocked, Tampered) as exc:
        raise CheckpointTypeBlockedError(_blocked_message(exc, where), exc.type_key) from exc
    except Exception as exc:
        raise CheckpointDecodeError(
            f"A {type(value).__name__} value would not be restored from a checkpoint: {exc}. "
            "If the type is yours and trusted, pass it in allowed_checkpoint_types=[...]."
        ) from exc


def decode_payload(
    payload: bytes, *, allowed: frozenset[str], checkpoint_id: str
) -> WorkflowCheckpoint:
    """A new :class:`WorkflowCheckpoint` from stored bytes, through the value-only decoder.

    ``allowed`` adds ``"module:qualname"`` keys to the admitted classes (as do MAF's
    ``register_checkpoint_type`` registrations).

    Raises:
        CheckpointTypeBlockedError: a class that is not admitted (nothing of it was called).
        CheckpointTamperedError: a stream no encoder writes (also logged at WARNING).
        CheckpointDecodeError: the bytes are not a checkpoint, or belong to another id.

    Example:
        >>> from agent_framework import WorkflowCheckpoint
        >>> cp = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h")
        >>> decode_payload(b"[]", allowed=frozenset(), checkpoint_id="c")
        Traceback (most recent call last):
        ...
        foundry_checkpoint_maf._payload.CheckpointDecodeError: Checkpoint 'c' is stored as list, ...
    """
    try:
        encoded: Any = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointDecodeError(
            f"Checkpoint {checkpoint_id!r} is stored in an unreadable form (not UTF-8 JSON "
            f"of a sane depth): {type(exc).__name__}"
        ) from exc
    return _checkpoint_from(encoded, allowed, checkpoint_id, verifying=False)


def verify_document(encoded: Any, *, allowed: frozenset[str], checkpoint_id: str) -> None:
    """Raise unless :func:`decode_payload` would decode the bytes :func:`encode_document`
    dumps ``encoded`` to; nothing when they decode.

    The encoding holds only what JSON round-trips, so it is checked as it is, without dumping
    and parsing it again. A pickle envelope that already passed under the same allowed types
    (on an earlier save in this process) is not decoded again. What a load would refuse as
    tampering is, at save time, a value pickled in a way the decoder does not rebuild: a
    :class:`CheckpointTypeBlockedError` naming its class (and nothing is logged).

    Example:
        >>> from agent_framework import WorkflowCheckpoint
        >>> cp = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h", state={"n": 1})
        >>> encoded, _ = encode_document(cp)
        >>> verify_document(encoded, allowed=frozenset(), checkpoint_id=cp.checkpoint_id)
        >>> verify_document(encoded, allowed=frozenset(), checkpoint_id="another")
        Traceback (most recent call last):
        ...
        foundry_checkpoint_maf._payload.CheckpointDecodeError: Checkpoint 'another' holds ...
    """
    _checkpoint_from(encoded, allowed, checkpoint_id, verifying=True)


def _checkpoint_from(
    encoded: Any, allowed: frozenset[str], checkpoint_id: str, *, verifying: bool
) -> WorkflowCheckpoint:
    where = f"checkpoint {checkpoint_id!r}"
    try:
        decoded = _decode_value(encoded, _admitted(allowed), verifying=verifying)
    except (Blocked, Tampered) as exc:
        if isinstance(exc, Blocked) or verifying:  # at save time a refusal is a blocked type
            raise CheckpointTypeBlockedError(
                _blocked_message(exc, where), exc.type_key or "?"
            ) from exc
        logger.warning(
            "tampered checkpoint %s refused, nothing in it was run: %s", checkpoint_id, exc
        )
        raise CheckpointTamperedError(
            f"Checkpoint {checkpoint_id!r} was refused as tampered, nothing in it was run: "
            f"{exc}. Its bytes are not what this storage writes; restore it from a trusted "
            "copy or delete it."
        ) from exc
    except (Damaged, CorruptPayloadError) as exc:
        raise CheckpointDecodeError(
            f"Checkpoint {checkpoint_id!r} cannot be decoded: {exc}"
        ) from exc
    except Exception as exc:  # never expected: whatever it is, the reader sees a typed error
        raise CheckpointDecodeError(
            f"Checkpoint {checkpoint_id!r} cannot be decoded: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(decoded, dict):
        raise CheckpointDecodeError(
            f"Checkpoint {checkpoint_id!r} is stored as {type(decoded).__name__}, not a checkpoint"
        )
    try:
        checkpoint = WorkflowCheckpoint.from_dict(decoded)
    except Exception as exc:
        raise CheckpointDecodeError(
            f"Checkpoint {checkpoint_id!r} is not a checkpoint record: {type(exc).__name__}: {exc}"
        ) from exc
    if checkpoint.checkpoint_id != checkpoint_id:
        raise CheckpointDecodeError(
            f"Checkpoint {checkpoint_id!r} holds checkpoint {checkpoint.checkpoint_id!r}; "
            "the item was changed outside this storage"
        )
    return checkpoint
