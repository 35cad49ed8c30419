"""The graph ``langgraph dev`` serves in ``tests/hosts/test_langgraph_dev.py``, on our saver.

``langgraph.json`` names :func:`checkpointer`, an async context manager yielding a
``FoundryCheckpointer`` (local mode: the embedded store under ``AGENTSERVER_STATE_ROOT``).
"""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from foundry_checkpoint import FoundryCheckpointer


class State(TypedDict, total=False):
    notes: Annotated[list[str], operator.add]


def draft(state: State) -> State:
    return {"notes": ["draft"]}


def review(state: State) -> State:
    return {"notes": [f"review:{interrupt('approve the draft?')}"]}


builder = StateGraph(State)
builder.add_node("draft", draft)
builder.add_node("review", review)
builder.add_edge(START, "draft")
builder.add_edge("draft", "review")
builder.add_edge("review", END)
graph = builder.compile()


@asynccontextmanager
async def checkpointer() -> AsyncIterator[FoundryCheckpointer]:
    """The server's checkpointer, closed when the server stops."""
    async with FoundryCheckpointer() as saver:
        yield saver
