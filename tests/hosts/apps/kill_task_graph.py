"""A test host for kill tests: a ``@multi_turn_task`` handler driving a LangGraph graph.

azure-ai-agentserver-invocations' host with a handler of our own: each ``POST /invocations``
is one turn of a ``@multi_turn_task`` chain (one chain per user and thread), and the turn runs a
graph of ``STEPS`` slow nodes checkpointed by ``FoundryCheckpointer``. A node journals
``start``, sleeps, journals ``effect`` (its side effect), sleeps again and returns its update;
the checkpointer journals ``writes`` once a node's writes are stored and waits
``KILL_CHECKPOINT_SECONDS`` before each checkpoint (the window between a node's writes and the
checkpoint that follows them). The first node adds a value over the state store's item limit
to the state when the message asks for it (``big:`` prefix).

The task is the platform's resilient runtime (``set_resilient_tasks_enabled``): a process that
dies mid-turn leaves the task ``in_progress``; the next process's start-up scan re-enters the
handler with ``entry_mode == "recovered"`` and the persisted input, and the handler resumes
the graph after its last durable node (``ainvoke(None)``), or starts the turn when its input
never reached a checkpoint. The turn's id rides in the graph state, so the checkpoint itself
says whether the turn had started. ``GET /invocations/{turn}?thread_id=...`` answers whether
a turn is running or done, and the thread's messages.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import operator
import os
import random
from collections.abc import Sequence
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
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.graph import END, START, StateGraph
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from foundry_checkpoint import FoundryCheckpointer

STEPS = 4
WORK = float(os.environ.get("KILL_STEP_SECONDS", "0.5"))
SETTLE = float(os.environ.get("KILL_SETTLE_SECONDS", "0.2"))
CHECKPOINT_DELAY = float(os.environ.get("KILL_CHECKPOINT_SECONDS", "0.3"))
BIG = 1_400_000  # random bytes: over the 1 MB item limit after compression and base64


def journal(run: str, step: int, event: str) -> None:
    line = json.dumps({"run": run, "step": step, "event": event, "pid": os.getpid()}) + "\n"
    fd = os.open(os.environ["KILL_JOURNAL"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class State(TypedDict, total=False):
    turn: str
    messages: Annotated[list[str], operator.add]
    blob: str


def node(index: int) -> Any:
    async def step(state: State) -> dict[str, Any]:
        run = state["turn"]
        journal(run, index, "start")
        await asyncio.sleep(WORK)
        journal(run, index, "effect")
        update: dict[str, Any] = {"messages": [f"{run}: step {index}"]}
        if index == 0 and run.startswith("big:"):
            # tagged with the process id: a killed attempt's chunks are orphans (see GET)
            big = base64.b64encode(random.Random(7).randbytes(BIG)).decode()
            update["blob"] = f"{big}#{os.getpid()}"
        await asyncio.sleep(SETTLE)
        return update

    return step


class JournallingCheckpointer(FoundryCheckpointer):
    """Says when a node's writes are stored; waits before each checkpoint."""

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await super().aput_writes(config, writes, task_id, task_path)
        turn = config["configurable"].get("turn")
        for channel, value in writes:
            said = value[-1] if channel == "messages" and isinstance(value, list) else None
            if isinstance(turn, str) and isinstance(said, str) and said.startswith(turn + ": "):
                journal(turn, int(said.rsplit(" ", 1)[-1]), "writes")

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        await asyncio.sleep(CHECKPOINT_DELAY)
        return await super().aput(config, checkpoint, metadata, new_versions)


def build(checkpointer: FoundryCheckpointer) -> Any:
    builder = StateGraph(State)
    for n in range(STEPS):
        builder.add_node(f"step{n}", node(n))
    builder.add_edge(START, "step0")
    for n in range(STEPS - 1):
        builder.add_edge(f"step{n}", f"step{n + 1}")
    builder.add_edge(f"step{STEPS - 1}", END)
    return builder.compile(checkpointer=checkpointer)


set_resilient_tasks_enabled(True)
checkpointer = JournallingCheckpointer(store_prefix="killable-graph")
graph = build(checkpointer)
app = InvocationAgentServerHost()
app.shutdown_handler(checkpointer.aclose)


def chain_id(user: str, thread_id: str) -> str:
    """One chain per user and thread (task ids allow ``[a-zA-Z0-9_-]``, 128 at most)."""
    return "chain-" + hashlib.sha256(f"{user}\0{thread_id}".encode()).hexdigest()[:40]


@multi_turn_task(name="graph-turn")
async def graph_turn(ctx: TaskContext[dict[str, Any]]) -> dict[str, Any]:
    """One turn: run the graph for the turn's message, or resume it after a crash."""
    turn = ctx.input
    journal(turn["turn"], -1, f"entry:{ctx.entry_mode}")
    # The runtime restores the request's call id on recovery; the user id rides in the input.
    token = set_request_context(
        FoundryAgentRequestContext(call_id=turn["call_id"], user_id=turn["user_id"])
    )
    try:
        config: RunnableConfig = {
            "configurable": {"thread_id": turn["thread_id"], "turn": turn["turn"]}
        }
        snapshot = await graph.aget_state(config)
        if snapshot.values.get("turn") != turn["turn"]:  # the turn's input is in no checkpoint
            await graph.ainvoke({"turn": turn["turn"], "messages": [turn["message"]]}, config)
        elif snapshot.tasks:  # it is: go on after the last durable node
            # (``snapshot.next`` leaves out a task whose writes are stored but not checkpointed)
            await graph.ainvoke(None, config)
        done = await graph.aget_state(config)
        return {"turn": turn["turn"], "messages": done.values.get("messages", [])}
    finally:
        reset_request_context(token)


@app.invoke_handler
async def handle(request: Request) -> Response:
    body = await request.json()
    context = get_request_context()
    user = context.user_id or "local"
    turn = {
        "thread_id": body["thread_id"],
        "turn": body["turn"],
        "message": body["message"],
        "user_id": user,
        "call_id": context.call_id,
    }
    result = await graph_turn.run(
        task_id=chain_id(user, body["thread_id"]), input=turn, input_id=body["turn"]
    )
    return JSONResponse({"status": "completed", "entry": "direct", **result})


@app.get_invocation_handler
async def get_turn(request: Request) -> Response:
    turn = request.path_params["invocation_id"]
    thread_id = request.query_params["thread_id"]
    context = get_request_context()
    user = context.user_id or "local"
    running = await graph_turn.get_active_run(chain_id(user, thread_id), turn)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    snapshot = await graph.aget_state(config)
    finished = snapshot.values.get("turn") == turn and not snapshot.tasks
    status = "completed" if finished and running is None else "in_progress"
    blob = snapshot.values.get("blob")
    same = blob.rsplit("#", 1)[0] if blob else ""
    digest = hashlib.sha256(same.encode()).hexdigest()[:12] if blob else None
    return JSONResponse(
        {
            "status": status,
            "turn": turn,
            "messages": snapshot.values.get("messages", []),
            "blob": digest,
        }
    )
