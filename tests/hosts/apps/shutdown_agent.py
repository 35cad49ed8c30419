"""A test host: a LangGraph graph behind azure-ai-agentserver-invocations, stopped by SIGTERM.

Wired as ``samples/hosted_agents/langgraph_agent.py`` is: one ``FoundryCheckpointer`` for the
process, closed by the host's shutdown handler (not with ``SHUTDOWN_CLOSE=0``: then nothing
closes it, as in a Responses host, whose one shutdown-handler slot holds its own handler).
``first -> second -> third``, each step journaled (its start and its end, with the process id)
in ``$SHUTDOWN_JOURNAL``. ``first`` waits for the file ``$SHUTDOWN_JOURNAL.gate``, so that the
test can make the store slow before ``first`` returns (its saves are then still being written
when the host stops the turn); ``second`` waits for ``$SHUTDOWN_JOURNAL.release``, so it is in
flight (or not yet started) when the process stops.

Requests (``POST /invocations``, JSON): ``{"thread_id": "t", "message": "..."}`` runs a turn
(``durability="sync"``: every step is saved before the next one starts), and with
``"background": true`` answers ``202`` at once and runs the turn in a task of its own (the
usual way to serve a long turn: nothing waits for that task when the host stops);
``{"thread_id": "t", "action": "resume"}`` continues the thread from its latest checkpoint (what
a client, or a recovery, does after a process died mid-turn). Both answer the thread's
messages.
"""

from __future__ import annotations

import asyncio
import operator
import os
from pathlib import Path
from typing import Annotated, Any, TypedDict

from azure.ai.agentserver.invocations import InvocationAgentServerHost
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from foundry_checkpoint import FoundryCheckpointer

JOURNAL = Path(os.environ["SHUTDOWN_JOURNAL"])
GATE = JOURNAL.with_name(JOURNAL.name + ".gate")
RELEASE = JOURNAL.with_name(JOURNAL.name + ".release")


class State(TypedDict):
    messages: Annotated[list[str], operator.add]


def _say(text: str) -> dict[str, list[str]]:
    return {"messages": [text]}


def _note(line: str) -> None:
    with JOURNAL.open("a", encoding="utf-8") as out:
        out.write(f"{line} {os.getpid()}\n")
        out.flush()
        os.fsync(out.fileno())


async def _wait_for(path: Path) -> None:
    """Poll for a file the test process creates (no event crosses processes)."""
    while not path.exists():  # noqa: ASYNC110, ASYNC240 - a tiny stat, 50 times a second
        await asyncio.sleep(0.02)


async def first(state: State) -> dict[str, list[str]]:
    _note("first:start")
    await _wait_for(GATE)
    _note("first:end")  # its side effect is done; the test sends SIGTERM now
    return _say("first")


async def second(state: State) -> dict[str, list[str]]:
    _note("second:start")
    await _wait_for(RELEASE)
    _note("second:end")
    return _say("second")


async def third(state: State) -> dict[str, list[str]]:
    _note("third:start")
    _note("third:end")
    return _say("third")


builder = StateGraph(State)
builder.add_node("first", first)
builder.add_node("second", second)
builder.add_node("third", third)
builder.add_edge(START, "first")
builder.add_edge("first", "second")
builder.add_edge("second", "third")
builder.add_edge("third", END)
checkpointer = FoundryCheckpointer(store_prefix="shutdown")
graph: Any = builder.compile(checkpointer=checkpointer)


_running: set[asyncio.Task[Any]] = set()


async def handle(request: Request) -> Response:
    """Run a turn (or continue the thread); in a task of its own with ``"background": true``."""
    body = await request.json()
    config: RunnableConfig = {"configurable": {"thread_id": body["thread_id"]}}
    inputs = None if body.get("action") == "resume" else {"messages": [body["message"]]}
    run = graph.ainvoke(inputs, config, durability="sync")
    if body.get("background"):
        task = asyncio.ensure_future(run)  # the pattern of a long turn: answer now, run on
        _running.add(task)
        task.add_done_callback(_running.discard)
        return JSONResponse({"status": "accepted"}, 202)
    await run
    snapshot = await graph.aget_state(config)
    return JSONResponse({"messages": snapshot.values.get("messages", [])})


app = InvocationAgentServerHost()
app.invoke_handler(handle)
if os.environ.get("SHUTDOWN_CLOSE", "1") == "1":
    app.shutdown_handler(checkpointer.aclose)
# else: nothing closes the checkpointer (a Responses host keeps the one shutdown-handler slot
# for its own handler); the exit of the process flushes what is still being written.
