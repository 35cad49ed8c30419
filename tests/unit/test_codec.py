"""The item codec: round trips, the exact inline budget, spill ordering, integrity errors."""

from __future__ import annotations

import base64
import builtins
import hashlib
import json
import os
import random
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from azure.ai.agentserver.core.storage._state_serializer import serialize_item_create_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from foundry_checkpoint._codec import (
    FORMAT,
    INLINE_BUDGET,
    ITEM_LIMIT,
    decode,
    encode,
    encode_inline,
    spilled_digest,
)
from foundry_checkpoint.errors import (
    CheckpointTooLargeError,
    CorruptPayloadError,
    MissingBlobError,
)
from foundry_checkpoint.spill import BlobInfo, LocalSpill

NS = "lg/3f2a9c"
KEY = "checkpoint:0001"
MB = 1024 * 1024


def _random(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def _text(size: int) -> bytes:
    line = b"The quick brown fox jumps over the lazy dog; checkpoint state follows.\n"
    return (line * (size // len(line) + 1))[:size]


def _request_bytes(key: str, value: dict[str, Any], tags: dict[str, str] | None) -> int:
    """Size of the body the SDK itself would send to create this item."""
    return len(serialize_item_create_request(key, value, tags))


def _assert_flat(value: dict[str, Any]) -> None:
    assert all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value.values())


class RecordingSpill:
    """A LocalSpill wrapper that records calls (and can fail puts on demand)."""

    def __init__(self, directory: Path) -> None:
        self.inner = LocalSpill(directory, fsync=False)
        self.puts: list[tuple[str, str, int]] = []
        self.fail_puts = False

    @property
    def describe(self) -> str:
        return "recording:" + self.inner.describe

    async def put(self, namespace: str, data: bytes) -> str:
        if self.fail_puts:
            raise OSError("injected: blob upload failed")
        digest = await self.inner.put(namespace, data)
        self.puts.append((namespace, digest, len(data)))
        return digest

    async def get(self, namespace: str, digest: str) -> bytes:
        return await self.inner.get(namespace, digest)

    async def delete(self, namespace: str, digests: Iterable[str]) -> int:
        return await self.inner.delete(namespace, digests)

    async def delete_namespace(self, namespace: str) -> int:
        return await self.inner.delete_namespace(namespace)

    async def list(self, namespace: str) -> list[BlobInfo]:
        return await self.inner.list(namespace)

    async def namespaces(self) -> builtins.list[str]:
        return await self.inner.namespaces()

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def spill(tmp_path: Path) -> RecordingSpill:
    return RecordingSpill(tmp_path / "spill")


async def _roundtrip(
    payload: bytes,
    spill: RecordingSpill | None,
    *,
    key: str = KEY,
    tags: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    value = await encode(
        payload, key=key, tags=tags, extra=extra, spill=spill, namespace=NS, where="test item"
    )
    _assert_flat(value)
    assert value["v"] == FORMAT
    body = _request_bytes(key, value, tags)
    assert body <= INLINE_BUDGET <= ITEM_LIMIT
    assert await decode(value, spill=spill, namespace=NS, where="test item") == payload
    return value


async def _spill_encode(payload: bytes, spill: RecordingSpill, key: str = KEY) -> dict[str, Any]:
    return await encode(
        payload, key=key, tags=None, extra=None, spill=spill, namespace=NS, where="x"
    )


# -- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "kind", "form", "codec"),
    [
        (0, "random", "inline", "raw"),
        (1, "random", "inline", "raw"),
        (100_000, "random", "inline", "raw"),
        (100_000, "text", "inline", "z"),
        (2 * MB, "random", "spill", "raw"),
        (2 * MB, "text", "inline", "z"),
        (50 * MB, "random", "spill", "raw"),
        (16 * MB, "text", "inline", "z"),  # compresses far below the budget: stays inline
        (50 * MB, "text", "spill", "raw"),  # inflates past INFLATE_LIMIT at ~300:1: spilled raw
        (8 * MB, "hex", "spill", "z"),  # compressible, but not enough to fit: spills compressed
    ],
)
async def test_round_trip_sizes(
    spill: RecordingSpill, size: int, kind: str, form: str, codec: str
) -> None:
    if kind == "random":
        payload = _random(size)
    elif kind == "text":
        payload = _text(size)
    else:
        payload = _random(size // 2).hex().encode()
    value = await _roundtrip(payload, spill)
    assert ("d" in value, "s" in value) == (form == "inline", form == "spill")
    assert value["c"] == codec
    if form == "spill":
        assert value["n"] == size
        assert [p[1] for p in spill.puts] == [value["s"]]
        assert spilled_digest(value) == value["s"]
        stored_size = spill.puts[0][2]
        assert stored_size < size if codec == "z" else stored_size == size
    else:
        assert spill.puts == []
        assert spilled_digest(value) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=st.binary(max_size=4096))
async def test_small_payloads_round_trip_inline(payload: bytes) -> None:
    value = await _roundtrip(payload, None)
    assert "d" in value
    assert value == encode_inline(payload)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.integers(min_value=0, max_value=3 * MB),
    seed=st.integers(min_value=0, max_value=2**32),
    repeat=st.sampled_from([1, 7, 1000]),
)
async def test_random_payloads_round_trip(
    tmp_path_factory: pytest.TempPathFactory, size: int, seed: int, repeat: int
) -> None:
    # `repeat` makes the payload more or less compressible.
    chunk = _random(max(1, size // repeat), seed)
    payload = (chunk * repeat)[:size]
    spill = RecordingSpill(tmp_path_factory.mktemp("spill"))
    value = await _roundtrip(payload, spill)
    assert ("s" in value) == bool(spill.puts)


# -- the exact budget --------------------------------------------------------------------------


def _largest_inline_random(key: str, tags: dict[str, str] | None, extra: dict[str, str]) -> int:
    """Largest incompressible payload whose inline create request fits the budget (per the SDK)."""

    def fits(n: int) -> bool:
        value = {**encode_inline(_random(n, 1)), **extra}
        return _request_bytes(key, value, tags) <= INLINE_BUDGET

    lo, hi = 0, INLINE_BUDGET
    while lo < hi:  # binary search for the last n that fits
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


@pytest.mark.parametrize(
    ("key", "tags", "extra"),
    [
        (KEY, None, {}),
        ('k\u00e9y "quoted" \\ \u2603', {"thread": "t-1", "ns": "caf\u00e9"}, {"id": "x" * 300}),
    ],
)
async def test_spill_happens_exactly_at_the_budget(
    spill: RecordingSpill, key: str, tags: dict[str, str] | None, extra: dict[str, str]
) -> None:
    n = _largest_inline_random(key, tags, extra)
    under = _random(n, 1)
    over = _random(n + 1, 1)

    inline = await encode(
        under, key=key, tags=tags, extra=extra, spill=spill, namespace=NS, where="under"
    )
    assert "d" in inline and spill.puts == []
    assert _request_bytes(key, inline, tags) <= INLINE_BUDGET

    spilled = await encode(
        over, key=key, tags=tags, extra=extra, spill=spill, namespace=NS, where="over"
    )
    assert "s" in spilled and len(spill.puts) == 1
    assert _request_bytes(key, {**encode_inline(over), **extra}, tags) > INLINE_BUDGET
    for value, payload in ((inline, under), (spilled, over)):
        assert {k: value[k] for k in extra} == extra
        assert await decode(value, spill=spill, namespace=NS, where="x") == payload


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    key=st.text(min_size=1, max_size=128),
    tags=st.none()
    | st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=40), max_size=4),
    delta=st.integers(min_value=-2000, max_value=2000),
)
async def test_inline_exactly_when_the_sdk_body_fits(
    tmp_path_factory: pytest.TempPathFactory,
    key: str,
    tags: dict[str, str] | None,
    delta: int,
) -> None:
    # Near the boundary for an ASCII key, with keys and tags that JSON escapes differently.
    payload = _random(INLINE_BUDGET * 3 // 4 + delta, 2)
    spill = RecordingSpill(tmp_path_factory.mktemp("spill"))
    value = await encode(
        payload, key=key, tags=tags, extra=None, spill=spill, namespace=NS, where="x"
    )
    fits = _request_bytes(key, encode_inline(payload), tags) <= INLINE_BUDGET
    assert ("d" in value) == fits
    assert _request_bytes(key, value, tags) <= INLINE_BUDGET


@pytest.mark.parametrize(
    ("size", "kind", "codec"),
    [
        (0, "text", "raw"),
        (10_000, "text", "raw"),  # compressible, but fits raw: no zlib pass
        (700_000, "random", "raw"),
        (900_000, "text", "z"),  # fits only compressed: compressed as usual
    ],
)
async def test_uncompressed_inline_form(size: int, kind: str, codec: str) -> None:
    payload = _text(size) if kind == "text" else _random(size)
    value = await encode(
        payload,
        key=KEY,
        tags={"kind": "c"},
        extra={"id": "t"},
        spill=None,
        namespace=None,
        where="x",
        compress=False,
    )
    assert "d" in value and value["c"] == codec and value["id"] == "t"
    if codec == "raw":
        # The form every version writes for an incompressible payload, so every version reads it.
        assert value == {
            "v": FORMAT,
            "c": "raw",
            "d": base64.b64encode(payload).decode("ascii"),
            "k": f"{zlib.crc32(payload):08x}",
            "id": "t",
        }
    assert _request_bytes(KEY, value, {"kind": "c"}) <= INLINE_BUDGET
    assert await decode(value, spill=None, namespace=None, where="x") == payload


async def test_uncompressed_raw_value_is_checked() -> None:
    value = await encode(
        _text(5000),
        key=KEY,
        tags=None,
        extra=None,
        spill=None,
        namespace=None,
        where="x",
        compress=False,
    )
    data = bytearray(base64.b64decode(value["d"]))
    data[100] ^= 1
    with pytest.raises(CorruptPayloadError, match="CRC-32 mismatch"):
        await decode(
            {**value, "d": base64.b64encode(bytes(data)).decode()},
            spill=None,
            namespace=None,
            where="x",
        )


async def test_uncompressed_too_large_still_spills(spill: RecordingSpill) -> None:
    payload = _random(2 * MB)
    value = await encode(
        payload,
        key=KEY,
        tags=None,
        extra=None,
        spill=spill,
        namespace=NS,
        where="x",
        compress=False,
    )
    assert "s" in value and len(spill.puts) == 1
    assert await decode(value, spill=spill, namespace=NS, where="x") == payload


# -- spilling: ordering, failures, dedupe ------------------------------------------------------


async def test_blob_is_written_before_the_item(spill: RecordingSpill) -> None:
    items: dict[str, dict[str, Any]] = {}
    payload = _random(3 * MB)

    async def write_item(key: str, value: dict[str, Any]) -> None:
        # At the moment the item is written its blob is already stored and readable.
        digest = spilled_digest(value)
        assert digest is not None
        assert await spill.inner.get(NS, digest)
        items[key] = value

    value = await _spill_encode(payload, spill)
    await write_item(KEY, value)
    assert await decode(items[KEY], spill=spill, namespace=NS, where="x") == payload


async def test_failure_between_upload_and_item_write_leaves_no_dangling_item(
    spill: RecordingSpill,
) -> None:
    items: dict[str, dict[str, Any]] = {}

    async def write_item(key: str, value: dict[str, Any]) -> None:
        raise ConnectionError("injected: the item write failed")

    payload = _random(3 * MB)
    value = await _spill_encode(payload, spill)
    with pytest.raises(ConnectionError):
        await write_item(KEY, value)
    assert items == {}  # no item at all, so none that points at a missing blob
    digest = hashlib.sha256(payload).hexdigest()  # raw codec: blob digest == payload digest
    assert [info.digest for info in await spill.list(NS)] == [digest]  # an orphan for gc


async def test_failed_upload_raises_before_any_item(spill: RecordingSpill) -> None:
    spill.fail_puts = True
    with pytest.raises(OSError, match="injected"):
        await _spill_encode(_random(3 * MB), spill)
    assert await spill.list(NS) == []


@pytest.mark.parametrize("with_spill", [False, True])
async def test_too_large_without_spill_store(spill: RecordingSpill, with_spill: bool) -> None:
    with pytest.raises(CheckpointTooLargeError) as excinfo:
        await encode(
            _random(2 * MB),
            key=KEY,
            tags=None,
            extra=None,
            spill=spill if with_spill else None,
            namespace=None,
            where="checkpoint 'c1' of thread 't1'",
        )
    message = str(excinfo.value)
    assert "checkpoint 'c1' of thread 't1'" in message
    assert "AzureBlobSpill" in message and "LocalSpill" in message
    assert "Nothing was written" in message
    assert spill.puts == [] and await spill.namespaces() == []


async def test_huge_extra_fields_are_refused_before_upload(spill: RecordingSpill) -> None:
    with pytest.raises(CheckpointTooLargeError, match="extra fields"):
        await encode(
            _random(2 * MB),
            key=KEY,
            tags=None,
            extra={"id": "x" * INLINE_BUDGET},
            spill=spill,
            namespace=NS,
            where="x",
        )
    assert spill.puts == []


async def test_extra_fields_must_not_clash() -> None:
    with pytest.raises(ValueError, match="clash"):
        await encode(
            b"x", key=KEY, tags=None, extra={"d": "x"}, spill=None, namespace=None, where="x"
        )


async def test_same_content_is_stored_once_and_refreshed(spill: RecordingSpill) -> None:
    payload = _random(3 * MB)
    first = await _spill_encode(payload, spill, key="a")
    (path,) = [p for p in spill.inner.directory.rglob("*") if p.is_file()]
    inode = path.stat().st_ino
    os.utime(path, (1_000_000_000, 1_000_000_000))  # make it look old (2001)

    second = await _spill_encode(payload, spill, key="b")
    assert first == second
    assert [p for p in spill.inner.directory.rglob("*") if p.is_file()] == [path]
    assert path.stat().st_ino == inode  # not rewritten...
    (info,) = await spill.list(NS)
    assert info.last_modified > 1_000_000_000 + 86_400  # ...but its mtime was refreshed


# -- integrity ---------------------------------------------------------------------------------


async def test_flipped_byte_in_spilled_blob(spill: RecordingSpill) -> None:
    value = await _roundtrip(_random(2 * MB), spill)
    path = spill.inner.directory / NS / value["s"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptPayloadError, match="checkpoint 7"):
        await decode(value, spill=spill, namespace=NS, where="checkpoint 7")


async def test_deleted_blob(spill: RecordingSpill) -> None:
    value = await _roundtrip(_random(2 * MB), spill)
    assert await spill.delete(NS, [value["s"]]) == 1
    with pytest.raises(MissingBlobError) as excinfo:
        await decode(value, spill=spill, namespace=NS, where="checkpoint 7")
    message = str(excinfo.value)
    assert "checkpoint 7" in message and value["s"] in message and NS in message
    assert "lifecycle" in message


async def test_reference_without_spill_store(spill: RecordingSpill) -> None:
    value = await _roundtrip(_random(2 * MB), spill)
    with pytest.raises(MissingBlobError, match="no spill store is configured"):
        await decode(value, spill=None, namespace=None, where="checkpoint 7")


class _LyingSpill(RecordingSpill):
    """A spill store that does not verify what it returns (the store is the layer that does)."""

    async def get(self, namespace: str, digest: str) -> bytes:
        return b"something else"


async def test_codec_still_checks_the_decoded_size(tmp_path: Path) -> None:
    spill = _LyingSpill(tmp_path)
    value = await _roundtrip(_random(2 * MB), RecordingSpill(tmp_path))
    with pytest.raises(CorruptPayloadError, match="expected"):
        await decode(value, spill=spill, namespace=NS, where="x")


async def test_namespace_is_asked_for_only_when_a_value_spills(spill: RecordingSpill) -> None:
    asked: list[str] = []

    async def namespace() -> str:
        asked.append(NS)
        return NS

    small = await encode(
        b"small", key=KEY, tags=None, extra=None, spill=spill, namespace=namespace, where="x"
    )
    assert "d" in small and asked == []
    big = _random(2 * MB)
    value = await encode(
        big, key=KEY, tags=None, extra=None, spill=spill, namespace=namespace, where="x"
    )
    assert asked == [NS] and spill.puts == [(NS, value["s"], len(big))]
    assert await decode(value, spill=spill, namespace=NS, where="x") == big


async def test_values_written_by_earlier_versions_still_read(tmp_path: Path) -> None:
    # A reference and its blob exactly as the format-1 writer has always stored them: the
    # blob in <dir>/<namespace>/<sha256 of the stored bytes>, zlib level 6 when smaller.
    payload = _random(3 * MB // 2).hex().encode()  # compresses, but not enough to fit
    stored = zlib.compress(payload, 6)
    digest = hashlib.sha256(stored).hexdigest()
    (tmp_path / "lg" / "3f2a9c").mkdir(parents=True)
    (tmp_path / "lg" / "3f2a9c" / digest).write_bytes(stored)
    value = {"v": 1, "c": "z", "s": digest, "n": len(payload)}
    spill = LocalSpill(tmp_path, fsync=False)
    assert await decode(value, spill=spill, namespace=NS, where="x") == payload
    # ...and writing the same payload today produces the same reference and the same blob.
    again = await encode(
        payload, key=KEY, tags=None, extra=None, spill=spill, namespace=NS, where="x"
    )
    assert again == value
    assert [info.digest for info in await spill.list(NS)] == [digest]


def _flip_b64(text: str) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[len(raw) // 2] ^= 0x40
    return base64.b64encode(bytes(raw)).decode()


_RAW = encode_inline(b"incompressible? no, but short")
_Z = encode_inline(_text(10_000))
_REF = {"v": 1, "c": "raw", "s": "0" * 64, "n": 5}


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("not a mapping", "not an object"),
        ({**_RAW, "v": 2}, "unknown value format"),
        ({**_RAW, "v": True}, "unknown value format"),
        ({**_RAW, "v": "1"}, "unknown value format"),
        ({k: v for k, v in _RAW.items() if k != "v"}, "unknown value format"),
        ({**_RAW, "c": "gzip"}, "unknown codec"),
        ({**_RAW, "d": "***"}, "bad base64"),
        ({**_RAW, "d": "QUI"}, "bad base64"),
        ({**_RAW, "d": 5}, "not a string"),
        ({**_RAW, "d": _flip_b64(_RAW["d"])}, "CRC-32 mismatch"),
        ({k: v for k, v in _RAW.items() if k != "k"}, "no valid CRC-32"),
        ({**_RAW, "k": "xyz"}, "no valid CRC-32"),
        ({**_Z, "d": _flip_b64(_Z["d"])}, "zlib"),
        ({**_Z, "d": base64.b64encode(base64.b64decode(_Z["d"])[:-3]).decode()}, "zlib"),
        ({**_Z, "d": base64.b64encode(base64.b64decode(_Z["d"]) + b"x").decode()}, "zlib"),
        ({"v": 1, "c": "raw"}, "neither an inline payload nor a valid blob digest"),
        ({**_REF, "s": "ABC"}, "valid blob digest"),
        ({**_REF, "n": -1}, "invalid payload size"),
        ({**_REF, "n": "5"}, "invalid payload size"),
    ],
)
async def test_corrupt_values(value: Any, match: str) -> None:
    with pytest.raises(CorruptPayloadError, match=match) as excinfo:
        await decode(value, spill=None, namespace=None, where="item 'k9'")
    assert "item 'k9'" in str(excinfo.value)


@pytest.mark.parametrize("codec_text", [False, True])
async def test_tampered_reference_size(spill: RecordingSpill, codec_text: bool) -> None:
    payload = _random(2 * MB // 2).hex().encode() if codec_text else _random(2 * MB)
    value = await _roundtrip(payload, spill)
    assert value["c"] == ("z" if codec_text else "raw")
    for wrong in (value["n"] - 1, value["n"] + 1):
        with pytest.raises(CorruptPayloadError):
            await decode({**value, "n": wrong}, spill=spill, namespace=NS, where="x")


# -- the inline form ---------------------------------------------------------------------------


def test_encode_inline_forms() -> None:
    assert encode_inline(b"") == {"v": 1, "c": "raw", "d": "", "k": "00000000"}
    noise = _random(1000)
    raw = encode_inline(noise)
    assert raw["c"] == "raw" and base64.b64decode(raw["d"]) == noise
    text = _text(1000)
    z = encode_inline(text)
    assert z["c"] == "z" and "k" not in z and len(z["d"]) < len(base64.b64encode(text))
    assert json.dumps(z) == json.dumps(z, separators=(", ", ": "))  # flat, one string payload


def test_spilled_digest_ignores_foreign_values() -> None:
    assert spilled_digest(_REF) == "0" * 64
    for value in (_RAW, _Z, {**_REF, "v": 2}, {**_REF, "s": 5}, {**_REF, "s": "0" * 63}, {}):
        assert spilled_digest(value) is None


def _prose(size: int) -> bytes:
    """Text that compresses like messages do (words drawn at random), ``size`` bytes."""
    rng = random.Random(5)
    words = [bytes(rng.choices(b"etaoinshrdlucmfwyp", k=rng.randint(2, 9))) for _ in range(3000)]
    return b" ".join(rng.choice(words) for _ in range(size // 4))[:size]


async def test_fast_level_up_to_1_mb_and_level_6_before_spilling(
    spill: RecordingSpill, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = _prose(300_000)
    fast, tight = zlib.compress(payload, 1), zlib.compress(payload, 6)
    assert len(tight) < len(fast) < len(payload)
    value = await encode(
        payload, key=KEY, tags=None, extra=None, spill=spill, namespace=NS, where="x"
    )
    assert value["c"] == "z" and base64.b64decode(value["d"]) == fast
    # A budget that only the level-6 form fits: the value stays inline, level 6.
    import foundry_checkpoint._codec as codec

    monkeypatch.setattr(codec, "INLINE_BUDGET", 4 * (len(tight) + len(fast)) // 6 + 200)
    value = await encode(
        payload, key=KEY, tags=None, extra=None, spill=spill, namespace=NS, where="x"
    )
    assert base64.b64decode(value["d"]) == tight and spill.puts == []
    assert await decode(value, spill=spill, namespace=NS, where="x") == payload
    # Over 1 MB: level 6 at once, as every version wrote it.
    monkeypatch.undo()
    big = _prose(3 * MB // 2)
    value = await encode(big, key=KEY, tags=None, extra=None, spill=spill, namespace=NS, where="x")
    assert base64.b64decode(value["d"]) == zlib.compress(big, 6)
