"""The item codec: checkpoint bytes <-> one compact state-store item value.

A value is a flat JSON object of short fields, never nested JSON (nested values cost the SDK's
local mode many times more per write). Two forms exist, both with format ``"v": 1``:

* **inline**: ``{"v": 1, "c": "raw", "d": <base64>, "k": <crc32>}`` or
  ``{"v": 1, "c": "z", "d": <base64 of a zlib stream>}``;
* **reference** to a spilled blob: ``{"v": 1, "c": "raw" | "z", "s": <sha256>, "n": <size>}``.

``c`` is the codec: ``"z"`` (zlib, level 6) is used only when it makes the payload smaller,
otherwise ``"raw"``; the embedded local store asks for ``"raw"`` whenever the payload fits an
item that way (its bytes travel nowhere, so the zlib pass would be pure cost). Integrity is
checked on every read:

* ``"raw"`` inline values carry ``"k"``, the CRC-32 of the payload as 8 lowercase hex digits;
* ``"z"`` inline values rely on the zlib stream's own Adler-32 checksum and structure (a
  truncated stream or trailing bytes are rejected too), and may inflate to at most
  :data:`INFLATE_LIMIT` bytes (a payload that would inflate further is spilled instead), so a
  small item cannot make a reader allocate without bound;
* references carry the sha256 of the stored (possibly compressed) blob, which is also its
  content-addressed name (computed by the spill store's ``put``, and verified by its ``get``:
  the codec never hashes a blob itself), and ``"n"``, the size of the *decoded* payload,
  checked after decompression. ``"n"`` is written by whoever wrote the item, so it bounds
  nothing by itself: a reader accepts only what this writer can produce. A payload is at most
  :data:`MAX_PAYLOAD` bytes (larger ones are refused when written), and a compressed blob
  inflates to at most :data:`INFLATE_LIMIT` bytes or :data:`MAX_RATIO` times its own size,
  whichever is larger (a larger payload that compresses better than that is spilled ``"raw"``).
  A reference recording more is refused before anything is inflated, and inflation stops one
  byte past the bound, so memory stays proportional to what is stored, never to what a
  tampered reference claims.

Any failure raises :class:`~foundry_checkpoint.errors.CorruptPayloadError` naming ``where``.
These checks catch damage and accidental edits; they are not a signature against a deliberate
forger with write access to the store.

The size that decides between the forms is measured on the exact request body the SDK sends to
create the item (``json.dumps({"key": key, "value": value, "tags": tags})`` with the default
separators and ASCII escaping; ``tags`` omitted when empty), which is larger than the item value
alone. It must fit :data:`INLINE_BUDGET`, the store's 1 MB limit (:data:`ITEM_LIMIT`) on its
stricter reading, 10**6 bytes. A value that does not fit is uploaded to the spill store
**before** the reference is returned, so an item written with the returned value never points
at a blob that was not stored. The payload is compressed once and the blob hashed once (by
the spill store); the spill namespace is asked for only when a value spills. Callers may add
``extra`` string fields (for example the full identifier when a key had to be hashed); they
count towards the size.

Example:
    >>> import asyncio
    >>> value = asyncio.run(encode(b"hello", key="k", tags=None, extra=None,
    ...                            spill=None, namespace=None, where="checkpoint 1"))
    >>> value
    {'v': 1, 'c': 'raw', 'd': 'aGVsbG8=', 'k': '3610a686'}
    >>> asyncio.run(decode(value, spill=None, namespace=None, where="checkpoint 1"))
    b'hello'
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeAlias

from ._offload import OFFLOAD_BYTES, offload
from ._store._limits import MAX_VALUE_BYTES as ITEM_LIMIT
from .errors import CheckpointTooLargeError, CorruptPayloadError, MissingBlobError
from .spill import SpillStore

__all__ = [
    "FORMAT",
    "INFLATE_LIMIT",
    "INLINE_BUDGET",
    "ITEM_LIMIT",
    "MAX_PAYLOAD",
    "MAX_RATIO",
    "NamespaceSource",
    "decode",
    "encode",
    "encode_inline",
    "encode_now",
    "spilled_digest",
]

INLINE_BUDGET: Final = ITEM_LIMIT
"""Largest create-request body (key + value + tags as JSON) written inline: the item limit on
its stricter reading of "1 MB" (10**6 bytes), measured on the whole body, so the value alone
(what the limit counts) is smaller by the key, the tags and the envelope."""

FORMAT: Final = 1
"""The value format written by this version (the ``"v"`` field)."""

INFLATE_LIMIT: Final = 16 << 20
"""Largest payload an inline compressed value may inflate to (16 MiB). Larger payloads
are spilled even when their compressed form would fit an item, and an inline value inflating
beyond it is refused as corrupt after at most this much output. A spilled value is bounded by
the size recorded in its reference instead."""

MAX_PAYLOAD: Final = 1 << 30
"""Largest payload (checkpoint, write or state bytes) encoded at all: 1 GiB. A larger one is
refused when it is written, and a reference recording a larger size is refused as corrupt."""

MAX_RATIO: Final = 64
"""Largest inflation ratio of a compressed blob that inflates past :data:`INFLATE_LIMIT`. zlib
gets a few times on checkpoint data (msgpack of messages and state); a larger payload
that compresses better than this (long runs of one byte, repeated records) is spilled ``"raw"``,
so a reader can refuse any stream that would inflate further."""

_RAW: Final = "raw"
_ZLIB: Final = "z"
_LEVEL: Final = 1
"""The zlib level of a payload up to :data:`_FAST_UP_TO`: deflate's fast mode, about half the
CPU of level 6 on checkpoint data (msgpack of messages) for 5-10% more bytes."""
_TIGHT_LEVEL: Final = 6
"""The zlib level of a larger payload, and of one whose fast form misses the budget (so the
item limit keeps inline what it always kept, and a spilled payload over 1 MB keeps its blob,
named by the digest of the stored bytes, and is compressed once)."""
_FAST_UP_TO: Final = INLINE_BUDGET
"""Payloads up to this size (1 MB) are compressed at the fast level: their compressed form
fits an item unless they barely compress."""
_RESERVED: Final = frozenset({"v", "c", "d", "k", "s", "n"})
_DIGEST_RE: Final = re.compile(r"[0-9a-f]{64}")
_CRC_RE: Final = re.compile(r"[0-9a-f]{8}")
_SOME_DIGEST: Final = "0" * 64  # a digest's length, for sizing a reference before the upload

NamespaceSource: TypeAlias = "str | Callable[[], Awaitable[str]]"
"""A spill namespace, or a coroutine function giving it (called only when a value spills)."""


def inflate_bound(stored_size: int) -> int:
    """The most bytes a compressed blob of ``stored_size`` bytes may inflate to: what
    :func:`encode` can have written (:data:`INFLATE_LIMIT`, or :data:`MAX_RATIO` times the
    blob, at most :data:`MAX_PAYLOAD`).

    Example:
        >>> inflate_bound(1_000) == INFLATE_LIMIT
        True
        >>> inflate_bound(1_000_000)
        64000000
    """
    return min(MAX_PAYLOAD, max(INFLATE_LIMIT, MAX_RATIO * stored_size))


def _pack(payload: bytes, level: int = _LEVEL) -> tuple[str, bytes]:
    """``("z", compressed)`` when zlib makes ``payload`` smaller (and the result inflates within
    :func:`inflate_bound`), else ``("raw", payload)``."""
    if payload:
        compressed = zlib.compress(payload, level)
        if len(compressed) < len(payload) and len(payload) <= inflate_bound(len(compressed)):
            return _ZLIB, compressed
    return _RAW, payload


def _crc(payload: bytes) -> str:
    return f"{zlib.crc32(payload):08x}"


def _b64_len(size: int) -> int:
    return 4 * ((size + 2) // 3)


def _request_size(key: str, value: Mapping[str, Any], tags: Mapping[str, str] | None) -> int:
    """Bytes of the SDK's create-item request body for this key, value and tags."""
    body: dict[str, Any] = {"key": key, "value": dict(value)}
    if tags:
        body["tags"] = dict(tags)
    return len(json.dumps(body).encode("utf-8"))


def _check_extra(extra: Mapping[str, str] | None) -> dict[str, str]:
    if not extra:
        return {}
    clash = sorted(_RESERVED.intersection(extra))
    if clash:
        raise ValueError(f"extra fields {clash} clash with the codec's own fields")
    for name, text in extra.items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise TypeError("extra fields must map str to str")
    return dict(extra)


def _inline_value(codec: str, payload: bytes, data: str) -> dict[str, Any]:
    value: dict[str, Any] = {"v": FORMAT, "c": codec, "d": data}
    if codec == _RAW:
        value["k"] = _crc(payload)
    return value


def _packed(
    payload: bytes,
    key: str,
    tags: Mapping[str, str] | None,
    fields: Mapping[str, str],
    compress: bool,
) -> tuple[dict[str, Any] | None, str, bytes]:
    """The CPU work of :func:`encode`: ``(inline value, codec, stored bytes)``, the value None
    when the payload does not fit inline (it spills, as ``stored``).

    The payload is compressed at the fast level up to :data:`_FAST_UP_TO` bytes, and again at
    level 6 only when that misses the budget.
    """
    if not compress:
        raw = {**_inline_value(_RAW, payload, ""), **fields}
        if _request_size(key, raw, tags) + _b64_len(len(payload)) <= INLINE_BUDGET:
            raw["d"] = base64.b64encode(payload).decode("ascii")
            return raw, _RAW, payload
    fast = len(payload) <= _FAST_UP_TO
    codec, stored = _pack(payload, _LEVEL if fast else _TIGHT_LEVEL)
    skeleton = {**_inline_value(codec, payload, ""), **fields}
    inline_size = _request_size(key, skeleton, tags) + _b64_len(len(stored))
    if codec == _ZLIB and inline_size > INLINE_BUDGET and fast:
        # Level 6 before spilling: it may still fit.
        codec, stored = _pack(payload, _TIGHT_LEVEL)
        skeleton = {**_inline_value(codec, payload, ""), **fields}
        inline_size = _request_size(key, skeleton, tags) + _b64_len(len(stored))
    if inline_size <= INLINE_BUDGET and (codec == _RAW or len(payload) <= INFLATE_LIMIT):
        skeleton["d"] = base64.b64encode(stored).decode("ascii")
        return skeleton, codec, stored
    return None, codec, stored


def encode_now(
    payload: bytes,
    *,
    key: str,
    tags: Mapping[str, str] | None,
    extra: Mapping[str, str] | None,
    compress: bool = True,
) -> dict[str, Any] | None:
    """:func:`encode`'s inline value when it needs no worker thread (the payload is under
    :data:`~foundry_checkpoint._offload.OFFLOAD_BYTES`) and no spill store; else None.

    Example:
        >>> encode_now(b"hello", key="k", tags=None, extra={"id": "t"}, compress=False)["id"]
        't'
        >>> encode_now(b"x" * OFFLOAD_BYTES, key="k", tags=None, extra=None) is None
        True
    """
    if len(payload) >= OFFLOAD_BYTES:
        return None
    value, _, _ = _packed(bytes(payload), key, tags, _check_extra(extra), compress)
    return value


def encode_inline(payload: bytes) -> dict[str, Any]:
    """The inline item value for ``payload``, whatever its size (no budget check).

    Example:
        >>> encode_inline(b"")
        {'v': 1, 'c': 'raw', 'd': '', 'k': '00000000'}
        >>> encode_inline(b"a" * 100)["c"]
        'z'
    """
    codec, stored = _pack(bytes(payload))
    return _inline_value(codec, payload, base64.b64encode(stored).decode("ascii"))


async def encode(
    payload: bytes,
    *,
    key: str,
    tags: Mapping[str, str] | None,
    extra: Mapping[str, str] | None,
    spill: SpillStore | None,
    namespace: NamespaceSource | None,
    where: str,
    compress: bool = True,
) -> dict[str, Any]:
    """Encode ``payload`` as the value of item ``key``, spilling it when it does not fit.

    Returns the inline value (plus ``extra``) when the create-request body fits
    :data:`INLINE_BUDGET`. Otherwise stores the (compressed when smaller) bytes in ``spill``
    under ``namespace`` first and returns a reference. The payload is compressed once (up to
    1 MB at a fast level, and again at level 6 only when that misses the budget), the blob is
    hashed once (by ``spill.put``, which returns the digest), and ``namespace``, when it is a
    coroutine function, is called only when the value spills. With ``compress=False`` an inline
    value is written ``"raw"`` (CRC-32 checked, no zlib pass) whenever the raw form fits the
    budget, for stores where the bytes travel nowhere; a payload that fits only compressed is
    encoded as usual. Every version reads both forms.

    Args:
        payload: The bytes to encode.
        key: The item key (its size counts towards the request budget).
        tags: The item's tags (counted too), or None.
        extra: String fields added to the value (counted too), or None.
        spill: Where a value that does not fit goes, or None.
        namespace: The spill namespace, or a coroutine function giving it, or None.
        where: What the item is, for error messages.
        compress: Whether to try zlib on a payload that fits inline raw.

    Returns:
        The item value: inline, or a reference to the stored blob.

    Raises:
        CheckpointTooLargeError: The value does not fit and no spill store (or namespace) is
            given, ``key``, ``tags`` and ``extra`` alone exceed the budget, or the payload is
            over :data:`MAX_PAYLOAD`; raised before anything is written.
        ValueError: An ``extra`` field clashes with the codec's own fields.

    Example:
        >>> import asyncio
        >>> value = asyncio.run(encode(b"x" * 10_000, key="k", tags={"t": "1"},
        ...                            extra={"id": "thread-1"}, spill=None, namespace=None,
        ...                            where="checkpoint 1"))
        >>> value["c"], value["id"]
        ('z', 'thread-1')
        >>> asyncio.run(encode(b"x" * 10_000, key="k", tags=None, extra=None, spill=None,
        ...                    namespace=None, where="checkpoint 1", compress=False))["c"]
        'raw'
    """
    payload = bytes(payload)
    fields = _check_extra(extra)
    if len(payload) > MAX_PAYLOAD:
        raise CheckpointTooLargeError(
            f"{where} is {len(payload):,} bytes once serialized, over the {MAX_PAYLOAD:,}-byte "
            "limit of one stored value. Keep large data outside the checkpointed state (store "
            "it elsewhere and keep a reference in the state). Nothing was written."
        )
    value, codec, stored = await offload(
        len(payload), lambda: _packed(payload, key, tags, fields, compress)
    )
    if value is not None:
        return value

    if spill is None or namespace is None:
        missing = "no spill store" if spill is None else "no spill namespace"
        inline_size = _request_size(key, {**_inline_value(codec, payload, ""), **fields}, tags)
        inline_size += _b64_len(len(stored))
        raise CheckpointTooLargeError(
            f"{where} is too large for one state-store item: the create request would be "
            f"{inline_size:,} bytes (payload {len(payload):,} bytes, {codec} encoded), over the "
            f"{INLINE_BUDGET:,}-byte budget (the store's {ITEM_LIMIT:,}-byte item limit), "
            f"and {missing} is configured. Fix: pass spill=AzureBlobSpill(...) (hosted mode) or "
            "spill=LocalSpill(...), or set FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING or "
            "FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL. Nothing was written."
        )

    reference: dict[str, Any] = {"v": FORMAT, "c": codec, "s": _SOME_DIGEST, "n": len(payload)}
    reference.update(fields)
    reference_size = _request_size(key, reference, tags)  # a digest has a fixed length
    if reference_size > INLINE_BUDGET:
        raise CheckpointTooLargeError(
            f"{where}: the item key, tags and extra fields alone need {reference_size:,} "
            f"bytes, over the {INLINE_BUDGET:,}-byte request budget. Shorten them. "
            "Nothing was written."
        )
    ns = namespace if isinstance(namespace, str) else await namespace()
    reference["s"] = await spill.put(ns, stored)
    return reference


def _corrupt(where: str, why: str) -> CorruptPayloadError:
    return CorruptPayloadError(
        f"{where} cannot be decoded: {why}. The stored value was changed or damaged outside "
        "foundry-checkpoint, or written by an incompatible version."
    )


def _inflate(where: str, data: bytes, limit: int, what: str) -> bytes:
    """Decompress one complete zlib stream of at most ``limit`` bytes (``what`` names it).

    Never produces more than ``limit + 1`` bytes: the stream is refused as soon as it exceeds.
    """
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit + 1)
        if len(out) > limit:
            raise _corrupt(where, f"the payload inflates beyond {what} ({limit:,} bytes)")
        if inflater.unconsumed_tail:  # cannot happen below the limit; never flush it unbounded
            raise _corrupt(where, "the zlib stream has input left past its end")
        out += inflater.flush()
    except zlib.error as exc:
        raise _corrupt(where, f"bad zlib data ({exc})") from None
    if not inflater.eof or inflater.unused_data or inflater.unconsumed_tail:
        raise _corrupt(where, "the zlib stream is truncated or followed by extra bytes")
    return out


async def decode(
    value: Mapping[str, Any],
    *,
    spill: SpillStore | None,
    namespace: str | None,
    where: str,
) -> bytes:
    """The payload an item value holds, fetching a spilled blob if referenced.

    A spilled blob is verified against its digest by ``spill.get`` (the one layer that
    verifies blobs); the codec then checks the decoded size.

    Args:
        value: The item value, as :func:`encode` returned it.
        spill: The spill store a reference is read from, or None.
        namespace: The spill namespace a reference is read from, or None.
        where: What the item is, for error messages.

    Returns:
        The payload.

    Raises:
        CorruptPayloadError: Unknown format or codec, bad base64 or zlib, a checksum, sha256
            or size mismatch; the message names ``where``.
        MissingBlobError: The blob is gone, or no spill store is configured to read a
            reference; the message names ``where``.

    Example:
        >>> import asyncio
        >>> asyncio.run(decode(encode_inline(b"abc"), spill=None, namespace=None, where="x"))
        b'abc'
    """
    if not isinstance(value, Mapping):
        raise _corrupt(where, f"the item value is a {type(value).__name__}, not an object")
    version = value.get("v")
    if type(version) is not int or version != FORMAT:
        raise _corrupt(where, f"unknown value format {version!r} (this version reads {FORMAT})")
    codec = value.get("c")
    if codec not in (_RAW, _ZLIB):
        raise _corrupt(where, f"unknown codec {codec!r}")

    if "d" in value:
        text = value["d"]
        if not isinstance(text, str):
            raise _corrupt(where, "the inline payload is not a string")
        try:
            stored = await offload(len(text), lambda: base64.b64decode(text, validate=True))
        except (binascii.Error, ValueError) as exc:
            raise _corrupt(where, f"bad base64 ({exc})") from None
        if codec == _ZLIB:
            return await offload(
                len(stored), lambda: _inflate(where, stored, INFLATE_LIMIT, "the inline limit")
            )
        check = value.get("k")
        if not isinstance(check, str) or not _CRC_RE.fullmatch(check):
            raise _corrupt(where, "the raw inline payload has no valid CRC-32 field")
        if _crc(stored) != check:
            raise _corrupt(where, "CRC-32 mismatch")
        return stored

    digest = value.get("s")
    size = value.get("n")
    if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
        raise _corrupt(where, "the value has neither an inline payload nor a valid blob digest")
    if type(size) is not int or size < 0:
        raise _corrupt(where, f"invalid payload size {size!r}")
    if size > MAX_PAYLOAD:
        raise _corrupt(
            where, f"its recorded size ({size:,} bytes) is over the {MAX_PAYLOAD:,}-byte limit"
        )
    if spill is None or namespace is None:
        raise MissingBlobError(
            f"{where} was spilled to blob {digest} ({size:,} bytes) because it exceeded the "
            "store's item limit, and no spill store is configured to read it. Configure the "
            "spill store it was written with (spill=AzureBlobSpill(...) / LocalSpill(...), or "
            "the FOUNDRY_CHECKPOINT_BLOB_* environment variables)."
        )
    try:
        stored = await spill.get(namespace, digest)
    except MissingBlobError as exc:
        raise MissingBlobError(f"{where}: {exc}") from exc
    except CorruptPayloadError as exc:
        raise CorruptPayloadError(f"{where}: {exc}") from exc
    if codec == _ZLIB:
        bound = inflate_bound(len(stored))
        if size <= len(stored) or size > bound:  # refused before inflating anything
            raise _corrupt(
                where,
                f"its recorded size ({size:,} bytes) is not what a {len(stored):,}-byte "
                f"compressed blob inflates to (more than {len(stored):,} and at most "
                f"{bound:,} bytes)",
            )
        payload = await offload(
            len(stored), lambda: _inflate(where, stored, size, "its recorded size")
        )
    else:
        payload = stored
    if len(payload) != size:
        raise _corrupt(where, f"spilled payload has {len(payload)} bytes, expected {size}")
    return payload


def spilled_digest(value: Mapping[str, Any]) -> str | None:
    """The sha256 of the blob ``value`` references, or None for inline (or foreign) values.

    Example:
        >>> spilled_digest({"v": 1, "c": "raw", "s": "0" * 64, "n": 3})
        '0000000000000000000000000000000000000000000000000000000000000000'
        >>> spilled_digest(encode_inline(b"abc")) is None
        True
    """
    if not isinstance(value, Mapping) or "d" in value:
        return None
    version = value.get("v")
    digest = value.get("s")
    if type(version) is not int or version != FORMAT or not isinstance(digest, str):
        return None
    return digest if _DIGEST_RE.fullmatch(digest) else None
