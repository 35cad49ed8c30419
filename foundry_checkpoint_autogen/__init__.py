"""foundry-checkpoint for AutoGen: durable agent, runtime and team state on Foundry's state store.

Example::

    from foundry_checkpoint_autogen import AutoGenStateStore, DurableAgent, durable_factory

    class Counter(DurableAgent, RoutedAgent): ...      # save_state/load_state as usual

    store = AutoGenStateStore()                        # local by default, hosted inside Foundry
    await Counter.register(runtime, "counter", durable_factory(Counter, store))
    # each agent restores on its first message and saves after each handler, on
    # SingleThreadedAgentRuntime and on gRPC workers (DurableGrpcWorkerAgentRuntime) alike;
    # in a hosted agent serving many users, DurableSingleThreadedAgentRuntime and
    # DurableGrpcWorkerAgentRuntime run each handler in its sender's request context

``DurableGrpcWorkerAgentRuntime`` is imported when first used (it loads gRPC).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from foundry_checkpoint.adapter import __version__ as __version__

from ._agent import DurableAgent, durable_factory
from ._runtime import DurableSingleThreadedAgentRuntime, load_runtime, running, save_runtime
from ._store import AutoGenStateStore, StateVersion, StoredState
from ._team import TeamSession, load_team, save_team

if TYPE_CHECKING:
    from ._grpc import DurableGrpcWorkerAgentRuntime

__all__ = [
    "AutoGenStateStore",
    "DurableAgent",
    "DurableGrpcWorkerAgentRuntime",
    "DurableSingleThreadedAgentRuntime",
    "StateVersion",
    "StoredState",
    "TeamSession",
    "durable_factory",
    "load_runtime",
    "load_team",
    "running",
    "save_runtime",
    "save_team",
]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name == "DurableGrpcWorkerAgentRuntime":
        from ._grpc import DurableGrpcWorkerAgentRuntime

        return DurableGrpcWorkerAgentRuntime
    raise AttributeError(f"module 'foundry_checkpoint_autogen' has no attribute {name!r}")
