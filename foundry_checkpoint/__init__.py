"""foundry-checkpoint: durable checkpoints on Azure AI Foundry's state store.

LangGraph::

    from foundry_checkpoint import FoundryCheckpointer
    graph = builder.compile(checkpointer=FoundryCheckpointer())

Microsoft Agent Framework: see :mod:`foundry_checkpoint_maf`.

With ``FOUNDRY_HOSTING_ENVIRONMENT`` unset the data lives in an embedded SQLite store under
``AGENTSERVER_STATE_ROOT``; inside a Foundry-hosted agent the same objects use the hosted
service. ``FoundryCheckpointer`` is imported lazily, so this package imports without LangGraph;
``AzureBlobSpill`` too, so local mode never loads the blob storage client code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._gc import GcReport
from ._version import __version__ as __version__
from .errors import (
    CheckpointTooLargeError,
    ConcurrentWriteError,
    CorruptPayloadError,
    FoundryCheckpointError,
    InvalidArgumentError,
    InvalidIdentifierError,
    IsolationRefusedError,
    MissingBlobError,
    PayloadNotFoundError,
    UnreadableValueError,
    UnsafeValueError,
)
from .payloads import PayloadRef, PayloadStore
from .spill import LocalSpill, SpillStore

if TYPE_CHECKING:
    from ._langgraph._saver import FoundryCheckpointer
    from ._memory._store import FoundryStore
    from ._serde import StrictSerializer
    from .migrate import LangchainAzureSource, MigratingCheckpointer, acopy_thread, copy_thread
    from .spill import AzureBlobSpill

__all__ = [
    "AzureBlobSpill",
    "CheckpointTooLargeError",
    "ConcurrentWriteError",
    "CorruptPayloadError",
    "FoundryCheckpointError",
    "FoundryCheckpointer",
    "FoundryStore",
    "GcReport",
    "InvalidArgumentError",
    "InvalidIdentifierError",
    "IsolationRefusedError",
    "LangchainAzureSource",
    "LocalSpill",
    "MigratingCheckpointer",
    "MissingBlobError",
    "PayloadNotFoundError",
    "PayloadRef",
    "PayloadStore",
    "SpillStore",
    "StrictSerializer",
    "UnreadableValueError",
    "UnsafeValueError",
    "acopy_thread",
    "copy_thread",
]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name == "FoundryCheckpointer":
        try:
            from ._langgraph._saver import FoundryCheckpointer
        except ModuleNotFoundError as exc:  # pragma: no cover - depends on the install
            if exc.name and exc.name.split(".")[0] == "langgraph":
                hint = "pip install 'foundry-checkpoint[langgraph]'"
                raise ImportError(f"FoundryCheckpointer needs LangGraph: {hint}") from exc
            raise
        return FoundryCheckpointer
    if name == "FoundryStore":
        try:
            from ._memory._store import FoundryStore
        except ModuleNotFoundError as exc:  # pragma: no cover - depends on the install
            if exc.name and exc.name.split(".")[0] == "langgraph":
                hint = "pip install 'foundry-checkpoint[langgraph]'"
                raise ImportError(f"FoundryStore needs LangGraph: {hint}") from exc
            raise
        return FoundryStore
    if name == "AzureBlobSpill":
        from .spill import AzureBlobSpill

        return AzureBlobSpill
    if name in ("LangchainAzureSource", "MigratingCheckpointer", "acopy_thread", "copy_thread"):
        from . import migrate

        return getattr(migrate, name)
    if name == "StrictSerializer":
        from ._serde import StrictSerializer

        return StrictSerializer
    raise AttributeError(f"module 'foundry_checkpoint' has no attribute {name!r}")
