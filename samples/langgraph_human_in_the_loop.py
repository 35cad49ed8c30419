"""LangGraph human-in-the-loop across processes: interrupt in one, resume in another.

What it shows:
- an agent (a deterministic fake chat model, so no key or network) drafts a reply, then the graph
  calls ``interrupt()`` to ask a human for approval;
- process 1 runs the graph until that interrupt and exits; the pending question is kept in the
  checkpoint by ``FoundryCheckpointer``;
- process 2, a brand-new Python process with a brand-new checkpointer, finds the pending question
  from the thread id alone and resumes the graph with ``Command(resume=...)``.

In a Foundry-hosted agent the two processes can be two replicas; locally they share the embedded
store under ``AGENTSERVER_STATE_ROOT`` (a temporary folder here unless you set it).

Run: ``python samples/langgraph_human_in_the_loop.py``
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import TypedDict

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

from foundry_checkpoint import FoundryCheckpointer

THREAD: RunnableConfig = {"configurable": {"thread_id": "ticket-1234"}}


class State(TypedDict, total=False):
    request: str
    draft: str
    decision: str
    sent: str


def draft(state: State) -> State:
    """The 'agent': a fake chat model that always answers the same way."""
    model = FakeListChatModel(responses=["Refund of 42 EUR approved; it reaches you in 3 days."])
    reply = model.invoke(f"Write a reply to: {state['request']}")
    return {"draft": str(reply.content)}


def approve(state: State) -> State:
    """Pause for a human; on resume, ``interrupt`` returns the human's answer."""
    decision = interrupt({"question": "Send this reply?", "draft": state["draft"]})
    return {"decision": str(decision)}


def send(state: State) -> State:
    if state["decision"] != "yes":
        return {"sent": "(not sent)"}
    return {"sent": state["draft"]}


def build(saver: FoundryCheckpointer) -> CompiledStateGraph[State, None, State, State]:
    builder = StateGraph(State)
    builder.add_node("draft", draft)
    builder.add_node("approve", approve)
    builder.add_node("send", send)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "approve")
    builder.add_edge("approve", "send")
    builder.add_edge("send", END)
    return builder.compile(checkpointer=saver)


def ask() -> None:
    """Process 1: run until the interrupt, then exit."""
    with FoundryCheckpointer() as saver:
        result = build(saver).invoke({"request": "Where is my refund?"}, THREAD)
        question = result["__interrupt__"][0].value
        print(f"[process 1] drafted: {question['draft']}")
        print(f"[process 1] paused, waiting for a human: {question['question']}")


def resume(answer: str) -> None:
    """Process 2: find the pending question from the thread id, then resume with the answer."""
    with FoundryCheckpointer() as saver:
        graph = build(saver)
        state = graph.get_state(THREAD)
        pending = [i.value["question"] for task in state.tasks for i in task.interrupts]
        print(f"[process 2] pending question: {pending[0]} (next node: {state.next[0]})")
        result = graph.invoke(Command(resume=answer), THREAD)
        print(f"[process 2] resumed with {answer!r}; sent: {result['sent']}")
        print(f"[process 2] checkpoints in the thread: {len(list(saver.list(THREAD)))}")


def main() -> None:
    os.environ.setdefault("AGENTSERVER_STATE_ROOT", tempfile.mkdtemp(prefix="foundry-hitl-"))
    os.environ.setdefault("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    if len(sys.argv) > 1 and sys.argv[1] == "ask":
        ask()
    elif len(sys.argv) > 2 and sys.argv[1] == "resume":
        resume(sys.argv[2])
    else:
        # Two separate Python processes share nothing but the store (same environment).
        subprocess.run([sys.executable, __file__, "ask"], check=True)
        subprocess.run([sys.executable, __file__, "resume", "yes"], check=True)


if __name__ == "__main__":
    main()
