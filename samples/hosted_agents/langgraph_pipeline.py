"""The graph both langchain-azure-ai host samples serve: three deterministic steps, no model.

``triage -> research -> reply``, each step adding one assistant message to a ``messages``
state (the shape langchain-azure-ai's hosts require), so a turn's answer depends only on what
the user said and on the turns before it. That makes a crashed and recovered turn easy to check:
its final state must equal an uninterrupted run's.

:func:`build` compiles it on a checkpointer; ``wrap`` lets a caller put something around each
step (a timer, a journal of side effects) without changing the steps themselves, and ``schema``
a state with more fields than ``messages``.

:class:`HashedChainStore` keeps the Responses host's conversation-chain records under a hashed
chain id, so that the state store it names fits the store's 128-character name limit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langchain_azure_ai.agents.hosting import FoundryConversationChainStore
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph

#: A step: the state in, the update out.
Step = Callable[[dict[str, Any]], dict[str, Any]]


class State(TypedDict):
    """The conversation: every message of every turn, user and assistant."""

    messages: Annotated[list[AnyMessage], add_messages]


def _said(state: dict[str, Any]) -> tuple[int, str]:
    """The number of the current turn and what the user said in it."""
    asked = [m for m in state["messages"] if isinstance(m, HumanMessage)]
    return len(asked), asked[-1].text if asked else ""


def _say(step: str, turn: int, text: str) -> dict[str, Any]:
    # A fixed id per step and turn: a step that runs again replaces its message, never adds one.
    return {"messages": [AIMessage(content=text, id=f"{step}-{turn}")]}


def triage(state: dict[str, Any]) -> dict[str, Any]:
    """Classify the request (by its length, to stay deterministic)."""
    turn, said = _said(state)
    kind = "long" if len(said) > 40 else "short"
    return _say("triage", turn, f"triage: a {kind} request")


def research(state: dict[str, Any]) -> dict[str, Any]:
    """Look back over the conversation: how many turns came before this one."""
    turn, said = _said(state)
    return _say("research", turn, f"research: turn {turn}, {len(said.split())} words")


def reply(state: dict[str, Any]) -> dict[str, Any]:
    """The answer the client reads: the last assistant message of the turn."""
    turn, said = _said(state)
    return _say("reply", turn, f"reply {turn}: {said.upper()}")


#: The steps, in the order they run.
STEPS: tuple[tuple[str, Step], ...] = (
    ("triage", triage),
    ("research", research),
    ("reply", reply),
)


def build(
    checkpointer: BaseCheckpointSaver[Any],
    *,
    wrap: Callable[[str, Step], Step] | None = None,
    schema: type[Any] = State,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """``triage -> research -> reply`` on ``checkpointer``.

    Args:
        checkpointer: The graph's checkpointer (one per process).
        wrap: Called with each step's name and function; what it returns runs instead.
        schema: The state's type: :class:`State` or a subclass of it.

    Returns:
        The compiled graph.

    Example:
        >>> from langgraph.checkpoint.memory import InMemorySaver
        >>> graph = build(InMemorySaver())
        >>> config = {"configurable": {"thread_id": "t-1"}}
        >>> out = graph.invoke({"messages": [HumanMessage("hello there")]}, config)
        >>> [m.text for m in out["messages"][1:]]
        ['triage: a short request', 'research: turn 1, 2 words', 'reply 1: HELLO THERE']
    """
    builder = StateGraph(schema)
    previous = START
    for name, step in STEPS:
        builder.add_node(name, wrap(name, step) if wrap is not None else step)
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder.compile(checkpointer=checkpointer)


class HashedChainStore:
    """langchain-azure-ai's conversation-chain records, under a hashed chain id.

    The Responses host keeps, per conversation chain, which checkpoint the chain continues from.
    Its default store (``FoundryConversationChainStore``) names one state store
    ``langchain_azure_ai.agents.hosting/responses/<chain id>`` per chain; with a user the chain
    id is ``user-<64 hex digits>:<response id>`` and that name passes the state store's
    128-character limit. Here the chain id is its sha256 (64 hex digits): the name has 108.

    Example:
        >>> len(HashedChainStore.chain("user-" + "0" * 64 + ":caresp_" + "x" * 50))
        64
    """

    def __init__(self) -> None:
        self._store = FoundryConversationChainStore()

    @staticmethod
    def chain(conversation_chain_id: str) -> str:
        """The id the records of ``conversation_chain_id`` are kept under."""
        return hashlib.sha256(conversation_chain_id.encode()).hexdigest()

    async def get(self, conversation_chain_id: str, key: str) -> dict[str, str] | None:
        """The record ``key`` of a conversation chain, or None."""
        return await self._store.get(self.chain(conversation_chain_id), key)

    async def set(self, conversation_chain_id: str, key: str, data: dict[str, str]) -> None:
        """Replace the record ``key`` of a conversation chain."""
        await self._store.set(self.chain(conversation_chain_id), key, data)
