"""``FoundryCheckpointStorageProvider``: plug the storage into agent-framework-foundry-hosting.

Foundry hosting takes workflow checkpoint storage through ``checkpoint_store_provider=``, a
``ContextScopedStoreProvider`` whose ``get_store(config=, context_id=, platform_context=)``
returns a ``CheckpointStorage`` for one context (a conversation, a response lineage). This
provider gives a :class:`FoundryCheckpointStorage` per call, all sharing one core (one I/O loop,
one credential, one connection pool, a bounded cache of store clients, per-user caches), and
binds each to the request's platform context. Each call of such a storage captures its identity
from that context, the same way every adapter captures it from the caller's own
(``CheckpointCore.capture``, then ``arun(call=)``: see ``foundry_checkpoint._core``), so the
``x-agent-foundry-call-id`` header identifying the caller travels with every store request and
everything cached is the caller's, even when the workflow runs the storage in a task that
carries no request context of its own.

Importing this module imports ``agent_framework_foundry_hosting``; the package's
``__init__`` imports it only when ``FoundryCheckpointStorageProvider`` is first used.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agent_framework import CheckpointStorage
from agent_framework_foundry_hosting import ContextScopedStoreProvider
from azure.ai.agentserver.core import AgentConfig, FoundryAgentRequestContext

from foundry_checkpoint.adapter import DEFAULT_ITEM_TTL_SECONDS, CoreOwner, LocalBackend, new_core
from foundry_checkpoint.errors import InvalidArgumentError

from ._payload import check_value, type_keys
from ._storage import FoundryCheckpointStorage

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from foundry_checkpoint.spill import SpillStore

__all__ = ["FoundryCheckpointStorageProvider"]


class FoundryCheckpointStorageProvider(CoreOwner, ContextScopedStoreProvider[CheckpointStorage]):
    """Foundry hosting's ``checkpoint_store_provider`` backed by :class:`FoundryCheckpointStorage`.

    Takes the same options as :class:`FoundryCheckpointStorage` except ``context_id``, which
    hosting passes per request. Close the provider (``close()``/``aclose()``/``with``) when the
    host shuts down; the storages it hands out share its core and need no closing.

    Example:
        >>> provider = FoundryCheckpointStorageProvider(store_prefix="maf")
        >>> # ResponsesHostServer(agent, checkpoint_store_provider=provider)
        >>> provider.close()
    """

    def __init__(
        self,
        *,
        store_prefix: str = "maf",
        credential: AsyncTokenCredential | None = None,
        endpoint: str | None = None,
        user_id: str | None = None,
        trusted_delegation: bool = False,
        item_ttl_seconds: int = DEFAULT_ITEM_TTL_SECONDS,
        spill: SpillStore | None = None,
        local_backend: LocalBackend = "sqlite",
        allowed_checkpoint_types: Iterable[type | str] | None = None,
        **client_kwargs: Any,
    ) -> None:
        self._allowed = type_keys(allowed_checkpoint_types)
        self._core = new_core(locals(), scope_word="context")

    @property
    def allowed_checkpoint_types(self) -> frozenset[str]:
        """The extra ``"module:qualname"`` types every storage of this provider admits."""
        return self._allowed

    def get_store(
        self,
        *,
        config: AgentConfig,
        context_id: str,
        platform_context: FoundryAgentRequestContext,
    ) -> FoundryCheckpointStorage:
        """The checkpoint storage of ``context_id``, bound to the request's platform context."""
        if not context_id:
            raise InvalidArgumentError("context_id must be provided to get a checkpoint store.")
        return FoundryCheckpointStorage._on_core(
            self._core, context_id, allowed=self._allowed, request_context=platform_context
        )

    def validate_checkpoint_value(self, value: object) -> None:
        """Raise ``WorkflowCheckpointException`` if ``value`` would not decode under the allow-list.

        Mirrors hosting's default provider, so a host can check a typed turn input up front.
        """
        check_value(value, self._allowed)

    def __repr__(self) -> str:
        return f"FoundryCheckpointStorageProvider({self._core.describe()})"
