"""A graph whose state holds its own types, run by ``test_state_types`` in child processes.

``python -m tests.langgraph._typed_graph ACTION FACE THREAD [ENDPOINT CA_FILE PREFIX]`` with
``ACTION`` ``write`` (a first run, which stops at the interrupt) or ``resume`` (a fresh process:
``get_state``, ``get_state_history``, then ``Command(resume=...)``), ``FACE`` ``sync`` or
``async``; with an endpoint, hosted mode against that emulator, else the local store under
``AGENTSERVER_STATE_ROOT``. It prints one JSON line: what it read, as ``repr`` and type names.

The state nests pydantic models, dataclasses, enums and named tuples in lists and dicts; every
type is only declared in the state schema (no ``with_allowlist``, no
``LANGGRAPH_STRICT_MSGPACK``).
"""

from __future__ import annotations

import asyncio
import json
import operator
import sys
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, NamedTuple

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt
from pydantic import BaseModel
from typing_extensions import TypedDict

from foundry_checkpoint import FoundryCheckpointer


class Color(Enum):
    RED = "red"
    BLUE = "blue"


class Point(NamedTuple):
    x: int
    y: int


@dataclass
class Tag:
    name: str
    color: Color


class Item(BaseModel):
    name: str
    tags: list[Tag] = []
    where: Point | None = None
    marks: dict[str, Point] = {}


class Undeclared(BaseModel):
    """Declared nowhere in the graph: a value of it must fail when saved."""

    note: str


class State(TypedDict, total=False):
    items: Annotated[list[Item], operator.add]
    by_name: dict[str, Item]
    last: Tag | None
    answer: str
    extra: dict[str, Any]


def _add(state: State) -> dict[str, Any]:
    n = len(state.get("items", []))
    item = Item(
        name=f"item-{n}",
        tags=[Tag("a", Color.RED), Tag("b", Color.BLUE)],
        where=Point(n, -n),
        marks={"origin": Point(0, 0)},
    )
    return {"items": [item], "by_name": {item.name: item}, "last": item.tags[0]}


def _ask(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "name?", "seen": state["last"]})
    return {"answer": str(answer), "last": Tag(str(answer), Color.BLUE)}


def _smuggle(state: State) -> dict[str, Any]:
    return {"extra": {"hidden": Undeclared(note="not in any schema")}}


def build(saver: FoundryCheckpointer, *, smuggle: bool = False) -> CompiledStateGraph[Any]:
    """``add`` then ``ask`` (an interrupt); with ``smuggle``, a node that returns an
    :class:`Undeclared` inside the ``dict[str, Any]`` field."""
    builder = StateGraph(State)
    builder.add_node("add", _add)
    builder.add_node("ask", _ask)
    builder.add_edge(START, "add")
    if smuggle:
        builder.add_node("smuggle", _smuggle)
        builder.add_edge("add", "smuggle")
        builder.add_edge("smuggle", END)
    else:
        builder.add_edge("add", "ask")
        builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def expected_after_write() -> dict[str, Any]:
    """The state a ``write`` run leaves (at the interrupt)."""
    return dict(_add({}))


def describe(value: Any) -> Any:
    """``value`` as JSON: containers kept, every other value as ``[type name, repr]``."""
    if isinstance(value, dict):
        return {str(k): describe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [describe(v) for v in value]
    return [type(value).__qualname__, repr(value)]


def _saver(argv: list[str]) -> FoundryCheckpointer:
    if len(argv) > 3:
        from foundry_checkpoint.emulator import EmulatorCredential

        endpoint, ca_file, prefix = argv[3:6]
        return FoundryCheckpointer(
            store_prefix=prefix,
            credential=EmulatorCredential("alice"),
            endpoint=endpoint,
            connection_verify=ca_file,
        )
    return FoundryCheckpointer()


def _sync(action: str, graph: CompiledStateGraph[Any], config: Any) -> dict[str, Any]:
    if action == "write":
        graph.invoke({}, config)
        return {"state": describe(graph.get_state(config).values)}
    state = graph.get_state(config)
    history = list(graph.get_state_history(config))
    out = graph.invoke(Command(resume="carol"), config)
    return {
        "state": describe(state.values),
        "interrupts": [describe(i.value) for i in state.interrupts],
        "history": [describe(h.values) for h in history],
        "final": describe(out),
    }


async def _async(action: str, graph: CompiledStateGraph[Any], config: Any) -> dict[str, Any]:
    if action == "write":
        await graph.ainvoke({}, config)
        return {"state": describe((await graph.aget_state(config)).values)}
    state = await graph.aget_state(config)
    history = [h async for h in graph.aget_state_history(config)]
    out = await graph.ainvoke(Command(resume="carol"), config)
    return {
        "state": describe(state.values),
        "interrupts": [describe(i.value) for i in state.interrupts],
        "history": [describe(h.values) for h in history],
        "final": describe(out),
    }


def main(argv: list[str]) -> None:
    action, face, thread = argv[:3]
    config: Any = {"configurable": {"thread_id": thread}}
    with _saver(argv) as saver:
        graph = build(saver)
        if face == "sync":
            result = _sync(action, graph, config)
        else:
            result = asyncio.run(_async(action, graph, config))
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
