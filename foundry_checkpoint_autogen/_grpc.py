"""``DurableGrpcWorkerAgentRuntime``: AutoGen's gRPC worker with state methods and a forgiving
lifecycle.

autogen-ext's ``GrpcWorkerAgentRuntime`` (0.7.5) raises ``NotImplementedError("Saving state is
not yet implemented.")`` from ``save_state``, ``load_state``, ``agent_save_state``,
``agent_load_state`` and ``agent_metadata``; its ``stop()`` raises ``RuntimeError("Runtime is
not running.")`` before ``start()`` and when called twice; and a stopped worker restarted
accepts ``start()`` but then hangs on ``send_message``. This subclass answers the state methods
for the agents this worker hosts (it records them as its factories make them, through public
API only), raises a :class:`LookupError` that points at the store for an agent hosted by
another worker, makes ``start()`` idempotent and ``stop()`` forgiving, and refuses a restart
with a clear error.

It also carries each message's request context to its handler (see
:mod:`foundry_checkpoint_autogen._carry`): the sender's call id and user id travel in the
message itself (the ``RpcRequest``'s ``metadata`` map, the ``CloudEvent``'s attributes, both
forwarded unchanged by the gRPC host), and the receiving worker (this class) makes them the
request context around the handler. A message from a worker of another class carries none and is
handled outside any request.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Literal, TypeVar

from autogen_core import Agent, AgentId, AgentInstantiationContext, AgentMetadata, AgentType
from autogen_ext.runtimes.grpc import GrpcWorkerAgentRuntime

from ._carry import CARRIED_KEYS, capture, restored

__all__ = ["DurableGrpcWorkerAgentRuntime"]

T = TypeVar("T", bound=Agent)
_R = TypeVar("_R", bound="DurableGrpcWorkerAgentRuntime")


class DurableGrpcWorkerAgentRuntime(GrpcWorkerAgentRuntime):
    """A ``GrpcWorkerAgentRuntime`` whose state methods work for the agents it hosts.

    Takes the same arguments as ``GrpcWorkerAgentRuntime``. ``save_state()`` maps
    ``str(AgentId)`` to each hosted agent's ``save_state()`` (the format of
    ``SingleThreadedAgentRuntime``); ``load_state()`` loads such a mapping, creating agents of
    the types this worker registered; ``agent_save_state``, ``agent_load_state`` and
    ``agent_metadata`` answer for those types. An agent of a type another worker hosts raises
    :class:`LookupError` (its state is in the store, written by its own worker when it is a
    :class:`~foundry_checkpoint_autogen.DurableAgent`).

    Every handler runs in its sender's request context (the call id and user id the hosts set),
    carried in the message to whichever worker hosts the recipient, so a durable agent saves
    into its sender's partition; a message sent outside any request is handled outside any.

    Lifecycle: ``start()`` twice starts once; ``stop()`` before ``start()`` or twice does
    nothing; ``start()`` after ``stop()`` raises :class:`RuntimeError` (a stopped worker cannot
    be reused: create a new one); ``async with`` starts and stops.

    Args:
        host_address: The ``host:port`` of the gRPC host (``GrpcWorkerAgentRuntimeHost``).
        **kwargs: Passed to ``GrpcWorkerAgentRuntime`` (``tracer_provider``,
            ``payload_serialization_format``, ``extra_grpc_config``).

    Example:
        >>> import asyncio
        >>> async def lifecycle() -> str:
        ...     worker = DurableGrpcWorkerAgentRuntime("127.0.0.1:1")
        ...     await worker.stop(); await worker.stop()      # never started: nothing to do
        ...     return worker.phase
        >>> asyncio.run(lifecycle())
        'new'
    """

    def __init__(self, host_address: str, **kwargs: Any) -> None:
        for hook in ("_send_message", "_process_request", "_process_event"):
            if not callable(getattr(GrpcWorkerAgentRuntime, hook, None)):
                raise TypeError(
                    f"this autogen-ext has no GrpcWorkerAgentRuntime.{hook}, which "
                    "DurableGrpcWorkerAgentRuntime wraps to carry each sender's request "
                    "context; install the autogen-ext version foundry-checkpoint[autogen] pins"
                )
        super().__init__(host_address, **kwargs)
        self._phase: Literal["new", "running", "stopped"] = "new"
        self._hosted: dict[AgentId, Agent] = {}
        self._local_types: set[str] = set()

    @property
    def phase(self) -> Literal["new", "running", "stopped"]:
        """``"new"`` (never started), ``"running"`` or ``"stopped"`` (cannot be restarted)."""
        return self._phase

    @property
    def hosted_types(self) -> frozenset[str]:
        """The agent types this worker registered (it hosts their agents)."""
        return frozenset(self._local_types)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect to the host; a no-op when running.

        Raises:
            RuntimeError: the worker was stopped (a stopped worker cannot be reused).
        """
        if self._phase == "running":
            return
        if self._phase == "stopped":
            raise RuntimeError(
                "this DurableGrpcWorkerAgentRuntime was stopped and cannot be restarted (a "
                "restarted gRPC worker accepts start() but never delivers messages): create a "
                "new runtime and register the agents again; their state is in the store"
            )
        await super().start()
        self._phase = "running"

    async def stop(self) -> None:
        """Stop the worker; a no-op before ``start()`` and after ``stop()``."""
        if self._phase != "running":
            return
        self._phase = "stopped"
        await super().stop()

    async def __aenter__(self: _R) -> _R:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- the sender's request context, in the message --------------------------------------
    async def _send_message(
        self,
        runtime_message: Any,
        send_type: Literal["send", "publish"],
        recipient: AgentId | Any,
        telemetry_metadata: Mapping[str, str],
    ) -> None:
        # A task made in send_message/publish_message: it runs in the sender's context.
        carrier = capture()
        kind = runtime_message.WhichOneof("message")
        if kind == "request":
            for key in CARRIED_KEYS:
                runtime_message.request.metadata.pop(key, None)
            runtime_message.request.metadata.update(carrier)
        elif kind == "cloudEvent":
            attributes = runtime_message.cloudEvent.attributes
            for key in CARRIED_KEYS:
                if key in attributes:
                    del attributes[key]
            for key, value in carrier.items():
                attributes[key].ce_string = value
        await super()._send_message(runtime_message, send_type, recipient, telemetry_metadata)

    async def _process_request(self, request: Any) -> None:
        carried = {k: request.metadata[k] for k in CARRIED_KEYS if k in request.metadata}
        with restored(carried):
            await super()._process_request(request)

    async def _process_event(self, event: Any) -> None:
        attributes = event.attributes
        carried = {
            k: attributes[k].ce_string
            for k in CARRIED_KEYS
            if k in attributes and attributes[k].WhichOneof("attr") == "ce_string"
        }
        with restored(carried):
            await super()._process_event(event)

    # -- registration: remember what this worker hosts -----------------------------------------
    async def register_factory(
        self,
        type: str | AgentType,
        agent_factory: Callable[[], T | Awaitable[T]],
        *,
        expected_class: type[T] | None = None,
    ) -> AgentType:
        """Register an agent factory as the base class does; its agents are recorded as hosted.

        Args:
            type: The agent type the factory makes.
            agent_factory: Makes one agent (synchronously or as an awaitable).
            expected_class: The class the agents must be, checked by the base class.

        Returns:
            The registered agent type.
        """
        name = type if isinstance(type, str) else type.type
        registered = await super().register_factory(
            type, self._recording(agent_factory), expected_class=expected_class
        )
        self._local_types.add(name)
        return registered

    async def register_agent_instance(self, agent_instance: Agent, agent_id: AgentId) -> AgentId:
        """Register an agent instance as the base class does; it is recorded as hosted.

        Args:
            agent_instance: The agent.
            agent_id: Its id.

        Returns:
            ``agent_id``.
        """
        registered = await super().register_agent_instance(agent_instance, agent_id)
        self._local_types.add(agent_id.type)
        self._hosted[agent_id] = agent_instance
        return registered

    def _recording(self, factory: Callable[[], T | Awaitable[T]]) -> Callable[[], Any]:
        def make() -> T | Awaitable[T]:
            agent_id = AgentInstantiationContext.current_agent_id()
            made = factory()
            if inspect.isawaitable(made):
                return self._record_later(agent_id, made)
            self._hosted[agent_id] = made
            return made

        return make

    async def _record_later(self, agent_id: AgentId, made: Awaitable[T]) -> T:
        agent = await made
        self._hosted[agent_id] = agent
        return agent

    # -- the state methods --------------------------------------------------------------------
    def _local(self, agent_id: AgentId) -> None:
        if agent_id.type not in self._local_types:
            hosted = ", ".join(sorted(self._local_types)) or "none"
            raise LookupError(
                f"agent {agent_id} is not hosted by this worker (its types: {hosted}); it lives "
                "on another worker, whose runtime answers for it. Read its state from the "
                f"store instead: AutoGenStateStore.load(scope, 'agent', '{agent_id}')"
            )

    async def _agent(self, agent_id: AgentId) -> Agent:
        self._local(agent_id)
        return await self.try_get_underlying_agent_instance(agent_id)

    async def save_state(self) -> Mapping[str, Any]:
        """Save the state of every agent this worker has created or registered.

        Returns:
            ``{str(AgentId): state}``, the format of ``SingleThreadedAgentRuntime``.
        """
        return {
            str(aid): dict(await agent.save_state()) for aid, agent in list(self._hosted.items())
        }

    async def load_state(self, state: Mapping[str, Any]) -> None:
        """Load the states of agents of the types this worker hosts.

        Args:
            state: ``{str(AgentId): state}``, as :meth:`save_state` returns it.

        Raises:
            LookupError: some agents are of types hosted elsewhere (named); nothing was loaded.
        """
        ids = {key: AgentId.from_str(key) for key in state}
        foreign = sorted(key for key, aid in ids.items() if aid.type not in self._local_types)
        if foreign:
            raise LookupError(
                f"agents {foreign} are not hosted by this worker (its types: "
                f"{sorted(self._local_types)}); load them on the worker that hosts them. "
                "Nothing was loaded."
            )
        for key, aid in ids.items():
            await (await self._agent(aid)).load_state(state[key])

    async def agent_save_state(self, agent: AgentId) -> Mapping[str, Any]:
        """Save one hosted agent's state (the agent is created if needed).

        Args:
            agent: The agent's id.

        Returns:
            The agent's ``save_state()``.

        Raises:
            LookupError: the agent's type is hosted by another worker.
        """
        return await (await self._agent(agent)).save_state()

    async def agent_load_state(self, agent: AgentId, state: Mapping[str, Any]) -> None:
        """Load a state into one hosted agent (the agent is created if needed).

        Args:
            agent: The agent's id.
            state: What its ``save_state()`` returned.

        Raises:
            LookupError: the agent's type is hosted by another worker.
        """
        await (await self._agent(agent)).load_state(state)

    async def agent_metadata(self, agent: AgentId) -> AgentMetadata:
        """Describe one hosted agent.

        Args:
            agent: The agent's id.

        Returns:
            Its metadata (type, key, description).

        Raises:
            LookupError: the agent's type is hosted by another worker.
        """
        return (await self._agent(agent)).metadata
