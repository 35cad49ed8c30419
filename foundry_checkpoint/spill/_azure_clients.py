"""The Azure Blob clients behind an :class:`~foundry_checkpoint.spill.AzureBlobSpill`.

Async clients are bound to the event loop that opens them, so :class:`BlobClients` opens them
lazily, inside the loop of the first call, and :meth:`BlobClients.aclose` closes what it opened
(never a container client the caller passed). azure-storage-blob is imported only when clients
are configured, so importing this module works without the ``blob`` extra.

Example:
    >>> account_from_url("https://myaccount.blob.core.windows.net")
    'myaccount'
    >>> account_from_url("http://127.0.0.1:10000/devstoreaccount1")
    'devstoreaccount1'
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final, TypeAlias
from urllib.parse import urlsplit

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential
    from azure.storage.blob.aio import BlobServiceClient, ContainerClient

__all__ = [
    "BLOB_EXTRA",
    "BlobClients",
    "BlobCredential",
    "account_from_url",
    "check_credential",
    "connection_string_field",
    "import_blob_aio",
]

BLOB_EXTRA: Final = "foundry-checkpoint[blob]"

BlobCredential: TypeAlias = (
    "AsyncTokenCredential | AzureNamedKeyCredential | AzureSasCredential | str | None"
)
"""What authenticates an account URL: an async token credential (``azure.identity.aio``), a
named key or SAS credential, an account key or SAS token string, or None (see
:class:`~foundry_checkpoint.spill.AzureBlobSpill`)."""


def import_blob_aio() -> Any:
    """The ``azure.storage.blob.aio`` module, or an ImportError that names the extra."""
    try:
        import aiohttp  # noqa: F401  # the async transport azure-storage-blob needs
        from azure.storage.blob import aio
    except ImportError as exc:
        raise ImportError(
            f"AzureBlobSpill needs azure-storage-blob and aiohttp: pip install '{BLOB_EXTRA}'"
        ) from exc
    return aio


def connection_string_field(connection_string: str, field: str) -> str | None:
    """The value of ``field`` (case-insensitive) in a storage connection string, or None."""
    for part in connection_string.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name.strip().lower() == field.lower():
            return value.strip()
    return None


def account_from_url(url: str) -> str:
    """The storage account an endpoint URL names (host label, or first path segment for
    emulator-style ``http://127.0.0.1:10000/<account>`` URLs)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    path_first = parts.path.strip("/").split("/", 1)[0]
    if host in ("localhost", "") or host.replace(".", "").isdigit() or ":" in host:
        return path_first or host
    return host.split(".", 1)[0]


def check_credential(credential: object) -> BlobCredential:
    """Return ``credential`` when it is a :data:`BlobCredential`, else raise
    InvalidArgumentError (an async token credential is anything with ``get_token``)."""
    if credential is None or isinstance(
        credential, (str, AzureNamedKeyCredential, AzureSasCredential)
    ):
        return credential
    if callable(getattr(credential, "get_token", None)):
        return credential  # type: ignore[return-value]  # an AsyncTokenCredential
    raise InvalidArgumentError(
        f"unsupported blob credential {type(credential).__name__}: pass an async token "
        "credential (azure.identity.aio), AzureNamedKeyCredential, AzureSasCredential, an "
        "account key or SAS token string, or None"
    )


def _default_credential() -> Any:
    try:
        from azure.identity.aio import DefaultAzureCredential
    except ImportError as exc:
        raise ImportError(
            "AzureBlobSpill with an account URL and no credential uses DefaultAzureCredential "
            f"from azure-identity: pip install '{BLOB_EXTRA}' or pass credential="
        ) from exc
    return DefaultAzureCredential()


class BlobClients:
    """The container client of one store: the caller's, or one opened (with its service client
    and, for an account URL without a credential, a ``DefaultAzureCredential``) on first use.

    Example:
        >>> clients = BlobClients(None, account_url=None, credential=None,
        ...                       connection_string="AccountName=acc;AccountKey=a2V5",
        ...                       container_name="checkpoints", client_kwargs={})
        >>> clients.owned_credential is None
        True
    """

    def __init__(
        self,
        given: ContainerClient | None,
        *,
        account_url: str | None,
        credential: BlobCredential,
        connection_string: str | None,
        container_name: str,
        client_kwargs: dict[str, Any],
    ) -> None:
        """Remember how to open the clients; nothing is opened here."""
        self._given = given
        self._account_url = account_url
        self._credential = credential
        self._connection_string = connection_string
        self._container_name = container_name
        self._client_kwargs = client_kwargs
        self._service: BlobServiceClient | None = None
        self._container: ContainerClient | None = None
        self.owned_credential: Any = None
        """The ``DefaultAzureCredential`` these clients opened (closed by :meth:`aclose`)."""
        self._loop: asyncio.AbstractEventLoop | None = None

    def container(self) -> ContainerClient:
        """The container client, created on first use inside the running loop.

        Raises:
            RuntimeError: Clients this object opened are in use on another event loop.
        """
        loop = asyncio.get_running_loop()
        if self._container is not None:
            if self._loop is not loop and self._given is None:
                raise RuntimeError(
                    "AzureBlobSpill is bound to the event loop that first used it; "
                    "call aclose() there before using it from another loop"
                )
            return self._container
        if self._given is not None:
            self._container = self._given
        else:
            aio = import_blob_aio()
            if self._connection_string is not None:
                service = aio.BlobServiceClient.from_connection_string(
                    self._connection_string, **self._client_kwargs
                )
            else:
                credential = self._credential
                if credential is None and not urlsplit(self._account_url or "").query:
                    credential = self.owned_credential = _default_credential()
                service = aio.BlobServiceClient(
                    self._account_url, credential=credential, **self._client_kwargs
                )
            self._service = service
            self._container = service.get_container_client(self._container_name)
        self._loop = loop
        assert self._container is not None
        return self._container

    async def aclose(self) -> None:
        """Close the service client and credential opened here (not a given client).

        Idempotent; the next :meth:`container` opens new clients, on any loop.
        """
        service, self._service = self._service, None
        credential, self.owned_credential = self.owned_credential, None
        self._container = None
        self._loop = None
        if service is not None:
            await service.close()
        if credential is not None:
            await credential.close()
