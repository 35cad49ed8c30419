"""A graph whose state holds a type of its own, run by ``test_strict_compile`` in a child process.

``python -m tests.security._strict_graph THREAD`` runs the graph twice on ``THREAD`` (the second
run resumes from the stored checkpoint) and prints the resulting point.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from foundry_checkpoint import FoundryCheckpointer


@dataclass
class Point:
    x: int
    y: int


@dataclass
class State:
    point: Point
    moves: int = 0


def _move(state: State) -> dict[str, Any]:
    return {"point": Point(state.point.x + 1, state.point.y), "moves": state.moves + 1}


def main(thread: str) -> None:
    builder = StateGraph(State)
    builder.add_node("move", _move)
    builder.add_edge(START, "move")
    builder.add_edge("move", END)
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    with FoundryCheckpointer() as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(State(point=Point(0, 0)), config)
        state = graph.get_state(config).values  # reads the stored Point back
        out = graph.invoke(State(point=state["point"], moves=state["moves"]), config)
        print(out["point"], out["moves"])


if __name__ == "__main__":
    main(sys.argv[1])
