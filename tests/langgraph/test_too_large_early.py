"""How early a value too large for any store stops a run: right after the node that made it.

LangGraph serializes a node's output only after the node returned, so the node's own side
effects have happened by then; what the saver can spare is every later node's. With
``durability="sync"`` (what langchain-azure-ai's hosts run) the step's checkpoint is awaited
before the next step, so the refusal (``CheckpointTooLargeError``, before anything is written)
ends the run there. With ``"async"`` (LangGraph's default) the next steps run while the step is
being saved, and LangGraph raises the saver's error only when the run ends: the later nodes ran.
The cap of one stored value (1 GiB) is lowered to 100 kB here.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from foundry_checkpoint import FoundryCheckpointer, _codec
from foundry_checkpoint.errors import CheckpointTooLargeError


class State(TypedDict, total=False):
    big: bytes
    log: Annotated[list[str], operator.add]


def _graph(saver: FoundryCheckpointer, ran: list[str]) -> Any:
    def make(state: State) -> State:
        ran.append("make")
        return {"big": random.Random(7).randbytes(200_000)}  # over the lowered cap

    def after(state: State) -> State:
        ran.append("after")  # a side effect of a later node
        return {"log": ["after"]}

    builder = StateGraph(State)
    builder.add_node("make", make)
    builder.add_node("after", after)
    builder.add_edge(START, "make")
    builder.add_edge("make", "after")
    builder.add_edge("after", END)
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize(("durability", "later_nodes_ran"), [("sync", False), ("async", True)])
async def test_a_value_over_the_cap_stops_the_run_after_its_node(
    make_saver: Callable[..., FoundryCheckpointer],
    monkeypatch: pytest.MonkeyPatch,
    durability: str,
    later_nodes_ran: bool,
) -> None:
    monkeypatch.setattr(_codec, "MAX_PAYLOAD", 100_000)
    saver = make_saver(fresh_prefix=True)
    ran: list[str] = []
    config: Any = {"configurable": {"thread_id": "t-1"}}
    with pytest.raises(CheckpointTooLargeError) as refused:
        await _graph(saver, ran).ainvoke({}, config, durability=durability)
    assert ran == (["make", "after"] if later_nodes_ran else ["make"])
    assert str(refused.value).startswith("thread 't-1'")
    # nothing of the refused value was stored: the thread holds no checkpoint with it
    async for stored in saver.alist(config):
        assert "big" not in stored.checkpoint["channel_values"]
        assert all(channel != "big" for _, channel, _ in stored.pending_writes or [])
