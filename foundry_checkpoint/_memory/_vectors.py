"""Semantic search for the memory store: embedding, packed vector pages, the query walk.

What is stored:

* **the item's own vectors**, in the memory item's value (``"vec"``: :func:`pack_vectors`,
  each path's vector as little-endian float64, base64): exact, so an item is self-contained and
  scores are computed from it exactly as ``InMemoryStore`` computes them (cosine, float64).
* **packed vector pages** (kind word ``v``): compact copies of many items' vectors of one
  namespace, for the query to score everything in few store calls. A page holds, per item, its
  key, a version (a digest of the item's exact vectors) and each vector as int8 with a
  per-vector scale ``a`` (the unit vector is ``a * q`` plus a residual) and the residual's norm
  ``r``, an exact bound of the quantisation error of any cosine computed from the page
  (Cauchy-Schwarz: ``|u.x - a q.x| <= ||u - a q||`` for a unit query ``x``). An item put without
  vectors (``index=False``, or no text at the fields) has an entry without rows: the query
  knows its scoreless items from the pages too. Tags: ``k``="v", ``p1``..``p8`` and ``n`` (the
  namespace's prefixes and the namespace itself, :func:`labels_tag`), ``b`` (the page's bucket).
* **buckets**: a page covers the item keys whose sha256 bits start with its bucket bits
  (``"r"`` + bits; the root bucket ``"r"`` covers every key). A page over :data:`PAGE_BUDGET`
  bytes splits into its two children, so the pages of a namespace form a prefix-free code and a
  key's page is found from one listing of the namespace's pages (tags only).
* **splits** with writers in other processes (no lock): the page is first **sealed** (rewritten
  as read, ``if_match`` its etag, with a split token in its value and its tag ``s``): a writer
  holding the old etag fails its compare-and-set and reads again, and a writer that reads or
  lists a sealed page changes nothing before it has finished that split itself. Then each
  child is created (never overwritten) from the sealed entries of its half, marked with the
  token (a child already there with it was made by another writer finishing the same split,
  and stands), and only then is the sealed page deleted. A sealed page never changes, so its
  children hold every entry it held, and no entry is ever only on a page that is deleted or
  rolled back (children are never deleted by a split). A child splits only once its parent is
  gone.

Costs (store calls):

* a put with vectors (or without, on an indexed store): list the namespace's pages (1 per 100
  pages), read the key's page (1), write it (1, ``if_match`` its etag; a lost race (412) reads
  and retries); a split writes the seal instead, then 2 creates and a delete (and a read of the
  parent's bucket below the root). A delete: the same. The page changes of
  one namespace and user are grouped per process: those that arrive while one is being written
  are applied together next (one listing, one read and write per page touched), so a batch of
  100 puts into one namespace writes its pages about 14 times, not 100. A put rewrites its
  whole page: up to :data:`PAGE_BUDGET` bytes (about 340 KB on average at 1536 dims).
* a query under a prefix: list the pages (tags ``k``, ``p{len(prefix)}``; 1 per 100 pages), read
  every page (concurrently), score every vector, then read the best candidates' items (one call
  each, concurrently) until the top ``offset + limit`` by exact score are known: the walk reads
  candidates in order of their upper bound ``approx + r`` and stops when the ``offset +
  limit``-th exact score among those read that pass the filter is at least the next
  candidate's bound. So the answer is exactly ``InMemoryStore``'s whenever the pages are current
  (recall 1.0), the item reads grow with ``offset + limit`` (and with what the filter rejects),
  and the page reads with the namespaces and the vectors under the prefix divided by a page's
  capacity (measured below). A prefix holding many small namespaces costs a page read per
  namespace. A prefix deeper than 8 labels lists by ``p8`` and skips the pages of other
  namespaces after reading them. An entry is checked against its item: the item read back is
  re-scored from its own vectors (an entry older than its item cannot misplace it), an item
  gone (deleted, expired) or failing the filter is dropped and the walk goes on.
* when fewer than ``offset + limit`` scored items pass the filter, ``InMemoryStore`` fills the
  page with items that have no vectors (its "scoreless" corner case, offset not applied): so do
  we, reading the scoreless entries of the pages until the page is full.

Measured (local mode, the embedded SQLite engine, one process, on 2 cores shared with other
work, so times vary by 2-4x between runs; 10,000 items in one namespace, one text field each;
20 queries, ``limit=10``; the deterministic hashing embedding of the tests (sparse), and at
1536 dims also a dense one (every word a Gaussian direction, as dense as a real model's
vectors); ``tests/memory/test_semantic.py::test_measured_on_10000_items``):

==========================  ==============  ==============  ================
                            dims 64         dims 1536       dims 1536 dense
==========================  ==============  ==============  ================
pages (bytes each: mean)    4 (328 KB)      61 (343 KB)     61 (343 KB)
largest page                334 KB          599 KB          599 KB
store calls per query       16.2            74.4            73.7
of which item reads         11.2            12.4            11.7
recall@10 vs InMemoryStore  1.00            1.00            1.00
ms per query: min, median   21, 63          133, 273        100, 135
ms per put's page update    11              21              11
==========================  ==============  ==============  ================

A query's calls are 1 listing + the pages + the item reads: they grow with the vectors under
the prefix divided by a page's capacity (a page splits at about 4,500 vectors of 64 dims or 290
of 1536 dims, so it holds half that on average), not with the items one for one. The item reads
stay near ``limit`` because the int8 error bounds are tight (``r`` about 0.008 for a dense
1536-dim vector, 0.004 for the sparse 64-dim ones) and the walk stops as soon as no unread
candidate's bound can beat the last kept exact score.

Crash safety: pages are hints written after the item. A crash between the item's write and
its page's leaves the page without the item's current vectors (a query misses it, or scores it
from the item exactly when an older entry names it), and a crash between a delete and the
page update leaves an entry whose item is gone (the query reads nothing and goes on). A split
interrupted after its seal leaves the sealed page (and perhaps one child) beside the others: a
query keeps each key's entry from the deepest page, and the next writer to the namespace sees
the seal in its listing and finishes the split. :meth:`VectorIndex.repair` rewrites a
namespace's pages from the items themselves and fixes all three.

Deviation from ``InMemoryStore`` (and ``SqliteStore``/``PostgresStore``): a put's vectors
replace the item's previous ones. Those stores keep the vectors of a path the new put does not
embed, so an item re-put with ``index=False`` (or with other fields) still matches its old text.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import math
import random
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import numpy as np
from azure.ai.agentserver.core.storage import (
    FoundryStorageConflictError,
    FoundryStorageNotFoundError,
    FoundryStoragePreconditionError,
)
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    IndexConfig,
    Item,
    PutOp,
    SearchItem,
    SearchOp,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)
from numpy.typing import NDArray

from foundry_checkpoint.adapter import MAX_PAGE, ItemKey, Scope, bounded, item_key
from foundry_checkpoint.errors import (
    ConcurrentWriteError,
    CorruptPayloadError,
    InvalidArgumentError,
)

__all__ = [
    "PAGE_BUDGET",
    "Readback",
    "VectorIndex",
    "labels_tag",
    "pack_vectors",
    "unpack_vectors",
    "vectors_version",
]

#: A page is split when its JSON grows past this many bytes (the item limit is 1,000,000).
PAGE_BUDGET: Final = 600_000
#: Namespace labels the tags can name (``p1``..``p8``).
TAGGED_DEPTH: Final = 8
#: Attempts of a page update that loses its compare-and-set race.
ATTEMPTS: Final = 10
#: Seconds: the n-th retry waits up to this times 2**n (random).
BACKOFF: Final = 0.005
#: Pages (and candidate items) read at once.
CONCURRENCY: Final = 16
#: Added to every stored error bound: the float64 rounding of the dot products themselves.
_EPSILON: Final = 1e-9
_ROOT: Final = "r"
_KIND: Final = "v"
_MAX_BITS: Final = 65  # "r" and the 64 bits of a key's digest
_SEAL: Final = "s"  # the tag (and value field) of a page being split: its split's token
_RACES: Final = (
    FoundryStoragePreconditionError,
    FoundryStorageConflictError,
    FoundryStorageNotFoundError,
)

Namespace: TypeAlias = tuple[str, ...]
#: What the store's ``read`` answers for one item: the item (TTL honoured) and its ``"vec"``
#: (:func:`pack_vectors`; None when it has none), or None when the item does not exist.
Readback: TypeAlias = tuple[Item, Mapping[str, str] | None] | None
Vectors: TypeAlias = dict[str, list[float]]


def labels_tag(labels: Sequence[str]) -> str:
    """The tag value naming a namespace prefix: its labels escaped, joined by ``/``.

    Injective (``/`` inside a label is escaped) and at most 128 characters (hashed beyond).

    Example:
        >>> labels_tag(("users", "a/b"))
        'users/a~2fb'
    """
    return item_key(*labels)


def pack_vectors(vectors: Mapping[str, Sequence[float]]) -> dict[str, str]:
    """An item's vectors as the JSON its value keeps (``"vec"``): base64 float64 per path.

    Exact: :func:`unpack_vectors` gives back the same floats.

    Example:
        >>> packed = pack_vectors({"text": [0.5, -1.0]})
        >>> packed
        {'text': 'AAAAAAAA4D8AAAAAAADwvw=='}
        >>> unpack_vectors(packed)
        {'text': [0.5, -1.0]}
    """
    return {
        path: base64.b64encode(np.asarray(vector, dtype="<f8").tobytes()).decode("ascii")
        for path, vector in vectors.items()
    }


def unpack_vectors(packed: Mapping[str, str]) -> Vectors:
    """The vectors :func:`pack_vectors` packed (a malformed entry: CorruptPayloadError).

    Example:
        >>> unpack_vectors({"a": pack_vectors({"a": [1.0]})["a"]})
        {'a': [1.0]}
    """
    return {path: _floats(text).tolist() for path, text in packed.items()}


def vectors_version(packed: Mapping[str, str] | None) -> str:
    """A short digest of an item's packed vectors: a page entry is current when its version is
    the item's (``""`` for an item without vectors).

    Example:
        >>> vectors_version(None), len(vectors_version(pack_vectors({"t": [1.0]})))
        ('', 10)
    """
    if not packed:
        return ""
    digest = hashlib.sha256(json.dumps(sorted(packed.items())).encode("utf-8"))
    return digest.hexdigest()[:10]


def _floats(text: str) -> NDArray[np.float64]:
    try:
        raw = base64.b64decode(text, validate=True)
        return np.frombuffer(raw, dtype="<f8").astype(np.float64)
    except (ValueError, TypeError) as exc:
        raise CorruptPayloadError(
            "a stored vector is not base64 float64: the item was changed outside this "
            "package; put the item again to re-embed it"
        ) from exc


def _key_bits(key: str) -> str:
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return _ROOT + "".join(f"{byte:08b}" for byte in digest[:8])


def _cosine(query: NDArray[np.float64], vectors: Sequence[NDArray[np.float64]]) -> float:
    """The largest cosine of ``query`` with ``vectors``, computed as InMemoryStore does."""
    matrix = np.array(vectors, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1)
    mask = norms != 0
    scores = np.zeros_like(norms)
    scores[mask] = np.dot(matrix[mask], query) / (norms[mask] * np.linalg.norm(query))
    return float(scores.max())


@dataclass
class _Row:
    path: str
    scale: float
    bound: float
    codes: bytes


@dataclass
class _Entry:
    version: str
    rows: list[_Row]


def _quantize(path: str, vector: Sequence[float] | NDArray[np.float64]) -> _Row:
    """One vector as int8 codes, scale and error bound (see the module docstring)."""
    values = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(values))
    if norm == 0.0 or not math.isfinite(norm):
        return _Row(path, 0.0, 0.0, bytes(len(values)))
    unit = values / norm
    scale = float(f"{float(np.abs(unit).max()) / 127:.7g}")
    codes = np.clip(np.rint(unit / scale), -127, 127).astype(np.int8)
    residual = float(np.linalg.norm(unit - scale * codes.astype(np.float64)))
    bound = float(f"{residual * 1.001 + _EPSILON:.4g}")
    while bound < residual + _EPSILON:  # the rounded bound never undercuts the error
        bound *= 1.001
    return _Row(path, scale, bound, codes.tobytes())


@dataclass
class _Page:
    """One vector page as read (or about to be written)."""

    namespace: Namespace
    bits: str
    dims: int | None
    entries: dict[str, _Entry] = field(default_factory=dict)
    etag: str | None = None
    #: The token of the split under way: the page is frozen (no writer changes it) until its
    #: children hold its entries and it is deleted.
    seal: str | None = None
    #: The token of the split that made this page (a child made from a sealed page).
    origin: str | None = None

    @property
    def store_key(self) -> str:
        return item_key(_KIND, *self.namespace, self.bits)

    def tags(self) -> dict[str, str]:
        tags = {"k": _KIND, "n": labels_tag(self.namespace), "b": self.bits}
        for depth in range(1, min(len(self.namespace), TAGGED_DEPTH) + 1):
            tags[f"p{depth}"] = labels_tag(self.namespace[:depth])
        if self.seal is not None:
            tags[_SEAL] = self.seal
        return tags

    def to_json(self) -> dict[str, Any]:
        paths: dict[str, int] = {}
        keys, versions, counts, fields_, scales, bounds = [], [], [], [], [], []
        blob = bytearray()
        for key, entry in self.entries.items():
            keys.append(key)
            versions.append(entry.version)
            counts.append(len(entry.rows))
            for row in entry.rows:
                fields_.append(paths.setdefault(row.path, len(paths)))
                scales.append(row.scale)
                bounds.append(row.bound)
                blob += row.codes
        value: dict[str, Any] = {
            "ns": list(self.namespace),
            "b": self.bits,
            "d": self.dims,
            "P": list(paths),
            "k": keys,
            "h": versions,
            "n": counts,
            "f": fields_,
            "a": scales,
            "r": bounds,
            "q": base64.b64encode(bytes(blob)).decode("ascii"),
        }
        if self.seal is not None:
            value[_SEAL] = self.seal
        if self.origin is not None:
            value["o"] = self.origin
        return value

    @classmethod
    def from_json(cls, value: Mapping[str, Any], etag: str | None) -> _Page:
        try:
            page = cls(tuple(value["ns"]), str(value["b"]), value["d"], etag=etag)
            seal, origin = value.get(_SEAL), value.get("o")
            if not isinstance(seal, str | None) or not isinstance(origin, str | None):
                raise TypeError("seal")
            page.seal, page.origin = seal, origin
            dims = int(value["d"] or 0)
            blob = base64.b64decode(value["q"], validate=True)
            paths, fields_ = value["P"], value["f"]
            row = 0
            for key, version, count in zip(value["k"], value["h"], value["n"], strict=True):
                rows = []
                for _ in range(count):
                    rows.append(
                        _Row(
                            paths[fields_[row]],
                            float(value["a"][row]),
                            float(value["r"][row]),
                            blob[row * dims : (row + 1) * dims],
                        )
                    )
                    row += 1
                page.entries[key] = _Entry(version, rows)
            return page
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise CorruptPayloadError(
                "a vector page of the memory store is malformed: it was changed outside this "
                "package; run the store's repair to rebuild it from the items"
            ) from exc


@dataclass
class _Candidate:
    namespace: Namespace
    key: str
    upper: float
    version: str


_Change: TypeAlias = "tuple[str, _Entry | None, asyncio.Future[None]]"


def _unapplied(namespace: Namespace) -> ConcurrentWriteError:
    return ConcurrentWriteError(
        f"the memory store's vector page of namespace {namespace!r} was not updated (the call "
        "writing it was cancelled); the item was written: put it again to index it"
    )


def _owned(key: str, buckets: Iterable[str]) -> bool:
    bits = _key_bits(key)
    return any(bits.startswith(b) for b in buckets)


def _search_tags(prefix: Namespace) -> dict[str, str]:
    """The tags that list the pages under ``prefix``; the kind tag last, since the embedded
    engine drives a listing from its first tag (as the memory store's own listings do)."""
    if not prefix:
        return {"k": _KIND}
    depth = min(len(prefix), TAGGED_DEPTH)
    return {f"p{depth}": labels_tag(prefix[:depth]), "k": _KIND}


class VectorIndex:
    """The semantic index of a memory store: embeds puts, keeps the vector pages, answers
    ``search(query=...)`` exactly as ``InMemoryStore`` does (see the module docstring).

    Args:
        config: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``; the default field
            ``"$"`` embeds the whole value).

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> index = VectorIndex({"dims": 8, "embed": DeterministicFakeEmbedding(size=8)})
        >>> index.dims, index.fields
        (8, [('$', '$')])
    """

    def __init__(self, config: IndexConfig) -> None:
        self.config = config
        self.dims = int(config["dims"])
        self.embeddings: Embeddings = ensure_embeddings(config.get("embed"))
        self._queued: dict[tuple[str, str, Namespace], list[_Change]] = {}
        self._draining: set[tuple[str, str, Namespace]] = set()
        self.fields: list[tuple[str, str | list[str]]] = [
            (path, tokenize_path(path)) if path != "$" else (path, path)
            for path in (config.get("fields") or ["$"])
        ]

    # -- puts ---------------------------------------------------------------------------------
    async def embed_puts(self, puts: Sequence[PutOp]) -> dict[tuple[Namespace, str], Vectors]:
        """The vectors of each put (path -> vector), all texts embedded in one call.

        Puts to the same (namespace, key): the last wins (as in a batch). Deletes are left
        out; a put with nothing to embed (``index=False``, no text at the fields) maps to
        ``{}`` (the item has no vectors). Paths as ``InMemoryStore`` names them: the field,
        or ``field.i`` for the i-th of several texts.

        Example:
            >>> from langchain_core.embeddings import DeterministicFakeEmbedding
            >>> index = VectorIndex({"dims": 4, "embed": DeterministicFakeEmbedding(size=4),
            ...                      "fields": ["text"]})
            >>> import asyncio
            >>> out = asyncio.run(index.embed_puts([PutOp(("a",), "k", {"text": "hi"})]))
            >>> list(out[("a",), "k"]), len(out[("a",), "k"]["text"])
            (['text'], 4)
        """
        last: dict[tuple[Namespace, str], PutOp] = {}
        for op in puts:
            last[(op.namespace, op.key)] = op
        out: dict[tuple[Namespace, str], Vectors] = {}
        texts: dict[str, list[tuple[tuple[Namespace, str], str]]] = {}
        for ident, op in last.items():
            if op.value is None:
                continue
            out[ident] = {}
            if op.index is False:
                continue
            paths = self.fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
            for path, tokens in paths:
                found = get_text_at_path(op.value, tokens)
                if len(found) > 1:
                    for i, text in enumerate(found):
                        texts.setdefault(text, []).append((ident, f"{path}.{i}"))
                elif found:
                    texts.setdefault(found[0], []).append((ident, path))
        if texts:
            embedded = await self.embeddings.aembed_documents(list(texts))
            if len(embedded) != len(texts):
                raise InvalidArgumentError(
                    f"the embeddings answered {len(embedded)} vectors for {len(texts)} texts; "
                    "check the index's embed function"
                )
            for vector, where in zip(embedded, texts.values(), strict=True):
                self._check_dims(vector)
                for ident, path in where:
                    out[ident][path] = list(vector)
        return out

    def _check_dims(self, vector: Sequence[float]) -> None:
        if len(vector) != self.dims:
            raise InvalidArgumentError(
                f"the embeddings answered a vector of {len(vector)} dimensions for an index of "
                f"dims={self.dims}; set index dims to the model's size"
            )

    async def upsert(self, scope: Scope, namespace: Namespace, key: str, vectors: Vectors) -> None:
        """Record the vectors of an item just put (``{}``: the item has none) in its page.

        Example:
            >>> VectorIndex.upsert.__name__
            'upsert'
        """
        for vector in vectors.values():
            self._check_dims(vector)
        packed = pack_vectors(vectors) if vectors else None
        entry = _Entry(vectors_version(packed), [_quantize(path, v) for path, v in vectors.items()])
        await self._update(scope, namespace, key, entry)

    async def remove(self, scope: Scope, namespace: Namespace, key: str) -> None:
        """Drop what the pages hold for an item deleted (or expired).

        Example:
            >>> VectorIndex.remove.__name__
            'remove'
        """
        await self._update(scope, namespace, key, None)

    async def _pages_of(self, scope: Scope, namespace: Namespace) -> list[ItemKey]:
        return await _list_all(scope, {"n": labels_tag(namespace), "k": _KIND})  # k last

    async def _update(
        self, scope: Scope, namespace: Namespace, key: str, entry: _Entry | None
    ) -> None:
        """Apply one entry change (None: drop it) to the namespace's pages.

        Changes to one namespace of one user are grouped: while one call writes the pages,
        the changes that arrive meanwhile queue up, and the next round applies them all with
        one listing and one read and write per page touched (a batch of 100 puts into a
        namespace costs a few page writes, not 100). Races with other processes are settled
        by the pages' etags (read again, retry with a random backoff).
        """
        ident = (scope.name, scope.user, namespace)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued.setdefault(ident, []).append((key, entry, done))
        if ident not in self._draining:
            self._draining.add(ident)
            try:
                while queued := self._queued.pop(ident, None):
                    changes = {k: e for k, e, _ in queued}  # the last change to a key wins
                    try:
                        await self._apply(scope, namespace, changes)
                    except Exception as exc:  # this round's callers get it; the next goes on
                        for _, _, future in queued:
                            if not future.done():
                                future.set_exception(exc)
                        continue
                    except BaseException:  # cancelled: this round's callers and the queue
                        for _, _, future in queued:
                            if not future.done():
                                future.set_exception(_unapplied(namespace))
                        raise
                    for _, _, future in queued:
                        if not future.done():
                            future.set_result(None)
            finally:
                self._draining.discard(ident)
                for _, _, future in self._queued.pop(ident, []):  # left by a cancelled round
                    if not future.done():
                        future.set_exception(_unapplied(namespace))
        await done

    async def _apply(
        self, scope: Scope, namespace: Namespace, changes: dict[str, _Entry | None]
    ) -> None:
        left = dict(changes)
        for attempt in range(ATTEMPTS):
            if attempt:
                await asyncio.sleep(random.uniform(0, BACKOFF * 2**attempt))
            listed = await self._pages_of(scope, namespace)
            for _ in range(ATTEMPTS):  # splits under way: finish them first, then list again
                sealed = [k for k in listed if (k.tags or {}).get(_SEAL)]
                if not sealed:
                    break
                await bounded((_finish_listed(scope, k) for k in sealed), CONCURRENCY)
                listed = await self._pages_of(scope, namespace)
            buckets = {str((k.tags or {}).get("b", "")): k for k in listed}
            known = set(buckets)
            groups: dict[str, dict[str, _Entry | None]] = {}
            for key, entry in left.items():
                bits = _key_bits(key)
                owners = [b for b in known if bits.startswith(b)]
                if owners:
                    groups.setdefault(max(owners, key=len), {})[key] = entry
                elif entry is not None:  # no page covers the key: a new one
                    bucket = _free_bucket(bits, known)
                    known.add(bucket)
                    groups.setdefault(bucket, {})[key] = entry
            applied = await bounded(
                (
                    self._apply_page(scope, namespace, bucket, buckets.get(bucket), group)
                    for bucket, group in groups.items()
                ),
                CONCURRENCY,
            )
            for ok, group in zip(applied, groups.values(), strict=True):
                if ok:
                    for key in group:
                        del left[key]
            left = {k: e for k, e in left.items() if e is not None or _owned(k, known)}
            if not left:
                return
        raise ConcurrentWriteError(
            f"the memory store's vector page of namespace {namespace!r} kept changing during "
            f"{ATTEMPTS} attempts; the item was written, run the store's repair or put it again "
            "to index it"
        )

    async def _apply_page(
        self,
        scope: Scope,
        namespace: Namespace,
        bucket: str,
        listed: ItemKey | None,
        changes: Mapping[str, _Entry | None],
    ) -> bool:
        """Apply ``changes`` to one page; False when it lost a race (the caller lists again)."""
        if listed is None:
            page = _Page(namespace, bucket, self.dims)
        else:
            stored = await scope.store.get_item(listed.key)
            if stored is None:
                return False  # split or repaired meanwhile
            page = _Page.from_json(stored.value, stored.etag)
            if page.seal is not None:  # being split (sealed after the listing): finish it
                await _finish_split(scope, page)
                return False
        if page.dims not in (None, self.dims) and any(e and e.rows for e in changes.values()):
            raise _dims_error(namespace, page.dims, self.dims)
        updated = _Page(namespace, page.bits, page.dims or self.dims, dict(page.entries), page.etag)
        updated.origin = page.origin
        changed = False
        for key, entry in changes.items():
            current = updated.entries.get(key)
            if entry is None:
                if current is not None:
                    del updated.entries[key]
                    changed = True
            elif current is None or current.version != entry.version:
                updated.entries[key] = entry
                changed = True
        if not changed:
            return True  # already current (a retried put): nothing to write
        try:
            return await _store(scope, page, updated)
        except _RACES:
            return False  # a concurrent update or split: read again

    # -- repair -------------------------------------------------------------------------------
    async def repair(
        self,
        scope: Scope,
        namespace: Namespace,
        items: Mapping[str, Mapping[str, str] | None],
    ) -> int:
        """Rewrite a namespace's pages from its items: missing entries added, stale ones
        replaced, entries of items gone dropped, pages left by an interrupted split removed.

        Args:
            scope: the memory store's scope.
            namespace: the namespace.
            items: every item of the namespace: key -> its ``"vec"`` (None: no vectors).

        Returns:
            How many entries changed.

        Example:
            >>> VectorIndex.repair.__name__
            'repair'
        """
        listed = await self._pages_of(scope, namespace)
        buckets = {str((k.tags or {}).get("b", "")): k for k in listed}
        shadowed = [b for b in buckets if any(o != b and o.startswith(b) for o in buckets)]
        changed = 0
        for bucket in shadowed:
            stored = await scope.store.get_item(buckets[bucket].key)
            if stored is not None:
                changed += len(_Page.from_json(stored.value, stored.etag).entries)
            await scope.store.delete_item(buckets[bucket].key)
            del buckets[bucket]
        wanted = {key: self._entry_of(vec) for key, vec in items.items()}
        placed: set[str] = set()
        unstored: dict[str, _Entry] = {}
        for bucket, listed_key in buckets.items():
            stored = await scope.store.get_item(listed_key.key)
            if stored is None:
                continue
            page = _Page.from_json(stored.value, stored.etag)
            mine = {k: e for k, e in wanted.items() if _key_bits(k).startswith(bucket)}
            placed.update(mine)
            before = {k: e.version for k, e in page.entries.items()}
            after = {k: e.version for k, e in mine.items()}
            diff = set(before.items()) ^ set(after.items())
            if not diff and page.seal is None:
                continue
            changed += len({k for k, _ in diff})
            rebuilt = _Page(namespace, page.bits, page.dims or self.dims, mine, page.etag)
            if not await _store(scope, page, rebuilt):  # a split under way: those go again
                unstored.update(mine)
        missing = {key: entry for key, entry in wanted.items() if key not in placed}
        missing.update(unstored)
        if missing and not buckets:  # a namespace without pages: build them at once
            root = _Page(namespace, _ROOT, self.dims, missing)
            await bounded((_create(scope, leaf) for leaf in _leaves(root)), CONCURRENCY)
            return changed + len(missing)
        if missing:
            await self._apply(scope, namespace, dict(missing))
        return changed + len(missing)

    def _entry_of(self, packed: Mapping[str, str] | None) -> _Entry:
        if not packed:
            return _Entry("", [])
        rows = [_quantize(path, _floats(text)) for path, text in packed.items()]
        return _Entry(vectors_version(packed), rows)

    # -- queries ------------------------------------------------------------------------------
    async def search(
        self,
        scope: Scope,
        op: SearchOp,
        read: Callable[[Namespace, str], Awaitable[Readback]],
        matches: Callable[[Item], bool],
    ) -> list[SearchItem]:
        """The results of ``op`` (which has a ``query``) as ``InMemoryStore`` gives them.

        Args:
            scope: the memory store's scope.
            op: the search (``namespace_prefix``, ``query``, ``offset``, ``limit``).
            read: one item and its packed vectors (one store call; TTL honoured), or None.
            matches: whether an item passes ``op.filter``.

        Returns:
            The page of results, best first (``score`` the exact cosine; None for the
            scoreless items that fill a short page).

        Example:
            >>> VectorIndex.search.__name__
            'search'
        """
        if not op.query:
            raise InvalidArgumentError("a semantic search needs a query; pass query=...")
        query = np.asarray(await self.embeddings.aembed_query(op.query), dtype=np.float64)
        prefix = tuple(op.namespace_prefix)
        listed = await _list_all(scope, _search_tags(prefix))
        stored = await bounded((scope.store.get_item(k.key) for k in listed), CONCURRENCY)
        pages: list[tuple[_Page, Mapping[str, Any]]] = []
        for got in stored:
            if got is None:
                continue
            namespace = tuple(got.value.get("ns") or ())
            if namespace[: len(prefix)] != prefix:
                continue
            pages.append((_Page(namespace, str(got.value.get("b", "")), None), got.value))
        candidates, scoreless = _score_pages(pages, query, self.dims)
        need = op.offset + op.limit
        if op.limit <= 0 or (not candidates and not scoreless):
            return []
        accepted: list[tuple[float, Item]] = []
        late_scoreless: list[Item] = []
        position, least = 0, 1
        while position < len(candidates):
            threshold = _kth(accepted, need)
            if len(accepted) >= need and candidates[position].upper <= threshold:
                break
            if len(accepted) < need:  # the filter rejected some: read more at once each round
                take = max(need - len(accepted), least)
                least *= 2
            else:
                take = sum(1 for c in candidates[position:] if c.upper > threshold)
            batch = candidates[position : position + max(take, 1)]
            position += len(batch)
            found = await bounded((read(c.namespace, c.key) for c in batch), CONCURRENCY)
            for readback in found:
                if readback is None:
                    continue  # deleted or expired since the page was written
                item, packed = readback
                if not matches(item):
                    continue
                if not packed:
                    late_scoreless.append(item)  # re-put without vectors, page not yet told
                    continue
                vectors = [_floats(text) for text in packed.values()]
                accepted.append((_cosine(query, vectors), item))
        accepted.sort(key=lambda pair: pair[0], reverse=True)
        kept: list[tuple[float | None, Item]] = list(accepted[op.offset : need])
        if len(kept) < op.limit:
            fill = op.limit - len(kept)
            kept.extend((None, item) for item in late_scoreless[:fill])
            rest = scoreless
            while len(kept) < op.limit and rest:
                chunk, rest = rest[: op.limit - len(kept)], rest[op.limit - len(kept) :]
                found = await bounded((read(ns, key) for ns, key in chunk), CONCURRENCY)
                for readback in found:
                    if readback is not None and not readback[1] and matches(readback[0]):
                        kept.append((None, readback[0]))
        return [
            SearchItem(
                namespace=item.namespace,
                key=item.key,
                value=item.value,
                created_at=item.created_at,
                updated_at=item.updated_at,
                score=score,
            )
            for score, item in kept[: op.limit]
        ]


def _dims_error(namespace: Namespace, stored: object, dims: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"the memory store's vectors of namespace {namespace!r} have {stored} dimensions, the "
        f"index dims={dims}; configure the dims the items were embedded with, or put them again "
        "under a new store_prefix"
    )


def _kth(accepted: list[tuple[float, Item]], need: int) -> float:
    if len(accepted) < need or need <= 0:
        return -math.inf
    return sorted((score for score, _ in accepted), reverse=True)[need - 1]


def _score_pages(
    pages: Iterable[tuple[_Page, Mapping[str, Any]]], query: NDArray[np.float64], dims: int
) -> tuple[list[_Candidate], list[tuple[Namespace, str]]]:
    """Every item of the pages with the upper bound of its score (best first), and the items
    without vectors. A key on several pages (an interrupted split) counts from the deepest."""
    norm = float(np.linalg.norm(query))
    unit = query / norm if norm else query
    unit32 = unit.astype(np.float32)
    slack = 2.0 * (dims + 1) * 2.0**-24
    best: dict[tuple[Namespace, str], tuple[int, _Candidate | None]] = {}
    for page, value in sorted(pages, key=lambda pv: len(pv[0].bits)):
        if value.get("d") not in (None, dims):
            raise _dims_error(page.namespace, value.get("d"), dims)
        try:
            keys, versions, counts = value["k"], value["h"], value["n"]
            blob = base64.b64decode(value["q"], validate=True)
            codes = np.frombuffer(blob, dtype=np.int8).reshape(-1, dims)
            scales = np.asarray(value["a"], dtype=np.float64)
            bounds = np.asarray(value["r"], dtype=np.float64)
            rows = int(sum(counts))
            if codes.shape[0] != rows or len(scales) != rows or len(bounds) != rows:
                raise ValueError("rows")
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptPayloadError(
                "a vector page of the memory store is malformed: it was changed outside this "
                "package; run the store's repair to rebuild it from the items"
            ) from exc
        # each entry's upper bound: the largest ``approx + r`` over its rows (max pooling)
        uppers: list[float] = []
        if rows:
            # float32 products: their rounding (at most dims * 2**-24 of ||a q|| ||x||, about
            # 1) is added to the bounds, so the upper bounds stay bounds
            dots = codes.astype(np.float32) @ unit32
            upper_rows = scales * dots.astype(np.float64) + (bounds + slack)
            sizes = np.asarray(counts, dtype=np.int64)
            starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))[sizes > 0]
            uppers = np.maximum.reduceat(upper_rows, starts).tolist()
        scored = iter(uppers)
        depth = len(page.bits)
        for key, version, count in zip(keys, versions, counts, strict=True):
            found = _Candidate(page.namespace, key, next(scored), version) if count else None
            best[(page.namespace, key)] = (depth, found)
    candidates = [c for _, c in best.values() if c is not None]
    candidates.sort(key=lambda c: c.upper, reverse=True)
    scoreless = [ident for ident, (_, c) in best.items() if c is None]
    return candidates, scoreless


def _free_bucket(bits: str, buckets: Iterable[str]) -> str:
    """The bucket for a key no page covers: one bit past its longest common prefix with the
    existing buckets (so the buckets stay prefix-free)."""
    longest = 0
    for bucket in buckets:
        common = 0
        for a, b in zip(bits, bucket, strict=False):
            if a != b:
                break
            common += 1
        longest = max(longest, common)
    return bits[: max(longest + 1, len(_ROOT))] if buckets else _ROOT


async def _list_all(scope: Scope, tags: Mapping[str, str]) -> list[ItemKey]:
    out: list[ItemKey] = []
    after: str | None = None
    while True:
        page = await scope.store.list_keys(tags=dict(tags), limit=MAX_PAGE, after=after)
        out.extend(page.keys)
        if not page.has_more or not page.keys:
            return out
        after = page.last_id


def _splits(page: _Page) -> bool:
    """Whether ``page`` is over :data:`PAGE_BUDGET` and can be split."""
    return len(page.entries) > 1 and len(page.bits) < _MAX_BITS and _size(page) > PAGE_BUDGET


async def _store(scope: Scope, read: _Page, page: _Page) -> bool:
    """Write ``page``, the new state of the page ``read`` (``if_match`` its etag; created when
    new, deleted when empty); split it when over budget.

    A split first seals the page as it was read (rewritten with a seal token, ``if_match``:
    from then on no writer changes it), then makes its two children, then deletes it (see
    :func:`_finish_split`). A new page over budget is created as its leaves.

    Returns:
        True when ``page``'s entries are all stored; False when the caller must list again
        and apply its changes to the pages as they now are.
    """
    if not _splits(page):
        value, tags = page.to_json(), page.tags()
        if page.etag is None:
            await scope.store.create_item(page.store_key, value, tags=tags)
        elif page.entries:
            await scope.store.set_item(page.store_key, value, tags=tags, if_match=page.etag)
        else:
            await scope.store.delete_item(page.store_key, if_match=page.etag)
        return True
    if page.etag is None:  # a new page: its leaves, none overwriting a page made meanwhile
        made = await bounded((_try_create(scope, leaf) for leaf in _leaves(page)), CONCURRENCY)
        return all(made)
    if read.origin is not None and len(read.bits) > 1 and not await _parent_gone(scope, read):
        return False
    sealed = _Page(page.namespace, read.bits, page.dims, dict(read.entries), read.etag)
    sealed.seal, sealed.origin = secrets.token_hex(8), read.origin
    ref = await scope.store.set_item(
        sealed.store_key, sealed.to_json(), tags=sealed.tags(), if_match=read.etag
    )
    sealed.etag = ref.etag
    return await _finish_split(scope, sealed, page.entries)


async def _parent_gone(scope: Scope, page: _Page) -> bool:
    """Whether the sealed page ``page`` was made from is gone (finishing it when it is not):
    a child is split only after its parent's split is over."""
    stored = await scope.store.get_item(item_key(_KIND, *page.namespace, page.bits[:-1]))
    if stored is None:
        return True
    parent = _Page.from_json(stored.value, stored.etag)
    if parent.seal != page.origin:
        return True  # another page at that bucket (the parent's bucket made anew)
    await _finish_split(scope, parent)
    return False


async def _try_create(scope: Scope, page: _Page) -> bool:
    try:
        await _create(scope, page)
    except FoundryStorageConflictError:
        return False
    return True


async def _finish_listed(scope: Scope, listed: ItemKey) -> None:
    """Finish the split of a page a listing shows sealed (any writer may: a split never waits
    for the writer that began it)."""
    stored = await scope.store.get_item(listed.key)
    if stored is not None:
        page = _Page.from_json(stored.value, stored.etag)
        if page.seal is not None:
            await _finish_split(scope, page)


async def _finish_split(
    scope: Scope, sealed: _Page, wanted: Mapping[str, _Entry] | None = None
) -> bool:
    """Finish the split of the sealed page ``sealed``: make its two children, then delete it.

    Each child is created (never overwritten) from the sealed entries of its half, or from
    ``wanted`` (the sealed entries with the splitting writer's changes) when they fit one page;
    the child records the split's token (``origin``). A child already there with that token
    was made by another writer finishing the same split: it stands (and it holds every entry
    of the sealed page's half, since the sealed page does not change). A child made otherwise
    (an older interrupted split) gets the sealed entries it lacks. The sealed page is deleted
    only when both children stand, so no entry is ever only on a page deleted; a writer that
    reads a sealed page finishes its split before it writes anything.

    Returns:
        True when the children hold ``wanted`` (False: the caller lists again and applies its
        changes to the children; also False when the split could not be finished yet).
    """
    token, depth = sealed.seal, len(sealed.bits)
    complete, empty = True, []
    try:
        for bit in "01":
            base = {k: e for k, e in sealed.entries.items() if _key_bits(k)[depth] == bit}
            mine = (
                base
                if wanted is None
                else {k: e for k, e in wanted.items() if _key_bits(k)[depth] == bit}
            )
            touched = {k: e.version for k, e in mine.items()} != {
                k: e.version for k, e in base.items()
            }
            if not base and not mine:
                continue
            child = _Page(sealed.namespace, sealed.bits + bit, sealed.dims, dict(mine))
            child.origin = token
            if touched and _splits(child):  # the changes do not fit: applied on the next round
                child.entries, complete = dict(base), False
            try:
                ref = await scope.store.create_item(
                    child.store_key, child.to_json(), tags=child.tags()
                )
            except FoundryStorageConflictError:
                pass
            else:
                if not child.entries:  # made empty so that no late finisher makes it from base
                    empty.append((child.store_key, ref.etag))
                continue
            complete = complete and not touched
            stored = await scope.store.get_item(child.store_key)
            if stored is None:
                return False  # made and deleted meanwhile: the next round makes it again
            there = _Page.from_json(stored.value, stored.etag)
            if there.origin == token:
                continue
            if there.seal is not None:  # a page left by an older split, being split itself
                await _finish_split(scope, there)
                return False
            merged = _Page(there.namespace, there.bits, there.dims or sealed.dims, etag=there.etag)
            merged.entries = {**base, **there.entries}  # the entries of the page there are newer
            merged.origin = token
            if not await _store(scope, there, merged):
                return False
        with contextlib.suppress(FoundryStorageNotFoundError):  # finished by another writer
            await scope.store.delete_item(sealed.store_key, if_match=sealed.etag)
        for key, etag in empty:
            with contextlib.suppress(*_RACES):  # written meanwhile: it stays
                await scope.store.delete_item(key, if_match=etag)
    except _RACES:
        return False
    return complete


def _size(page: _Page) -> int:
    return len(json.dumps(page.to_json(), separators=(",", ":")).encode("utf-8"))


def _children(page: _Page) -> list[_Page]:
    children = [_Page(page.namespace, page.bits + bit, page.dims) for bit in "01"]
    depth = len(page.bits)
    for key, entry in page.entries.items():
        children[int(_key_bits(key)[depth])].entries[key] = entry
    return children


def _leaves(page: _Page) -> list[_Page]:
    """``page`` split until every part fits :data:`PAGE_BUDGET` (empty parts left out)."""
    if len(page.entries) <= 1 or len(page.bits) >= _MAX_BITS or _size(page) <= PAGE_BUDGET:
        return [page] if page.entries else []
    return [leaf for child in _children(page) for leaf in _leaves(child)]


async def _create(scope: Scope, page: _Page) -> None:
    await scope.store.create_item(page.store_key, page.to_json(), tags=page.tags())
