"""The hosted backend: ``FoundryStateStore`` clients sharing one credential and one transport.

Left to itself each ``FoundryStateStore`` builds its own credential and aiohttp session (a
connection pool per store: descriptors grow with the threads served), and azure-core turns a
CA-file ``connection_verify`` into a new SSL context per request. :class:`HostedClients`
builds every client of one core with the same credential (the one passed, else one
``DefaultAzureCredential`` created on first use) and the same transport (one session, one SSL
context), and closes what it created in :meth:`HostedClients.aclose`. Its clients are
:class:`HostedStore`, which reads a ``list_keys`` page into light records (the SDK's models
cost ~75 µs a key to build: ~7 ms for the 100-key page "latest" reads every turn). The SDK
also ignores azure-core's ``retry_*`` client options, so :class:`RetrySettingsPolicy` applies
them per request; and since azure-core never retries a POST on a transport error,
:func:`transport_retried` repeats creates that are safe to repeat.

Example:
    >>> import asyncio
    >>> async def demo() -> list[str]:
    ...     clients = HostedClients(
    ...         endpoint="https://example.invalid", user_id=None, item_ttl_seconds=-1,
    ...         credential=None, client_kwargs={"retry_total": 0})
    ...     try:
    ...         return [type(p).__name__ for p in clients.pipeline_kwargs()["per_call_policies"]]
    ...     finally:
    ...         await clients.aclose()
    >>> asyncio.run(demo())
    ['RetrySettingsPolicy']
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

from azure.ai.agentserver.core import FoundryAgentRequestContext
from azure.ai.agentserver.core.storage import (
    FoundryStateStore,
    FoundryStorageConflictError,
    FoundryStorageNotFoundError,
    Order,
    StateStore,
)
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline import PipelineRequest
from azure.core.pipeline.policies import SansIOHTTPPolicy
from azure.core.rest import AsyncHttpResponse, HttpRequest

from foundry_checkpoint.errors import FoundryCheckpointError, InvalidArgumentError

from ._backend import BackendSettings, Caller, hosted_caller
from ._limits import HOSTING_ENV, MAX_PAGE, PROJECT_ENDPOINT_ENV
from ._protocol import StateStoreLike
from ._records import PageRecord

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

__all__ = [
    "RETRY_OPTIONS",
    "HostedBackend",
    "HostedClients",
    "HostedStore",
    "RetrySettingsPolicy",
    "create_store",
    "env_settings_present",
    "hosted",
    "page_of",
    "transport_retried",
]

T = TypeVar("T")

_TRANSPORT_ATTEMPTS: Final = 4
#: Store names a :class:`HostedClients` remembers as answering "no such store" (bounded).
_MAX_ABSENT: Final = 4096

#: azure-core's retry options that :class:`RetrySettingsPolicy` applies to every request.
RETRY_OPTIONS: Final = (
    "retry_total",
    "retry_connect",
    "retry_read",
    "retry_status",
    "retry_backoff_factor",
    "retry_backoff_max",
)


def hosted() -> bool:
    """True when running inside a Foundry-hosted agent (``FOUNDRY_HOSTING_ENVIRONMENT`` set).

    Example:
        >>> import os
        >>> hosted() == bool(os.environ.get("FOUNDRY_HOSTING_ENVIRONMENT"))
        True
    """
    return bool(os.environ.get(HOSTING_ENV))


def env_settings_present() -> bool:
    """True when the environment names a proxy (``HTTPS_PROXY``, ...) or a ``.netrc`` exists.

    An aiohttp session that trusts the environment looks both up again on every request,
    each on a worker thread (two thread hops and ~0.15 ms of CPU a request, six requests a
    turn); with neither present, the shared session is made without ``trust_env``, which
    behaves the same. Proxy variables set after the session is made are not seen.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {"HTTPS_PROXY": "http://proxy.invalid:3128"}):
        ...     env_settings_present()
        True
    """
    from aiohttp.helpers import netrc_from_env, proxies_from_env

    return bool(proxies_from_env()) or netrc_from_env() is not None


class RetrySettingsPolicy(SansIOHTTPPolicy[HttpRequest, AsyncHttpResponse]):
    """Hands azure-core retry options to the SDK's own ``AsyncRetryPolicy``, per request.

    ``FoundryStateStore`` builds ``AsyncRetryPolicy()`` with its defaults and ignores
    ``retry_total=`` and the other ``retry_*`` client options. The retry policy reads those
    options from each request's context, though, so this policy (a per-call policy, which
    azure-core places before the retry policy) puts the configured values there unless the
    call already set them.

    Args:
        settings: ``retry_*`` options (see :data:`RETRY_OPTIONS`) and their values.

    Raises:
        InvalidArgumentError: A key of ``settings`` is not a retry option.

    Example:
        >>> policy = RetrySettingsPolicy({"retry_total": 0})
        >>> policy.settings
        {'retry_total': 0}
    """

    def __init__(self, settings: Mapping[str, Any]) -> None:
        unknown = set(settings) - set(RETRY_OPTIONS)
        if unknown:
            raise InvalidArgumentError(f"not retry options: {sorted(unknown)}")
        self.settings = dict(settings)

    def on_request(self, request: PipelineRequest[HttpRequest]) -> None:
        """Set the configured retry options on the request unless it carries its own."""
        for key, value in self.settings.items():
            request.context.options.setdefault(key, value)


async def transport_retried(make: Callable[[], Awaitable[T]]) -> T:
    """``make()``, again after a dropped connection or a failed send.

    azure-core retries a POST only on some HTTP statuses, never on a transport error, so a
    create (a store, an item) would fail a whole step on one dropped connection. Callers only
    pass operations that are safe to repeat: a create that did land answers 409 the second
    time, which they treat as "already there".

    Args:
        make: Starts the operation afresh on every call.

    Returns:
        What the first attempt that did not fail in transport answered.

    Raises:
        ServiceRequestError: The last attempt could not send.
        ServiceResponseError: The last attempt got no response.
    """
    for attempt in range(_TRANSPORT_ATTEMPTS):
        try:
            return await make()
        except (ServiceRequestError, ServiceResponseError):
            if attempt == _TRANSPORT_ATTEMPTS - 1:
                raise
            await asyncio.sleep(0.1 * 4**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def page_of(body: str | None) -> PageRecord:
    """The page of a ``list_keys`` response body (an empty body is an empty page, as for the
    SDK).

    Example:
        >>> page_of('{"data": [], "first_id": null, "last_id": null}').has_more
        False
    """
    return PageRecord.of_wire(json.loads(body or "{}"))


class HostedStore(FoundryStateStore):
    """``FoundryStateStore`` whose ``list_keys`` answers light records.

    The request is the SDK's own (path, query, headers, call id, pipeline and error mapping);
    only the answer is read differently: into :class:`~._records.PageRecord` and its key records,
    which have the attributes of the SDK's ``StateStoreItemKeyPage`` and ``StateStoreItemKey``
    that callers read. The SDK builds a generated model per key, ~7 ms of CPU for a page of
    100 keys against under 0.5 ms here, and hosted "latest" reads such a page every turn.
    Every other call is the SDK's. Only :class:`HostedClients` builds one, in hosted mode, so
    the SDK's local backend is never behind it.

    Example:
        >>> import asyncio
        >>> async def demo() -> str:
        ...     clients = HostedClients(endpoint="https://example.invalid", user_id="ann",
        ...                             item_ttl_seconds=60, credential=None, client_kwargs={})
        ...     store = clients.client("s")
        ...     await store.aclose()
        ...     await clients.aclose()
        ...     return type(store).__name__
        >>> asyncio.run(demo())
        'HostedStore'
    """

    #: The descriptor :meth:`HostedClients.get_or_create` read or created this client with.
    opened_descriptor: StateStore | None = None
    _absent: _Absent | None = None

    async def get(self) -> StateStore:
        """The store's descriptor (the SDK's ``get``); a store found missing is remembered
        by the :class:`HostedClients` that built this client, whose next
        :meth:`~HostedClients.get_or_create` of it then creates it without looking first.

        Raises:
            FoundryStorageNotFoundError: The store does not exist.
        """
        try:
            return await super().get()
        except FoundryStorageNotFoundError:
            if self._absent is not None:
                self._absent.add(self.name)
            raise

    async def list_keys(  # type: ignore[override]
        self,
        *,
        tags: Mapping[str, str] | None = None,
        limit: int | None = None,
        after: str | None = None,
        before: str | None = None,
        order: Order = "desc",
        call_id: str | None = None,
    ) -> PageRecord:
        """One page of keys, newest first by default (see ``FoundryStateStore.list_keys``).

        Args:
            tags: Exact tag filter.
            limit: Page size.
            after: List after this item id.
            before: List before this item id.
            order: ``"asc"`` or ``"desc"``.
            call_id: The Foundry call id to forward (None: the request context's).

        Returns:
            The page.

        Raises:
            ValueError: Both ``after`` and ``before`` are given.
            FoundryStorageError: The service refused the call.
        """
        if after is not None and before is not None:
            raise ValueError("after and before are mutually exclusive")
        query: dict[str, str] = {}
        if tags is not None:
            for key, value in tags.items():
                query[f"tags.{key}"] = value
        if limit is not None:
            query["limit"] = str(limit)
        if after is not None:
            query["after"] = after
        if before is not None:
            query["before"] = before
        query["order"] = order
        response = await self._send_storage_request(
            self._request(
                "GET",
                f"{self._store_path()}/items:keys",
                include_user_id=True,
                call_id=call_id,
                query=query,
            )
        )
        return page_of(response.text())


class _Absent:
    """Store names last seen missing, oldest forgotten first (at most ``size``)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._names: dict[str, None] = {}

    def add(self, name: str) -> None:
        self._names.pop(name, None)
        self._names[name] = None
        if len(self._names) > self._size:
            del self._names[next(iter(self._names))]

    def take(self, name: str) -> bool:
        """Whether ``name`` was seen missing (and forget it: the caller is creating it)."""
        return self._names.pop(name, 0) is None


async def create_store(store: FoundryStateStore) -> StateStore | None:
    """Create ``store``'s store (one POST) and answer its descriptor; None when the SDK no
    longer has the call this relies on (then the caller takes the public path).

    The SDK's public API creates a store only inside ``FoundryStateStore.get_or_create``,
    which looks first (a GET) and drops the descriptor the create answered with, so opening a
    store already known to be missing would cost three round trips (GET, POST, and a GET for
    the descriptor) where one does. The create request itself is the SDK's own
    ``_create_properties`` (its body, headers, pipeline and error mapping); this is the one
    place that calls it, and ``tests/backends/test_hosted_open.py`` fails if the SDK changes
    it.

    Args:
        store: An SDK client in hosted mode.

    Returns:
        The created store's descriptor, or None (the SDK changed; nothing was sent).

    Raises:
        FoundryStorageConflictError: The store exists already.
    """
    create = getattr(type(store), "_create_properties", None)
    if not inspect.iscoroutinefunction(create) or len(inspect.signature(create).parameters) != 1:
        return None
    descriptor = await create(store)
    return descriptor if isinstance(descriptor, StateStore) else await store.get()


class HostedClients:
    """Builds the hosted store clients of one core, sharing a credential and a transport.

    Clients are built with ``user_isolation=True`` and the core's TTL and ``user_id``. Building
    a client sends nothing; :meth:`get_or_create` does. Closing a client leaves the shared
    transport and credential open; :meth:`aclose` closes what this object created.

    Args:
        endpoint: The project endpoint (None: the SDK reads ``FOUNDRY_PROJECT_ENDPOINT``).
        user_id: The delegated end user (sent as ``x-ms-user-id``; the options accept it in
            hosted mode only with ``trusted_delegation=True``), or None.
        item_ttl_seconds: The stores' item TTL.
        credential: An async credential, or None for one ``DefaultAzureCredential``.
        client_kwargs: azure-core client options (``connection_verify``, ``retry_total``, ...).

    Example:
        >>> import asyncio
        >>> async def demo() -> str:
        ...     clients = HostedClients(endpoint="https://example.invalid", user_id="ann",
        ...                             item_ttl_seconds=60, credential=None, client_kwargs={})
        ...     store = clients.client("s")
        ...     await store.aclose()
        ...     await clients.aclose()
        ...     return store.name
        >>> asyncio.run(demo())
        's'
    """

    def __init__(
        self,
        *,
        endpoint: str | None,
        user_id: str | None,
        item_ttl_seconds: int,
        credential: AsyncTokenCredential | None,
        client_kwargs: Mapping[str, Any],
    ) -> None:
        self._endpoint = endpoint
        self._user_id = user_id
        self._ttl = item_ttl_seconds
        self._credential = credential
        self._client_kwargs = dict(client_kwargs)
        self._owned_credential: AsyncTokenCredential | None = None
        self._session: Any = None
        self._transport: Any = None
        self._absent = _Absent(_MAX_ABSENT)

    def client(self, name: str) -> HostedStore:
        """A client of the store ``name``; no I/O.

        Args:
            name: The store name.

        Returns:
            The client, isolated, on the shared credential and transport.
        """
        store = HostedStore(
            name,
            self.credential(),
            self._endpoint,
            user_isolation=True,
            item_ttl_seconds=self._ttl,
            user_id=self._user_id,
            **self.pipeline_kwargs(),
        )
        store._absent = self._absent
        return store

    async def get_or_create(self, name: str) -> HostedStore:
        """A client of the store ``name``, created isolated first when it does not exist.

        One round trip when the store exists (a GET, whose descriptor the client keeps as
        ``opened_descriptor`` for the isolation check) or when a GET of this object's clients
        found it missing before (a create, whose answer is the descriptor); a GET and a create
        otherwise. A create that finds the store there (another writer was quicker, or an
        earlier "missing" is stale) reads it instead.

        Args:
            name: The store name.

        Returns:
            The client (an existing store keeps its own settings: check its descriptor).
        """
        store = self.client(name)
        try:
            if self._absent.take(name):
                descriptor = await self._create(store)
            else:
                try:
                    descriptor = await store.get()
                except FoundryStorageNotFoundError:
                    self._absent.take(name)
                    descriptor = await self._create(store)
        except BaseException:
            await store.aclose()
            raise
        store.opened_descriptor = descriptor
        return store

    async def _create(self, store: HostedStore) -> StateStore:
        """Create ``store``'s store isolated (again after a dropped connection), or read it when
        it exists; the public path (the SDK's ``get_or_create``, then a GET) when
        :func:`create_store` cannot be used."""
        try:
            descriptor = await transport_retried(lambda: create_store(store))
        except FoundryStorageConflictError:
            return await store.get()
        if descriptor is not None:
            return descriptor
        opened = await transport_retried(
            lambda: HostedStore.get_or_create(
                store.name,
                self.credential(),
                self._endpoint,
                user_isolation=True,
                item_ttl_seconds=self._ttl,
                user_id=self._user_id,
                **self.pipeline_kwargs(),
            )
        )
        await opened.aclose()
        return await store.get()

    def credential(self) -> AsyncTokenCredential:
        """The one credential every client uses.

        The one passed in, else one ``DefaultAzureCredential`` created on first use and closed
        by :meth:`aclose` (the SDK would build one per client: one per thread served).

        Returns:
            The credential.

        Raises:
            FoundryCheckpointError: No credential was passed and azure-identity is missing.
        """
        if self._credential is not None:
            return self._credential
        if self._owned_credential is None:
            try:
                from azure.identity.aio import DefaultAzureCredential
            except ImportError as exc:  # pragma: no cover - azure-identity is a dependency
                raise FoundryCheckpointError(
                    "hosted mode without credential= uses DefaultAzureCredential: install "
                    "azure-identity, or pass an async credential"
                ) from exc
            self._owned_credential = DefaultAzureCredential()
        return self._owned_credential

    def pipeline_kwargs(self) -> dict[str, Any]:
        """The client keyword arguments, with one transport shared by every client.

        The session is made once, with one SSL context built from
        ``connection_verify``/``connection_cert``, and every client gets the same transport,
        which it does not own. It honours proxy variables and ``.netrc`` (``use_env_settings``,
        on by default) only when :func:`env_settings_present` finds some when it is made. A
        ``transport=`` passed by the caller is used as given. The ``retry_*`` options are
        taken out and applied per request by a :class:`RetrySettingsPolicy` placed before the
        SDK's policy (``per_call_policies``).

        Returns:
            Keyword arguments for ``FoundryStateStore``.
        """
        kwargs = dict(self._client_kwargs)
        retry: dict[str, Any] = {k: kwargs.pop(k) for k in RETRY_OPTIONS if k in kwargs}
        if retry:
            extra = kwargs.pop("per_call_policies", None)
            chain = (
                [] if extra is None else list(extra) if isinstance(extra, list | tuple) else [extra]
            )
            kwargs["per_call_policies"] = [RetrySettingsPolicy(retry), *chain]
        if "transport" in kwargs:
            return kwargs
        if self._transport is None:
            import ssl

            import aiohttp
            from azure.core.pipeline.transport import AioHttpTransport

            verify = kwargs.get("connection_verify", True)
            cert = kwargs.get("connection_cert")
            context: ssl.SSLContext | bool
            if verify is False and not cert:
                context = False
            else:
                context = ssl.create_default_context(
                    cafile=verify if isinstance(verify, str) else None
                )
                if verify is False:
                    context.check_hostname = False
                    context.verify_mode = ssl.CERT_NONE
                if cert:
                    context.load_cert_chain(*((cert,) if isinstance(cert, str) else cert))
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=context),
                trust_env=bool(kwargs.get("use_env_settings", True)) and env_settings_present(),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
            )
            transport_kwargs = {
                k: v
                for k, v in kwargs.items()
                if k not in ("connection_verify", "connection_cert", "per_call_policies")
            }
            self._transport = AioHttpTransport(
                session=self._session, session_owner=False, **transport_kwargs
            )
        kwargs.pop("connection_verify", None)
        kwargs.pop("connection_cert", None)
        kwargs["transport"] = self._transport
        return kwargs

    async def aclose(self) -> None:
        """Close the shared session and the credential this object created; idempotent."""
        session, self._session, self._transport = self._session, None, None
        if session is not None:
            await session.close()
        credential, self._owned_credential = self._owned_credential, None
        if credential is not None:
            await credential.close()


class HostedBackend:
    """The Foundry service (chosen whenever ``FOUNDRY_HOSTING_ENVIRONMENT`` is set): one
    :class:`HostedClients` per adapter object.

    The service partitions by the request's call id (or the token), so a client binds no
    partition (``""``); values are compressed when that pays; with no spill store configured,
    values over the item limit go into the scope's own store as chunk items; the first
    "latest" page asks for a full page (each page is one request).

    Args:
        settings: The adapter's options (endpoint, credential, ``user_id``, TTL, client
            options).

    Example:
        >>> import asyncio
        >>> from foundry_checkpoint._options import StoreOptions
        >>> backend = HostedBackend(StoreOptions(store_prefix="x", endpoint="https://e.invalid"))
        >>> backend.kind, backend.location, backend.chunks_in_store, backend.spill_root
        ('hosted', 'https://e.invalid', True, None)
        >>> asyncio.run(backend.aclose())
    """

    kind = "hosted"
    compresses = True
    chunks_in_store = True
    spill_root = None
    first_page = MAX_PAGE

    def __init__(self, settings: BackendSettings) -> None:
        self.location = settings.endpoint or os.environ.get(PROJECT_ENDPOINT_ENV, "(unset)")
        self.clients = HostedClients(
            endpoint=settings.endpoint,
            user_id=settings.user_id,
            item_ttl_seconds=settings.item_ttl_seconds,
            credential=settings.credential,
            client_kwargs=settings.client_kwargs,
        )

    @staticmethod
    def caller(user_id: str | None, context: FoundryAgentRequestContext) -> Caller:
        """The hosted rule: the request's identity, else the delegated user, else the token."""
        return hosted_caller(user_id, context)

    async def open(self, name: str, partition: str, *, create: bool) -> StateStoreLike | None:
        """A client of ``name``, created isolated first when ``create`` (else checked by the
        caller's GET)."""
        if create:
            return await self.clients.get_or_create(name)
        return self.clients.client(name)

    def bind(self, name: str, partition: str) -> StateStoreLike:
        """A client of a store already opened; no I/O."""
        return self.clients.client(name)

    async def aclose(self) -> None:
        """Close the shared transport and the credential this backend created."""
        await self.clients.aclose()
