"""LangGraph long-term memory: a user's preferences remembered across threads and processes.

What it shows:
- ``builder.compile(checkpointer=FoundryCheckpointer(), store=FoundryStore())``: the thread's
  checkpoints in the checkpointer, the memories that cross threads in the store, both on the
  embedded local store by default and on the Foundry state store inside a hosted agent;
- a node reaching the store as ``runtime.store`` and the user from the run's context
  (``context={"user_id": ...}``), writing one item per preference under
  ``("users", <user>, "preferences")`` with ``put`` and reading them back with ``search``;
- process 1: alice and bob each tell the agent their preferences in a thread of their own;
- process 2, a brand-new Python process with new objects: in new threads, the agent books with
  each user's own preferences (read from the store, not from the thread), and
  ``list_namespaces`` shows the users it remembers.

No model, key or network is needed: the "agent" is a few lines of deterministic Python. Locally
the two processes share the embedded store under ``AGENTSERVER_STATE_ROOT`` (a temporary folder
here unless you set it).

Run: ``python samples/langgraph_memory.py``
"""

from __future__ import annotations

import operator
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from foundry_checkpoint import FoundryCheckpointer, FoundryStore


class State(TypedDict):
    request: str
    said: Annotated[list[str], operator.add]


@dataclass
class Context:
    user_id: str


def agent(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """``remember <topic>: <choice>`` stores a preference; ``book a flight`` uses them."""
    store = runtime.store
    assert store is not None, "compile the graph with store=..."
    namespace = ("users", runtime.context.user_id, "preferences")
    request = state["request"]
    if request.startswith("remember "):
        topic, choice = request.removeprefix("remember ").split(":", 1)
        store.put(namespace, topic.strip(), {"choice": choice.strip()})
        reply = f"noted {topic.strip()} = {choice.strip()}"
    else:
        known = sorted(store.search(namespace, limit=20), key=lambda item: item.key)
        prefs = ", ".join(f"{item.key} {item.value['choice']}" for item in known)
        reply = f"booked: {prefs or 'no preferences known'}"
    return {"said": [f"user: {request}", f"agent: {reply}"]}


def build(saver: FoundryCheckpointer, store: FoundryStore) -> Any:
    builder = StateGraph(State, context_schema=Context)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=saver, store=store)


def turn(graph: Any, process: int, user: str, thread: str, request: str) -> list[str]:
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    said: list[str] = graph.invoke(
        {"request": request, "said": []}, config, context=Context(user_id=user)
    )["said"]
    print(f"[process {process}] {user} (thread {thread}): {said[-1].removeprefix('agent: ')}")
    return said


def first_week() -> None:
    """Process 1: each user tells the agent their preferences in a thread of their own."""
    with FoundryCheckpointer() as saver, FoundryStore() as store:
        for thread in ("alice-monday", "bob-monday", "alice-friday", "bob-friday"):
            saver.delete_thread(thread)  # start clean when run again
        for user in ("alice", "bob"):
            for item in store.search(("users", user)):
                store.delete(item.namespace, item.key)
        graph = build(saver, store)
        turn(graph, 1, "alice", "alice-monday", "remember seat: window")
        turn(graph, 1, "alice", "alice-monday", "remember meal: vegetarian")
        turn(graph, 1, "bob", "bob-monday", "remember seat: aisle")


def later() -> None:
    """Process 2: new objects and new threads; the memories come from the store."""
    with FoundryCheckpointer() as saver, FoundryStore() as store:
        graph = build(saver, store)
        said = turn(graph, 2, "alice", "alice-friday", "book a flight")
        turn(graph, 2, "bob", "bob-friday", "book a flight")
        print(f"[process 2] messages in thread alice-friday: {len(said)}")
        print(f"[process 2] namespaces remembered: {store.list_namespaces(prefix=('users',))}")


def main() -> None:
    os.environ.setdefault("AGENTSERVER_STATE_ROOT", tempfile.mkdtemp(prefix="foundry-memory-"))
    os.environ.setdefault("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    if len(sys.argv) > 1 and sys.argv[1] == "first":
        first_week()
    elif len(sys.argv) > 1 and sys.argv[1] == "later":
        later()
    else:
        # Two separate Python processes share nothing but the store (same environment).
        subprocess.run([sys.executable, __file__, "first"], check=True)
        subprocess.run([sys.executable, __file__, "later"], check=True)


if __name__ == "__main__":
    main()
