"""Providers that plug this package into agent-framework-foundry-hosting's hosts.

``FoundryCheckpointStorageProvider`` (workflows) and ``FoundrySessionStoreProvider`` (agents).

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

Agents (not workflows) take their session store through ``agent_session_store_provider=``, a
``StoreProvider[SessionStore]`` whose ``get_store(config=, platform_context=)`` the host calls
once per request. :class:`FoundrySessionStoreProvider` answers with a view of one
:class:`~foundry_checkpoint_maf.FoundrySessionStore` bound to that request's platform context
(``FoundrySessionStore.for_request``): one core for every request and user, the request's
identity captured by the core on every call, and one ETag memory shared by the views, so the
host's read, claim and commit of a conversation within one request are compare-and-sets.

What the host keeps in the session, read from its code (``_responses.py``, 1.0.0b261022): with
its default ``history_source="agent_server"`` the model's prior messages come from the
Responses transcript in the response store, the session holds no messages, and a history
provider that loads messages is refused at construction. With ``history_source="agent"`` the
host sends only the request's input and the agent's own history provider supplies the rest; the
session store then holds what the agent keeps in ``AgentSession`` (for MAF's
``InMemoryHistoryProvider``, every message, rewritten whole each turn). With
:class:`~foundry_checkpoint_maf.FoundryHistoryProvider` on the agent the messages live in its
own stores (an append per turn, spilling when large) and the session keeps only its id and
small state, so ours is the durable history. The host saves a stored request's session under
its response id and, with a ``conversation``, under the conversation id (a claim before the
run and a commit after it); a ``store=false`` request with a history provider that stores
messages is refused by the host. A response continued twice by ``previous_response_id`` (a
fork) loads the same saved ``AgentSession`` twice, with one session id; the history provider
records each copy's branch in the session's state, so each branch reads only its own messages,
as with ``InMemoryHistoryProvider``; a conversation is linear (the host's claim lets one turn
run at a time).

Importing this module imports ``agent_framework_foundry_hosting``; the package's
``__init__`` imports it only when one of these providers is first used.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agent_framework import CheckpointStorage, SessionStore
from agent_framework_foundry_hosting import ContextScopedStoreProvider, StoreProvider
from azure.ai.agentserver.core import AgentConfig, FoundryAgentRequestContext

from foundry_checkpoint.adapter import DEFAULT_ITEM_TTL_SECONDS, CoreOwner, LocalBackend, new_core
from foundry_checkpoint.errors import InvalidArgumentError

from ._payload import check_value, type_keys
from ._sessions import FoundrySessionStore
from ._storage import FoundryCheckpointStorage

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from foundry_checkpoint.spill import SpillStore

__all__ = ["FoundryCheckpointStorageProvider", "FoundrySessionStoreProvider"]


class FoundryCheckpointStorageProvider(CoreOwner, ContextScopedStoreProvider[CheckpointStorage]):
    """Foundry hosting's ``checkpoint_store_provider`` backed by :class:`FoundryCheckpointStorage`.

    Takes the same options as :class:`FoundryCheckpointStorage` except ``context_id``, which
    hosting passes per request. Close the provider (``close()``/``aclose()``/``with``) when the
    host shuts down; the storages it hands out share its core and need no closing.

    At a shutdown (SIGTERM) every checkpoint the host has handed a storage is stored: a save
    that has started is not cancelled with the workflow. A recovered run resumes from the
    checkpoint the host's own record of the run names, though: at a superstep's end the host
    re-reads its claim on the run, then hands the storage the checkpoint, and only then writes
    that record. A shutdown inside that chain makes the step that had just finished run again
    in the next process, and nothing on the storage's side can close that window
    (``docs/long-running.md``, graceful shutdown).

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


class FoundrySessionStoreProvider(CoreOwner, StoreProvider[SessionStore]):
    """Foundry hosting's ``agent_session_store_provider`` backed by :class:`FoundrySessionStore`.

    For a plain agent on ``ResponsesHostServer`` (``InvocationsHostServer`` has the same slot):
    the host asks it for the session store of every request, and gets a view of one store bound
    to that request's platform context, so each call runs as the request's end user (users with
    the same conversation id have separate sessions). Pair it with
    :class:`~foundry_checkpoint_maf.FoundryHistoryProvider` on the agent and
    ``history_source="agent"`` on the host (the module docstring says why). Takes the options
    of :class:`FoundrySessionStore`; close the provider when the host shuts down (the views it
    hands out share its core and need no closing).

    Unlike the host's default ``AgentSessionStoreProvider``, which names a store per end user
    and platform session (``FOUNDRY_AGENT_SESSION_ID``), the sessions of a user are keyed by
    the host's session ids (response and conversation ids) alone, in that user's partition:
    a conversation goes on under a new platform session too.

    Example:
        >>> import asyncio
        >>> from agent_framework import AgentSession
        >>> from azure.ai.agentserver.core import AgentConfig, FoundryAgentRequestContext
        >>> async def demo() -> list[object]:
        ...     async with FoundrySessionStoreProvider(store_prefix="docs-hosted") as provider:
        ...         config = AgentConfig.from_env()
        ...         def request(user: str) -> SessionStore:
        ...             context = FoundryAgentRequestContext(call_id=f"{user}-1", user_id=user)
        ...             return provider.get_store(config=config, platform_context=context)
        ...         await request("ann").set("conv-1", AgentSession(session_id="ann's"))
        ...         mine = await request("ann").get("conv-1")
        ...         return [mine.session_id if mine else None, await request("bo").get("conv-1")]
        >>> asyncio.run(demo())
        ["ann's", None]
    """

    def __init__(
        self,
        *,
        store_prefix: str = "maf-sessions",
        credential: AsyncTokenCredential | None = None,
        endpoint: str | None = None,
        user_id: str | None = None,
        trusted_delegation: bool = False,
        item_ttl_seconds: int = DEFAULT_ITEM_TTL_SECONDS,
        spill: SpillStore | None = None,
        local_backend: LocalBackend = "sqlite",
        **client_kwargs: Any,
    ) -> None:
        self._core = new_core(locals(), scope_word="session store")
        self._etags: OrderedDict[tuple[str, str | None, str], str | None] = OrderedDict()

    def get_store(
        self, *, config: AgentConfig, platform_context: FoundryAgentRequestContext
    ) -> FoundrySessionStore:
        """The session store of the request ``platform_context`` (a view on this provider's
        core; nothing is sent until it is used)."""
        del config  # the platform context carries the identity; the core knows the mode
        store = FoundrySessionStore.__new__(FoundrySessionStore)
        store._setup(
            self._core, owns_core=False, request_context=platform_context, etags=self._etags
        )
        return store

    def __repr__(self) -> str:
        return f"FoundrySessionStoreProvider({self._core.describe()})"
