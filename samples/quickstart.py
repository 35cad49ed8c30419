"""Quickstart: a LangGraph agent whose progress survives a restart (the `make demo` sample).

What it shows:
- ``FoundryCheckpointer()`` with no arguments: the embedded local store under
  ``AGENTSERVER_STATE_ROOT`` (default ``~/.agentserver``), the same code that runs unchanged
  inside a Foundry-hosted agent; ``foundry-checkpoint threads`` then shows what it stored;
- a run interrupted half way (a "crash"), then resumed by a brand-new checkpointer, as a new
  process would: the graph continues from the latest checkpoint instead of starting over;
- the checkpoint history of the thread.

No model, key or network is needed.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from foundry_checkpoint import FoundryCheckpointer


class State(TypedDict):
    done: Annotated[list[str], operator.add]


STEPS = ["plan", "research", "draft", "review", "publish"]
CRASH_AT = "review"


def make_step(name: str, crash: bool) -> Callable[[State], dict[str, list[str]]]:
    def step(state: State) -> dict[str, list[str]]:
        if crash and name == CRASH_AT:
            raise RuntimeError(f"simulated crash in {name!r}")
        print(f"  running {name}")
        return {"done": [name]}

    return step


def build(checkpointer: FoundryCheckpointer, *, crash: bool) -> Any:
    builder = StateGraph(State)
    previous = START
    for name in STEPS:
        builder.add_node(name, make_step(name, crash))
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder.compile(checkpointer=checkpointer)


def main() -> None:
    os.environ.setdefault("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    config: RunnableConfig = {"configurable": {"thread_id": "demo-thread"}}

    print("1) first run, which crashes before it finishes:")
    with FoundryCheckpointer() as saver:
        print(f"   {saver!r}")
        saver.delete_thread("demo-thread")  # start clean when run again
        try:
            build(saver, crash=True).invoke({"done": []}, config)
        except RuntimeError as exc:
            print(f"   crashed: {exc}")

    print("2) a new checkpointer (as a restarted process would have) resumes the thread:")
    with FoundryCheckpointer() as saver:
        graph = build(saver, crash=False)
        state = graph.get_state(config)
        print(f"   saved progress: {state.values['done']}, next: {list(state.next)}")
        result = graph.invoke(None, config)
        print(f"   finished: {result['done']}")
        history = list(saver.list(config))
        latest_step = history[0].metadata["step"]
        print(f"   {len(history)} checkpoints in the thread; latest step {latest_step}")
    print("3) see what is stored: foundry-checkpoint threads (or history demo-thread --tree)")


if __name__ == "__main__":
    main()
