"""``foundry_checkpoint.langgraph_server``: the factories ``langgraph.json`` names.

The real server serving them is ``tests/hosts/test_langgraph_dev.py``; here: what the factories
yield and close, what they read from the ``"store"`` section the server puts in
``LANGGRAPH_STORE``, the errors for a broken section, and that entering them and using what
they yield makes no blocking call on the loop under ``langgraph dev``'s blockbuster.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from typing_extensions import TypedDict

from foundry_checkpoint import FoundryCheckpointer, FoundryStore, InvalidArgumentError
from foundry_checkpoint.langgraph_server import (
    STORE_CONFIG_ENV,
    checkpointer,
    store,
    store_options,
)
from tests._blockbuster import langgraph_dev_blockbuster

SECTION = {"path": "foundry_checkpoint.langgraph_server.store"}


@pytest.fixture(autouse=True)
def _local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    monkeypatch.delenv(STORE_CONFIG_ENV, raising=False)


def _sweepers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "foundry-store-ttl" and t.is_alive()]


def test_the_factories_yield_our_saver_and_store_and_persist_across_new_objects() -> None:
    async def first() -> tuple[object, object]:
        async with checkpointer() as saver, store() as memory:
            await memory.aput(("users", "ann"), "tea", {"likes": "green"})
            return saver, memory

    saver, memory = asyncio.run(first())
    assert isinstance(saver, FoundryCheckpointer)
    assert isinstance(memory, FoundryStore)
    assert isinstance(memory, BaseStore)

    async def second() -> object:
        async with store() as again:
            item = await again.aget(("users", "ann"), "tea")
            return None if item is None else item.value

    assert asyncio.run(second()) == {"likes": "green"}


def test_options_pass_through_and_win_over_the_store_section(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(STORE_CONFIG_ENV, json.dumps({**SECTION, "ttl": {"default_ttl": 5}}))

    async def main() -> tuple[str, str, object, object]:
        async with (
            checkpointer(store_prefix="srv") as saver,
            store(store_prefix="team", ttl={"default_ttl": 7}) as memory,
            store() as from_section,
        ):
            return repr(saver), repr(memory), memory.ttl_config, from_section.ttl_config

    saver, memory, ttl, section_ttl = asyncio.run(main())
    assert "store_prefix='srv'" in saver
    assert "team" in memory
    assert isinstance(ttl, dict) and ttl["default_ttl"] == 7
    assert isinstance(section_ttl, dict) and section_ttl["default_ttl"] == 5


def test_a_sweep_interval_in_the_section_runs_the_sweeper_while_the_store_is_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ttl = {"default_ttl": 1, "sweep_interval_minutes": 30}
    monkeypatch.setenv(STORE_CONFIG_ENV, json.dumps({**SECTION, "ttl": ttl}))
    before = len(_sweepers())

    async def main() -> int:
        async with store() as memory:
            await memory.aput(("a",), "k", {"v": 1})
            return len(_sweepers())

    assert asyncio.run(main()) == before + 1
    assert len(_sweepers()) == before  # stopped on exit

    monkeypatch.setenv(STORE_CONFIG_ENV, json.dumps({**SECTION, "ttl": {"default_ttl": 1}}))

    async def without_interval() -> int:
        async with store():
            return len(_sweepers())

    assert asyncio.run(without_interval()) == before


def test_store_options_reads_ttl_and_index_and_nothing_else() -> None:
    section = {
        **SECTION,
        "ttl": {"default_ttl": 10, "refresh_on_read": False},
        "index": {"dims": 3, "embed": "openai:text-embedding-3-small", "fields": ["text"]},
        "other": {"ignored": True},
    }
    assert store_options({STORE_CONFIG_ENV: json.dumps(section)}) == {
        "ttl": {"default_ttl": 10, "refresh_on_read": False},
        "index": {"dims": 3, "embed": "openai:text-embedding-3-small", "fields": ["text"]},
    }
    assert store_options({STORE_CONFIG_ENV: json.dumps(SECTION)}) == {}
    assert store_options({STORE_CONFIG_ENV: "  "}) == {}
    assert store_options({}) == {}


def test_an_embed_file_in_the_index_is_loaded_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "embeddings.py").write_text(
        "def embed(texts):\n    return [[float(len(t)), 1.0, 0.0] for t in texts]\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    section = {**SECTION, "index": {"dims": 3, "embed": "./embeddings.py:embed"}}
    options = store_options({STORE_CONFIG_ENV: json.dumps(section)})
    embed = options["index"]["embed"]
    assert callable(embed) and embed(["abcd"]) == [[4.0, 1.0, 0.0]]
    assert options["index"]["dims"] == 3
    # Loaded once per file: the same function again.
    assert store_options({STORE_CONFIG_ENV: json.dumps(section)})["index"]["embed"] is embed


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{not json", "JSON object"),
        ('["a list"]', "JSON object"),
        (json.dumps({**SECTION, "ttl": 5}), '"ttl" must be an object'),
        (json.dumps({**SECTION, "index": "openai"}), '"index" must be an object'),
        (json.dumps({**SECTION, "index": {"embed": "./missing.py:f"}}), "does not exist"),
        (json.dumps({**SECTION, "index": {"embed": "./embeddings.py:nope"}}), "has no 'nope'"),
    ],
)
def test_a_broken_store_section_is_refused_with_the_fix(
    raw: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "embeddings.py").write_text("def embed(texts):\n    return []\n", "utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError, match=says):
        store_options({STORE_CONFIG_ENV: raw})
    monkeypatch.setenv(STORE_CONFIG_ENV, raw)

    async def main() -> None:
        async with store():
            pass  # pragma: no cover - never entered

    with pytest.raises(InvalidArgumentError, match=says):
        asyncio.run(main())


class State(TypedDict, total=False):
    n: int


def test_entering_the_factories_and_a_graph_run_make_no_blocking_call_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``langgraph dev`` does: factories entered on its loop, blockbuster armed, a fresh
    state root (the first call creates its folders), a sync node using the store in a worker
    thread and an async node on the loop."""
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "fresh" / "root"))

    async def bump(state: State) -> State:
        from langgraph.config import get_store

        memory = get_store()
        await memory.aput(("counts",), "n", {"n": state["n"] + 1})
        return {"n": state["n"] + 1}

    def read(state: State) -> State:
        from langgraph.config import get_store

        item = get_store().get(("counts",), "n")
        assert item is not None
        return {"n": item.value["n"] * 10}

    builder = StateGraph(State)
    builder.add_node("bump", bump)
    builder.add_node("read", read)
    builder.add_edge(START, "bump")
    builder.add_edge("bump", "read")
    builder.add_edge("read", END)

    async def main() -> object:
        async with checkpointer() as saver, store() as memory:
            graph = builder.compile(checkpointer=saver, store=memory)
            config: RunnableConfig = {"configurable": {"thread_id": "t-1"}}
            result = await graph.ainvoke({"n": 1}, config)
            state = await graph.aget_state(config)
            found = await memory.asearch(("counts",))
            return result, state.values, [i.value for i in found]

    with langgraph_dev_blockbuster():
        outcome = asyncio.run(main())
    assert outcome == ({"n": 20}, {"n": 20}, [{"n": 2}])
