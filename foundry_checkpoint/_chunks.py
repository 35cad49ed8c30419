"""Hosted mode's default spill: values over the item limit kept as chunk items of the scope's
own state store, so a hosted deployment needs no other Azure resource.

:class:`ChunkSpill` implements :class:`~foundry_checkpoint.spill.SpillStore` over the store of
one scope (one thread or context). A blob of ``n`` bytes becomes ``ceil(n / CHUNK_BYTES)``
items keyed by its sha256 and the chunk's index, ``m/k/<sha256>/<i>`` (the ``m/`` family the
core reserves for its own items), each value ``{"d": <base64 of the chunk>}``. Chunk 0, the
head, carries the tags ``kind=chunk``, ``nc`` (the chunk count) and ``sz`` (the blob's size);
the others carry none, so a listing by tag sees one entry per blob. Because the chunks live in
the scope's store they share everything the store gives its items: the caller's partition (the
calls carry the same request identity), the item TTL, and deletion with the store (deleting a
thread deletes its items, chunks included). Nothing needs cleaning up separately.

* **Writes** store every chunk (concurrently, head last) before ``put`` returns, so the item
  that references the blob (written after, as with any spill store) never points at chunks
  that were not stored. Keys are content addressed: writing the same blob again rewrites the
  same items (idempotent) and refreshes their TTL and modification time.
* **Reads** fetch the head, then the other chunks concurrently, and verify the whole blob
  against its sha256 (:class:`~foundry_checkpoint.errors.CorruptPayloadError` when it differs,
  :class:`~foundry_checkpoint.errors.MissingBlobError` when a chunk is gone).
* Each chunk's create request (key, base64 value and tags, as JSON) stays under the store's
  1,000,000-byte item limit: :data:`CHUNK_BYTES` bytes encode to 980,000 base64 characters.
* **TTL.** Chunks expire like any item. A value that live checkpoints still reference but no
  later write stores again (an unchanged LangGraph channel) is kept alive by :meth:`refresh`,
  which the scope's rate-limited TTL touch calls (one listing of the heads; only chunks older
  than half the TTL are written again).

The namespace a caller passes is validated as by every spill store but not part of the keys:
the store already belongs to one (user, scope). ``namespaces()`` answers nothing, since the
chunks of a scope are found through that scope only.

Example:
    >>> import asyncio
    >>> from foundry_checkpoint._store._embedded import EngineStore
    >>> from foundry_checkpoint._store._engine import StateEngine
    >>> async def demo() -> tuple[int, bool, int]:
    ...     store = await EngineStore.get_or_create(
    ...         StateEngine(), "s", user_isolation=True, item_ttl_seconds=-1)
    ...     chunks = ChunkSpill(lambda: store)
    ...     digest = await chunks.put("lg/ns", b"x" * (CHUNK_BYTES + 1))
    ...     back = await chunks.get("lg/ns", digest)
    ...     items = len((await store.list_keys(limit=100)).keys)
    ...     return items, back == b"x" * (CHUNK_BYTES + 1), await chunks.delete("lg/ns", [digest])
    >>> asyncio.run(demo())
    (2, True, 1)
"""

from __future__ import annotations

import base64
import binascii
import builtins
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from ._aio import bounded
from ._codec import MAX_PAYLOAD
from ._offload import offload
from ._store._listing import all_keys
from ._store._naming import item_key
from ._store._protocol import ItemKey, StateStoreLike
from .errors import CorruptPayloadError
from .spill._protocol import (
    DIGEST_RE,
    BlobInfo,
    blob_bytes,
    check_digest,
    check_namespace,
    missing_blob,
    sha256_hex,
    verified,
)

__all__ = ["CHUNK_BYTES", "CHUNK_KIND", "ChunkSpill", "chunk_key"]

CHUNK_BYTES: Final = 735_000
"""Bytes of one chunk: 980,000 base64 characters, which leaves the key, the tags and the JSON
envelope of the create request well inside the store's 1,000,000-byte item limit."""

CHUNK_KIND: Final = "chunk"
"""The ``kind`` tag of a blob's head chunk."""

_MAX_CHUNKS: Final = MAX_PAYLOAD // CHUNK_BYTES + 1
"""The most chunks a blob can have (a blob is at most the codec's 1 GiB payload limit)."""

_HEAD_TAGS: Final = {"kind": CHUNK_KIND}


def chunk_key(digest: str, index: int) -> str:
    """The item key of chunk ``index`` of the blob ``digest``.

    Example:
        >>> chunk_key("ab" * 32, 0) == "m/k/" + "ab" * 32 + "/0"
        True
    """
    return item_key("m", "k", digest, str(index))


def _corrupt(digest: str, where: str, why: str) -> CorruptPayloadError:
    return CorruptPayloadError(
        f"spilled blob {digest} in {where} is corrupt: {why}. It was changed or damaged "
        "outside foundry-checkpoint."
    )


def _count(tags: Mapping[str, str] | None, digest: str, where: str) -> int:
    """The chunk count a head's tags record, checked."""
    text = (tags or {}).get("nc", "")
    if not text.isdigit() or not 1 <= int(text) <= _MAX_CHUNKS:
        raise _corrupt(digest, where, f"its head records {text!r} chunks")
    return int(text)


class ChunkSpill:
    """A :class:`~foundry_checkpoint.spill.SpillStore` over one scope's own state store.

    Args:
        store: gives the scope's store client (called for each operation, so a client the
            core rebuilt is picked up).

    Example:
        >>> import asyncio
        >>> from foundry_checkpoint._store._embedded import EngineStore
        >>> from foundry_checkpoint._store._engine import StateEngine
        >>> async def demo() -> bytes:
        ...     store = await EngineStore.get_or_create(
        ...         StateEngine(), "s", user_isolation=True, item_ttl_seconds=-1)
        ...     chunks = ChunkSpill(lambda: store)
        ...     return await chunks.get("ns", await chunks.put("ns", b"abc"))
        >>> asyncio.run(demo())
        b'abc'
    """

    def __init__(self, store: Callable[[], StateStoreLike]) -> None:
        self._store = store

    @property
    def describe(self) -> str:
        """``chunks:<store name>``."""
        return f"chunks:{self._store().name}"

    async def put(self, namespace: str, data: bytes) -> str:
        """Store ``data`` as chunk items under its sha256 (head last); the digest."""
        check_namespace(namespace)
        data = blob_bytes(data)
        digest = await sha256_hex(data)
        store = self._store()
        count = max(1, -(-len(data) // CHUNK_BYTES))

        async def write(index: int) -> None:
            part = data[index * CHUNK_BYTES : (index + 1) * CHUNK_BYTES]
            text = await offload(len(part), lambda: base64.b64encode(part).decode("ascii"))
            tags = {**_HEAD_TAGS, "nc": str(count), "sz": str(len(data))} if index == 0 else None
            await store.set_item(chunk_key(digest, index), {"d": text}, tags=tags)

        await bounded(write(i) for i in range(1, count))
        await write(0)  # the head last: a head means every chunk was stored
        return digest

    async def get(self, namespace: str, digest: str) -> bytes:
        """The blob's bytes, from its chunks, verified against ``digest``."""
        check_namespace(namespace)
        check_digest(digest)
        store = self._store()
        where = "the scope's own store"
        head = await store.get_item(chunk_key(digest, 0))
        if head is None:
            raise missing_blob(namespace, digest, where)
        count = _count(head.tags, digest, where)

        async def read(index: int) -> bytes:
            item = head if index == 0 else await store.get_item(chunk_key(digest, index))
            if item is None:
                raise missing_blob(namespace, digest, where)
            text = item.value.get("d") if isinstance(item.value, Mapping) else None
            if not isinstance(text, str):
                raise _corrupt(digest, where, f"chunk {index} holds no base64 string")
            try:
                return await offload(len(text), lambda: base64.b64decode(text, validate=True))
            except (binascii.Error, ValueError) as exc:
                raise _corrupt(digest, where, f"chunk {index} has bad base64 ({exc})") from None

        parts = await bounded(read(i) for i in range(count))
        return await verified(namespace, digest, b"".join(parts), where)

    async def delete(self, namespace: str, digests: Iterable[str]) -> int:
        """Delete the chunks of the given blobs (head last); how many blobs existed."""
        check_namespace(namespace)
        wanted = sorted({check_digest(d) for d in digests})
        store = self._store()
        where = "the scope's own store"

        async def drop(digest: str) -> int:
            head = await store.get_item(chunk_key(digest, 0))
            if head is None:
                return 0
            count = _count(head.tags, digest, where)
            await bounded(store.delete_item(chunk_key(digest, i)) for i in range(1, count))
            await store.delete_item(chunk_key(digest, 0))
            return 1

        return sum(await bounded(drop(d) for d in wanted))

    async def delete_namespace(self, namespace: str) -> int:
        """Delete every blob stored in the scope's store; the count."""
        check_namespace(namespace)
        return await self.delete(namespace, [b.digest for b in await self.list(namespace)])

    async def list(self, namespace: str) -> builtins.list[BlobInfo]:
        """Every blob of the scope's store (one listing of the heads), sorted by digest."""
        check_namespace(namespace)
        heads = await all_keys(self._store(), _HEAD_TAGS)
        found = [info for key in heads if (info := _info(key)) is not None]
        return sorted(found)

    async def refresh(self, namespace: str, older_than: float) -> int:
        """Write again (same content: a new TTL) every blob last written before ``older_than``
        (epoch seconds); how many. Chunks that live items still reference stay as long as the
        items do, even when no later write stores the same value again.
        """
        store = self._store()
        where = "the scope's own store"
        stale = [b.digest for b in await self.list(namespace) if b.last_modified < older_than]

        async def again(digest: str) -> None:
            head = await store.get_item(chunk_key(digest, 0))
            if head is None:
                return
            count = _count(head.tags, digest, where)

            async def rewrite(index: int) -> None:
                item = head if index == 0 else await store.get_item(chunk_key(digest, index))
                if item is not None:
                    await store.set_item(chunk_key(digest, index), dict(item.value), tags=item.tags)

            await bounded(rewrite(i) for i in range(1, count))
            await rewrite(0)

        await bounded(again(d) for d in stale)
        return len(stale)

    async def namespaces(self) -> builtins.list[str]:
        """None: a scope's chunks are found through that scope, never listed globally."""
        return []

    async def aclose(self) -> None:
        """Nothing to release: the chunks use the scope's store client."""


def _info(key: ItemKey) -> BlobInfo | None:
    """The blob a head key names (None for a key that is not a head this module wrote)."""
    parts = key.key.split("/")
    tags = key.tags or {}
    size = tags.get("sz", "")
    if len(parts) != 4 or parts[:2] != ["m", "k"] or parts[3] != "0" or not size.isdigit():
        return None
    if not DIGEST_RE.fullmatch(parts[2]):
        return None
    return BlobInfo(digest=parts[2], size=int(size), last_modified=float(key.updated_at))
