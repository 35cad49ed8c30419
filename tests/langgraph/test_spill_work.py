"""Each spilled value is compressed once and hashed once on write, and hashed once on read.

Counts the zlib and sha256 calls on large buffers (small ones are item keys and names) while a
3 MB value goes through the real path: a checkpoint's channel value (its own blob, stored as
it is) and a pending write (the whole item through the codec, compressed when smaller), with
LocalSpill and with AzureBlobSpill against Azurite.
"""

from __future__ import annotations

import hashlib
import random
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from foundry_checkpoint import AzureBlobSpill, FoundryCheckpointer, LocalSpill
from foundry_checkpoint.spill import SpillStore
from tests.langgraph._util import cfg

BIG = 3 * 1024 * 1024
LARGE = 64 * 1024  # buffers from this size on are payloads, not keys or names


class _Inflater:
    """A ``zlib.decompressobj`` that counts itself once it inflates a large input."""

    def __init__(self, counts: Counter[str], inner: Any) -> None:
        self._counts = counts
        self._inner = inner
        self._counted = False

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        if len(data) >= LARGE and not self._counted:
            self._counted = True
            self._counts["inflate"] += 1
        return bytes(self._inner.decompress(data, max_length))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Calls of zlib.compress, zlib.decompressobj and hashlib.sha256 on large buffers."""
    found: Counter[str] = Counter()
    compress, decompressobj, sha256 = zlib.compress, zlib.decompressobj, hashlib.sha256

    def counting_compress(data: bytes, /, *args: Any, **kwargs: Any) -> bytes:
        if len(data) >= LARGE:
            found["compress"] += 1
        return compress(data, *args, **kwargs)

    def counting_decompressobj(*args: Any, **kwargs: Any) -> _Inflater:
        return _Inflater(found, decompressobj(*args, **kwargs))

    def counting_sha256(data: bytes = b"", /, *args: Any, **kwargs: Any) -> Any:
        if len(data) >= LARGE:
            found["sha256"] += 1
        return sha256(data, *args, **kwargs)

    monkeypatch.setattr(zlib, "compress", counting_compress)
    monkeypatch.setattr(zlib, "decompressobj", counting_decompressobj)
    monkeypatch.setattr(hashlib, "sha256", counting_sha256)
    yield found


def _payload(kind: str) -> bytes:
    if kind == "incompressible":
        return random.Random(7).randbytes(BIG)
    return random.Random(8).randbytes(BIG // 2).hex().encode()  # halves, still over 1 MB


@pytest.fixture(params=["local", "azure"])
def make_spill(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], SpillStore]:
    """A factory of spill stores over one place (a reader gets a store of its own)."""
    if request.param == "local":
        return lambda: LocalSpill(tmp_path / "spill", fsync=False)
    azurite = request.getfixturevalue("azurite")
    container = f"w{uuid.uuid4().hex[:12]}"
    return lambda: AzureBlobSpill(
        connection_string=azurite.connection_string, container=container, retry_total=0
    )


@pytest.mark.parametrize("kind", ["incompressible", "compressible"])
def test_one_compression_and_one_hash_per_spilled_value(
    make_saver: Callable[..., FoundryCheckpointer],
    make_spill: Callable[[], SpillStore],
    counts: Counter[str],
    kind: str,
) -> None:
    big = _payload(kind)
    saver = make_saver(spill=make_spill())

    # A channel value over the per-channel threshold: its own blob, stored as it is.
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"big": big}
    checkpoint["channel_versions"] = {"big": 1}
    counts.clear()
    written = saver.put(cfg("channel"), checkpoint, {"source": "input", "step": -1}, {"big": 1})
    assert counts == {"sha256": 1}
    counts.clear()
    got = make_saver(spill=make_spill()).get_tuple(written)
    assert got is not None and got.checkpoint["channel_values"] == {"big": big}
    assert counts == {"sha256": 1}

    # A pending write: the whole item goes through the codec and spills.
    config = saver.put(cfg("writes"), empty_checkpoint(), {"source": "input", "step": -1}, {})
    counts.clear()
    saver.put_writes(config, [("big", big)], "task-1")
    assert counts == {"compress": 1, "sha256": 1}
    counts.clear()
    got = make_saver(spill=make_spill()).get_tuple(config)
    assert got is not None and got.pending_writes == [("task-1", "big", big)]
    assert counts == ({"sha256": 1} if kind == "incompressible" else {"sha256": 1, "inflate": 1})
