"""The graph ``langgraph dev`` serves in ``tests/hosts/test_langgraph_dev.py``, on our saver.

``langgraph.json`` names ``./agent.py:checkpointer``: the factory of
:mod:`foundry_checkpoint.langgraph_server`, re-exported by this file (the file form of the path),
an async context manager yielding a ``FoundryCheckpointer`` (local mode: the embedded store under
``AGENTSERVER_STATE_ROOT``).
"""

from __future__ import annotations

import operator
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from foundry_checkpoint.langgraph_server import checkpointer


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


__all__ = ["checkpointer", "graph"]
