"""foundry-checkpoint for Microsoft Agent Framework: workflow checkpoints on Foundry's state store.

Example::

    from agent_framework import WorkflowBuilder
    from foundry_checkpoint_maf import FoundryCheckpointStorage

    storage = FoundryCheckpointStorage(context_id="conv-42")
    workflow = WorkflowBuilder(name="triage", start_executor=a, checkpoint_storage=storage) \\
        .add_edge(a, b).build()
    await workflow.run("input")                       # a checkpoint after every superstep
    await workflow.run(checkpoint_id=checkpoint_id)   # resume, in this or another process

Inside Foundry hosting (agent-framework-foundry-hosting), pass
``checkpoint_store_provider=FoundryCheckpointStorageProvider()``; that class is imported only
when first used, so this package works without the hosting package installed.

Agent sessions (``Agent.run(session=...)``): ``FoundrySessionStore``, a ``SessionStore``
(imported when first used, since MAF marks ``SessionStore`` experimental).

Agents (not workflows) keep their conversation with ``FoundryHistoryProvider``, a MAF
``HistoryProvider`` (``context_providers=[FoundryHistoryProvider()]``). Hosted on
``ResponsesHostServer``, such an agent takes ``history_source="agent"`` and
``agent_session_store_provider=FoundrySessionStoreProvider()`` (imported when first used, as
``FoundryCheckpointStorageProvider``).

Errors of decoding (all ``WorkflowCheckpointException``): ``CheckpointTypeBlockedError`` (a
class that is not allowed: "deserialization blocked"), ``CheckpointTamperedError`` (a stored
pickle no encoder writes, logged at WARNING) and ``CheckpointDecodeError`` (damaged).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from foundry_checkpoint.adapter import __version__ as __version__

from ._history import FoundryHistoryProvider
from ._history_view import StoredHistory, StoredMessage
from ._payload import CheckpointDecodeError, CheckpointTamperedError, CheckpointTypeBlockedError
from ._storage import FoundryCheckpointStorage, StoredCheckpoint

if TYPE_CHECKING:
    from ._hosting import FoundryCheckpointStorageProvider, FoundrySessionStoreProvider
    from ._sessions import FoundrySessionStore, StoredSession

__all__ = [
    "CheckpointDecodeError",
    "CheckpointTamperedError",
    "CheckpointTypeBlockedError",
    "FoundryCheckpointStorage",
    "FoundryCheckpointStorageProvider",
    "FoundryHistoryProvider",
    "FoundrySessionStore",
    "FoundrySessionStoreProvider",
    "StoredCheckpoint",
    "StoredHistory",
    "StoredMessage",
    "StoredSession",
]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name in ("FoundrySessionStore", "StoredSession"):  # MAF's SessionStore warns when subclassed
        from . import _sessions

        return getattr(_sessions, name)
    if name in ("FoundryCheckpointStorageProvider", "FoundrySessionStoreProvider"):
        try:
            from . import _hosting
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] == "agent_framework_foundry_hosting":
                raise ImportError(
                    f"{name} needs agent-framework-foundry-hosting: "
                    "pip install agent-framework-foundry-hosting"
                ) from exc
            raise
        provider: type = getattr(_hosting, name)
        return provider
    raise AttributeError(f"module 'foundry_checkpoint_maf' has no attribute {name!r}")
