"""A LangGraph chat whose ``messages`` channel is LangGraph's own ``DeltaChannel``.

Shared by the prune tests of the saver and of the command line.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Annotated, Any, Protocol

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from tests.langgraph._util import cfg


def add_message_batches(state: list[AnyMessage], writes: Sequence[Any]) -> list[AnyMessage]:
    """``add_messages`` over a batch of writes, the reducer shape ``DeltaChannel`` calls."""
    return functools.reduce(add_messages, writes, state)  # type: ignore[arg-type]


class Chat(TypedDict):
    """No snapshot within these tests: every value is rebuilt from writes."""

    messages: Annotated[list[AnyMessage], DeltaChannel(add_message_batches)]


class SnapshotChat(TypedDict):
    """A snapshot every third update: values are rebuilt from a snapshot plus writes."""

    messages: Annotated[list[AnyMessage], DeltaChannel(add_message_batches, snapshot_frequency=3)]


def chat_type(snapshot_frequency: int) -> Any:
    """The state schema with the given snapshot frequency (100 or 3)."""
    return {100: Chat, 3: SnapshotChat}[snapshot_frequency]


class Node(Protocol):
    """A node function as LangGraph calls it (its parameter named ``state``)."""

    def __call__(self, state: Any) -> dict[str, list[AnyMessage]]: ...


def reply(tag: str) -> Node:
    """A node that answers ``"<tag> <messages so far>"`` (its id says the same)."""

    def run(state: Any) -> dict[str, list[AnyMessage]]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"{tag} {n}", id=f"{tag}-{n}")]}

    return run


def chat_graph(saver: BaseCheckpointSaver[Any], snapshot_frequency: int = 100) -> Any:
    """``START -> think -> answer -> END``: two messages per turn."""
    builder = StateGraph(chat_type(snapshot_frequency))
    builder.add_node("think", reply("think"))
    builder.add_node("answer", reply("ok"))
    builder.add_edge(START, "think")
    builder.add_edge("think", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


def human(turn: int) -> Chat:
    """The input of one turn."""
    return {"messages": [HumanMessage(f"hi {turn}", id=f"h-{turn}")]}


def texts(messages: list[AnyMessage]) -> list[tuple[str | None, Any]]:
    """``(id, content)`` of each message, to compare conversations."""
    return [(m.id, m.content) for m in messages]


def reference(turns: int, snapshot_frequency: int = 100) -> list[tuple[str | None, Any]]:
    """The conversation after ``turns`` turns on ``InMemorySaver``, never pruned."""
    graph = chat_graph(InMemorySaver(), snapshot_frequency)
    out: dict[str, Any] = {}
    for turn in range(turns):
        out = graph.invoke(human(turn), cfg("ref"))
    return texts(out["messages"])
