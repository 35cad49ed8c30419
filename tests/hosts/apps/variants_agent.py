"""A test host: one graph, one FoundryCheckpointer, every way of running it, per request.

The request picks how the graph runs: ``"mode": "sync"`` (``graph.invoke`` in a worker thread,
as a handler that calls sync code does) or ``"async"`` (``await graph.ainvoke``), and LangGraph's
``"durability"`` (``"sync"``, ``"async"`` or ``"exit"``). The answer is the thread's messages,
read back in the same mode.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

from azure.ai.agentserver.invocations import InvocationAgentServerHost
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from foundry_checkpoint import FoundryCheckpointer


class State(TypedDict):
    messages: Annotated[list[str], operator.add]


def echo(state: State) -> dict[str, list[str]]:
    turns = [m for m in state["messages"] if m.startswith("user: ")]
    return {"messages": [f"agent: turn {len(turns)}"]}


def later(state: State) -> dict[str, list[str]]:
    return {"messages": ["agent: done"]}


builder = StateGraph(State)
builder.add_node("echo", echo)
builder.add_node("later", later)
builder.add_edge(START, "echo")
builder.add_edge("echo", "later")
checkpointer = FoundryCheckpointer(store_prefix="variants")
graph: Any = builder.compile(checkpointer=checkpointer)
app = InvocationAgentServerHost()
app.shutdown_handler(checkpointer.aclose)


@app.invoke_handler
async def handle(request: Request) -> Response:
    body = await request.json()
    config: RunnableConfig = {"configurable": {"thread_id": body["thread_id"]}}
    inputs = {"messages": [f"user: {body['message']}"]} if "message" in body else None
    durability = body.get("durability", "async")
    if body.get("mode") == "sync":
        if inputs is not None:
            await asyncio.to_thread(graph.invoke, inputs, config, durability=durability)
        snapshot = await asyncio.to_thread(graph.get_state, config)
    else:
        if inputs is not None:
            await graph.ainvoke(inputs, config, durability=durability)
        snapshot = await graph.aget_state(config)
    return JSONResponse({"messages": snapshot.values.get("messages", [])})
