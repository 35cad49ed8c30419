"""The saver under ``langgraph dev``'s blockbuster: no blocking call on any event loop.

``langgraph dev`` (without ``--allow-blocking``) arms blockbuster, which raises ``BlockingError``
for a blocking call (``os.mkdir``, a SQLite statement, ``os.replace``...) made in any thread
where an event loop runs: the server's loop, and the saver's own private loop too. Each test
arms it exactly as ``langgraph dev`` does (``tests._blockbuster``) and runs a graph through
every kind of saver call, sync and async, on every backend: the embedded SQLite store and the
SDK's local mode on a state root that does not exist yet (the first call creates its folders),
and hosted mode on the emulator; a value over the item limit spills to a ``LocalSpill``.
"""

from __future__ import annotations

import asyncio
import operator
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint.spill import LocalSpill
from tests._blockbuster import (
    BlockingError,
    langgraph_dev_blockbuster,
    on_a_loop_thread,
)
from tests.conftest import StoreEnv

#: Above the 1 MB item limit and incompressible, so it spills on every backend.
BIG = 1_200_000


class State(TypedDict, total=False):
    notes: Annotated[list[str], operator.add]
    blob: bytes


def _draft(state: State) -> State:
    return {"notes": ["draft"], "blob": os.urandom(BIG)}


def _review(state: State) -> State:
    answer = interrupt("approve the draft?")
    return {"notes": [f"review:{answer}"]}


def _graph(saver: FoundryCheckpointer) -> Any:
    builder = StateGraph(State)
    builder.add_node("draft", _draft)
    builder.add_node("review", _review)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture(params=["local", "local-sdk", "hosted"])
def store_mode(request: pytest.FixtureRequest) -> str:
    """The embedded store, the SDK's local mode (both local), and hosted mode (the emulator)."""
    return str(request.param)


def _saver_kwargs(store_env: StoreEnv, store_mode: str, tmp_path: Path) -> dict[str, Any]:
    if store_mode == "local-sdk":
        return store_env.kwargs(local_backend="sdk")
    if store_mode == "hosted":  # hosted mode has no default spill store: give it a local one
        return store_env.kwargs(spill=LocalSpill(tmp_path / "spill", fsync=False))
    return store_env.kwargs()


def _state_root() -> Path:
    return Path(os.environ["AGENTSERVER_STATE_ROOT"])


def _spilled(saver: FoundryCheckpointer) -> list[str]:
    spill = saver._core.spill
    assert isinstance(spill, LocalSpill)
    return saver._core.run(spill.namespaces())


def _thread(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def test_the_armed_blockbuster_catches_blocking_calls_on_any_loop_thread(tmp_path: Path) -> None:
    """The check the other tests rely on: armed as ``langgraph dev`` arms it, blockbuster
    refuses a folder and a SQLite statement on a thread running a loop (not only the main
    one) and lets the same work through on a thread that runs none."""

    def sqlite_statement() -> int:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        try:
            return int(conn.execute("SELECT 1").fetchone()[0])
        finally:
            conn.close()

    def both() -> tuple[int, bool]:
        (tmp_path / "made").mkdir()
        return sqlite_statement(), (tmp_path / "made").is_dir()

    with langgraph_dev_blockbuster():
        with pytest.raises(BlockingError, match=r"os\.mkdir"):
            on_a_loop_thread(lambda: (tmp_path / "refused").mkdir())
        with pytest.raises(BlockingError, match="sqlite3"):
            on_a_loop_thread(sqlite_statement)
        with ThreadPoolExecutor(1) as pool:  # a thread without a loop
            assert pool.submit(both).result() == (1, True)
        assert sqlite_statement() == 1  # nor does this one run a loop
    assert not (tmp_path / "refused").exists()


def test_sync_graph_runs_under_langgraph_dev_blockbuster(
    store_env: Any, store_mode: str, tmp_path: Path
) -> None:
    """Sync faces: the saver's private loop is the loop blockbuster watches."""
    kwargs = _saver_kwargs(store_env, store_mode, tmp_path)
    assert not _state_root().exists()  # the first call creates every folder it needs
    with langgraph_dev_blockbuster():
        saver = FoundryCheckpointer(**kwargs)
        try:
            graph = _graph(saver)
            config = _thread("t-sync")
            paused = graph.invoke({"notes": []}, config)
            assert "__interrupt__" in paused
            assert graph.get_state(config).next == ("review",)
            assert _spilled(saver)  # the big value went to the spill store
            done = graph.invoke(Command(resume="ok"), config)
            assert done["notes"] == ["draft", "review:ok"]
            assert len(done["blob"]) == BIG
            history = list(graph.get_state_history(config))
            assert len(history) >= 4
            assert len(list(saver.list(config, limit=2))) == 2
            assert "t-sync" in saver.list_threads()
            assert saver.get_tuple(_thread("never-written")) is None
            saver.delete_thread("t-sync")
            assert saver.get_tuple(config) is None
            assert graph.get_state(config).values == {}
            assert _spilled(saver) == []
            assert saver.list_threads() == []
        finally:
            saver.close()
        saver.close()  # idempotent
    if store_mode != "hosted":
        assert _state_root().is_dir()


async def test_async_graph_runs_under_langgraph_dev_blockbuster(
    store_env: Any, store_mode: str, tmp_path: Path
) -> None:
    """Async faces from a running loop (as the server calls them): neither that loop nor the
    saver's own ever makes a blocking call; two threads run at once."""
    kwargs = _saver_kwargs(store_env, store_mode, tmp_path)
    assert not _state_root().exists()
    with langgraph_dev_blockbuster():
        saver = FoundryCheckpointer(**kwargs)  # built on the loop, as a server factory does
        try:
            graph = _graph(saver)
            configs = [_thread("t-async-1"), _thread("t-async-2")]
            paused = await asyncio.gather(*(graph.ainvoke({"notes": []}, c) for c in configs))
            assert all("__interrupt__" in p for p in paused)
            for config in configs:
                assert (await graph.aget_state(config)).next == ("review",)
            done = await graph.ainvoke(Command(resume="yes"), configs[0])
            assert done["notes"] == ["draft", "review:yes"]
            history = [s async for s in graph.aget_state_history(configs[0])]
            assert len(history) >= 4
            assert len([t async for t in saver.alist(configs[0], limit=2)]) == 2
            assert sorted(await saver.alist_threads()) == ["t-async-1", "t-async-2"]
            assert await saver.aget_tuple(_thread("never-written")) is None
            for config in configs:
                await saver.adelete_thread(config["configurable"]["thread_id"])
                assert await saver.aget_tuple(config) is None
            assert await saver.alist_threads() == []
        finally:
            await saver.aclose()
        await saver.aclose()  # idempotent


async def test_a_relative_state_root_needs_no_blocking_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AGENTSERVER_STATE_ROOT=.state`` (a project's ``.env``): the saver is built on the
    server's loop without reading the working directory there, and its database and spilled
    blobs land under the working directory of the first use."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", ".state")
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    with langgraph_dev_blockbuster():
        saver = FoundryCheckpointer()
        try:
            graph = _graph(saver)
            config = _thread("t-relative")
            assert "__interrupt__" in await graph.ainvoke({"notes": []}, config)
            state = await graph.aget_state(config)
            assert len(state.values["blob"]) == BIG
        finally:
            await saver.aclose()
    assert (tmp_path / ".state" / "foundry_checkpoint" / "state.sqlite3").is_file()
    assert _blob_files(tmp_path / ".state" / "foundry_checkpoint" / "spill") >= 1


def _blob_files(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if p.is_file() and p.stat().st_size >= BIG)
