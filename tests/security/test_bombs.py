"""Decompression bombs: a small tampered item cannot make a reader allocate without bound.

An inline compressed item of under 700 KB that inflates to 512 MiB, a spilled blob that
inflates far past the size its reference records, and one whose reference records the whole
512 MiB (a ~1000:1 ratio the writer never produces) are planted behind the saver's back.
Reading raises ``CorruptPayloadError`` and the traced peak allocation stays under a fixed bound
(it was over 2.5 GiB when inline inflation was unbounded, and 512 MiB when a reference's size
was trusted). What the writer produces still reads back: a large payload that compresses better
than ``MAX_RATIO`` is spilled raw.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import random
import tracemalloc
import uuid
import zlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from foundry_checkpoint import (
    CheckpointTooLargeError,
    CorruptPayloadError,
    FoundryCheckpointer,
    LocalSpill,
    _codec,
)
from foundry_checkpoint._codec import INFLATE_LIMIT, MAX_PAYLOAD, MAX_RATIO, decode, encode
from foundry_checkpoint._langgraph._records import checkpoint_key
from tests.langgraph._util import cfg

_BOUND = 3 * INFLATE_LIMIT  # 48 MiB: the limit, one growth step of the output buffer, slack
_T = TypeVar("_T")


def _zeros_stream(mib: int) -> bytes:
    """A zlib stream of ``mib`` MiB of zeros, built without holding the zeros."""
    packer = zlib.compressobj(9)
    chunk = bytes(1 << 20)
    parts = [packer.compress(chunk) for _ in range(mib)]
    return b"".join([*parts, packer.flush()])


BOMB = _zeros_stream(512)


def _peak(call: Callable[[], _T]) -> tuple[_T | BaseException, int]:
    """``call()``'s result (or the exception it raised) and the traced peak allocation."""
    tracemalloc.start()
    try:
        result: _T | BaseException = call()
    except Exception as exc:
        result = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return result, peak


def test_the_bomb_is_small_and_large() -> None:
    assert len(BOMB) < 600_000
    assert INFLATE_LIMIT * 30 < 512 * (1 << 20)


def test_an_inline_bomb_is_refused_within_the_bound() -> None:
    value = {"v": 1, "c": "z", "d": base64.b64encode(BOMB).decode("ascii")}
    result, peak = _peak(lambda: asyncio.run(decode(value, spill=None, namespace=None, where="x")))
    assert isinstance(result, CorruptPayloadError), result
    assert "inflates beyond" in str(result)
    assert peak < _BOUND, peak


def test_a_payload_above_the_inflate_limit_is_spilled_not_inlined(tmp_path: Any) -> None:
    payload = bytes(INFLATE_LIMIT + 1)  # compresses to a few KB, still never inline
    spill = LocalSpill(tmp_path, fsync=False)
    namespace = "p/" + "0" * 32
    value = asyncio.run(
        encode(payload, key="k", tags=None, extra=None, spill=spill, namespace=namespace, where="x")
    )
    assert "d" not in value and value["n"] == len(payload)
    assert asyncio.run(decode(value, spill=spill, namespace=namespace, where="x")) == payload


def _plant(
    env: Any,
    change: Callable[[Any, dict[str, Any]], dict[str, Any] | Awaitable[dict[str, Any]]],
) -> None:
    """One checkpoint on thread ``t1``, its item value then replaced by ``change(scope, value)``."""
    with FoundryCheckpointer(**env.kwargs(spill=LocalSpill(env.root / "spill"))) as saver:
        checkpoint = empty_checkpoint()
        config = saver.put(cfg("t1"), checkpoint, {"source": "loop", "step": 1}, {})
        key = checkpoint_key("", config["configurable"]["checkpoint_id"])

        async def go() -> None:
            scope = await saver._core.scope("t1")
            item = await scope.store.get_item(key)
            assert item is not None
            new = await _maybe(change(scope, dict(item.value)))
            await scope.store.set_item(key, new, tags=dict(item.tags or {}))

        saver._core.run(go())


async def _maybe(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) else value


def _read_peak(env: Any) -> tuple[object, int]:
    with FoundryCheckpointer(**env.kwargs(spill=LocalSpill(env.root / "spill"))) as reader:
        return _peak(lambda: reader.get_tuple(cfg("t1")))


def test_an_inline_bomb_in_the_store(store_env: Any) -> None:
    bomb = {"v": 1, "c": "z", "d": base64.b64encode(BOMB).decode("ascii")}
    _plant(store_env, lambda scope, value: bomb)
    result, peak = _read_peak(store_env)
    assert isinstance(result, CorruptPayloadError), result
    assert peak < _BOUND, peak


def test_a_spilled_bomb_is_bounded_by_its_recorded_size(store_env: Any) -> None:
    digest = hashlib.sha256(BOMB).hexdigest()

    async def change(scope: Any, value: dict[str, Any]) -> dict[str, Any]:
        namespace = await scope.namespace(create=True)
        spill = LocalSpill(store_env.root / "spill")
        await spill.put(namespace, BOMB)
        return {"v": 1, "c": "z", "s": digest, "n": 1000}

    _plant(store_env, change)
    result, peak = _read_peak(store_env)
    assert isinstance(result, CorruptPayloadError), result
    assert "recorded size" in str(result)
    assert peak < 8 * len(BOMB), peak  # the blob itself, a copy or two; never the inflation


def test_a_spilled_bomb_recording_its_whole_size_is_refused_before_inflating(
    store_env: Any,
) -> None:
    digest = hashlib.sha256(BOMB).hexdigest()

    async def change(scope: Any, value: dict[str, Any]) -> dict[str, Any]:
        namespace = await scope.namespace(create=True)
        await LocalSpill(store_env.root / "spill").put(namespace, BOMB)
        return {"v": 1, "c": "z", "s": digest, "n": 512 << 20}  # the truth, at ~1000:1

    _plant(store_env, change)
    result, peak = _read_peak(store_env)
    assert isinstance(result, CorruptPayloadError), result
    assert "recorded size" in str(result) and "at most" in str(result)
    assert peak < 8 * len(BOMB), peak  # never the inflation


def _spill(tmp_path: Any) -> tuple[LocalSpill, str]:
    return LocalSpill(tmp_path, fsync=False), "p/" + "0" * 32


def test_a_reference_over_the_payload_limit_is_refused(tmp_path: Any) -> None:
    spill, namespace = _spill(tmp_path)
    digest = asyncio.run(spill.put(namespace, b"abc"))
    for codec in ("raw", "z"):
        value = {"v": 1, "c": codec, "s": digest, "n": MAX_PAYLOAD + 1}
        with pytest.raises(CorruptPayloadError, match="over the 1,073,741,824-byte limit"):
            asyncio.run(decode(value, spill=spill, namespace=namespace, where="x"))


def test_a_compressed_blob_must_be_smaller_than_its_payload(tmp_path: Any) -> None:
    spill, namespace = _spill(tmp_path)
    stream = zlib.compress(b"abc")  # longer than the 3 bytes it holds: never written as "z"
    digest = asyncio.run(spill.put(namespace, stream))
    value = {"v": 1, "c": "z", "s": digest, "n": 3}
    with pytest.raises(CorruptPayloadError, match="recorded size"):
        asyncio.run(decode(value, spill=spill, namespace=namespace, where="x"))


def test_what_the_writer_spills_reads_back_within_the_ratio(tmp_path: Any) -> None:
    spill, namespace = _spill(tmp_path)
    zeros = bytes(INFLATE_LIMIT + 1)  # compresses ~1000:1: spilled raw
    text = random.Random(7).randbytes(INFLATE_LIMIT // 2 + 1).hex().encode()  # about 2:1
    for payload, codec in ((zeros, "raw"), (text, "z")):
        value = asyncio.run(
            encode(payload, key="k", tags=None, extra=None, spill=spill, namespace=namespace,
                   where="x")
        )  # fmt: skip
        assert "d" not in value and value["c"] == codec and value["n"] == len(payload)
        blob = asyncio.run(spill.get(namespace, value["s"]))
        assert len(payload) <= max(INFLATE_LIMIT, MAX_RATIO * len(blob))
        assert asyncio.run(decode(value, spill=spill, namespace=namespace, where="x")) == payload


def test_a_payload_over_the_limit_is_refused_when_written(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_codec, "MAX_PAYLOAD", 1000)  # the same check, without a 1 GiB buffer
    spill, namespace = _spill(tmp_path)
    with pytest.raises(CheckpointTooLargeError, match="Nothing was written"):
        asyncio.run(
            encode(bytes(1001), key="k", tags=None, extra=None, spill=spill, namespace=namespace,
                   where="x")
        )  # fmt: skip
    assert asyncio.run(spill.list(namespace)) == []


async def test_a_gzip_encoded_blob_is_never_inflated_on_download(azurite: Any) -> None:
    """A blob planted in the container with ``Content-Encoding: gzip`` (this store sets none)
    and named by the sha256 of what it inflates to: the download does not inflate it (azure's
    client would, without bound, and the digest would then match), so it is refused as corrupt
    with memory bounded by the stored bytes."""
    from azure.storage.blob import ContentSettings
    from azure.storage.blob.aio import BlobServiceClient

    from foundry_checkpoint.spill import AzureBlobSpill

    container = f"bombs{uuid.uuid4().hex[:12]}"
    inflated = 512 << 20
    digest = hashlib.sha256(bytes(inflated)).hexdigest()
    packed = _gzip_zeros(512)
    namespace = "p/" + "0" * 32
    direct = BlobServiceClient.from_connection_string(azurite.connection_string, retry_total=0)
    spill = AzureBlobSpill(
        connection_string=azurite.connection_string, container=container, prefix="fc",
        retry_total=0, create_container=True,
    )  # fmt: skip
    try:
        blobs = direct.get_container_client(container)
        await blobs.create_container()
        await blobs.upload_blob(
            f"fc/{namespace}/{digest}", packed,
            content_settings=ContentSettings(content_encoding="gzip"),
        )  # fmt: skip
        tracemalloc.start()
        try:
            with pytest.raises(CorruptPayloadError, match="hashes to"):
                await spill.get(namespace, digest)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 16 * len(packed) + (8 << 20), peak  # the stored bytes, never 512 MiB
        reference = {"v": 1, "c": "raw", "s": digest, "n": inflated}
        with pytest.raises(CorruptPayloadError):
            await decode(reference, spill=spill, namespace=namespace, where="x")
    finally:
        await spill.aclose()
        await direct.close()


def _gzip_zeros(mib: int) -> bytes:
    """A gzip stream of ``mib`` MiB of zeros, built without holding the zeros."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: the gzip container
    chunk = bytes(1 << 20)
    parts = [packer.compress(chunk) for _ in range(mib)]
    return b"".join([*parts, packer.flush()])
