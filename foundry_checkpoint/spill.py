"""Spill stores: where payloads too large for one state-store item go.

The state store limits a serialized item value to 1 MB. A checkpoint larger than that is written
as a *blob* to a spill store first, and the item then holds only a small reference (its sha256,
size and codec, see :mod:`foundry_checkpoint._codec`). Two implementations are provided:

* :class:`LocalSpill` keeps blobs as files under a directory (the default in local mode).
* :class:`AzureBlobSpill` keeps them in an Azure Blob Storage container (hosted mode); it needs
  the ``foundry-checkpoint[blob]`` extra.

Both implement the :class:`SpillStore` protocol. Blobs are **content-addressed**: a blob's name
is the sha256 of its bytes, so writing the same content twice stores it once, and a reader can
verify what it got back. Every blob lives in a **namespace**, an opaque string chosen by the
caller (the checkpointers use a random value kept in the user's own isolated store, so that one
user's cleanup can never reach another user's blobs). Namespaces are 1-200 characters of
``[A-Za-z0-9_.-/]`` made of non-empty ``/``-separated segments, none of them ``.`` or ``..``.
A namespace does not contain the blobs of the namespaces nested below it: ``"a"`` and ``"a/b"``
are unrelated.

Writing an existing blob again does not upload it again but refreshes its last-modified time, so
a retention rule of the form "delete blobs not modified for N days" never removes a blob that
deduplication keeps reusing (keep N longer than the state store's item TTL).

Example:
    >>> import asyncio, hashlib, tempfile
    >>> from foundry_checkpoint.spill import LocalSpill
    >>> async def demo(directory: str) -> bytes:
    ...     spill = LocalSpill(directory)
    ...     data = b"a large checkpoint"
    ...     digest = hashlib.sha256(data).hexdigest()
    ...     await spill.put("lg/3f2a", digest, data)
    ...     return await spill.get("lg/3f2a", digest)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     asyncio.run(demo(d))
    b'a large checkpoint'
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable
from urllib.parse import urlsplit

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

from ._store._private import private_dir
from .errors import (
    CorruptPayloadError,
    FoundryCheckpointError,
    InvalidArgumentError,
    InvalidIdentifierError,
    MissingBlobError,
)

if TYPE_CHECKING:
    from azure.storage.blob.aio import BlobServiceClient, ContainerClient

__all__ = ["AzureBlobSpill", "BlobInfo", "LocalSpill", "SpillStore"]

_NAMESPACE_RE = re.compile(r"[A-Za-z0-9_.\-/]{1,200}")
_DIGEST_RE = re.compile(r"[0-9a-f]{64}")
_CONTAINER_RE = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}")
_HASH_IN_THREAD = 1 << 20  # hash payloads from 1 MiB on in a worker thread
_DELETE_CONCURRENCY = 16
_BLOB_EXTRA = "foundry-checkpoint[blob]"


class BlobInfo(NamedTuple):
    """One stored blob, as :meth:`SpillStore.list` reports it.

    Example:
        >>> BlobInfo(digest="ab" * 32, size=3, last_modified=1700000000.0).size
        3
    """

    digest: str
    """The blob's sha256 (64 lowercase hex characters), which is also its name."""
    size: int
    """Stored size in bytes."""
    last_modified: float
    """Last write (or refresh by :meth:`SpillStore.put`) in epoch seconds."""


@runtime_checkable
class SpillStore(Protocol):
    """A content-addressed blob store, partitioned into namespaces.

    Every method validates ``namespace`` (see the module docstring) and each ``digest`` (64
    lowercase hex characters) and raises :class:`~foundry_checkpoint.errors.InvalidIdentifierError`
    for a bad one before doing any I/O.

    Example:
        >>> import tempfile
        >>> isinstance(LocalSpill(tempfile.gettempdir()), SpillStore)
        True
    """

    async def put(self, namespace: str, digest: str, data: bytes) -> None:
        """Store ``data`` under ``digest`` (which must equal ``sha256(data).hexdigest()``).

        Idempotent: when the blob exists already it is not uploaded again, but its last-modified
        time is refreshed. Raises :class:`ValueError` when ``digest`` does not match ``data``.
        """
        ...

    async def get(self, namespace: str, digest: str) -> bytes:
        """The blob's bytes, verified against ``digest``.

        Raises :class:`~foundry_checkpoint.errors.MissingBlobError` when the blob does not exist
        and :class:`~foundry_checkpoint.errors.CorruptPayloadError` when its sha256 differs.
        """
        ...

    async def delete(self, namespace: str, digests: Iterable[str]) -> int:
        """Delete the given blobs of ``namespace``; returns how many existed and were removed."""
        ...

    async def delete_namespace(self, namespace: str) -> int:
        """Delete every blob of ``namespace`` (not of nested namespaces); returns the count."""
        ...

    async def list(self, namespace: str) -> builtins.list[BlobInfo]:
        """Every blob of ``namespace``, sorted by digest."""
        ...

    async def namespaces(self) -> builtins.list[str]:
        """Every namespace that holds at least one blob, sorted."""
        ...

    async def aclose(self) -> None:
        """Release clients and connections. Idempotent; the store may be used again after it."""
        ...

    @property
    def describe(self) -> str:
        """Where the blobs live, for messages and logs (``local:<dir>``, ``azure:<a>/<c>/<p>``)."""
        ...


def _check_namespace(namespace: object) -> str:
    """Return ``namespace`` when valid, else raise InvalidIdentifierError saying why."""
    if not isinstance(namespace, str):
        raise InvalidIdentifierError(
            f"spill namespace must be a str, got {type(namespace).__name__}"
        )
    if not _NAMESPACE_RE.fullmatch(namespace):
        raise InvalidIdentifierError(
            f"invalid spill namespace {namespace!r}: use 1-200 characters of [A-Za-z0-9_.-/]"
        )
    segments = namespace.split("/")
    if any(segment in ("", ".", "..") for segment in segments) or ".." in namespace:
        raise InvalidIdentifierError(
            f"invalid spill namespace {namespace!r}: no leading, trailing or doubled '/', "
            "no '.' or '..' segments and no '..' anywhere"
        )
    return namespace


def _check_digest(digest: object) -> str:
    """Return ``digest`` when it is 64 lowercase hex characters, else raise."""
    if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
        raise InvalidIdentifierError(
            f"invalid blob digest {digest!r}: expected a sha256 as 64 lowercase hex characters"
        )
    return digest


async def _sha256_hex(data: bytes) -> str:
    """sha256 of ``data``; large inputs are hashed in a worker thread (hashlib drops the GIL)."""
    if len(data) >= _HASH_IN_THREAD:
        return await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())
    return hashlib.sha256(data).hexdigest()


async def _check_content(digest: str, data: bytes) -> None:
    """Raise ValueError when ``data`` is not the content ``digest`` names."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"blob data must be bytes, got {type(data).__name__}")
    actual = await _sha256_hex(bytes(data))
    if actual != digest:
        raise InvalidArgumentError(
            f"blob digest {digest} does not match the data (sha256 {actual}); "
            "spill stores are content-addressed"
        )


def _missing(namespace: str, digest: str, where: str) -> MissingBlobError:
    return MissingBlobError(
        f"spilled blob {digest} of namespace {namespace!r} is missing from {where}. It was "
        "deleted outside foundry-checkpoint (for example by a retention or lifecycle rule "
        "shorter than the state store's item TTL), or the spill store points at another "
        "directory, container or prefix than the one the checkpoint was written with."
    )


def _corrupt(namespace: str, digest: str, actual: str, where: str) -> CorruptPayloadError:
    return CorruptPayloadError(
        f"spilled blob {digest} of namespace {namespace!r} in {where} is corrupt: its content "
        f"hashes to {actual}. It was changed or damaged outside foundry-checkpoint."
    )


# --------------------------------------------------------------------------------------------
# Local directory
# --------------------------------------------------------------------------------------------


class LocalSpill:
    """A spill store in a local directory: one file per blob at ``<dir>/<namespace>/<digest>``.

    Writes are atomic (a private temporary file in the same directory, then :func:`os.replace`),
    so a reader never sees a partial blob, and several processes may share the directory: two
    writers of one digest write identical bytes, and a namespace removed by one process while
    another writes into it is re-created by the writer. With ``fsync=True`` (the default) file
    data and the directory entry are flushed to disk before :meth:`put` returns, so a blob
    survives a crash of the machine once the item that references it has been written.
    Blocking file I/O runs in worker threads, never on the calling event loop.

    Files are created readable by their owner only (mode 0600, directories 0700).

    Example:
        >>> import asyncio, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     spill = LocalSpill(d, fsync=False)
        ...     asyncio.run(spill.namespaces())
        []
    """

    def __init__(self, directory: str | os.PathLike[str], *, fsync: bool = True) -> None:
        """Use ``directory`` (created on the first write) for blobs; see the class docstring."""
        self._root = Path(os.path.abspath(os.fspath(directory)))
        self._fsync = fsync

    @property
    def directory(self) -> Path:
        """The absolute directory holding the blobs."""
        return self._root

    @property
    def describe(self) -> str:
        """``local:<absolute directory>``."""
        return f"local:{self._root}"

    def __str__(self) -> str:
        return self.describe

    def __repr__(self) -> str:
        return f"LocalSpill({str(self._root)!r}, fsync={self._fsync!r})"

    def _path(self, namespace: str, digest: str | None = None) -> Path:
        folder = self._root.joinpath(*_check_namespace(namespace).split("/"))
        path = folder if digest is None else folder / _check_digest(digest)
        self._inside(path)
        return path

    def _inside(self, path: Path) -> None:
        """Raise unless ``path``, with every symbolic link resolved, lies under the root.

        A symlinked namespace folder or blob (a tampered spill directory) could otherwise make
        a read, a listing or a delete reach files outside the spill store.
        """
        root = os.path.realpath(self._root)
        real = os.path.realpath(path)
        if os.path.commonpath([root, real]) != root:
            raise CorruptPayloadError(
                f"{path} resolves to {real}, outside the spill directory {root} (a symbolic "
                "link was placed in it); nothing was read or deleted there"
            )

    async def put(self, namespace: str, digest: str, data: bytes) -> None:
        """Write the blob unless present; refresh its modification time when it is."""
        path = self._path(namespace, digest)
        await _check_content(digest, data)
        await asyncio.to_thread(self._put_sync, path, bytes(data))

    def _put_sync(self, path: Path, data: bytes) -> None:
        for _ in range(5):
            try:
                os.utime(path)  # present: refresh mtime, do not rewrite
                return
            except FileNotFoundError:
                pass
            try:
                self._write_blob(path, data)
                return
            except FileNotFoundError:
                # Another process removed the (empty) namespace directory between our mkdir and
                # our write; try again from the start.
                continue
        raise OSError(f"could not write blob {path} (its directory kept disappearing)")

    def _write_blob(self, path: Path, data: bytes) -> None:
        """Create ``path`` atomically with ``data`` (temporary file + os.replace)."""
        private_dir(path.parent)
        tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if self._fsync:
                    os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        if self._fsync:
            _fsync_directory(path.parent)

    async def get(self, namespace: str, digest: str) -> bytes:
        """Read and verify the blob."""
        path = self._path(namespace, digest)
        try:
            data = await asyncio.to_thread(path.read_bytes)
        except (FileNotFoundError, NotADirectoryError):
            raise _missing(namespace, digest, self.describe) from None
        actual = await _sha256_hex(data)
        if actual != digest:
            raise _corrupt(namespace, digest, actual, self.describe)
        return data

    async def delete(self, namespace: str, digests: Iterable[str]) -> int:
        """Remove the given blobs; returns how many were removed."""
        paths = [self._path(namespace, digest) for digest in digests]
        folder = self._path(namespace)
        return await asyncio.to_thread(self._delete_sync, folder, paths)

    def _delete_sync(self, folder: Path, paths: builtins.list[Path]) -> int:
        removed = 0
        for path in paths:
            try:
                os.unlink(path)
                removed += 1
            except (FileNotFoundError, NotADirectoryError):
                pass
        self._prune(folder)
        return removed

    async def delete_namespace(self, namespace: str) -> int:
        """Remove every blob of ``namespace`` (and stale temporary files); returns the count."""
        folder = self._path(namespace)
        return await asyncio.to_thread(self._delete_namespace_sync, folder)

    def _delete_namespace_sync(self, folder: Path) -> int:
        removed = 0
        for entry in _scan(folder):
            if not entry.is_file(follow_symlinks=False):
                continue
            if _DIGEST_RE.fullmatch(entry.name) or _is_temp_name(entry.name):
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    continue
                if _DIGEST_RE.fullmatch(entry.name):
                    removed += 1
        self._prune(folder)
        return removed

    def _prune(self, folder: Path) -> None:
        """Remove ``folder`` and its parents up to the root while they are empty."""
        while folder != self._root and self._root in folder.parents:
            try:
                folder.rmdir()
            except OSError:  # not empty, already gone, or in use by another process
                return
            folder = folder.parent

    async def list(self, namespace: str) -> builtins.list[BlobInfo]:
        """Every blob of ``namespace`` with its size and modification time."""
        folder = self._path(namespace)
        return await asyncio.to_thread(self._list_sync, folder)

    @staticmethod
    def _list_sync(folder: Path) -> builtins.list[BlobInfo]:
        infos: builtins.list[BlobInfo] = []
        for entry in _scan(folder):
            if not _DIGEST_RE.fullmatch(entry.name):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                infos.append(BlobInfo(entry.name, st.st_size, st.st_mtime))
        return sorted(infos)

    async def namespaces(self) -> builtins.list[str]:
        """Every namespace directory that holds at least one blob."""
        return await asyncio.to_thread(self._namespaces_sync)

    def _namespaces_sync(self) -> builtins.list[str]:
        found: builtins.list[str] = []
        for dirpath, _dirnames, filenames in os.walk(self._root):
            if any(_DIGEST_RE.fullmatch(name) for name in filenames):
                relative = Path(dirpath).relative_to(self._root).as_posix()
                if relative != "." and _NAMESPACE_RE.fullmatch(relative):
                    found.append(relative)
        return sorted(found)

    async def aclose(self) -> None:
        """Nothing to release; present for the protocol."""


def _scan(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _is_temp_name(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp") and _DIGEST_RE.match(name[1:]) is not None


def _fsync_directory(folder: Path) -> None:
    """Flush a directory entry to disk (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# Azure Blob Storage
# --------------------------------------------------------------------------------------------


def _import_blob_aio() -> Any:
    """The ``azure.storage.blob.aio`` module, or an ImportError that names the extra."""
    try:
        import aiohttp  # noqa: F401  # the async transport azure-storage-blob needs
        from azure.storage.blob import aio
    except ImportError as exc:
        raise ImportError(
            f"AzureBlobSpill needs azure-storage-blob and aiohttp: pip install '{_BLOB_EXTRA}'"
        ) from exc
    return aio


def _connection_string_field(connection_string: str, field: str) -> str | None:
    for part in connection_string.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name.strip().lower() == field.lower():
            return value.strip()
    return None


def _account_from_url(url: str) -> str:
    """The storage account an endpoint URL names (host label, or first path segment for
    emulator-style ``http://127.0.0.1:10000/<account>`` URLs)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    path_first = parts.path.strip("/").split("/", 1)[0]
    if host in ("localhost", "") or host.replace(".", "").isdigit() or ":" in host:
        return path_first or host
    return host.split(".", 1)[0]


class AzureBlobSpill:
    """A spill store in an Azure Blob Storage container (needs ``foundry-checkpoint[blob]``).

    Blob names are ``<prefix>/<namespace>/<digest>``. Give exactly one of:

    * ``container_client``: an ``azure.storage.blob.aio.ContainerClient`` you own (this store
      never closes it). It must not have been used on another event loop, since all I/O runs on
      the checkpointer's own loop.
    * ``account_url`` (``https://<account>.blob.core.windows.net``) and ``container``, with
      ``credential`` (any credential azure-storage-blob accepts; when omitted and the URL
      carries no SAS token, ``azure.identity.aio.DefaultAzureCredential`` is used and closed by
      :meth:`aclose`).
    * ``connection_string`` and ``container``.

    ``container`` defaults to ``"foundry-checkpoint"``; with ``create_container=True`` it is
    created the first time a write finds it missing. ``client_kwargs`` go to the
    ``BlobServiceClient`` (for example ``retry_total=0`` or ``connection_verify``).

    Clients are created lazily, inside the event loop of the first call, because async clients
    are bound to the loop that opens them. After :meth:`aclose` the store can be used again (on
    any loop); it opens new clients then.

    :meth:`put` refreshes an existing blob's ``Last-Modified`` (Set Blob Metadata) instead of
    uploading it again, so a lifecycle management rule "delete base blobs N days after
    modification" is safe as long as N is longer than the state store's item TTL.

    Environment variables read by :meth:`from_env`:

    * ``FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING``: a storage connection string (wins when
      both are set), or
    * ``FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL``: the blob endpoint, authenticated with
      ``DefaultAzureCredential`` (managed identity in a hosted agent);
    * ``FOUNDRY_CHECKPOINT_BLOB_CONTAINER``: the container (default ``foundry-checkpoint``);
    * ``FOUNDRY_CHECKPOINT_BLOB_PREFIX``: the blob name prefix (default ``foundry-checkpoint``).

    Unset and empty variables are treated alike.

    Example:
        >>> spill = AzureBlobSpill(
        ...     account_url="https://myaccount.blob.core.windows.net",
        ...     credential="<account key or token credential>",
        ...     container="checkpoints",
        ... )
        >>> spill.describe
        'azure:myaccount/checkpoints/foundry-checkpoint'
    """

    ENV_CONNECTION_STRING = "FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING"
    ENV_ACCOUNT_URL = "FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL"
    ENV_CONTAINER = "FOUNDRY_CHECKPOINT_BLOB_CONTAINER"
    ENV_PREFIX = "FOUNDRY_CHECKPOINT_BLOB_PREFIX"
    DEFAULT_CONTAINER = "foundry-checkpoint"
    DEFAULT_PREFIX = "foundry-checkpoint"

    def __init__(
        self,
        container_client: ContainerClient | None = None,
        *,
        account_url: str | None = None,
        credential: Any = None,
        connection_string: str | None = None,
        container: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        create_container: bool = True,
        **client_kwargs: Any,
    ) -> None:
        """Configure the store; no network I/O happens here (see the class docstring)."""
        _import_blob_aio()
        given = [
            name
            for name, value in (
                ("container_client", container_client),
                ("account_url", account_url),
                ("connection_string", connection_string),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise InvalidArgumentError(
                "AzureBlobSpill needs exactly one of container_client, account_url or "
                f"connection_string (got {', '.join(given) or 'none'})"
            )
        if container_client is not None and (container is not None or client_kwargs):
            raise InvalidArgumentError(
                "with container_client, do not pass container or client options: "
                "configure the client you pass instead"
            )
        if container_client is not None and credential is not None:
            raise InvalidArgumentError("with container_client, do not pass credential")
        if connection_string is not None and credential is not None:
            raise InvalidArgumentError("with connection_string, do not pass credential")

        if container_client is not None:
            container_name = str(container_client.container_name)
            account = str(container_client.account_name or "")
        else:
            container_name = self.DEFAULT_CONTAINER if container is None else container
            if connection_string is not None:
                endpoint = _connection_string_field(connection_string, "BlobEndpoint")
                account = _connection_string_field(connection_string, "AccountName") or (
                    _account_from_url(endpoint) if endpoint else ""
                )
            else:
                assert account_url is not None
                account = _account_from_url(account_url)
        if not isinstance(container_name, str) or not _CONTAINER_RE.fullmatch(container_name):
            raise InvalidIdentifierError(
                f"invalid blob container name {container_name!r}: use 3-63 lowercase letters, "
                "digits and single hyphens, starting and ending with a letter or digit"
            )
        if not isinstance(prefix, str):
            raise InvalidIdentifierError("blob prefix must be a str")
        prefix = prefix.strip("/")
        if prefix:
            _check_namespace(prefix)

        self._given_client = container_client
        self._account_url = account_url
        self._credential = credential
        self._connection_string = connection_string
        self._container_name = container_name
        self._account = account
        self._prefix = prefix
        self._create_container = create_container
        self._client_kwargs = client_kwargs

        self._service: BlobServiceClient | None = None
        self._container: ContainerClient | None = None
        self._owned_credential: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_env(cls) -> AzureBlobSpill | None:
        """A store configured from ``FOUNDRY_CHECKPOINT_BLOB_*`` variables, or None when neither
        a connection string nor an account URL is set.

        Example:
            >>> spill = AzureBlobSpill.from_env()
            >>> spill is None or spill.describe.startswith("azure:")
            True
        """
        connection_string = os.environ.get(cls.ENV_CONNECTION_STRING, "").strip()
        account_url = os.environ.get(cls.ENV_ACCOUNT_URL, "").strip()
        if not connection_string and not account_url:
            return None
        container = os.environ.get(cls.ENV_CONTAINER, "").strip() or cls.DEFAULT_CONTAINER
        prefix = os.environ.get(cls.ENV_PREFIX, "").strip() or cls.DEFAULT_PREFIX
        if connection_string:
            return cls(connection_string=connection_string, container=container, prefix=prefix)
        return cls(account_url=account_url, container=container, prefix=prefix)

    @property
    def container_name(self) -> str:
        """The container holding the blobs."""
        return self._container_name

    @property
    def prefix(self) -> str:
        """The blob name prefix (without surrounding ``/``; may be empty)."""
        return self._prefix

    @property
    def describe(self) -> str:
        """``azure:<account>/<container>/<prefix>``."""
        return f"azure:{self._account}/{self._container_name}/{self._prefix}"

    def __str__(self) -> str:
        return self.describe

    def __repr__(self) -> str:
        return f"AzureBlobSpill({self.describe!r})"

    # -- clients -----------------------------------------------------------------------------

    def _client(self) -> ContainerClient:
        """The container client, created on first use inside the running loop."""
        loop = asyncio.get_running_loop()
        if self._container is not None:
            if self._loop is not loop and self._given_client is None:
                raise RuntimeError(
                    "AzureBlobSpill is bound to the event loop that first used it; "
                    "call aclose() there before using it from another loop"
                )
            return self._container
        if self._given_client is not None:
            self._container = self._given_client
        else:
            aio = _import_blob_aio()
            if self._connection_string is not None:
                self._service = aio.BlobServiceClient.from_connection_string(
                    self._connection_string, **self._client_kwargs
                )
            else:
                credential = self._credential
                if credential is None and not urlsplit(self._account_url or "").query:
                    credential = self._owned_credential = _default_credential()
                self._service = aio.BlobServiceClient(
                    self._account_url, credential=credential, **self._client_kwargs
                )
            assert self._service is not None
            self._container = self._service.get_container_client(self._container_name)
        self._loop = loop
        assert self._container is not None
        return self._container

    async def aclose(self) -> None:
        """Close the clients (and default credential) this store created. Idempotent."""
        service, self._service = self._service, None
        credential, self._owned_credential = self._owned_credential, None
        self._container = None
        self._loop = None
        if service is not None:
            await service.close()
        if credential is not None:
            await credential.close()

    def _blob_name(self, namespace: str, digest: str | None = None) -> str:
        base = f"{self._prefix}/{namespace}" if self._prefix else namespace
        return f"{base}/" if digest is None else f"{base}/{digest}"

    # -- operations --------------------------------------------------------------------------

    async def put(self, namespace: str, digest: str, data: bytes) -> None:
        """Upload the blob unless present; refresh its Last-Modified when it is.

        Costs one request when the blob exists (Set Blob Metadata) and two when it does not.
        """
        name = self._blob_name(_check_namespace(namespace), _check_digest(digest))
        await _check_content(digest, data)
        container = self._client()
        blob = container.get_blob_client(name)
        metadata = {"fcdigest": digest}
        try:
            await blob.set_blob_metadata(metadata)
            return
        except ResourceNotFoundError:
            pass
        for attempt in range(2):
            try:
                await blob.upload_blob(bytes(data), overwrite=False, metadata=metadata)
                return
            except ResourceExistsError:
                return  # a concurrent writer stored the same content just now
            except ResourceNotFoundError as exc:
                no_container = getattr(exc, "error_code", None) == "ContainerNotFound"
                if attempt or not self._create_container or not no_container:
                    raise FoundryCheckpointError(
                        f"cannot write blob {digest} of namespace {namespace!r}: container "
                        f"{self._container_name!r} does not exist in {self.describe} "
                        "(create it, or pass create_container=True)"
                    ) from exc
                with contextlib.suppress(ResourceExistsError):
                    await container.create_container()

    async def get(self, namespace: str, digest: str) -> bytes:
        """Download and verify the blob."""
        name = self._blob_name(_check_namespace(namespace), _check_digest(digest))
        try:
            downloader = await self._client().download_blob(name)
            data = bytes(await downloader.readall())
        except ResourceNotFoundError as exc:
            raise _missing(namespace, digest, self.describe) from exc
        actual = await _sha256_hex(data)
        if actual != digest:
            raise _corrupt(namespace, digest, actual, self.describe)
        return data

    async def delete(self, namespace: str, digests: Iterable[str]) -> int:
        """Delete the given blobs; returns how many existed."""
        _check_namespace(namespace)
        names = sorted({self._blob_name(namespace, _check_digest(d)) for d in digests})
        return await self._delete_names(names)

    async def _delete_names(self, names: builtins.list[str]) -> int:
        if not names:
            return 0
        container = self._client()
        semaphore = asyncio.Semaphore(_DELETE_CONCURRENCY)

        async def delete_one(name: str) -> int:
            async with semaphore:
                try:
                    await container.delete_blob(name)
                except ResourceNotFoundError:
                    return 0
                return 1

        return sum(await asyncio.gather(*(delete_one(name) for name in names)))

    async def delete_namespace(self, namespace: str) -> int:
        """Delete every blob of ``namespace``; returns the count."""
        infos = await self.list(namespace)
        return await self._delete_names([self._blob_name(namespace, i.digest) for i in infos])

    async def list(self, namespace: str) -> builtins.list[BlobInfo]:
        """Every blob directly in ``namespace``."""
        from azure.storage.blob import BlobProperties

        base = self._blob_name(_check_namespace(namespace))
        infos: builtins.list[BlobInfo] = []
        try:
            async for item in self._client().walk_blobs(name_starts_with=base, delimiter="/"):
                rest = str(item.name)[len(base) :]
                if not isinstance(item, BlobProperties) or not _DIGEST_RE.fullmatch(rest):
                    continue  # a nested namespace (a BlobPrefix, ending in "/") or a foreign blob
                infos.append(BlobInfo(rest, int(item.size), item.last_modified.timestamp()))
        except ResourceNotFoundError:
            return []
        return sorted(infos)

    async def namespaces(self) -> builtins.list[str]:
        """Every namespace under the prefix that holds at least one blob."""
        start = f"{self._prefix}/" if self._prefix else ""
        found: set[str] = set()
        try:
            async for name in self._client().list_blob_names(name_starts_with=start or None):
                namespace, _, digest = str(name)[len(start) :].rpartition("/")
                if _DIGEST_RE.fullmatch(digest) and namespace:
                    with contextlib.suppress(InvalidIdentifierError):
                        found.add(_check_namespace(namespace))
        except ResourceNotFoundError:
            return []
        return sorted(found)


def _default_credential() -> Any:
    try:
        from azure.identity.aio import DefaultAzureCredential
    except ImportError as exc:
        raise ImportError(
            "AzureBlobSpill with an account URL and no credential uses DefaultAzureCredential "
            f"from azure-identity: pip install '{_BLOB_EXTRA}' or pass credential="
        ) from exc
    return DefaultAzureCredential()
