"""The Azure Blob Storage spill store, :class:`AzureBlobSpill` (``foundry-checkpoint[blob]``).

azure-storage-blob is imported when a store is created, so importing this module works without it.

Example:
    >>> AzureBlobSpill(connection_string="AccountName=acc;AccountKey=a2V5",
    ...                container="checkpoints").describe
    'azure:acc/checkpoints/foundry-checkpoint'
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

from ..errors import FoundryCheckpointError, InvalidArgumentError, InvalidIdentifierError
from ._protocol import (
    DIGEST_RE,
    BlobInfo,
    blob_bytes,
    check_digest,
    check_namespace,
    missing_blob,
    sha256_hex,
    verified,
)

if TYPE_CHECKING:
    from azure.storage.blob.aio import BlobServiceClient, ContainerClient

__all__ = ["AzureBlobSpill"]

_CONTAINER_RE: Final = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}")
_DELETE_CONCURRENCY: Final = 16
_BLOB_EXTRA: Final = "foundry-checkpoint[blob]"


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
            check_namespace(prefix)

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

    async def put(self, namespace: str, data: bytes) -> str:
        """Upload the blob unless present (refresh its Last-Modified when it is).

        Costs one request when the blob exists (Set Blob Metadata) and two when it does not.

        Args:
            namespace: The namespace to store the blob in.
            data: The blob's bytes.

        Returns:
            The blob's sha256 (its name), as 64 lowercase hex characters.

        Raises:
            InvalidIdentifierError: ``namespace`` is not a valid namespace.
            InvalidArgumentError: ``data`` is not bytes.
            FoundryCheckpointError: The container is missing and ``create_container`` is off.
        """
        check_namespace(namespace)
        blob = blob_bytes(data)
        digest = await sha256_hex(blob)
        await self._upload(namespace, digest, blob)
        return digest

    async def _upload(self, namespace: str, digest: str, data: bytes) -> None:
        container = self._client()
        blob = container.get_blob_client(self._blob_name(namespace, digest))
        metadata = {"fcdigest": digest}
        try:
            await blob.set_blob_metadata(metadata)
            return
        except ResourceNotFoundError:
            pass
        for attempt in range(2):
            try:
                await blob.upload_blob(data, overwrite=False, metadata=metadata)
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
        name = self._blob_name(check_namespace(namespace), check_digest(digest))
        try:
            downloader = await self._client().download_blob(name)
            data = bytes(await downloader.readall())
        except ResourceNotFoundError as exc:
            raise missing_blob(namespace, digest, self.describe) from exc
        return await verified(namespace, digest, data, self.describe)

    async def delete(self, namespace: str, digests: Iterable[str]) -> int:
        """Delete the given blobs; returns how many existed."""
        check_namespace(namespace)
        names = sorted({self._blob_name(namespace, check_digest(d)) for d in digests})
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

        base = self._blob_name(check_namespace(namespace))
        infos: builtins.list[BlobInfo] = []
        try:
            async for item in self._client().walk_blobs(name_starts_with=base, delimiter="/"):
                rest = str(item.name)[len(base) :]
                if not isinstance(item, BlobProperties) or not DIGEST_RE.fullmatch(rest):
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
                if DIGEST_RE.fullmatch(digest) and namespace:
                    with contextlib.suppress(InvalidIdentifierError):
                        found.add(check_namespace(namespace))
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
