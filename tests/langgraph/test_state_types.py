"""A graph's own state types read back in a fresh process, with default settings.

The state (``tests.langgraph._typed_graph``) nests pydantic models, dataclasses, enums and named
tuples in lists and dicts and declares them only in its schema. One child process runs the
graph to its interrupt; a second, fresh one reads ``get_state`` and ``get_state_history`` and
resumes: the values come back equal and typed, sync and async, local and hosted. What the
graph did not declare fails when it is saved, on the first run, naming the fix; a stored value
naming any other class is still refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_KW_ARGS, EXT_PYDANTIC_V2
from langgraph.types import Command
from pydantic import BaseModel, ImportString
from typing_extensions import TypedDict

from foundry_checkpoint import CorruptPayloadError, FoundryCheckpointer
from foundry_checkpoint.errors import UnreadableValueError, UnsafeValueError
from tests.langgraph import _typed_graph as tg
from tests.langgraph._util import cfg
from tests.security._gadgets import Planted, attacker_serde

ROOT = Path(__file__).resolve().parents[2]


def _child(env: Any, action: str, face: str, thread: str) -> dict[str, Any]:
    child_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child_env.pop("LANGGRAPH_STRICT_MSGPACK", None)
    args = [sys.executable, "-m", "tests.langgraph._typed_graph", action, face, thread]
    if env.mode == "hosted":
        args += [env.emulator.endpoint, env.emulator.ca_file, env.prefix]
    else:
        child_env.pop("FOUNDRY_HOSTING_ENVIRONMENT", None)
        child_env["AGENTSERVER_STATE_ROOT"] = os.environ["AGENTSERVER_STATE_ROOT"]
    done = subprocess.run(
        args, env=child_env, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("face", ["sync", "async"])
def test_own_types_resume_in_a_fresh_process(store_env: Any, face: str) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    expected = tg.describe(tg.expected_after_write())
    written = _child(store_env, "write", face, thread)
    assert written["state"] == expected

    resumed = _child(store_env, "resume", face, thread)
    assert resumed["state"] == expected  # equal, and typed: the reprs name every class
    assert resumed["state"]["items"][0][0] == "Item"
    assert "Tag(name='a', color=<Color.RED: 'red'>)" in resumed["state"]["items"][0][1]
    assert "where=Point(x=0, y=0)" in resumed["state"]["items"][0][1]
    assert resumed["state"]["last"] == ["Tag", "Tag(name='a', color=<Color.RED: 'red'>)"]
    # the interrupt's value (a pending write) holds a dataclass too
    assert resumed["interrupts"] == [
        {"question": ["str", "'name?'"], "seen": ["Tag", "Tag(name='a', color=<Color.RED: 'red'>)"]}
    ]
    assert resumed["history"] and resumed["history"][0] == expected
    assert all(item[0] == "Item" for h in resumed["history"] for item in h.get("items", []))
    assert resumed["final"]["answer"] == ["str", "'carol'"]
    assert resumed["final"]["last"] == ["Tag", "Tag(name='carol', color=<Color.BLUE: 'blue'>)"]
    assert resumed["final"]["by_name"] == expected["by_name"]


def test_an_undeclared_value_fails_when_saved(make_saver: Any) -> None:
    saver = make_saver(fresh_prefix=True)
    graph = tg.build(saver, smuggle=True)
    with pytest.raises(UnreadableValueError) as caught:
        graph.invoke({}, cfg("t1"))
    message = str(caught.value)
    assert "tests.langgraph._typed_graph.Undeclared" in message
    assert (
        "FoundryCheckpointer().with_allowlist([('tests.langgraph._typed_graph', 'Undeclared')])"
        in message
    )
    assert isinstance(caught.value, TypeError)
    assert not isinstance(caught.value, CorruptPayloadError)
    # nothing half-written: the stored state has the first node's values and no "extra"
    state = graph.get_state(cfg("t1"))
    assert "extra" not in state.values and state.values["items"][0].name == "item-0"
    stored = saver.get_tuple(cfg("t1"))
    assert stored is not None
    assert all(channel != "extra" for _, channel, _ in stored.pending_writes or [])


async def test_an_undeclared_value_fails_when_saved_async(make_saver: Any) -> None:
    saver = make_saver(fresh_prefix=True)
    graph = tg.build(saver, smuggle=True)
    with pytest.raises(UnreadableValueError, match="with_allowlist"):
        await graph.ainvoke({}, cfg("t1"))
    assert "extra" not in (await graph.aget_state(cfg("t1"))).values


def test_with_allowlist_admits_what_the_graph_does_not_declare(make_saver: Any) -> None:
    saver = make_saver(fresh_prefix=True)
    allowed = saver.with_allowlist([("tests.langgraph._typed_graph", "Undeclared")])
    graph = tg.build(allowed, smuggle=True)
    graph.invoke({}, cfg("t1"))
    extra = graph.get_state(cfg("t1")).values["extra"]
    assert extra == {"hidden": tg.Undeclared(note="not in any schema")}


def _plant(env: Any, thread: str, typed: tuple[str, bytes], channel: str = "last") -> None:
    """Store, as an attacker would, a newest checkpoint whose ``channel`` is ``typed``."""
    with FoundryCheckpointer(**env.kwargs(serde=attacker_serde())) as attacker:
        parent = attacker.get_tuple(cfg(thread))
        assert parent is not None
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {channel: Planted(typed)}
        checkpoint["channel_versions"] = {channel: "9" * 32 + ".0"}
        attacker.put(parent.config, checkpoint, {"source": "loop", "step": 9}, {channel: 1})


@pytest.mark.parametrize(
    ("module", "name", "code"),
    [
        ("tests.langgraph._typed_graph", "Undeclared", EXT_PYDANTIC_V2),  # the app's, not declared
        ("os", "system", EXT_CONSTRUCTOR_KW_ARGS),
        ("pydantic", "ImportString", EXT_CONSTRUCTOR_KW_ARGS),
    ],
)
def test_a_stored_value_naming_another_class_is_refused(
    make_saver: Any, store_env: Any, module: str, name: str, code: int
) -> None:
    saver = make_saver()
    graph = tg.build(saver)
    graph.invoke({}, cfg("t1"))
    assert graph.get_state(cfg("t1")).values["last"] == tg.Tag("a", tg.Color.RED)
    payload = ormsgpack.packb([module, name, {"note": "x"}])
    _plant(store_env, "t1", ("msgpack", ormsgpack.packb(ormsgpack.Ext(code, payload))))
    with FoundryCheckpointer(**store_env.kwargs()) as victim:
        victim_graph = tg.build(victim)
        with pytest.raises(UnsafeValueError, match=rf"{module}\.{name}"):
            victim_graph.get_state(cfg("t1"))
        with pytest.raises(UnsafeValueError):
            list(victim_graph.get_state_history(cfg("t1")))
        with pytest.raises(UnsafeValueError):
            victim_graph.invoke(None, cfg("t1"))


class Loader(BaseModel):
    """Validating it imports the module its field names."""

    target: ImportString[Any]


class LoaderState(TypedDict, total=False):
    loader: Loader


def test_a_declared_type_whose_validation_imports_is_left_to_the_allow_list(
    make_saver: Any, store_env: Any
) -> None:
    from langgraph.graph import END, START, StateGraph

    from foundry_checkpoint._langgraph._graphs import graph_types

    builder = StateGraph(LoaderState)
    builder.add_node("node", lambda state: {})
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    saver = make_saver()
    graph = builder.compile(checkpointer=saver)
    assert (__name__, "Loader") not in graph_types(graph)
    graph.invoke({}, cfg("t1"))
    payload = ormsgpack.packb([__name__, "Loader", {"target": "tabnanny"}, "model_validate_json"])
    _plant(store_env, "t1", ("msgpack", ormsgpack.packb(ormsgpack.Ext(EXT_PYDANTIC_V2, payload))),
           channel="loader")  # fmt: skip
    assert "tabnanny" not in sys.modules
    with pytest.raises(UnsafeValueError, match="Loader"):
        graph.get_state(cfg("t1"))
    assert "tabnanny" not in sys.modules  # refused before validation could import it
    trusted = builder.compile(checkpointer=saver.with_allowlist([(__name__, "Loader")]))
    try:  # an explicit allow-list entry is trusted: validation imports
        assert trusted.get_state(cfg("t1")).values["loader"].target.__name__ == "tabnanny"
    finally:
        sys.modules.pop("tabnanny", None)


class Inner(BaseModel):
    """Declared only in the subgraph's state."""

    label: str
    where: tg.Point


class ChildState(TypedDict, total=False):
    inner: Inner
    n: int


class ParentState(TypedDict, total=False):
    n: int


def _nested_graph(saver: FoundryCheckpointer) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def child_node(state: ChildState) -> dict[str, Any]:
        answer = interrupt("go?")
        return {"inner": Inner(label=str(answer), where=tg.Point(1, 2))}

    child = StateGraph(ChildState)
    child.add_node("mark", lambda state: {"inner": Inner(label="first", where=tg.Point(0, 0))})
    child.add_node("child_node", child_node)
    child.add_edge(START, "mark")
    child.add_edge("mark", "child_node")
    child.add_edge("child_node", END)
    parent = StateGraph(ParentState)
    parent.add_node("child", child.compile())
    parent.add_edge(START, "child")
    parent.add_edge("child", END)
    return parent.compile(checkpointer=saver)


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_subgraph_s_own_types_read_back_through_the_parent(
    make_saver: Any, durability: Any
) -> None:
    graph = _nested_graph(make_saver())
    graph.invoke({"n": 1}, cfg("t1"), durability=durability)
    fresh = _nested_graph(make_saver())  # another saver: nothing cached
    state = fresh.get_state(cfg("t1"), subgraphs=True)
    (task,) = state.tasks
    assert task.state.values["inner"] == Inner(label="first", where=tg.Point(0, 0))
    assert isinstance(task.state.values["inner"].where, tg.Point)
    fresh.invoke(Command(resume="yes"), cfg("t1"), durability=durability)
    assert fresh.get_state(cfg("t1")).values == {"n": 1}


async def test_a_subgraph_s_own_types_read_back_async(make_saver: Any) -> None:
    graph = _nested_graph(make_saver())
    await graph.ainvoke({"n": 1}, cfg("t1"), durability="async")
    fresh = _nested_graph(make_saver())
    state = await fresh.aget_state(cfg("t1"), subgraphs=True)
    assert state.tasks[0].state.values["inner"].label == "first"
    await fresh.ainvoke(Command(resume="ok"), cfg("t1"))


def test_the_functional_api_s_types_read_back(make_saver: Any) -> None:
    from tests.langgraph._functional_graph import build

    build(make_saver()).invoke(tg.Item(name="a"), cfg("t1"))
    out = build(make_saver()).invoke(Command(resume=1), cfg("t1"))  # another saver
    assert out == tg.Item(name="a+", tags=[tg.Tag("t", tg.Color.BLUE)])


def test_update_state_writes_and_reads_the_graph_s_types(make_saver: Any) -> None:
    saver = make_saver()
    graph = tg.build(saver)
    graph.invoke({}, cfg("t1"))
    graph.update_state(cfg("t1"), {"last": tg.Tag("set", tg.Color.BLUE)})
    with pytest.raises(UnreadableValueError, match="Undeclared"):
        graph.update_state(cfg("t1"), {"extra": {"x": tg.Undeclared(note="no")}})
    fresh = tg.build(make_saver())
    assert fresh.get_state(cfg("t1")).values["last"] == tg.Tag("set", tg.Color.BLUE)


def test_an_encrypted_strict_serializer_admits_the_graph_s_types(make_saver: Any) -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    from foundry_checkpoint import StrictSerializer

    def serde() -> EncryptedSerializer:
        return EncryptedSerializer.from_pycryptodome_aes(StrictSerializer(), key=b"k" * 16)

    tg.build(make_saver(serde=serde())).invoke({}, cfg("t1"))
    state = tg.build(make_saver(serde=serde())).get_state(cfg("t1"))
    assert state.values["by_name"]["item-0"].where == tg.Point(0, 0)
    with pytest.raises(UnreadableValueError, match="Undeclared"):
        tg.build(make_saver(serde=serde()), smuggle=True).invoke({}, cfg("t2"))


def test_run_scopes_end_with_their_runs(make_saver: Any) -> None:
    import gc

    from foundry_checkpoint._langgraph import _graphs

    saver = make_saver(fresh_prefix=True)
    tg.build(saver).invoke({}, cfg("t1"))
    with pytest.raises(UnreadableValueError):
        tg.build(saver, smuggle=True).invoke({}, cfg("t2"))
    gc.collect()  # a loop whose run failed is collected, and its scope with it
    assert _graphs._runs == {}
    # a later direct write in the same context inherits nothing from the runs
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"last": tg.Tag("x", tg.Color.RED)}
    checkpoint["channel_versions"] = {"last": 1}
    with pytest.raises(UnreadableValueError, match="Tag"):
        saver.put(cfg("t3"), checkpoint, {"source": "loop", "step": 1}, {"last": 1})
