"""Spill stores: one behaviour suite for LocalSpill and AzureBlobSpill (against real Azurite),
then what is specific to AzureBlobSpill (constructors, environment, containers). What is
specific to LocalSpill is in tests/unit/test_local_spill.py."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AzureNamedKeyCredential
from azure.core.pipeline import PipelineResponse
from azure.storage.blob.aio import BlobServiceClient, ContainerClient

from foundry_checkpoint.errors import (
    CorruptPayloadError,
    FoundryCheckpointError,
    InvalidArgumentError,
    InvalidIdentifierError,
    MissingBlobError,
)
from foundry_checkpoint.spill import AzureBlobSpill, BlobInfo, LocalSpill, SpillStore
from tests._azurite_fixtures import ACCOUNT_KEY, ACCOUNT_NAME, Azurite, running_azurite

NS = "lg/3f2a9c"


def _blob(text: str) -> tuple[str, bytes]:
    data = text.encode()
    return hashlib.sha256(data).hexdigest(), data


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _container_name() -> str:
    return f"t{uuid.uuid4().hex[:20]}"


@dataclass
class RequestLog:
    """Responses seen by a blob client (method, URL, status), for counting uploads."""

    responses: list[tuple[str, str, int]] = field(default_factory=list)

    def hook(self, response: PipelineResponse[Any, Any]) -> None:
        request = response.http_request
        self.responses.append((request.method, request.url, response.http_response.status_code))

    def uploads(self) -> int:
        """Successful Put Blob calls (new content written)."""
        return sum(
            1
            for method, url, status in self.responses
            if method == "PUT" and status == 201 and "comp=" not in url and "restype=" not in url
        )

    def count(self, method: str, fragment: str) -> int:
        """Requests of ``method`` whose URL contains ``fragment``."""
        return sum(1 for m, url, _ in self.responses if m == method and fragment in url)


@dataclass
class Harness:
    """A spill store under test plus back doors to observe and damage what it stored."""

    spill: SpillStore
    uploads: Callable[[], int]
    """How many blob writes (new content) the store has made."""
    age: Callable[[str, str], Awaitable[str]]
    """Make a blob look old if possible; returns its current write marker."""
    marker: Callable[[str, str], Awaitable[str]]
    """A value that changes on every write of the blob (mtime or ETag)."""
    overwrite: Callable[[str, str, bytes], Awaitable[None]]
    """Replace a blob's bytes behind the store's back."""


def _local_harness(root: Path) -> Harness:
    spill = LocalSpill(root, fsync=False)
    writes: list[Path] = []
    original = spill._write_blob

    def counting_write(path: Path, data: bytes) -> None:
        writes.append(path)
        original(path, data)

    spill._write_blob = counting_write  # type: ignore[method-assign]

    async def age(namespace: str, digest: str) -> str:
        path = root / namespace / digest
        os.utime(path, (1_000_000_000, 1_000_000_000))
        return str(path.stat().st_mtime_ns)

    async def marker(namespace: str, digest: str) -> str:
        return str((root / namespace / digest).stat().st_mtime_ns)

    async def overwrite(namespace: str, digest: str, data: bytes) -> None:
        (root / namespace / digest).write_bytes(data)

    return Harness(spill, lambda: len(writes), age, marker, overwrite)


@pytest.fixture(params=["local", "azure"])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    if request.param == "local":
        yield _local_harness(tmp_path / "spill")
        return
    azurite: Azurite = request.getfixturevalue("azurite")
    log = RequestLog()
    container = _container_name()
    spill = AzureBlobSpill(
        connection_string=azurite.connection_string,
        container=container,
        prefix="fc",
        retry_total=0,
        raw_response_hook=log.hook,
    )
    direct = BlobServiceClient.from_connection_string(azurite.connection_string, retry_total=0)
    blobs = direct.get_container_client(container)

    async def marker(namespace: str, digest: str) -> str:
        props = await blobs.get_blob_client(f"fc/{namespace}/{digest}").get_blob_properties()
        return str(props.etag)

    async def overwrite(namespace: str, digest: str, data: bytes) -> None:
        await blobs.upload_blob(f"fc/{namespace}/{digest}", data, overwrite=True)

    try:
        yield Harness(spill, log.uploads, marker, marker, overwrite)
    finally:
        await spill.aclose()
        await direct.close()


# -- the shared behaviour suite ----------------------------------------------------------------


async def test_put_get_list(harness: Harness) -> None:
    spill = harness.spill
    digest, data = _blob("hello spill")
    assert await spill.put(NS, data) == digest  # the store computes the address
    assert await spill.get(NS, digest) == data
    (info,) = await spill.list(NS)
    assert isinstance(info, BlobInfo)
    assert (info.digest, info.size) == (digest, len(data))
    assert isinstance(info.last_modified, float) and info.last_modified > 1_600_000_000
    assert await spill.namespaces() == [NS]
    assert harness.uploads() == 1


async def test_empty_blob_and_large_blob(harness: Harness) -> None:
    spill = harness.spill
    for data in (b"", os.urandom(9 * 1024 * 1024)):
        digest = hashlib.sha256(data).hexdigest()
        await spill.put(NS, data)
        assert await spill.get(NS, digest) == data
    assert sorted(i.size for i in await spill.list(NS)) == [0, 9 * 1024 * 1024]


async def test_put_twice_uploads_once_and_refreshes(harness: Harness) -> None:
    spill = harness.spill
    digest, data = _blob("dedupe me")
    await spill.put(NS, data)
    (before,) = await spill.list(NS)
    old = await harness.age(NS, digest)
    await spill.put(NS, data)
    assert harness.uploads() == 1  # not uploaded again...
    assert await harness.marker(NS, digest) != old  # ...but written (Last-Modified refreshed)
    (after,) = await spill.list(NS)
    assert after.last_modified >= before.last_modified
    assert after.last_modified > 1_000_000_000 + 86_400
    assert await spill.get(NS, digest) == data


async def test_concurrent_puts_of_one_blob(harness: Harness) -> None:
    digest, data = _blob("raced")
    await asyncio.gather(*(harness.spill.put(NS, data) for _ in range(8)))
    assert [i.digest for i in await harness.spill.list(NS)] == [digest]
    assert await harness.spill.get(NS, digest) == data


@pytest.mark.parametrize("data", ["text", None, 5])
async def test_data_that_is_not_bytes_is_refused(harness: Harness, data: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="must be bytes"):
        await harness.spill.put(NS, data)
    assert await harness.spill.list(NS) == []
    assert harness.uploads() == 0


async def test_put_accepts_bytes_like_data(harness: Harness) -> None:
    digest, data = _blob("a view")
    view = memoryview(bytearray(data))  # bytes-like, beyond the protocol's declared bytes
    assert await harness.spill.put(NS, view) == digest  # type: ignore[arg-type]
    assert await harness.spill.get(NS, digest) == data


async def test_missing_blob(harness: Harness) -> None:
    digest, data = _blob("gone")
    await harness.spill.put(NS, data)
    await harness.spill.delete(NS, [digest])
    with pytest.raises(MissingBlobError) as excinfo:
        await harness.spill.get(NS, digest)
    message = str(excinfo.value)
    assert digest in message and NS in message and "lifecycle" in message
    assert harness.spill.describe in message


async def test_flipped_byte_is_detected(harness: Harness) -> None:
    digest, data = _blob("precious state " * 100)
    await harness.spill.put(NS, data)
    damaged = bytearray(data)
    damaged[7] ^= 0x01
    await harness.overwrite(NS, digest, bytes(damaged))
    with pytest.raises(CorruptPayloadError, match=digest):
        await harness.spill.get(NS, digest)


async def test_namespaces_are_separate_and_not_nested(harness: Harness) -> None:
    spill = harness.spill
    d1, b1 = _blob("one")
    d2, b2 = _blob("two")
    for namespace, digest, data in (
        ("a", d1, b1),
        ("a/b", d2, b2),
        ("a/b", d1, b1),
        ("maf/ctx-1_x.y", d2, b2),
    ):
        assert await spill.put(namespace, data) == digest
    assert await spill.namespaces() == ["a", "a/b", "maf/ctx-1_x.y"]
    assert [i.digest for i in await spill.list("a")] == [d1]
    assert [i.digest for i in await spill.list("a/b")] == sorted([d1, d2])
    assert await spill.list("a/c") == []

    assert await spill.delete_namespace("a") == 1
    assert await spill.namespaces() == ["a/b", "maf/ctx-1_x.y"]
    assert await spill.get("a/b", d1) == b1  # same content elsewhere is untouched
    with pytest.raises(MissingBlobError):
        await spill.get("a", d1)
    assert await spill.delete_namespace("a") == 0
    assert await spill.delete_namespace("a/b") == 2
    assert await spill.namespaces() == ["maf/ctx-1_x.y"]


async def test_delete_counts_only_existing(harness: Harness) -> None:
    spill = harness.spill
    blobs = [_blob(f"blob {i}") for i in range(5)]
    for digest, data in blobs:
        assert await spill.put(NS, data) == digest
    absent, _ = _blob("never stored")
    assert await spill.delete(NS, [blobs[0][0], blobs[1][0], absent]) == 2
    assert await spill.delete(NS, [blobs[0][0]]) == 0
    assert await spill.delete(NS, []) == 0
    assert sorted(i.digest for i in await spill.list(NS)) == sorted(d for d, _ in blobs[2:])


async def test_empty_store(harness: Harness) -> None:
    spill = harness.spill
    assert await spill.namespaces() == []
    assert await spill.list(NS) == []
    assert await spill.delete_namespace(NS) == 0
    assert await spill.delete(NS, [_blob("x")[0]]) == 0


_BAD_NAMESPACES = [
    "",
    "/lg/x",
    "lg/",
    "lg//x",
    "..",
    "lg/../x",
    "lg/./x",
    ".",
    "a..b",
    "lg x",
    "lg\\x",
    "caf\u00e9",
    "x" * 201,
    5,
]


@pytest.mark.parametrize("namespace", _BAD_NAMESPACES)
async def test_invalid_namespaces(harness: Harness, namespace: Any) -> None:
    digest, data = _blob("x")
    for call in (
        lambda: harness.spill.put(namespace, data),
        lambda: harness.spill.get(namespace, digest),
        lambda: harness.spill.list(namespace),
        lambda: harness.spill.delete(namespace, [digest]),
        lambda: harness.spill.delete_namespace(namespace),
    ):
        with pytest.raises(InvalidIdentifierError):
            await call()
    assert harness.uploads() == 0


@pytest.mark.parametrize("digest", ["", "ABCD" * 16, "0" * 63, "g" * 64, "../" + "0" * 61])
async def test_invalid_digests(harness: Harness, digest: str) -> None:
    with pytest.raises(InvalidIdentifierError):
        await harness.spill.get(NS, digest)
    with pytest.raises(InvalidIdentifierError):
        await harness.spill.delete(NS, [digest])


async def test_longest_namespace_is_accepted(harness: Harness) -> None:
    namespace = "/".join(["n" * 49] * 4) + "n"
    assert len(namespace) == 200
    digest, data = _blob("deep")
    assert await harness.spill.put(namespace, data) == digest
    assert await harness.spill.namespaces() == [namespace]


async def test_aclose_is_idempotent_and_reusable(harness: Harness) -> None:
    digest, data = _blob("reuse")
    await harness.spill.aclose()  # before any use
    await harness.spill.put(NS, data)
    await harness.spill.aclose()
    await harness.spill.aclose()
    assert await harness.spill.get(NS, digest) == data


async def test_satisfies_the_protocol(harness: Harness) -> None:
    assert isinstance(harness.spill, SpillStore)
    assert str(harness.spill) == harness.spill.describe
    assert harness.spill.describe.split(":", 1)[0] in ("local", "azure")


# -- AzureBlobSpill specifics ------------------------------------------------------------------


async def _exercise(spill: AzureBlobSpill) -> None:
    digest, data = _blob(f"via {spill.describe}")
    await spill.put(NS, data)
    assert await spill.get(NS, digest) == data
    assert [i.digest for i in await spill.list(NS)] == [digest]


async def test_constructor_connection_string(azurite: Azurite) -> None:
    container = _container_name()
    spill = AzureBlobSpill(
        connection_string=azurite.connection_string, container=container, retry_total=0
    )
    assert spill.describe == f"azure:{ACCOUNT_NAME}/{container}/foundry-checkpoint"
    try:
        await _exercise(spill)
    finally:
        await spill.aclose()


async def test_constructor_account_url_and_named_key(azurite: Azurite) -> None:
    container = _container_name()
    spill = AzureBlobSpill(
        account_url=azurite.blob_endpoint,
        credential=AzureNamedKeyCredential(ACCOUNT_NAME, ACCOUNT_KEY),
        container=container,
        prefix="/custom/prefix/",
        retry_total=0,
    )
    assert spill.describe == f"azure:{ACCOUNT_NAME}/{container}/custom/prefix"
    try:
        await _exercise(spill)
        async with BlobServiceClient.from_connection_string(azurite.connection_string) as svc:
            names = [n async for n in svc.get_container_client(container).list_blob_names()]
        assert names == [f"custom/prefix/{NS}/{_blob(f'via {spill.describe}')[0]}"]
    finally:
        await spill.aclose()


async def test_constructor_container_client_stays_the_callers(azurite: Azurite) -> None:
    container = _container_name()
    async with BlobServiceClient.from_connection_string(
        azurite.connection_string, retry_total=0
    ) as svc:
        await svc.create_container(container)
        client: ContainerClient = svc.get_container_client(container)
        spill = AzureBlobSpill(client, prefix="p", create_container=False)
        assert spill.describe == f"azure:{ACCOUNT_NAME}/{container}/p"
        await _exercise(spill)
        await spill.aclose()
        assert [n async for n in client.list_blob_names()]  # the caller's client still works


async def test_from_env(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CONNECTION_STRING", "ACCOUNT_URL", "CONTAINER", "PREFIX"):
        monkeypatch.delenv(f"FOUNDRY_CHECKPOINT_BLOB_{name}", raising=False)
    assert AzureBlobSpill.from_env() is None

    monkeypatch.setenv("FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL", "https://acct.blob.core.windows.net")
    from_url = AzureBlobSpill.from_env()
    assert from_url is not None
    assert from_url.describe == "azure:acct/foundry-checkpoint/foundry-checkpoint"

    container = _container_name()
    monkeypatch.setenv("FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING", azurite.connection_string)
    monkeypatch.setenv("FOUNDRY_CHECKPOINT_BLOB_CONTAINER", container)
    monkeypatch.setenv("FOUNDRY_CHECKPOINT_BLOB_PREFIX", "envprefix")
    spill = AzureBlobSpill.from_env()
    assert spill is not None  # the connection string wins over the URL
    assert spill.describe == f"azure:{ACCOUNT_NAME}/{container}/envprefix"
    try:
        await _exercise(spill)
    finally:
        await spill.aclose()


async def test_account_url_without_credential_uses_default_credential() -> None:
    spill = AzureBlobSpill(account_url="https://acct.blob.core.windows.net", container="c-1x")
    spill._clients.container()  # creates clients lazily, inside this loop; no request is sent
    assert type(spill._clients.owned_credential).__name__ == "DefaultAzureCredential"
    await spill.aclose()
    assert spill._clients.owned_credential is None


async def test_from_connection_string(azurite: Azurite) -> None:
    container = _container_name()
    async with AzureBlobSpill.from_connection_string(
        azurite.connection_string, container, prefix="cs", retry_total=0
    ) as spill:
        assert spill.describe == f"azure:{ACCOUNT_NAME}/{container}/cs"
        await _exercise(spill)
        assert spill._clients._service is not None
    assert spill._clients._service is None  # leaving the block closed what the store opened


async def test_from_container_client_leaves_the_client_open(azurite: Azurite) -> None:
    container = _container_name()
    async with BlobServiceClient.from_connection_string(
        azurite.connection_string, retry_total=0
    ) as svc:
        client = svc.get_container_client(container)
        async with AzureBlobSpill.from_container_client(client, prefix="cc") as spill:
            assert spill.describe == f"azure:{ACCOUNT_NAME}/{container}/cc"
            await _exercise(spill)  # creates the container on the first write
        names = [n async for n in client.list_blob_names()]  # still the caller's, still open
        assert names == [f"cc/{NS}/{_blob(f'via {spill.describe}')[0]}"]


async def test_account_url_with_a_sas_credential(azurite: Azurite) -> None:
    from datetime import datetime, timedelta, timezone

    from azure.core.credentials import AzureSasCredential
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    container = _container_name()
    async with BlobServiceClient.from_connection_string(azurite.connection_string) as svc:
        await svc.create_container(container)
    sas = generate_account_sas(
        ACCOUNT_NAME,
        ACCOUNT_KEY,
        ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=True, list=True, delete=True, create=True),
        expiry=datetime.now(timezone.utc) + timedelta(hours=1),
    )
    async with AzureBlobSpill(
        account_url=azurite.blob_endpoint,
        credential=AzureSasCredential(sas),
        container=container,
        retry_total=0,
    ) as spill:
        await _exercise(spill)
        assert spill._clients.owned_credential is None  # no default credential was opened


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({}, ValueError),
        ({"account_url": "https://a.blob.core.windows.net", "connection_string": "x"}, ValueError),
        ({"connection_string": "AccountName=a", "credential": "k"}, ValueError),
        ({"connection_string": "AccountName=a", "container": "No_Caps"}, InvalidIdentifierError),
        ({"connection_string": "AccountName=a", "container": "ab"}, InvalidIdentifierError),
        ({"connection_string": "AccountName=a", "prefix": "a/../b"}, InvalidIdentifierError),
        ({"connection_string": ""}, InvalidArgumentError),
        ({"account_url": " "}, InvalidArgumentError),
        ({"account_url": "https://a.blob.core.windows.net", "credential": 5}, InvalidArgumentError),
        ({"account_url": "https://a.blob.core.windows.net", "credential": {"k": "v"}}, ValueError),
    ],
)
def test_constructor_validation(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        AzureBlobSpill(**kwargs)


async def test_container_is_created_on_first_write(azurite: Azurite) -> None:
    log = RequestLog()
    spill = AzureBlobSpill(
        connection_string=azurite.connection_string,
        container=_container_name(),
        retry_total=0,
        raw_response_hook=log.hook,
    )
    try:
        assert await spill.list(NS) == []  # reading a missing container is not an error
        assert await spill.namespaces() == []
        with pytest.raises(MissingBlobError, match="another"):
            await spill.get(NS, _blob("x")[0])
        await _exercise(spill)
        assert log.count("PUT", "restype=container") == 1 and log.uploads() == 1
        digest, data = _blob("second")
        before = len(log.responses)
        assert await spill.put(NS, data) == digest  # new blob, existing container: 2 requests
        assert [s for _, _, s in log.responses[before:]] == [404, 201]
        assert log.uploads() == 2
        before = len(log.responses)
        await spill.put(NS, data)  # existing blob: 1 request (Set Blob Metadata)
        ((method, url, status),) = log.responses[before:]
        assert (method, status) == ("PUT", 200) and "comp=metadata" in url
        assert log.uploads() == 2
    finally:
        await spill.aclose()


async def test_missing_container_without_create(azurite: Azurite) -> None:
    spill = AzureBlobSpill(
        connection_string=azurite.connection_string,
        container=_container_name(),
        create_container=False,
        retry_total=0,
    )
    _, data = _blob("nowhere")
    try:
        with pytest.raises(FoundryCheckpointError, match="does not exist"):
            await spill.put(NS, data)
    finally:
        await spill.aclose()


async def test_prefixes_partition_one_container(azurite: Azurite) -> None:
    container = _container_name()
    one, two = (
        AzureBlobSpill(
            connection_string=azurite.connection_string,
            container=container,
            prefix=prefix,
            retry_total=0,
        )
        for prefix in ("one", "two")
    )
    try:
        digest, data = _blob("shared content")
        await one.put(NS, data)
        await two.put("other", data)
        assert await one.namespaces() == [NS]
        assert await two.namespaces() == ["other"]
        assert await one.delete_namespace(NS) == 1
        assert await two.get("other", digest) == data
    finally:
        await one.aclose()
        await two.aclose()


async def test_bound_to_the_loop_that_first_used_it(azurite: Azurite) -> None:
    spill = AzureBlobSpill(
        connection_string=azurite.connection_string, container=_container_name(), retry_total=0
    )
    try:
        await spill.list(NS)
        with pytest.raises(RuntimeError, match="event loop"):
            await asyncio.to_thread(asyncio.run, spill.list(NS))
    finally:
        await spill.aclose()

    async def on_another_loop() -> list[BlobInfo]:
        try:
            return await spill.list(NS)
        finally:
            await spill.aclose()

    assert await asyncio.to_thread(asyncio.run, on_another_loop()) == []


def test_import_works_without_azure_storage_blob() -> None:
    script = (
        "import sys\n"
        "sys.modules['azure.storage.blob'] = None\n"
        "import foundry_checkpoint.spill as s\n"
        "try:\n"
        "    s.AzureBlobSpill(connection_string='AccountName=a')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert "foundry-checkpoint[blob]" in out.stdout


def test_azurite_process_is_stopped_by_pid(tmp_path: Path) -> None:
    with running_azurite(tmp_path) as service:
        os.kill(service.pid, 0)  # alive while in use
    with pytest.raises(ProcessLookupError):
        os.kill(service.pid, 0)  # terminated and reaped: nothing left behind
