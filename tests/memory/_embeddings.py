"""A deterministic fake embedding for the memory store's semantic-search tests.

:class:`HashingEmbeddings` hashes each lower-cased word (and each pair of neighbouring words)
into one of ``dims`` buckets with a sign, so texts sharing words get vectors with a high cosine,
texts sharing none get orthogonal-ish ones, and the same text always gets the same vector in
every process (sha256, not Python's salted ``hash``). It counts its calls, so a test can assert
how many embedding requests a batch of puts made. ``dense=True`` gives every word (and pair) a
pseudo-random Gaussian direction instead of one bucket, so vectors are dense as a real model's
are (the quantised pages' error bounds then matter).
"""

from __future__ import annotations

import hashlib
import itertools
import re

import numpy as np
from langchain_core.embeddings import Embeddings

_WORD = re.compile(r"[a-z0-9]+")


class HashingEmbeddings(Embeddings):
    """Bag of hashed words and word pairs, ``dims`` wide (not normalised).

    Example:
        >>> e = HashingEmbeddings(dims=16)
        >>> e.embed_query("red apple") == e.embed_documents(["Red apple"])[0]
        True
    """

    def __init__(self, dims: int = 64, *, dense: bool = False) -> None:
        self.dims = dims
        self.dense = dense
        self.document_calls = 0
        self.query_calls = 0
        self._directions: dict[str, list[float]] = {}

    def _direction(self, gram: str) -> list[float]:
        found = self._directions.get(gram)
        if found is None:
            seed = int.from_bytes(hashlib.sha256(gram.encode("utf-8")).digest()[:8], "little")
            found = np.random.default_rng(seed).standard_normal(self.dims).tolist()
            self._directions[gram] = found
        return found

    def _one(self, text: str) -> list[float]:
        words = _WORD.findall(text.lower())
        vector = [0.0] * self.dims
        grams = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        if self.dense:
            total = np.zeros(self.dims)
            for i, gram in enumerate(grams):
                total += np.asarray(self._direction(gram)) * (1.0 if i < len(words) else 0.5)
            return [float(x) for x in total]
        for i, gram in enumerate(grams):
            digest = hashlib.sha256(gram.encode("utf-8")).digest()
            slot = int.from_bytes(digest[:4], "little") % self.dims
            sign = 1.0 if digest[4] & 1 else -1.0
            vector[slot] += sign * (1.0 if i < len(words) else 0.5)
        return vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls += 1
        return [self._one(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return self._one(text)
