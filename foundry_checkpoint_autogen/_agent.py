"""``DurableAgent`` and ``durable_factory``: an AutoGen agent whose state survives its process.

A durable agent restores its stored state on its first message and saves its state after
every handler that returns normally, in an :class:`~foundry_checkpoint_autogen.AutoGenStateStore`
under kind ``"agent"`` and name ``str(agent.id)`` (``"type/key"``). Only public AutoGen API is
used: ``on_message_impl`` (``on_message`` is final), ``save_state``/``load_state``, ``id``.

Why lazily, under a lock, and not in the factory: AutoGen runtimes run every message as its own
task, and an awaiting factory lets concurrent first messages create several instances of one
agent (measured: 20 first messages, 20 instances). So the factory only attaches the store,
synchronously, and the first message (of however many arrive together) restores under the
agent's own lock; the others wait for it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

from autogen_core import BaseAgent, MessageContext

from ._store import AutoGenStateStore

__all__ = ["AGENT_KIND", "DurableAgent", "durable_factory"]

logger = logging.getLogger("foundry_checkpoint_autogen")

#: The ``kind`` under which agent states are stored.
AGENT_KIND: Final = "agent"

A = TypeVar("A", bound="DurableAgent")

_WRAPPED: Final = "_foundry_checkpoint_wrapped"


class DurableAgent(BaseAgent):
    """Mixin for AutoGen agents whose state lives in an :class:`AutoGenStateStore`.

    Put it first: ``class Counter(DurableAgent, RoutedAgent)``, implement ``save_state`` and
    ``load_state`` as usual, and register the agent with :func:`durable_factory`. Then:

    * on its first message the agent loads its latest stored state (under the agent's lock, so
      concurrent first messages restore once and all see the restored state);
    * after every handler that returns normally it saves ``save_state()`` as a new version
      (saves of one agent are serialized; a save that a newer one already covers is skipped);
      a handler that raises saves nothing;
    * an explicit ``load_state()`` (by a team, by ``runtime.load_state``) before the first
      message wins: the store is not read then.

    Example:
        >>> import asyncio
        >>> from dataclasses import dataclass
        >>> from autogen_core import (AgentId, MessageContext, RoutedAgent,
        ...     SingleThreadedAgentRuntime, message_handler)
        >>> @dataclass
        ... class Add:
        ...     n: int
        >>> class Counter(DurableAgent, RoutedAgent):
        ...     def __init__(self) -> None:
        ...         super().__init__("counts")
        ...         self.count = 0
        ...     @message_handler
        ...     async def add(self, message: Add, ctx: MessageContext) -> int:
        ...         self.count += message.n
        ...         return self.count
        ...     async def save_state(self) -> dict[str, int]:
        ...         return {"count": self.count}
        ...     async def load_state(self, state: Mapping[str, Any]) -> None:
        ...         self.count = state["count"]
        >>> async def process(store: AutoGenStateStore) -> int:
        ...     runtime = SingleThreadedAgentRuntime()
        ...     await Counter.register(runtime, "counter", durable_factory(Counter, store))
        ...     runtime.start()
        ...     reply = await runtime.send_message(Add(2), AgentId("counter", "ann"))
        ...     await runtime.stop()
        ...     return reply
        >>> with AutoGenStateStore() as store:
        ...     asyncio.run(process(store)), asyncio.run(process(store))  # two "processes"
        (2, 4)
    """

    _durable_store: AutoGenStateStore | None = None
    _durable_scope: str | None = None
    _durable_restored: bool = False
    _durable_loaded: bool = False
    _durable_restoring: bool = False
    _durable_done: int = 0
    _durable_saved: int = 0
    _durable_locks: tuple[asyncio.Lock, asyncio.Lock] | None = None
    _durable_owner: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("load_state")
        if own is not None and not getattr(own, _WRAPPED, False):
            setattr(cls, "load_state", _marking(own))  # noqa: B010

    def _durable_attach(self, store: AutoGenStateStore, scope: str | None) -> None:
        self._durable_store = store
        self._durable_scope = scope

    def _locks(self) -> tuple[asyncio.Lock, asyncio.Lock]:
        if self._durable_locks is None:
            self._durable_locks = (asyncio.Lock(), asyncio.Lock())
        return self._durable_locks

    def _store_or_raise(self) -> AutoGenStateStore:
        store = self._durable_store
        if store is None:
            from foundry_checkpoint.errors import FoundryCheckpointError

            raise FoundryCheckpointError(
                f"DurableAgent {self.id} has no store: register it with "
                f"durable_factory(factory, store), e.g. {type(self).__name__}.register(runtime, "
                f"{self.id.type!r}, durable_factory({type(self).__name__}, store))"
            )
        return store

    async def _durable_restore(self) -> None:
        if self._durable_restored:
            return
        store = self._store_or_raise()
        restore_lock, _ = self._locks()
        async with restore_lock:
            if self._durable_restored:
                return
            if not self._durable_loaded:
                state = await store.aload(self._durable_scope, AGENT_KIND, str(self.id))
                if state is not None:
                    self._durable_restoring = True
                    try:
                        await self.load_state(state)
                    finally:
                        self._durable_restoring = False
            self._durable_restored = True

    async def _durable_save(self) -> None:
        store = self._store_or_raise()
        self._durable_done += 1
        mine = self._durable_done
        _, save_lock = self._locks()
        async with save_lock:
            if self._durable_saved >= mine:
                return  # a save that began after this handler finished covers it
            covered = self._durable_done
            state = await self.save_state()
            await store.asave(self._durable_scope, AGENT_KIND, str(self.id), state)
            self._durable_saved = max(self._durable_saved, covered)

    def _durable_check_owner(self) -> None:
        """Refuse a message of another end user than the one this instance's state is for.

        The user is the store's cache key for the current call when it names one (the request
        context's user id, or local mode's partition); a request known only by its call id
        cannot be told apart client-side, so it is not checked (key agents per user then).
        """
        key = self._store_or_raise()._core.user_key()
        if not key.startswith("user:"):
            return
        if self._durable_owner is None:
            self._durable_owner = key
        elif self._durable_owner != key:
            from foundry_checkpoint.errors import CrossUserMessageError

            owner, sender = self._durable_owner.removeprefix("user:"), key.removeprefix("user:")
            raise CrossUserMessageError(
                f"DurableAgent {self.id} holds the state of {owner!r} and got a message in a "
                f"request of {sender!r}: handling it "
                "would save one user's state into another user's partition. Give each end user "
                "(or conversation) an agent key of its own, e.g. "
                f"AgentId({self.id.type!r}, conversation_id). Nothing was written."
            )

    async def on_message_impl(self, message: Any, ctx: MessageContext) -> Any:
        """Restore on the first message, run the handler, save if it returned normally.

        A message in another end user's request than the one whose state this instance holds
        raises :class:`~foundry_checkpoint.errors.CrossUserMessageError` before the handler
        runs.

        Args:
            message: The message AutoGen routes to this agent.
            ctx: Its message context.

        Returns:
            What the agent's handler returned.
        """
        self._durable_check_owner()
        await self._durable_restore()
        result = await super().on_message_impl(message, ctx)  # type: ignore[safe-super]
        await self._durable_save()
        return result


def _marking(
    load_state: Callable[[Any, Mapping[str, Any]], Awaitable[None]],
) -> Callable[[Any, Mapping[str, Any]], Awaitable[None]]:
    """``load_state`` that records an explicit load, so the store does not overwrite it."""

    @functools.wraps(load_state)
    async def wrapper(self: DurableAgent, state: Mapping[str, Any]) -> None:
        if not self._durable_restoring:
            self._durable_loaded = True
        await load_state(self, state)

    setattr(wrapper, _WRAPPED, True)
    return wrapper


def durable_factory(
    factory: Callable[[], A], store: AutoGenStateStore, *, scope: str | None = None
) -> Callable[[], A]:
    """Wrap an agent factory so every agent it makes saves to ``store`` (in ``scope``).

    ``factory`` must be synchronous (a class or a function returning a :class:`DurableAgent`):
    an awaiting factory lets AutoGen create several instances of one agent under concurrent
    first messages. The wrapper only attaches the store; the state is restored lazily on the
    agent's first message. Works with ``SingleThreadedAgentRuntime`` and
    ``GrpcWorkerAgentRuntime`` alike.

    Args:
        factory: A class or synchronous function that makes a :class:`DurableAgent`.
        store: Where the agents' states are saved.
        scope: The scope (a conversation) of every state the agents save; None for the
            default scope.

    Returns:
        A factory to pass to ``register`` or ``register_factory``.

    Raises:
        TypeError: ``factory`` is a coroutine function, ``store`` is not an
            ``AutoGenStateStore``, or (when called) the factory makes an awaitable or an
            agent that is not a ``DurableAgent``.
        InvalidIdentifierError: ``scope`` is not a usable identifier.

    Example:
        >>> from autogen_core import RoutedAgent
        >>> class Echo(DurableAgent, RoutedAgent):
        ...     def __init__(self) -> None:
        ...         super().__init__("echo")
        >>> make = durable_factory(Echo, AutoGenStateStore(), scope="conv-1")
        >>> callable(make)
        True
    """
    if inspect.iscoroutinefunction(factory):
        raise TypeError(
            "durable_factory needs a synchronous factory: an awaiting factory lets AutoGen "
            "create several instances of one agent when first messages arrive together"
        )
    if not isinstance(store, AutoGenStateStore):
        raise TypeError(f"store must be an AutoGenStateStore, got {type(store).__name__}")
    if scope is not None:
        from foundry_checkpoint.adapter import check_identifier

        check_identifier(scope, "scope")

    def make() -> A:
        agent = factory()
        if inspect.isawaitable(agent):
            close = getattr(agent, "close", None)
            if callable(close):
                close()
            raise TypeError(
                "durable_factory needs a synchronous factory; this one returned an awaitable"
            )
        if not isinstance(agent, DurableAgent):
            raise TypeError(
                f"durable_factory made a {type(agent).__name__}, which is not a DurableAgent: "
                f"declare it as class {type(agent).__name__}(DurableAgent, RoutedAgent)"
            )
        agent._durable_attach(store, scope)
        return agent

    make.__name__ = make.__qualname__ = f"durable_{getattr(factory, '__name__', 'factory')}"
    return make
