"""A graph for ``langgraph dev`` on Foundry's state store: checkpoints and long-term memory.

This sample shows the LangGraph server (``langgraph dev``) serving a graph whose threads are
kept by :class:`~foundry_checkpoint.FoundryCheckpointer` and whose memories, shared across
threads, by :class:`~foundry_checkpoint.FoundryStore`: ``langgraph.json`` names the factories of
:mod:`foundry_checkpoint.langgraph_server`, and nothing else needs configuring (local mode: one
SQLite file under ``AGENTSERVER_STATE_ROOT``, default ``~/.agentserver``)::

    pip install "foundry-checkpoint[langgraph]" "langgraph-cli[inmem]"
    cd samples/langgraph_server && langgraph dev

The graph drafts a note on a topic (``draft`` reads how many drafts on it were approved before,
through ``runtime.store``), waits for a human (``review``: ``interrupt()``), and on the answer
remembers the verdict under ``("approved", topic)``, keyed by the thread id, through
``get_store()``. A client (``langgraph-sdk``) drives it::

    client = get_sync_client(url="http://127.0.0.1:2024")
    thread = client.threads.create()
    client.runs.wait(thread["thread_id"], "agent", input={"topic": "tea"})  # paused
    client.runs.wait(thread["thread_id"], "agent", command={"resume": "ok"})
    client.store.search_items(["approved", "tea"])  # the memory the graph wrote
"""

from __future__ import annotations

import operator
from typing import Annotated

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    topic: str
    notes: Annotated[list[str], operator.add]


async def draft(state: State, runtime: Runtime) -> State:
    """Draft a note; earlier approvals of the topic are read from the long-term store."""
    assert runtime.store is not None  # the server always passes its store
    topic = state.get("topic", "general")
    approved = await runtime.store.asearch(("approved", topic), limit=100)
    return {"notes": [f"draft {len(approved) + 1} on {topic}"]}


def review(state: State, config: RunnableConfig) -> State:
    """Wait for a human; remember the verdict (after the interrupt: written once)."""
    verdict = interrupt("approve the draft?")
    topic = state.get("topic", "general")
    thread_id = config["configurable"]["thread_id"]
    store = get_store()
    store.put(("approved", topic), thread_id, {"draft": state["notes"][-1], "verdict": verdict})
    saved = store.get(("approved", topic), thread_id)
    assert saved is not None
    return {"notes": [f"review:{saved.value['verdict']}"]}


builder = StateGraph(State)
builder.add_node("draft", draft)
builder.add_node("review", review)
builder.add_edge(START, "draft")
builder.add_edge("draft", "review")
builder.add_edge("review", END)
graph = builder.compile()
