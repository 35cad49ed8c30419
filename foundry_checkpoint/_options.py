"""The keyword arguments every adapter takes, checked once: :class:`StoreOptions`.

``FoundryCheckpointer``, ``FoundryCheckpointStorage``, ``FoundryCheckpointStorageProvider`` and
``AutoGenStateStore`` keep their own explicit keyword arguments (so that users see them in
signatures and docs); each hands the common ones to one :class:`StoreOptions`, which checks
them before anything opens, and ``CheckpointCore`` takes it.

Example:
    >>> options = StoreOptions(store_prefix="team-a/langgraph", item_ttl_seconds=-1)
    >>> options.store_prefix, options.local_backend, options.spill is None
    ('team-a/langgraph', 'sqlite', True)
    >>> StoreOptions(store_prefix="x", item_ttl_seconds=0)
    Traceback (most recent call last):
    ...
    foundry_checkpoint.errors.InvalidArgumentError: item_ttl_seconds must be -1 ... got 0
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._store._backends import DEFAULT_BACKEND, check_backend_choice
from ._store._hosted import hosted
from ._store._limits import DEFAULT_ITEM_TTL_SECONDS, HOSTING_ENV, MAX_TTL_SECONDS
from ._store._naming import check_user_id, validate_prefix
from .errors import InvalidArgumentError, UntrustedDelegationError

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from .spill import SpillStore

__all__ = ["StoreOptions"]


@dataclass(frozen=True)
class StoreOptions:
    """Where an adapter keeps its data and how it reaches it, checked when built.

    Args:
        store_prefix: the first segment(s) of every store name.
        credential: hosted mode's token credential (default: one ``DefaultAzureCredential``).
        endpoint: hosted mode's project endpoint (default: ``FOUNDRY_PROJECT_ENDPOINT``).
        user_id: the end user to partition by outside a request (local mode: also the
            partition when the request names no user). Hosted mode sends it as the delegated
            ``x-ms-user-id``, which the service honours only for trusted callers, so hosted
            mode accepts it only with ``trusted_delegation=True``. Within a request the
            request's own identity always wins (see ``foundry_checkpoint._core``).
        trusted_delegation: the deployer's statement that this agent's identity is a trusted
            delegating (S2S/managed-identity) caller, whose ``x-ms-user-id`` the service
            honours; required for ``user_id=`` in hosted mode.
        item_ttl_seconds: idle lifetime of items in stores the adapter creates (-1: never).
        spill: where values over the item limit go (default: chosen by the backend).
        local_backend: ``"sqlite"`` (the embedded store), ``"sdk"`` (the SDK's local mode) or
            the name of a registered backend (``_store._backends.register_backend``).
        client_kwargs: passed to the state-store client (hosted mode).

    Raises:
        InvalidIdentifierError: a bad prefix or user id.
        UntrustedDelegationError: ``user_id=`` in hosted mode without ``trusted_delegation``.
        InvalidArgumentError: a TTL out of range, a backend name not registered, or a local
            backend named in hosted mode (where the service is the backend).

    Example:
        >>> StoreOptions(store_prefix="maf", user_id="alice").user_id
        'alice'
    """

    store_prefix: str
    credential: AsyncTokenCredential | None = None
    endpoint: str | None = None
    user_id: str | None = None
    trusted_delegation: bool = False
    item_ttl_seconds: int = DEFAULT_ITEM_TTL_SECONDS
    spill: SpillStore | None = None
    local_backend: str = DEFAULT_BACKEND
    client_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "store_prefix", validate_prefix(self.store_prefix))
        ttl = self.item_ttl_seconds
        if ttl != -1 and not 1 <= ttl <= MAX_TTL_SECONDS:
            raise InvalidArgumentError(
                f"item_ttl_seconds must be -1 (never expire) or 1..{MAX_TTL_SECONDS}, got {ttl}"
            )
        check_backend_choice(self.local_backend)
        if not isinstance(self.trusted_delegation, bool):
            raise InvalidArgumentError(
                f"trusted_delegation must be True or False, got {self.trusted_delegation!r}"
            )
        if self.user_id is not None:
            check_user_id(self.user_id)
            if hosted() and not self.trusted_delegation:
                raise UntrustedDelegationError(
                    f"user_id={self.user_id!r} was given in hosted mode ({HOSTING_ENV} is set), "
                    "where it is sent as the delegated x-ms-user-id header, which the service "
                    "honours only for trusted (S2S/managed-identity) callers and otherwise "
                    "ignores, putting every user in one partition. End users are isolated by "
                    "the platform's per-request call id, which the hosts set in the request "
                    "context: drop user_id=. If this agent's identity is configured as a "
                    "trusted delegating caller, pass trusted_delegation=True. Nothing was sent."
                )
        object.__setattr__(self, "client_kwargs", dict(self.client_kwargs))
