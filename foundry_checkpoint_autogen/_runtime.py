"""Whole-runtime state in the store, and ``running()``: a forgiving lifecycle for any runtime."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

from autogen_core import AgentId, AgentRuntime, SingleThreadedAgentRuntime

from ._store import AutoGenStateStore

__all__ = ["RUNTIME_KIND", "load_runtime", "running", "save_runtime"]

#: The ``kind`` under which whole-runtime states are stored.
RUNTIME_KIND: Final = "runtime"

R = TypeVar("R", bound=AgentRuntime)

_stopped: weakref.WeakSet[Any] = weakref.WeakSet()


def _grpc_types() -> tuple[type[Any], ...]:
    try:
        from autogen_ext.runtimes.grpc import GrpcWorkerAgentRuntime
    except ImportError:  # pragma: no cover - autogen-ext[grpc] is part of the extra
        return ()
    return (GrpcWorkerAgentRuntime,)


async def save_runtime(
    runtime: AgentRuntime, store: AutoGenStateStore, scope: str | None, *, name: str = "runtime"
) -> str:
    """Save ``runtime.save_state()`` as a new version of ``(scope, "runtime", name)``.

    Works for ``SingleThreadedAgentRuntime`` and
    :class:`~foundry_checkpoint_autogen.DurableGrpcWorkerAgentRuntime`; the stock
    ``GrpcWorkerAgentRuntime`` cannot report its agents' state.

    Args:
        runtime: The runtime whose agents' states are saved.
        store: Where the state is saved.
        scope: The scope (a conversation); None for the default scope.
        name: The name the runtime's state is kept under.

    Returns:
        The id of the new version.

    Raises:
        TypeError: the runtime cannot save its state (the message says which runtime to use).

    Example:
        >>> import asyncio
        >>> from autogen_core import SingleThreadedAgentRuntime
        >>> with AutoGenStateStore() as store:
        ...     version = asyncio.run(save_runtime(SingleThreadedAgentRuntime(), store, "conv"))
        ...     store.load("conv", "runtime", "runtime")
        {}
    """
    try:
        state = await runtime.save_state()
    except NotImplementedError as exc:
        raise TypeError(
            f"{type(runtime).__name__} cannot save its state ({exc}); use "
            "DurableGrpcWorkerAgentRuntime for gRPC workers, or DurableAgent to keep each "
            "agent's state in the store"
        ) from exc
    return await store.asave(scope, RUNTIME_KIND, name, state)


async def load_runtime(
    runtime: AgentRuntime,
    store: AutoGenStateStore,
    scope: str | None,
    *,
    name: str = "runtime",
    version: str | None = None,
) -> bool:
    """Load the saved runtime state (latest, or ``version``) into ``runtime``.

    Agents of types ``runtime`` does not have registered are skipped with a
    :class:`RuntimeWarning` that names them (AutoGen's own ``load_state`` skips them silently).
    Subscriptions and in-flight messages are not part of any AutoGen runtime's state.

    Args:
        runtime: The runtime to load into; register the agent types first.
        store: Where the state was saved.
        scope: The scope (a conversation); None for the default scope.
        name: The name the runtime's state is kept under.
        version: The version to load; None for the latest.

    Returns:
        True when a state was loaded, False when nothing was saved.

    Example:
        >>> import asyncio
        >>> from autogen_core import SingleThreadedAgentRuntime
        >>> with AutoGenStateStore() as store:
        ...     asyncio.run(load_runtime(SingleThreadedAgentRuntime(), store, "empty"))
        False
    """
    state = await store.aload(scope, RUNTIME_KIND, name, version=version)
    if state is None:
        return False
    known: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in state.items():
        agent_id = AgentId.from_str(key)
        try:
            await runtime.agent_metadata(agent_id)
        except (LookupError, ValueError):  # type not registered here (ValueError: gRPC worker)
            unknown.append(key)
        else:
            known[key] = value
    if unknown:
        warnings.warn(
            f"load_runtime skipped agents whose types this runtime has not registered: "
            f"{sorted(unknown)}; register them before loading",
            RuntimeWarning,
            stacklevel=2,
        )
    await runtime.load_state(known)
    return True


async def _start(runtime: AgentRuntime) -> bool:
    """Start ``runtime``; True if this call started it."""
    from ._grpc import DurableGrpcWorkerAgentRuntime

    if isinstance(runtime, DurableGrpcWorkerAgentRuntime):
        if runtime.phase == "running":
            return False
        await runtime.start()
        return True
    if isinstance(runtime, SingleThreadedAgentRuntime):
        try:
            runtime.start()
        except RuntimeError as exc:
            if "already started" not in str(exc):
                raise
            return False
        return True
    if isinstance(runtime, _grpc_types()):
        if runtime in _stopped:
            raise RuntimeError(
                "this GrpcWorkerAgentRuntime was stopped and cannot be restarted (it would "
                "accept start() and then hang on send_message): create a new runtime"
            )
        try:
            await runtime.start()
        except ValueError as exc:
            if "already running" not in str(exc):
                raise
            return False
        return True
    raise TypeError(
        f"running() knows SingleThreadedAgentRuntime and the gRPC worker runtimes, not "
        f"{type(runtime).__name__}"
    )


async def _stop(runtime: AgentRuntime, *, idle: bool) -> None:
    if isinstance(runtime, SingleThreadedAgentRuntime):
        try:
            await (runtime.stop_when_idle() if idle else runtime.stop())
        except RuntimeError as exc:
            if "not started" not in str(exc):
                raise
        return
    try:
        await runtime.stop()  # type: ignore[attr-defined]
    except RuntimeError as exc:
        if "not running" not in str(exc):
            raise
    _stopped.add(runtime)


@asynccontextmanager
async def running(runtime: R) -> AsyncIterator[R]:
    """Run ``runtime`` for the block: start it if needed, stop it after if this started it.

    Forgiving where AutoGen is strict: a runtime already running is used as is (and left
    running); the stop never raises "Runtime is not running" or "Runtime is not started". A
    ``SingleThreadedAgentRuntime`` finishes its queued messages first (``stop_when_idle``)
    unless the block raised. A stopped gRPC worker is refused with a clear error instead of
    hanging on its next message.

    Args:
        runtime: A ``SingleThreadedAgentRuntime`` or a gRPC worker runtime.

    Yields:
        ``runtime``, running.

    Raises:
        TypeError: a runtime of another kind.
        RuntimeError: a gRPC worker that was stopped (it cannot be restarted).

    Example:
        >>> import asyncio
        >>> from autogen_core import SingleThreadedAgentRuntime
        >>> async def demo() -> str:
        ...     runtime = SingleThreadedAgentRuntime()
        ...     async with running(runtime):
        ...         async with running(runtime):  # already running: used as is
        ...             pass
        ...     return "stopped once, no error"
        >>> asyncio.run(demo())
        'stopped once, no error'
    """
    started = await _start(runtime)
    ok = False
    try:
        yield runtime
        ok = True
    finally:
        if started:
            await _stop(runtime, idle=ok)
