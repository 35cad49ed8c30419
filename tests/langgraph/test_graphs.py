"""Real LangGraph graphs on the saver: sync and async, subgraphs, threads, human in the loop."""

from __future__ import annotations

import asyncio
import operator
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from foundry_checkpoint import FoundryCheckpointer
from tests.langgraph._util import cfg


class State(TypedDict):
    total: Annotated[int, operator.add]
    log: Annotated[list[str], operator.add]


def _counter() -> StateGraph[State]:
    """START -> a -> b -> END, each node adds to ``total`` and appends to ``log``."""
    builder = StateGraph(State)
    builder.add_node("a", lambda s: {"total": 1, "log": ["a"]})
    builder.add_node("b", lambda s: {"total": 10, "log": ["b"]})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder


def _with_subgraph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[State, Any, Any, Any]:
    child = StateGraph(State)
    child.add_node("inner", lambda s: {"total": 100, "log": ["inner"]})
    child.add_edge(START, "inner")
    child.add_edge("inner", END)
    parent = StateGraph(State)
    parent.add_node("outer", lambda s: {"total": 1, "log": ["outer"]})
    parent.add_node("sub", child.compile())
    parent.add_edge(START, "outer")
    parent.add_edge("outer", "sub")
    parent.add_edge("sub", END)
    return parent.compile(checkpointer=saver)


def test_sync_invoke_and_stream(make_saver: Callable[..., FoundryCheckpointer]) -> None:
    saver = make_saver()
    graph = _counter().compile(checkpointer=saver)
    assert graph.invoke({"total": 0, "log": []}, cfg("s1")) == {"total": 11, "log": ["a", "b"]}
    # A second run on the same thread continues from the saved state.
    chunks = list(graph.stream({"total": 0, "log": []}, cfg("s1"), stream_mode="values"))
    assert chunks[-1] == {"total": 22, "log": ["a", "b", "a", "b"]}
    state = graph.get_state(cfg("s1"))
    assert state.values["total"] == 22
    history = list(graph.get_state_history(cfg("s1")))
    assert [h.metadata["step"] for h in history if h.metadata] == [6, 5, 4, 3, 2, 1, 0, -1]
    assert [h.config["configurable"]["checkpoint_id"] for h in history] == sorted(
        (h.config["configurable"]["checkpoint_id"] for h in history), reverse=True
    )


def test_sync_subgraph(make_saver: Callable[..., FoundryCheckpointer]) -> None:
    # The same graph on InMemorySaver is the reference.
    reference = _with_subgraph(InMemorySaver())
    saver = make_saver()
    graph = _with_subgraph(saver)
    for _ in range(2):
        expected = reference.invoke({"total": 0, "log": []}, cfg("sub-1"))
        assert graph.invoke({"total": 0, "log": []}, cfg("sub-1")) == expected
    assert expected["log"].count("inner") >= 2
    assert graph.get_state(cfg("sub-1")).values == reference.get_state(cfg("sub-1")).values
    # The subgraph's own checkpoints live in a child namespace of the same thread.
    namespaces = {
        t.config["configurable"]["checkpoint_ns"] for t in saver.list(cfg("sub-1", ns=None))
    }
    assert "" in namespaces and any(ns.startswith("sub:") for ns in namespaces)


async def test_async_ainvoke_and_astream(make_saver: Callable[..., FoundryCheckpointer]) -> None:
    saver = make_saver()
    reference = _with_subgraph(InMemorySaver())
    graph = _with_subgraph(saver)
    expected = await reference.ainvoke({"total": 0, "log": []}, cfg("a1"))
    assert await graph.ainvoke({"total": 0, "log": []}, cfg("a1")) == expected
    want = [c async for c in reference.astream({"total": 0, "log": []}, cfg("a1"))]
    chunks = [c async for c in graph.astream({"total": 0, "log": []}, cfg("a1"))]
    assert chunks == want
    assert [next(iter(c)) for c in chunks] == ["outer", "sub"]
    state = await graph.aget_state(cfg("a1"))
    assert state.values == (await reference.aget_state(cfg("a1"))).values
    await saver.aclose()


async def test_sync_invoke_inside_running_loop(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    # As in Jupyter: the caller's thread already runs an event loop.
    asyncio.get_running_loop()
    saver = make_saver()
    graph = _counter().compile(checkpointer=saver)
    assert graph.invoke({"total": 0, "log": []}, cfg("loop-1"))["total"] == 11
    assert saver.get_tuple(cfg("loop-1")) is not None


def test_eight_threads_at_once(make_saver: Callable[..., FoundryCheckpointer]) -> None:
    saver = make_saver()
    graph = _counter().compile(checkpointer=saver)
    barrier = threading.Barrier(8)

    def run(i: int) -> int:
        barrier.wait()
        total = 0
        for _ in range(3):
            total = graph.invoke({"total": 0, "log": []}, cfg(f"worker-{i}"))["total"]
        return int(total)

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(run, range(8))) == [33] * 8
    for i in range(8):
        assert graph.get_state(cfg(f"worker-{i}")).values["log"] == ["a", "b"] * 3


def _approval_graph(saver: FoundryCheckpointer) -> CompiledStateGraph[State, Any, Any, Any]:
    def ask(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "approve?", "total": state["total"]})
        return {"total": 1000 if answer == "yes" else -1, "log": [f"answer:{answer}"]}

    builder = StateGraph(State)
    builder.add_node("prepare", lambda s: {"total": 5, "log": ["prepare"]})
    builder.add_node("ask", ask)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def test_interrupt_resume_in_a_new_instance(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    first = _approval_graph(make_saver())
    out = first.invoke({"total": 0, "log": []}, cfg("hitl-1"))
    assert out["__interrupt__"][0].value == {"question": "approve?", "total": 5}
    pending = first.get_state(cfg("hitl-1"))
    assert pending.next == ("ask",)

    # A new saver instance, as a restarted process would build: nothing cached in memory.
    second = _approval_graph(make_saver())
    assert second.get_state(cfg("hitl-1")).next == ("ask",)
    done = second.invoke(Command(resume="yes"), cfg("hitl-1"))
    assert done == {"total": 1005, "log": ["prepare", "answer:yes"]}
    assert second.get_state(cfg("hitl-1")).next == ()


async def test_interrupt_resume_async(make_saver: Callable[..., FoundryCheckpointer]) -> None:
    first = _approval_graph(make_saver())
    out = await first.ainvoke({"total": 0, "log": []}, cfg("hitl-a"))
    assert "__interrupt__" in out
    second = _approval_graph(make_saver())
    done = await second.ainvoke(Command(resume="no"), cfg("hitl-a"))
    assert done == {"total": 4, "log": ["prepare", "answer:no"]}
