"""The backend object: what the layers above need to know about where stores live.

A :class:`Backend` opens and binds the clients of one kind of store, and answers every
question the core and the adapters would otherwise ask by comparing a backend name: where the
data lives (:attr:`~Backend.location`), who a call is for and which partition it reads
(:meth:`~Backend.caller`), whether item values are compressed (:attr:`~Backend.compresses`),
where values over the item limit go when no spill store is configured
(:attr:`~Backend.spill_root`, :attr:`~Backend.chunks_in_store`), and how many keys the first
page of a "latest" listing asks for (:attr:`~Backend.first_page`). As httpx's client never asks
which transport it was given, nothing above the store layer asks which backend it has.

The three built-in backends live beside their stores (``EmbeddedBackend`` in :mod:`._embedded`,
``SdkLocalBackend`` in :mod:`._sdk_local`, ``HostedBackend`` in :mod:`._hosted`);
:mod:`._backends` registers them and chooses one per adapter object, once.

**Who a call is for** (the two rules the built-in backends use, :func:`hosted_caller` and
:func:`local_caller`, are spelled out in ``foundry_checkpoint._core``'s docstring). A backend
answers it from the request context it is handed, never by reading one itself: the core
captures the context once per call, at the sync or async call boundary, and derives the
:class:`Caller` from that one snapshot (``_core.Call``).

Example:
    >>> Caller("user:ann", "ann").partition
    'ann'
    >>> from azure.ai.agentserver.core import FoundryAgentRequestContext
    >>> local_caller("ann", FoundryAgentRequestContext(), partitioned=False)
    Caller(key='user:ann', partition='')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from ._protocol import StateStoreLike

if TYPE_CHECKING:
    from azure.ai.agentserver.core import FoundryAgentRequestContext
    from azure.core.credentials_async import AsyncTokenCredential

__all__ = [
    "DEFAULT_USER",
    "SELF",
    "Backend",
    "BackendSettings",
    "Caller",
    "hosted_caller",
    "local_caller",
]

#: The local partition when neither the request nor ``user_id=`` names a user.
DEFAULT_USER: Final = "local"
#: The cache key of a call made with the process's own identity (hosted, outside a request).
SELF: Final = "self"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who one call is for, captured once: the cache key and the embedded store's partition.

    ``key`` keys every client-side cache (``"user:<id>"`` from the request context or local
    mode's partition, ``"call:<id>"`` for a request known only by its call id,
    ``"delegated:<id>"`` for hosted mode's trusted ``user_id=``, ``"self"`` for the process's
    own token). ``partition`` is the store's own user partition, which the backend's clients
    are bound to (``""`` where the service, or nobody, partitions).

    Example:
        >>> Caller("user:ann", "ann").partition
        'ann'
    """

    key: str
    partition: str = ""


def hosted_caller(user_id: str | None, context: FoundryAgentRequestContext) -> Caller:
    """The caller where the service partitions (by the request's call id, else the token).

    Within a request (a call id), the context's user id, else the call id; outside one,
    ``user_id`` (accepted only when delegation was declared), else the process's own identity.
    The partition is ``""``: the service resolves it, the client binds none. A pure function of
    its arguments: it reads no context variable (the core captured ``context`` once).

    Args:
        user_id: the adapter's ``user_id=`` (None: not given).
        context: the request context of the call, as captured at its boundary.

    Returns:
        The :class:`Caller`.

    Example:
        >>> from azure.ai.agentserver.core import FoundryAgentRequestContext as Request
        >>> hosted_caller(None, Request()), hosted_caller("ann", Request())
        (Caller(key='self', partition=''), Caller(key='delegated:ann', partition=''))
        >>> hosted_caller("ann", Request(call_id="c-1")).key  # the call id wins over user_id=
        'call:c-1'
    """
    if context.call_id:
        if context.user_id:
            return Caller(f"user:{context.user_id}")
        return Caller(f"call:{context.call_id}")
    if user_id is not None:
        return Caller(f"delegated:{user_id}")
    return Caller(SELF)


def local_caller(
    user_id: str | None, context: FoundryAgentRequestContext, *, partitioned: bool
) -> Caller:
    """The caller where no service resolves a call id: the context's user id, else ``user_id``,
    else ``"local"`` (a call id alone names nobody). Reads no context variable.

    Args:
        user_id: the adapter's ``user_id=`` (None: not given).
        context: the request context of the call, as captured at its boundary.
        partitioned: whether the backend's clients are bound to the user's partition (else the
            partition is ``""`` and only the cache key carries the user).

    Returns:
        The :class:`Caller`.

    Example:
        >>> from azure.ai.agentserver.core import FoundryAgentRequestContext as Request
        >>> local_caller(None, Request(), partitioned=True)
        Caller(key='user:local', partition='local')
        >>> local_caller("ann", Request(call_id="c-1", user_id="bo"), partitioned=True)
        Caller(key='user:bo', partition='bo')
    """
    partition = context.user_id or user_id or DEFAULT_USER
    return Caller(f"user:{partition}", partition if partitioned else "")


class BackendSettings(Protocol):
    """The options a backend is built from (``StoreOptions`` has them all)."""

    @property
    def credential(self) -> AsyncTokenCredential | None: ...
    @property
    def endpoint(self) -> str | None: ...
    @property
    def user_id(self) -> str | None: ...
    @property
    def item_ttl_seconds(self) -> int: ...
    @property
    def client_kwargs(self) -> Mapping[str, Any]: ...


class Backend(Protocol):
    """One kind of store, as the layers above it see it; built once per adapter object.

    A backend is registered by its ``local_backend=`` name in :mod:`._backends`
    (``register_backend``); its constructor takes the adapter's
    :class:`BackendSettings`. It opens clients *without* checking them: the store layer checks
    every store it opens for ``user_isolation`` (``_backends.open_isolated``).
    """

    @property
    def kind(self) -> str:
        """The name shown as the adapters' ``kind`` (``"local-sqlite"``, ``"hosted"``...)."""
        ...

    @property
    def location(self) -> str:
        """Where the data lives (a file, a folder, an endpoint), for ``repr()`` and the CLI."""
        ...

    @property
    def compresses(self) -> bool:
        """Whether item values are compressed when that pays (False: stored as written)."""
        ...

    @property
    def chunks_in_store(self) -> bool:
        """Whether, with no spill store configured, values over the item limit go into the
        scope's own store as chunk items (and may still be there once one is configured)."""
        ...

    @property
    def spill_root(self) -> Path | None:
        """The folder of the default local spill store (None: no local spill by default)."""
        ...

    @property
    def first_page(self) -> int:
        """Keys the first page of a "latest" listing asks for (what one request costs)."""
        ...

    def caller(self, user_id: str | None, context: FoundryAgentRequestContext) -> Caller:
        """Who a call with request context ``context`` is for, and the partition its clients
        are bound to (a pure function of ``user_id`` and ``context``: read no context var)."""
        ...

    async def open(self, name: str, partition: str, *, create: bool) -> StateStoreLike | None:
        """A client of ``name`` in ``partition``: created (isolated, with the TTL) first when
        ``create``; else one whose descriptor is checked by a GET (None when it cannot exist)."""
        ...

    def bind(self, name: str, partition: str) -> StateStoreLike:
        """A client of a store already opened and checked; no I/O."""
        ...

    async def aclose(self) -> None:
        """Close what the backend's clients share; idempotent."""
        ...
