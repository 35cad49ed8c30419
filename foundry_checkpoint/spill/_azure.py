"""The Azure Blob Storage spill store, :class:`AzureBlobSpill` (``foundry-checkpoint[blob]``).

azure-storage-blob is imported when a store is created, so importing this module works without it.

Example:
    >>> AzureBlobSpill.from_connection_string(
    ...     "AccountName=acc;AccountKey=a2V5", container="checkpoints"
    ... ).describe
    'azure:acc/checkpoints/foundry-checkpoint'
"""

from __future__ import annotations

import builtins
import contextlib
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

from .._aio import AsyncClosing, bounded
from ..errors import FoundryCheckpointError, InvalidArgumentError, InvalidIdentifierError
from ._azure_clients import (
    BlobClients,
    BlobCredential,
    account_from_url,
    check_credential,
    connection_string_field,
    import_blob_aio,
)
from ._env import ENV_ACCOUNT_URL, ENV_CONNECTION_STRING, ENV_CONTAINER, ENV_PREFIX
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
    from azure.storage.blob.aio import ContainerClient

__all__ = ["AzureBlobSpill"]

_CONTAINER_RE: Final = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}")
_DELETE_CONCURRENCY: Final = 16


class AzureBlobSpill(AsyncClosing):
    """A spill store in an Azure Blob Storage container (needs ``foundry-checkpoint[blob]``).

    Blob names are ``<prefix>/<namespace>/<digest>``. Create one in the Azure SDK's style with
    :meth:`from_connection_string`, :meth:`from_container_client` or :meth:`from_env`, or with
    the constructor and exactly one of ``container_client``, ``account_url`` (with
    ``credential``) or ``connection_string`` (see :meth:`__init__`).

    Clients are created lazily, inside the event loop of the first call, because async clients
    are bound to the loop that opens them. :meth:`aclose` (or leaving ``async with``) closes the
    clients and the default credential the store opened, never a container client you passed;
    the store can be used again afterwards (on any loop) and then opens new clients.

    :meth:`put` refreshes an existing blob's ``Last-Modified`` (Set Blob Metadata) instead of
    uploading it again, so a lifecycle management rule "delete base blobs N days after
    modification" is safe as long as N is longer than the state store's item TTL.

    Example:
        >>> spill = AzureBlobSpill(
        ...     account_url="https://myaccount.blob.core.windows.net",
        ...     credential="<account key or SAS token>",
        ...     container="checkpoints",
        ... )
        >>> spill.describe
        'azure:myaccount/checkpoints/foundry-checkpoint'
    """

    ENV_CONNECTION_STRING = ENV_CONNECTION_STRING
    ENV_ACCOUNT_URL = ENV_ACCOUNT_URL
    ENV_CONTAINER = ENV_CONTAINER
    ENV_PREFIX = ENV_PREFIX
    DEFAULT_CONTAINER = "foundry-checkpoint"
    DEFAULT_PREFIX = "foundry-checkpoint"

    def __init__(
        self,
        container_client: ContainerClient | None = None,
        *,
        account_url: str | None = None,
        credential: BlobCredential = None,
        connection_string: str | None = None,
        container: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        create_container: bool = True,
        **client_kwargs: Any,
    ) -> None:
        """Configure the store from exactly one source; no network I/O happens here.

        Args:
            container_client: An ``azure.storage.blob.aio.ContainerClient`` you own (the store
                never closes it). It must not have been used on another event loop, since all
                I/O runs on the checkpointer's own loop.
            account_url: The blob endpoint, ``https://<account>.blob.core.windows.net``.
            credential: With ``account_url``: an async token credential (``azure.identity.aio``),
                an ``AzureNamedKeyCredential``, an ``AzureSasCredential``, an account key or SAS
                token string, or None: then ``azure.identity.aio.DefaultAzureCredential`` is
                used (and closed by :meth:`aclose`) unless the URL carries a SAS token.
            connection_string: A storage connection string.
            container: The container (default ``"foundry-checkpoint"``); not with
                ``container_client``.
            prefix: The blob name prefix (surrounding ``/`` removed; may be empty).
            create_container: Create the container the first time a write finds it missing.
            **client_kwargs: Options for the ``BlobServiceClient`` (for example
                ``retry_total=0`` or ``connection_verify``); not with ``container_client``.

        Raises:
            InvalidArgumentError: Not exactly one source, an option that does not apply to the
                source given, an empty connection string or account URL, or an unsupported
                credential.
            InvalidIdentifierError: An invalid container name or prefix.
            ImportError: azure-storage-blob or aiohttp is missing (the ``blob`` extra).

        Example:
            >>> AzureBlobSpill(connection_string="AccountName=acc;AccountKey=a2V5").describe
            'azure:acc/foundry-checkpoint/foundry-checkpoint'
        """
        import_blob_aio()
        container_name, account = _source(
            container_client, account_url, credential, connection_string, container, client_kwargs
        )
        if not isinstance(prefix, str):
            raise InvalidIdentifierError("blob prefix must be a str")
        prefix = prefix.strip("/")
        if prefix:
            check_namespace(prefix)

        self._container_name = container_name
        self._account = account
        self._prefix = prefix
        self._create_container = create_container
        self._clients = BlobClients(
            container_client,
            account_url=account_url,
            credential=credential,
            connection_string=connection_string,
            container_name=container_name,
            client_kwargs=client_kwargs,
        )

    @classmethod
    def from_connection_string(
        cls,
        connection_string: str,
        container: str | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        create_container: bool = True,
        **client_kwargs: Any,
    ) -> AzureBlobSpill:
        """A store in ``container`` of the account a storage connection string names.

        Args:
            connection_string: The storage connection string (account key or SAS inside).
            container: The container (default ``"foundry-checkpoint"``).
            prefix: The blob name prefix.
            create_container: Create the container the first time a write finds it missing.
            **client_kwargs: Options for the ``BlobServiceClient``.

        Returns:
            The store; it opens its clients on first use and closes them in :meth:`aclose`.

        Raises:
            InvalidArgumentError: An empty connection string.
            InvalidIdentifierError: An invalid container name or prefix.
            ImportError: azure-storage-blob or aiohttp is missing (the ``blob`` extra).

        Example:
            >>> spill = AzureBlobSpill.from_connection_string(
            ...     "DefaultEndpointsProtocol=https;AccountName=myaccount;AccountKey=a2V5",
            ...     container="checkpoints",
            ... )
            >>> spill.describe
            'azure:myaccount/checkpoints/foundry-checkpoint'
        """
        return cls(
            connection_string=connection_string,
            container=container,
            prefix=prefix,
            create_container=create_container,
            **client_kwargs,
        )

    @classmethod
    def from_container_client(
        cls,
        container_client: ContainerClient,
        *,
        prefix: str = DEFAULT_PREFIX,
        create_container: bool = True,
    ) -> AzureBlobSpill:
        """A store in the container of a client you own (and close; the store never does).

        Args:
            container_client: An ``azure.storage.blob.aio.ContainerClient``, not used on
                another event loop than the checkpointer's.
            prefix: The blob name prefix.
            create_container: Create the container the first time a write finds it missing.

        Returns:
            The store.

        Raises:
            InvalidIdentifierError: An invalid container name or prefix.
            ImportError: azure-storage-blob or aiohttp is missing (the ``blob`` extra).

        Example:
            >>> from azure.storage.blob.aio import ContainerClient
            >>> client = ContainerClient.from_connection_string(
            ...     "AccountName=myaccount;AccountKey=a2V5", container_name="checkpoints"
            ... )
            >>> AzureBlobSpill.from_container_client(client, prefix="lg").describe
            'azure:myaccount/checkpoints/lg'
        """
        return cls(container_client, prefix=prefix, create_container=create_container)

    @classmethod
    def from_env(cls) -> AzureBlobSpill | None:
        """A store configured from the ``FOUNDRY_CHECKPOINT_BLOB_*`` environment variables.

        The checkpointers call it when no ``spill=`` is passed. The variables (unset and empty
        ones are treated alike):

        * ``FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING``: a storage connection string (wins
          when both it and the account URL are set), or
        * ``FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL``: the blob endpoint, authenticated with
          ``DefaultAzureCredential`` (a managed identity in a hosted agent);
        * ``FOUNDRY_CHECKPOINT_BLOB_CONTAINER``: the container (default
          ``foundry-checkpoint``);
        * ``FOUNDRY_CHECKPOINT_BLOB_PREFIX``: the blob name prefix (default
          ``foundry-checkpoint``).

        Returns:
            The store, or None when neither a connection string nor an account URL is set.

        Raises:
            InvalidIdentifierError: The container or prefix variable is invalid.
            ImportError: azure-storage-blob or aiohttp is missing (the ``blob`` extra).

        Example:
            >>> import os
            >>> from unittest import mock
            >>> env = {"FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL": "https://myaccount.blob.core.windows.net"}
            >>> with mock.patch.dict(os.environ, env, clear=True):
            ...     AzureBlobSpill.from_env().describe
            'azure:myaccount/foundry-checkpoint/foundry-checkpoint'
            >>> with mock.patch.dict(os.environ, {}, clear=True):
            ...     AzureBlobSpill.from_env() is None
            True
        """
        connection_string = os.environ.get(cls.ENV_CONNECTION_STRING, "").strip()
        account_url = os.environ.get(cls.ENV_ACCOUNT_URL, "").strip()
        if not connection_string and not account_url:
            return None
        container = os.environ.get(cls.ENV_CONTAINER, "").strip() or cls.DEFAULT_CONTAINER
        prefix = os.environ.get(cls.ENV_PREFIX, "").strip() or cls.DEFAULT_PREFIX
        if connection_string:
            return cls.from_connection_string(connection_string, container, prefix=prefix)
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

    async def aclose(self) -> None:
        """Close the clients (and default credential) this store opened. Idempotent.

        A container client passed in stays open: it is the caller's.
        """
        await self._clients.aclose()

    def _client(self) -> ContainerClient:
        return self._clients.container()

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
            # never inflated on the way: a blob stored with a Content-Encoding (this store sets
            # none) would otherwise be decompressed without bound before it is verified
            downloader = await self._client().download_blob(name, decompress=False)
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

        async def delete_one(name: str) -> int:
            try:
                await container.delete_blob(name)
            except ResourceNotFoundError:
                return 0
            return 1

        return sum(await bounded((delete_one(n) for n in names), limit=_DELETE_CONCURRENCY))

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


def _source(
    container_client: ContainerClient | None,
    account_url: str | None,
    credential: object,
    connection_string: str | None,
    container: str | None,
    client_kwargs: dict[str, Any],
) -> tuple[str, str]:
    """The container name and account of a constructor's arguments, after checking them."""
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
    for name, text in (("account_url", account_url), ("connection_string", connection_string)):
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise InvalidArgumentError(f"{name} must be a non-empty str, got {text!r}")
    check_credential(credential)

    if container_client is not None:
        container_name = str(container_client.container_name)
        account = str(container_client.account_name or "")
    else:
        container_name = AzureBlobSpill.DEFAULT_CONTAINER if container is None else container
        if connection_string is not None:
            endpoint = connection_string_field(connection_string, "BlobEndpoint")
            account = connection_string_field(connection_string, "AccountName") or (
                account_from_url(endpoint) if endpoint else ""
            )
        else:
            assert account_url is not None
            account = account_from_url(account_url)
    if not isinstance(container_name, str) or not _CONTAINER_RE.fullmatch(container_name):
        raise InvalidIdentifierError(
            f"invalid blob container name {container_name!r}: use 3-63 lowercase letters, "
            "digits and single hyphens, starting and ending with a letter or digit"
        )
    return container_name, account
