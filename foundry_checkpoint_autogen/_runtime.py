"""Whole-runtime state in the store, ``running()`` (a forgiving lifecycle for any runtime), and
``DurableSingleThreadedAgentRuntime``, which hands each handler its sender's request context."""

from __future__ import annotations

import uuid
import warnings
import weakref
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

from autogen_core import (
    AgentId,
    AgentRuntime,
    CancellationToken,
    SingleThreadedAgentRuntime,
    TopicId,
)
from azure.ai.agentserver.core import FoundryAgentRequestContext, get_request_context

from ._carry import restored
from ._store import AutoGenStateStore

__all__ = [
    "RUNTIME_KIND",
    "DurableSingleThreadedAgentRuntime",
    "load_runtime",
    "running",
    "save_runtime",
]

#: Messages whose captured context a runtime keeps before their handler starts (a message an
#: intervention handler drops never starts one; the oldest entries go first past this).
MAX_CARRIED: Final = 10_000

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


class DurableSingleThreadedAgentRuntime(SingleThreadedAgentRuntime):
    """A ``SingleThreadedAgentRuntime`` that runs each handler in its sender's request context.

    AutoGen runs every handler in a task made from the context the runtime was started in, so
    a hosted agent's per-request identity (``get_request_context()``: the call id the store
    calls forward, from which the service resolves the user's partition) would be the
    starter's, not the sender's: one user's messages would save into another user's partition.
    This runtime captures the request context when a message is sent (``send_message``,
    ``publish_message``, from a request or from another handler) and makes exactly that context
    current around the handler that receives it; a message sent outside any request is handled
    outside any request. Everything else is ``SingleThreadedAgentRuntime``'s (same arguments).

    Example:
        >>> import asyncio
        >>> from azure.ai.agentserver.core import (FoundryAgentRequestContext,
        ...     get_request_context, set_request_context)
        >>> from autogen_core import AgentId, ClosureAgent, ClosureContext, MessageContext
        >>> async def seen(_: ClosureContext, message: str, ctx: MessageContext) -> str:
        ...     return str(get_request_context().user_id)
        >>> async def demo() -> list[str]:
        ...     runtime = DurableSingleThreadedAgentRuntime()
        ...     await ClosureAgent.register_closure(runtime, "who", seen)
        ...     runtime.start()  # started outside any request
        ...     replies = []
        ...     for user in ("ann", "bo"):
        ...         set_request_context(FoundryAgentRequestContext(call_id=f"c-{user}",
        ...                                                        user_id=user))
        ...         replies.append(await runtime.send_message("hi", AgentId("who", "k")))
        ...     await runtime.stop()
        ...     return replies
        >>> asyncio.run(demo())
        ['ann', 'bo']
    """

    def __init__(self, **kwargs: Any) -> None:
        for hook in ("_process_send", "_process_publish"):
            if not callable(getattr(SingleThreadedAgentRuntime, hook, None)):
                raise TypeError(
                    f"this autogen-core has no SingleThreadedAgentRuntime.{hook}, which "
                    "DurableSingleThreadedAgentRuntime wraps to restore each sender's request "
                    "context; install the autogen-core version foundry-checkpoint[autogen] pins"
                )
        super().__init__(**kwargs)
        self._carried: OrderedDict[str, deque[FoundryAgentRequestContext]] = OrderedDict()

    def _carry(self, message_id: str) -> FoundryAgentRequestContext:
        context = get_request_context()
        held = FoundryAgentRequestContext(
            call_id=context.call_id, user_id=context.user_id, session_id=context.session_id
        )
        self._carried.setdefault(message_id, deque()).append(held)
        self._carried.move_to_end(message_id)
        while len(self._carried) > MAX_CARRIED:
            self._carried.popitem(last=False)
        return held

    def _take(self, message_id: str) -> FoundryAgentRequestContext | None:
        queue = self._carried.get(message_id)
        if not queue:
            return None
        held = queue.popleft()
        if not queue:
            del self._carried[message_id]
        return held

    def _forget(self, message_id: str, held: FoundryAgentRequestContext) -> None:
        queue = self._carried.get(message_id)
        if queue is not None and any(entry is held for entry in queue):
            queue.remove(held)
            if not queue:
                del self._carried[message_id]

    async def send_message(
        self,
        message: Any,
        recipient: AgentId,
        *,
        sender: AgentId | None = None,
        cancellation_token: CancellationToken | None = None,
        message_id: str | None = None,
    ) -> Any:
        """Send as ``SingleThreadedAgentRuntime`` does; the handler runs in this call's context.

        Args:
            message: The message.
            recipient: The agent that handles it.
            sender: The sending agent, if any.
            cancellation_token: Cancels the send.
            message_id: The message id (a new one when None).

        Returns:
            What the recipient's handler returned.
        """
        message_id = message_id if message_id is not None else str(uuid.uuid4())
        held = self._carry(message_id)
        try:
            return await super().send_message(
                message,
                recipient,
                sender=sender,
                cancellation_token=cancellation_token,
                message_id=message_id,
            )
        finally:
            self._forget(message_id, held)  # a message that never reached a handler

    async def publish_message(
        self,
        message: Any,
        topic_id: TopicId,
        *,
        sender: AgentId | None = None,
        cancellation_token: CancellationToken | None = None,
        message_id: str | None = None,
    ) -> None:
        """Publish as ``SingleThreadedAgentRuntime`` does; every handler of it runs in this
        call's request context.

        Args:
            message: The message.
            topic_id: The topic.
            sender: The sending agent, if any.
            cancellation_token: Cancels the publication.
            message_id: The message id (a new one when None).
        """
        message_id = message_id if message_id is not None else str(uuid.uuid4())
        held = self._carry(message_id)
        try:
            await super().publish_message(
                message,
                topic_id,
                sender=sender,
                cancellation_token=cancellation_token,
                message_id=message_id,
            )
        except BaseException:
            self._forget(message_id, held)
            raise

    async def _process_send(self, message_envelope: Any) -> None:
        with restored(self._take(message_envelope.message_id)):
            await super()._process_send(message_envelope)

    async def _process_publish(self, message_envelope: Any) -> None:
        with restored(self._take(message_envelope.message_id)):
            await super()._process_publish(message_envelope)
