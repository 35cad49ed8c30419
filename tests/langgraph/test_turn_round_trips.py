"""A chat turn waits for as many store round trips as the one-request-per-call floor allows.

Every store call of the thread's scope is held for one simulated round trip and logged with
its start and end; the longest chain of calls that ran one after the other is what the turn
waits for on the service. The floor is LangGraph's ``InMemorySaver`` with the same round trip
slept per saver call. Per durability mode, the turn's store calls are asserted too (both modes).

The first turn of a new thread (hosted) is counted from the client's own requests
(:class:`tests._trips.Trips`), since it also opens the thread's store: the read's store GET
finds none, one create makes it (no second GET: the create answers the descriptor the isolation
check reads), and the write's index entry and the checkpoint follow one after the other.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from foundry_checkpoint import FoundryCheckpointer
from tests._trips import Trips, waves
from tests._trips import chain as request_chain

TRIP_S = 0.02
Log = list[tuple[str, float, float]]


class _Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _graph(saver: Any) -> Any:
    def assistant(state: _Chat) -> dict[str, Any]:
        return {"messages": [AIMessage("reply " * 50)]}

    builder: StateGraph[Any] = StateGraph(_Chat)
    builder.add_node("assistant", assistant)
    builder.add_edge(START, "assistant")
    builder.add_edge("assistant", END)
    return builder.compile(checkpointer=saver)


def _chain(log: Log) -> int:
    """The longest chain of calls each starting after the previous one ended."""
    ordered = sorted(log, key=lambda call: call[2])
    chains: list[int] = []
    for i, (_, start, _end) in enumerate(ordered):
        chains.append(1 + max((chains[j] for j in range(i) if ordered[j][2] <= start), default=0))
    return max(chains, default=0)


async def _trip(log: Log, name: str) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.sleep(TRIP_S)
    log.append((name, start, loop.time()))


class _TimedStore:
    """Wraps a scope's store: every call waits one round trip first and is logged."""

    def __init__(self, inner: Any, log: Log) -> None:
        self._inner = inner
        self._log = log

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        async def timed(*args: Any, **kwargs: Any) -> Any:
            loop = asyncio.get_running_loop()
            start = loop.time()
            await asyncio.sleep(TRIP_S)
            try:
                return await attr(*args, **kwargs)
            finally:
                self._log.append((name, start, loop.time()))

        return timed


def _floor(log: Log) -> InMemorySaver:
    class _DelayedInMemorySaver(InMemorySaver):
        async def aget_tuple(self, config: Any) -> Any:
            await _trip(log, "aget_tuple")
            return self.get_tuple(config)

        async def aput(self, config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
            await _trip(log, "aput")
            return self.put(config, checkpoint, metadata, versions)

        async def aput_writes(
            self, config: Any, writes: Any, task_id: str, task_path: str = ""
        ) -> None:
            await _trip(log, "aput_writes")
            self.put_writes(config, writes, task_id, task_path)

    return _DelayedInMemorySaver()


async def _turn(graph: Any, thread: str, durability: str) -> None:
    config = {"configurable": {"thread_id": thread}}
    await graph.ainvoke({"messages": [HumanMessage("hello " * 50)]}, config, durability=durability)


@pytest.mark.parametrize(
    ("durability", "calls"),
    [
        ("sync", {"set_item": 3, "create_item": 2}),
        ("async", {"set_item": 3, "create_item": 2}),
        ("exit", {"set_item": 1}),
    ],
)
async def test_a_chat_turn_waits_no_more_round_trips_than_the_floor(
    store_env: Any,
    make_saver: Callable[..., FoundryCheckpointer],
    durability: str,
    calls: dict[str, int],
) -> None:
    floor_log: Log = []
    floor = _graph(_floor(floor_log))
    for _ in range(3):
        floor_log.clear()
        await _turn(floor, "t", durability)
    floor_chain = _chain(floor_log)

    saver = make_saver(fresh_prefix=True)
    graph = _graph(saver)
    for _ in range(2):  # the first turn creates the thread's store; then steady turns
        await _turn(graph, "t", durability)
    scope = await saver._core.arun(saver._core.scope("t"))
    log: Log = []
    scope.store = _TimedStore(scope.store, log)
    await _turn(graph, "t", durability)

    finding = "list_keys" if store_env.mode == "hosted" else "greatest"
    assert Counter(name for name, _, _ in log) == Counter({finding: 1, **calls})
    assert _chain(log) == floor_chain == (2 if durability == "exit" else 4)


@pytest.mark.emulator
@pytest.mark.parametrize(
    ("durability", "chain", "calls"),
    [
        ("sync", 6, {"put_item": 4, "create_item": 2, "get_item": 1}),
        ("async", 6, {"put_item": 4, "create_item": 2, "get_item": 1}),
        ("exit", 4, {"put_item": 2, "get_item": 1}),
    ],
)
async def test_the_first_turn_of_a_new_thread_opens_its_store_in_two_round_trips(
    emulator: Any,
    monkeypatch: pytest.MonkeyPatch,
    durability: str,
    chain: int,
    calls: dict[str, int],
) -> None:
    """The read's GET, one create; then the touch (index entry and metadata read together)
    and the floor's own calls. Before: get_store -> get_store -> create_store -> get_store ->
    put_item -> get_item -> put_item -> ... (9 sync and async, 7 exit)."""
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    trips = Trips()
    saver = FoundryCheckpointer(
        store_prefix=f"lg1st{uuid.uuid4().hex[:10]}",
        credential=emulator.credential(user="alice"),
        endpoint=emulator.endpoint,
        connection_verify=emulator.ca_file,
        per_call_policies=[trips],
    )
    try:
        graph = _graph(saver)
        await _turn(graph, "other", durability)  # the process has opened the index store
        trips.take()
        await _turn(graph, "new", durability)
        log = trips.take()
    finally:
        await saver.aclose()
    assert waves(log)[:2] == ["get_store", "create_store"]
    assert Counter(name for name, _, _ in log) == Counter(
        {"get_store": 1, "create_store": 1, **calls}
    )
    assert request_chain(log) == chain
