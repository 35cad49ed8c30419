"""A graph whose ids come from a patched ``uuid.uuid4`` sees the same ids as with InMemorySaver.

LangGraph's own suite replaces ``uuid.uuid4`` with a counter and asserts the message ids a graph
produces; a saver (or the store under it) that draws from ``uuid.uuid4`` shifts those ids.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from foundry_checkpoint import FoundryCheckpointer
from tests.langgraph._util import cfg


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _reply(state: Chat) -> dict[str, list[AnyMessage]]:
    return {"messages": [AIMessage(f"ok {len(state['messages'])}")]}


def _graph(saver: BaseCheckpointSaver[Any]) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("reply", _reply)
    builder.add_node("again", _reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "again")
    builder.add_edge("again", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture
def counted_uuid4(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    """Patch ``uuid.uuid4`` with a counter (as LangGraph's tests do); call the result to reset."""
    state = {"n": 0}

    def fake() -> uuid.UUID:
        state["n"] += 1
        return uuid.UUID(int=state["n"])

    def reset() -> None:
        state["n"] = 0

    monkeypatch.setattr(uuid, "uuid4", fake)
    yield reset


def _ids(saver: BaseCheckpointSaver[Any], reset: Callable[[], None]) -> list[list[str]]:
    reset()
    graph = _graph(saver)
    turns: list[list[str]] = []
    for turn in range(3):
        out = graph.invoke({"messages": [HumanMessage(f"hi {turn}")]}, cfg("ids"))
        turns.append([str(m.id) for m in out["messages"]])
    state = graph.get_state(cfg("ids"))
    turns.append([str(m.id) for m in state.values["messages"]])
    return turns


def test_patched_uuid4_gives_the_ids_it_gives_with_in_memory_saver(
    counted_uuid4: Callable[[], None], make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    expected = _ids(InMemorySaver(), counted_uuid4)
    assert expected[-1][:2] == [str(uuid.UUID(int=1)), str(uuid.UUID(int=2))]
    saver = make_saver()
    assert _ids(saver, counted_uuid4) == expected


async def test_patched_uuid4_async(
    counted_uuid4: Callable[[], None], make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    async def ids(saver: BaseCheckpointSaver[Any]) -> list[str]:
        counted_uuid4()
        graph = _graph(saver)
        for turn in range(2):
            await graph.ainvoke({"messages": [HumanMessage(f"hi {turn}")]}, cfg("aids"))
        state = await graph.aget_state(cfg("aids"))
        return [str(m.id) for m in state.values["messages"]]

    expected = await ids(InMemorySaver())
    assert await ids(make_saver()) == expected
