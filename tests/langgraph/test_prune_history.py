"""prune and delete_for_runs never lose history: DeltaChannel values, parents, subgraph calls.

A ``DeltaChannel`` keeps no value in most checkpoints; LangGraph rebuilds it from the writes
of the parent chain (``get_delta_channel_history``). ``prune`` copies that history into the
checkpoint it keeps, clears the parent it deletes, and drops finished subgraph calls with the
checkpoint they started from (PostgresSaver's rules). Every scenario is compared with a run on
``InMemorySaver`` that was never pruned.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from foundry_checkpoint import FoundryCheckpointer
from tests.langgraph._delta import Chat, chat_graph, human, reference, reply, texts
from tests.langgraph._util import cfg


def _ids(saver: FoundryCheckpointer, thread: str, ns: str | None = "") -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg(thread, ns=ns))]


@pytest.mark.parametrize("snapshot_frequency", [100, 3])
def test_prune_keeps_a_delta_channel_conversation(
    make_saver: Callable[..., FoundryCheckpointer], snapshot_frequency: int
) -> None:
    saver = make_saver()
    graph = chat_graph(saver, snapshot_frequency)
    for turn in range(4):
        graph.invoke(human(turn), cfg("chat"))
    before = graph.get_state(cfg("chat"))
    assert texts(before.values["messages"]) == reference(4, snapshot_frequency)
    assert len(_ids(saver, "chat")) > 10

    saver.prune(["chat"])

    kept = list(saver.list(cfg("chat")))
    assert len(kept) == 1 and kept[0].parent_config is None
    assert kept[0].checkpoint["id"] == before.config["configurable"]["checkpoint_id"]
    for reader in (graph, chat_graph(make_saver(), snapshot_frequency)):  # and a new process
        after = reader.get_state(cfg("chat"))
        assert texts(after.values["messages"]) == texts(before.values["messages"])
        assert after.parent_config is None
    out = graph.invoke(human(4), cfg("chat"))
    assert texts(out["messages"]) == reference(5, snapshot_frequency)
    # A second prune keeps the history that the first one copied in.
    saver.prune(["chat"])
    out = chat_graph(make_saver(), snapshot_frequency).invoke(human(5), cfg("chat"))
    assert texts(out["messages"]) == reference(6, snapshot_frequency)


async def test_aprune_keeps_a_delta_channel_conversation(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    saver = make_saver()
    graph = chat_graph(saver)
    for turn in range(3):
        await graph.ainvoke(human(turn), cfg("achat"))
    before = await graph.aget_state(cfg("achat"))
    await saver.aprune(["achat"])
    assert len([t async for t in saver.alist(cfg("achat"))]) == 1
    after = await graph.aget_state(cfg("achat"))
    assert texts(after.values["messages"]) == texts(before.values["messages"])
    out = await graph.ainvoke(human(3), cfg("achat"))
    assert texts(out["messages"]) == reference(4)


def test_delta_history_matches_the_default_walk(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    """The saver's own get_delta_channel_history returns what the base class's walk does."""
    saver = make_saver()
    graph = chat_graph(saver, snapshot_frequency=3)
    for turn in range(3):
        graph.invoke(human(turn), cfg("walk"))
    for checkpoint_id in _ids(saver, "walk"):
        config = cfg("walk", checkpoint_id)
        ours = saver.get_delta_channel_history(config=config, channels=["messages"])
        base = BaseCheckpointSaver.get_delta_channel_history(
            saver, config=config, channels=["messages"]
        )
        assert ours == base
    assert saver.get_delta_channel_history(config=cfg("nothing"), channels=["messages"]) == {
        "messages": {"writes": []}
    }


def test_delete_for_runs_keeps_later_runs_whole(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    saver = make_saver()
    graph = chat_graph(saver)
    for turn in range(3):
        graph.invoke(human(turn), {**cfg("runs"), "metadata": {"run_id": f"run-{turn}"}})
    before = graph.get_state(cfg("runs"))
    saver.delete_for_runs(["run-1"])
    left = list(saver.list(cfg("runs")))
    assert {t.metadata.get("run_id") for t in left} == {"run-0", "run-2"}
    # The first checkpoint of run 2 lost its parent (run 1's last): it is a root now.
    roots = [t for t in left if t.parent_config is None]
    assert len(roots) == 2
    after = graph.get_state(cfg("runs"))
    assert texts(after.values["messages"]) == texts(before.values["messages"])
    out = graph.invoke(human(3), cfg("runs"))
    assert texts(out["messages"]) == reference(4)


def test_prune_refuses_before_deleting_when_the_history_cannot_be_kept(
    make_saver: Callable[..., FoundryCheckpointer], store_env: Any, monkeypatch: Any
) -> None:
    """Without a spill store, a history larger than one item cannot be copied: prune raises and
    the thread is untouched."""
    from foundry_checkpoint._core import Scope
    from foundry_checkpoint.errors import CheckpointTooLargeError

    saver = make_saver()
    # no spill store (local mode defaults to LocalSpill, hosted mode to the thread's chunks)
    saver._core.spill = None
    monkeypatch.setattr(Scope, "spill", property(lambda self: None))

    def big(state: Any) -> dict[str, list[AnyMessage]]:
        n = len(state["messages"])
        text = base64.b64encode(os.urandom(300_000)).decode()  # does not compress
        return {"messages": [AIMessage(f"{n}:{text}", id=f"big-{n}")]}

    builder = StateGraph(Chat)
    builder.add_node("big", big)
    builder.add_edge(START, "big")
    builder.add_edge("big", END)
    graph = builder.compile(checkpointer=saver)
    for turn in range(4):
        graph.invoke(human(turn), cfg("huge"))
    before = _ids(saver, "huge")
    with pytest.raises(CheckpointTooLargeError):
        saver.prune(["huge"])
    assert _ids(saver, "huge") == before
    state = graph.get_state(cfg("huge"))
    assert len(state.values["messages"]) == 8 and state.parent_config is not None


def test_prune_gives_up_whole_when_a_kept_checkpoint_changes_meanwhile(
    make_saver: Callable[..., FoundryCheckpointer], store_env: Any
) -> None:
    """Another writer changes the checkpoint prune is rewriting: ``ConcurrentWriteError``,
    nothing is deleted, and the retry prunes."""
    from foundry_checkpoint.errors import ConcurrentWriteError

    saver = make_saver()
    graph = chat_graph(saver)
    for turn in range(3):
        graph.invoke(human(turn), cfg("raced"))
    before = _ids(saver, "raced")
    scope = saver._core.run(saver._core.scope("raced"))
    store = scope.store

    class Racing:
        """The store, with another writer rewriting an item just before each conditional write."""

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        async def set_item(self, key: str, value: Any, **kwargs: Any) -> Any:
            if kwargs.get("if_match"):
                await store.set_item(key, value, tags=kwargs.get("tags"))
            return await store.set_item(key, value, **kwargs)

    scope.store = Racing()
    try:
        with pytest.raises(ConcurrentWriteError, match="changed while it was being pruned"):
            saver.prune(["raced"])
    finally:
        scope.store = store
    assert _ids(saver, "raced") == before
    saver.prune(["raced"])
    assert _ids(saver, "raced") == before[:1]
    assert texts(graph.get_state(cfg("raced")).values["messages"]) == reference(3)


# -- subgraphs ------------------------------------------------------------------------------
def _child(tag: str, *, ask: bool = False, checkpointer: Any = None) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("one", reply(f"{tag}1"))
    builder.add_node("two", reply(f"{tag}2"))
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    if ask:

        def question(state: Any) -> dict[str, list[AnyMessage]]:
            answer = interrupt("more?")
            return {"messages": [AIMessage(f"answer {answer}", id=f"ans-{answer}")]}

        builder.add_node("ask", question)
        builder.add_edge("two", "ask")
        builder.add_edge("ask", END)
    else:
        builder.add_edge("two", END)
    return builder.compile(checkpointer=checkpointer)


def _parent_with_call(saver: BaseCheckpointSaver[Any], *, ask: bool = False) -> Any:
    """``START -> sub (a subgraph called per turn, its own namespace per call) -> after``."""
    builder = StateGraph(Chat)
    builder.add_node("sub", _child("s", ask=ask))
    builder.add_node("after", reply("after"))
    builder.add_edge(START, "sub")
    builder.add_edge("sub", "after")
    builder.add_edge("after", END)
    return builder.compile(checkpointer=saver)


def _namespaces(saver: FoundryCheckpointer, thread: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in saver.list(cfg(thread, ns=None)):
        ns = t.config["configurable"]["checkpoint_ns"]
        out[ns] = out.get(ns, 0) + 1
    return out


def test_prune_drops_finished_subgraph_calls_and_clears_parents(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    saver = make_saver()
    graph = _parent_with_call(saver)
    for turn in range(3):
        graph.invoke(human(turn), cfg("calls"))
    spaces = _namespaces(saver, "calls")
    assert len([ns for ns in spaces if ns.startswith("sub:")]) == 3
    before = graph.get_state(cfg("calls"))

    saver.prune(["calls"])

    assert _namespaces(saver, "calls") == {"": 1}
    latest = saver.get_tuple(cfg("calls"))
    assert latest is not None and latest.parent_config is None
    after = graph.get_state(cfg("calls"))
    assert texts(after.values["messages"]) == texts(before.values["messages"])
    reference = _parent_with_call(InMemorySaver())
    for turn in range(4):
        expected = reference.invoke(human(turn), cfg("ref"))
    out = graph.invoke(human(3), cfg("calls"))
    assert texts(out["messages"]) == texts(expected["messages"])


def test_prune_drops_calls_written_before_the_owner_tag(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    """Subgraph-call checkpoints without the owner tag (older versions): read from metadata."""
    from foundry_checkpoint._langgraph._records import TAG_OWNER

    saver = make_saver()
    graph = _parent_with_call(saver)
    for turn in range(2):
        graph.invoke(human(turn), cfg("legacy"))

    async def strip() -> int:
        scope = await saver._core.scope("legacy")
        stripped = 0
        for key in await scope.keys():
            tags = dict(key.tags or {})
            if tags.pop(TAG_OWNER, None) is not None:
                item = await scope.store.get_item(key.key)
                assert item is not None
                await scope.store.set_item(key.key, dict(item.value), tags=tags)
                stripped += 1
        return stripped

    assert saver._core.run(strip()) > 2
    fresh = make_saver()
    fresh.prune(["legacy"])
    assert _namespaces(fresh, "legacy") == {"": 1}


def test_prune_keeps_an_interrupted_subgraph_call_resumable(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    saver = make_saver()
    graph = _parent_with_call(saver, ask=True)
    graph.invoke(human(0), cfg("hitl"))
    graph.invoke(Command(resume="yes"), cfg("hitl"))
    graph.invoke(human(1), cfg("hitl"))  # the second call waits in the subgraph
    pending = graph.get_state(cfg("hitl"), subgraphs=True)
    assert pending.next == ("sub",)
    calls = [ns for ns in _namespaces(saver, "hitl") if ns.startswith("sub:")]
    assert len(calls) == 2

    saver.prune(["hitl"])

    spaces = _namespaces(saver, "hitl")
    assert spaces[""] == 1
    waiting = [ns for ns in spaces if ns.startswith("sub:")]
    assert len(waiting) == 1 and spaces[waiting[0]] == 1  # the finished call went
    inner = saver.get_tuple(cfg("hitl", ns=waiting[0]))
    assert inner is not None and inner.parent_config is None
    out = _parent_with_call(make_saver(), ask=True).invoke(Command(resume="go"), cfg("hitl"))

    reference = _parent_with_call(InMemorySaver(), ask=True)
    reference.invoke(human(0), cfg("ref"))
    reference.invoke(Command(resume="yes"), cfg("ref"))
    reference.invoke(human(1), cfg("ref"))
    expected = reference.invoke(Command(resume="go"), cfg("ref"))
    assert texts(out["messages"]) == texts(expected["messages"])
    saver.prune(["hitl"])  # now that call is finished too
    assert _namespaces(saver, "hitl") == {"": 1}


def _parent_with_own_history(saver: BaseCheckpointSaver[Any]) -> Any:
    """A node that calls a ``checkpointer=True`` subgraph, which keeps its own conversation."""
    child = _child("c", checkpointer=True)

    def call(state: Any) -> dict[str, list[AnyMessage]]:
        n = len(state["messages"])
        out = child.invoke({"messages": [HumanMessage(f"to child {n}", id=f"tc-{n}")]})
        seen = [m.content for m in out["messages"]]
        return {"messages": [AIMessage(" | ".join(seen), id=f"child-{n}")]}

    builder = StateGraph(Chat)
    builder.add_node("call", call)
    builder.add_edge(START, "call")
    builder.add_edge("call", END)
    return builder.compile(checkpointer=saver)


async def test_checkpointer_true_subgraph_keeps_its_own_history(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    saver = make_saver()
    graph = _parent_with_own_history(saver)
    for turn in range(3):
        graph.invoke(human(turn), cfg("own"))
    assert _namespaces(saver, "own")["call"] > 1

    await saver.aprune(["own"])

    assert _namespaces(saver, "own") == {"": 1, "call": 1}
    out = await graph.ainvoke(human(3), cfg("own"))
    reference = _parent_with_own_history(InMemorySaver())
    for turn in range(4):
        expected = reference.invoke(human(turn), cfg("ref"))
    assert texts(out["messages"]) == texts(expected["messages"])
    last = out["messages"][-1].content
    assert last.count("to child") == 4  # the child still sees every earlier turn
