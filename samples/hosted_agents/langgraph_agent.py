"""A LangGraph agent on azure-ai-agentserver-invocations, checkpointed by FoundryCheckpointer.

What it shows:
- the graph is served through the **Invocations** protocol (``POST /invocations``): the request
  body is the app's own JSON, so it carries exactly what a graph needs (a thread id, a new
  message, or the answer to a pending ``interrupt()``) and the reply is the thread's state.
  The Responses protocol models a chat transcript whose history the host keeps; a graph keeps
  its own state in its checkpoints, so Invocations fits it without translation;
- **one** ``FoundryCheckpointer`` for the whole process, created at start-up and closed at
  shutdown, serves every end user: the host puts each request's platform headers
  (``x-agent-foundry-call-id``, ``x-agent-user-id``) in the request context, and the checkpointer
  forwards the call id on every state-store call, so the service stores each user's checkpoints
  in that user's partition. Two users may use the same thread id;
- a restarted process (or another replica) continues a conversation from the store, including a
  pending human-in-the-loop question.

The app code is what you deploy; nothing in it knows about the emulator. In a Foundry-hosted
agent the platform runs it (``python langgraph_agent.py`` serves on ``$PORT``);
``samples/hosted_agents_offline.py`` runs it against the state-store emulator instead.

Requests (``POST /invocations``, JSON):

- ``{"thread_id": "t1", "message": "..."}``: a new user message; a message that mentions a
  refund pauses for approval;
- ``{"thread_id": "t1", "resume": "yes"}``: the answer to the pending question;
- ``{"thread_id": "t1", "action": "state"}``: the thread's state, unchanged;
- ``{"thread_id": "t1", "action": "delete"}``: delete the thread (its checkpoints and blobs).

Each answers ``{"thread_id", "messages", "pending"}`` (``pending``: the questions waiting for an
answer).
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from azure.ai.agentserver.invocations import InvocationAgentServerHost
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from foundry_checkpoint import FoundryCheckpointer


class State(TypedDict):
    messages: Annotated[list[str], operator.add]


def reply(state: State) -> dict[str, list[str]]:
    """The 'agent': numbers the user's turns, which shows that earlier turns were restored."""
    turns = [m for m in state["messages"] if m.startswith("user: ")]
    said = turns[-1].removeprefix("user: ")
    return {"messages": [f"agent: turn {len(turns)}: noted {said!r}"]}


def review(state: State) -> dict[str, list[str]]:
    """Refunds need a human: ``interrupt()`` pauses here until the answer arrives."""
    said = [m for m in state["messages"] if m.startswith("user: ")][-1]
    if "refund" not in said:
        return {"messages": []}
    answer = interrupt(f"Approve the refund in {said.removeprefix('user: ')!r}?")
    verdict = "approved" if answer == "yes" else "declined"
    return {"messages": [f"agent: refund {verdict}"]}


def build(checkpointer: FoundryCheckpointer) -> CompiledStateGraph[Any, Any, Any, Any]:
    """``reply -> review``, checkpointed after every step."""
    builder = StateGraph(State)
    builder.add_node("reply", reply)
    builder.add_node("review", review)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "review")
    builder.add_edge("review", END)
    return builder.compile(checkpointer=checkpointer)


# Once per process: the checkpointer caches its store clients and owns one background loop.
checkpointer = FoundryCheckpointer(store_prefix="support-desk")
graph = build(checkpointer)
app = InvocationAgentServerHost()
app.shutdown_handler(checkpointer.aclose)
# azure-ai-agentserver-core 2.3+ may snapshot the process and restore it with a new environment:
# close the clients first; the next request reopens them and reads the environment again.
if hasattr(app, "before_snapshot_handler"):
    app.before_snapshot_handler(checkpointer.aclose)


async def _state(thread_id: str) -> dict[str, Any]:
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    snapshot = await graph.aget_state(config)
    pending = [i.value for task in snapshot.tasks for i in task.interrupts]
    return {
        "thread_id": thread_id,
        "messages": snapshot.values.get("messages", []),
        "pending": pending,
    }


@app.invoke_handler
async def handle(request: Request) -> Response:
    """Run one step of a thread for the user of this request."""
    try:
        body = await request.json()
    except ValueError:
        return JSONResponse({"error": "the body must be JSON"}, 400)
    thread_id = body.get("thread_id") if isinstance(body, dict) else None
    if not isinstance(thread_id, str) or not thread_id:
        return JSONResponse({"error": "thread_id (a non-empty string) is required"}, 400)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    action = body.get("action")
    if action == "delete":
        await checkpointer.adelete_thread(thread_id)
        return JSONResponse(await _state(thread_id))
    if action == "state":
        return JSONResponse(await _state(thread_id))
    waiting = bool((await _state(thread_id))["pending"])
    if "resume" in body:
        if not waiting:
            return JSONResponse({"error": "nothing in this thread waits for an answer"}, 409)
        await graph.ainvoke(Command(resume=body["resume"]), config)
    elif isinstance(body.get("message"), str):
        if waiting:
            return JSONResponse({"error": "answer the pending question first"}, 409)
        await graph.ainvoke({"messages": [f"user: {body['message']}"]}, config)
    else:
        return JSONResponse({"error": "send a message, a resume answer or an action"}, 400)
    return JSONResponse(await _state(thread_id))


if __name__ == "__main__":
    app.run()
