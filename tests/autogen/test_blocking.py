"""The AutoGen state store under ``langgraph dev``'s blockbuster (any host arming it).

It runs on the same core and stores as the LangGraph saver: armed as ``langgraph dev`` arms it
(``tests._blockbuster``), blockbuster sees no blocking call on the caller's loop or on the
store's private loop, sync and async, on a state root that does not exist yet, with a state
over the item limit (spilled to a ``LocalSpill``), versions, scopes and deletion.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint.spill import LocalSpill
from foundry_checkpoint_autogen import AutoGenStateStore
from tests._blockbuster import langgraph_dev_blockbuster
from tests.conftest import StoreEnv

AGENT = "writer/default"


@pytest.fixture(params=["local", "local-sdk", "hosted"])
def store_mode(request: pytest.FixtureRequest) -> str:
    """The embedded store, the SDK's local mode (both local), and hosted mode (the emulator)."""
    return str(request.param)


def _options(store_env: StoreEnv, store_mode: str, tmp_path: Path) -> dict[str, Any]:
    assert not Path(os.environ["AGENTSERVER_STATE_ROOT"]).exists()
    if store_mode == "local-sdk":
        return store_env.kwargs(local_backend="sdk")
    if store_mode == "hosted":  # hosted mode has no default spill store: give it a local one
        return store_env.kwargs(spill=LocalSpill(tmp_path / "spill", fsync=False))
    return store_env.kwargs()


def _big() -> dict[str, Any]:
    # 2 MB of JSON, over the item limit even compressed
    return {"blob": base64.b64encode(os.urandom(1_500_000)).decode("ascii")}


def _blobs(store_mode: str, tmp_path: Path) -> int:
    root = tmp_path / "spill" if store_mode == "hosted" else tmp_path / "state"
    return sum(1 for path in root.rglob("*") if path.is_file() and "spill" in path.parts)


def test_sync_store_under_langgraph_dev_blockbuster(
    store_env: Any, store_mode: str, tmp_path: Path
) -> None:
    options = _options(store_env, store_mode, tmp_path)
    with langgraph_dev_blockbuster():
        store = AutoGenStateStore(**options)
        try:
            store.save("conv-1", "agent", AGENT, {"turn": 1})
            big = _big()
            store.save("conv-1", "agent", AGENT, big)
            assert _blobs(store_mode, tmp_path) == 1
            assert store.load("conv-1", "agent", AGENT) == big
            assert len(store.versions("conv-1", "agent", AGENT)) == 2
            assert store.list_scopes() == ["conv-1"]
            assert store.delete("conv-1", "agent", AGENT) == 2
            assert store.load("conv-1", "agent", AGENT) is None
            assert _blobs(store_mode, tmp_path) == 0
        finally:
            store.close()


async def test_async_store_under_langgraph_dev_blockbuster(
    store_env: Any, store_mode: str, tmp_path: Path
) -> None:
    options = _options(store_env, store_mode, tmp_path)
    with langgraph_dev_blockbuster():
        store = AutoGenStateStore(**options)  # built on the caller's loop
        try:
            await store.asave("conv-1", "agent", AGENT, {"turn": 1})
            big = _big()
            await store.asave("conv-1", "agent", AGENT, big)
            assert await store.aload("conv-1", "agent", AGENT) == big
            assert len(await store.aversions("conv-1", "agent", AGENT)) == 2
            assert await store.alist_scopes() == ["conv-1"]
            assert await store.adelete("conv-1", "agent", AGENT) == 2
            assert await store.aload("conv-1", "agent", AGENT) is None
        finally:
            await store.aclose()
