"""A LangGraph graph run by a ``@multi_turn_task`` handler on azure-ai-agentserver-invocations.

What it shows:
- the platform's resilient task runtime (azure-ai-agentserver-core's ``tasks``) in a handler of
  your own: ``@multi_turn_task`` makes one **chain** per user and thread, and every
  ``POST /invocations`` is one turn of it (``graph_turn.run(task_id=..., input=...,
  input_id=turn)``). The runtime persists the turn's input and holds a lease on the task while
  the turn runs; between turns the chain is ``suspended``;
- the two layers of durable state: the task keeps the turn's small input (thread id, turn id,
  message, who asked), ``FoundryCheckpointer`` keeps the graph's state after every node;
- recovery: a process that dies mid-turn leaves the task ``in_progress``. The next process's
  start-up scan re-enters the handler with ``ctx.entry_mode == "recovered"`` and the persisted
  input, and the handler goes on after the last durable node (``ainvoke(None)``) or, when the
  turn's input never reached a checkpoint, starts the turn. The turn id rides in the graph
  state, so the checkpoint itself says which it is. Only the node in flight runs again;
- identity: the runtime restores the request's call id for a recovered turn; the handler also
  restores the user id the platform sent (kept in the turn's input), so the checkpointer reads
  and writes the same user's partition in local mode as in hosted mode;
- graceful shutdown: when the host stops (``ctx.shutdown`` is set) the handler stops between
  nodes and returns ``await ctx.exit_for_recovery()``; with ``durability="sync"`` every node
  it finished is already stored, and the next process goes on from there;
- ``GET /invocations/{turn}?thread_id=...`` tells a client whose request was lost in a crash
  whether the turn is still running or done, with the thread's messages;
- nothing is configured for the platform: no ``AGENTSERVER_TASKS_BACKEND``. In a
  Foundry-hosted agent the tasks live in the platform's task API; off the platform under
  ``AGENTSERVER_STATE_ROOT``, beside the embedded checkpoint store.

The graph is deterministic (no model): ``plan -> gather -> summarize``. In a Foundry-hosted
agent the platform runs this module (``python langgraph_multi_turn_task.py`` serves on
``$PORT``); a test runs it unchanged against the emulator with
``FoundryEmulator.agent_environment()``.

Requests: ``POST /invocations`` with ``{"thread_id": "t1", "turn": "turn-1", "message":
"..."}`` answers ``{"status": "completed", "turn", "messages"}``; ``GET
/invocations/turn-1?thread_id=t1`` answers ``{"status": "completed" | "in_progress", "turn",
"messages"}``.
"""

from __future__ import annotations

import hashlib
import operator
from typing import Annotated, Any, TypedDict

from azure.ai.agentserver.core import (
    FoundryAgentRequestContext,
    get_request_context,
    reset_request_context,
    set_request_context,
)
from azure.ai.agentserver.core.tasks import (
    TaskContext,
    multi_turn_task,
    set_resilient_tasks_enabled,
)
from azure.ai.agentserver.invocations import InvocationAgentServerHost
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from foundry_checkpoint import FoundryCheckpointer


class State(TypedDict, total=False):
    turn: str  # the turn whose input is in this state (the checkpoint says which turn ran)
    messages: Annotated[list[str], operator.add]


def _asked(state: State) -> str:
    return [m for m in state["messages"] if m.startswith("user: ")][-1].removeprefix("user: ")


def plan(state: State) -> dict[str, list[str]]:
    return {"messages": [f"plan: look up {_asked(state)!r}"]}


def gather(state: State) -> dict[str, list[str]]:
    words = _asked(state).split()
    return {"messages": [f"gather: {len(words)} keyword(s)"]}


def summarize(state: State) -> dict[str, list[str]]:
    turns = sum(1 for m in state["messages"] if m.startswith("user: "))
    return {"messages": [f"summary {turns}: {_asked(state)}"]}


def build(checkpointer: FoundryCheckpointer) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("gather", gather)
    builder.add_node("summarize", summarize)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "gather")
    builder.add_edge("gather", "summarize")
    builder.add_edge("summarize", END)
    return builder.compile(checkpointer=checkpointer)


# The resilient task runtime is opt-in: turn it on before the host starts.
set_resilient_tasks_enabled(True)
# Once per process: the checkpointer caches its store clients and owns one background loop.
checkpointer = FoundryCheckpointer(store_prefix="research")
graph = build(checkpointer)
app = InvocationAgentServerHost()
app.shutdown_handler(checkpointer.aclose)


def chain_id(user: str, thread_id: str) -> str:
    """One chain per user and thread (task ids allow ``[a-zA-Z0-9_-]``, 128 at most)."""
    return "research-" + hashlib.sha256(f"{user}\0{thread_id}".encode()).hexdigest()[:40]


@multi_turn_task(name="research-turn")
async def graph_turn(ctx: TaskContext[dict[str, Any]]) -> dict[str, Any]:
    """One turn of a thread: run the graph for the new message, or finish a recovered turn."""
    turn = ctx.input
    token = set_request_context(
        FoundryAgentRequestContext(call_id=turn["call_id"], user_id=turn["user_id"])
    )
    try:
        config: RunnableConfig = {"configurable": {"thread_id": turn["thread_id"]}}
        snapshot = await graph.aget_state(config)
        start: dict[str, Any] | None
        if snapshot.values.get("turn") != turn["turn"]:  # the input is in no checkpoint yet
            start = {"turn": turn["turn"], "messages": [f"user: {turn['message']}"]}
        elif snapshot.tasks:  # recovered: go on after the last durable node
            # (not ``snapshot.next``: it leaves out a node whose writes were stored when the
            # process died before the checkpoint that follows them; resuming applies them)
            start = None
        else:  # recovered after the graph finished: nothing left to run
            return {"turn": turn["turn"], "messages": snapshot.values.get("messages", [])}
        async for _ in graph.astream(start, config, durability="sync"):
            if ctx.shutdown.is_set():  # the host is stopping: every finished node is stored
                return await ctx.exit_for_recovery()  # type: ignore[no-any-return]
        done = await graph.aget_state(config)
        return {"turn": turn["turn"], "messages": done.values.get("messages", [])}
    finally:
        reset_request_context(token)


def _user() -> str:
    return get_request_context().user_id or "local"


@app.invoke_handler
async def handle(request: Request) -> Response:
    """Run one turn of the caller's thread as a turn of its chain."""
    try:
        body = await request.json()
    except ValueError:
        return JSONResponse({"error": "the body must be JSON"}, 400)
    fields = ("thread_id", "turn", "message")
    if not isinstance(body, dict) or not all(isinstance(body.get(f), str) for f in fields):
        return JSONResponse({"error": "thread_id, turn and message (strings) are needed"}, 400)
    turn = {
        "thread_id": body["thread_id"],
        "turn": body["turn"],
        "message": body["message"],
        "user_id": _user(),
        "call_id": get_request_context().call_id,
    }
    result = await graph_turn.run(
        task_id=chain_id(_user(), body["thread_id"]), input=turn, input_id=body["turn"]
    )
    return JSONResponse({"status": "completed", **result})


@app.get_invocation_handler
async def get_turn(request: Request) -> Response:
    """Whether a turn is still running (here or being recovered) or done."""
    turn = request.path_params["invocation_id"]
    thread_id = request.query_params.get("thread_id")
    if not thread_id:
        return JSONResponse({"error": "thread_id is needed"}, 400)
    running = await graph_turn.get_active_run(chain_id(_user(), thread_id), turn)
    snapshot = await graph.aget_state({"configurable": {"thread_id": thread_id}})
    done = running is None and snapshot.values.get("turn") == turn and not snapshot.tasks
    messages = snapshot.values.get("messages", [])
    return JSONResponse(
        {"status": "completed" if done else "in_progress", "turn": turn, "messages": messages}
    )


if __name__ == "__main__":
    app.run()
