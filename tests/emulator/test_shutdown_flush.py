"""A save whose caller is cancelled (a host stopping at shutdown) still lands, and ``aclose()``
waits for it; against the emulator, in hosted mode, for each adapter.

The emulator delays every item write, the caller is cancelled while its write is in flight,
then the adapter is closed; a fresh adapter reads back what the cancelled call was saving:
LangGraph's pending writes of a task, a MAF checkpoint, an AutoGen state. A LangGraph
checkpoint (``aput``) is the exception, on purpose: it is cancelled with its run (see
``FoundryCheckpointer.aput_writes``), so the thread's latest checkpoint stays the one before.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint._loop import FLUSH_SECONDS
from foundry_checkpoint.emulator import FoundryEmulator
from foundry_checkpoint_autogen import AutoGenStateStore
from foundry_checkpoint_maf import FoundryCheckpointStorage

pytestmark = pytest.mark.emulator

DELAY = 1.0  # seconds every item write waits in the emulator
WRITES = ("create_item", "put_item")


@pytest.fixture(scope="module")
def emu() -> Iterator[FoundryEmulator]:
    with FoundryEmulator(seed=33) as made:
        yield made


@pytest.fixture
def options(
    emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    monkeypatch.setenv("FOUNDRY_PROJECT_ENDPOINT", emu.endpoint)
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    emu.clear_faults()
    yield {
        "store_prefix": f"sf{uuid.uuid4().hex[:10]}",
        "credential": emu.credential(user="alice"),
        "endpoint": emu.endpoint,
        "connection_verify": emu.ca_file,
        "retry_total": 0,
    }
    emu.clear_faults()


def _slow_writes(emu: FoundryEmulator) -> None:
    for route in WRITES:
        emu.inject(route, status=None, delay=DELAY, times=None)


async def _cancel_in_flight(call: Awaitable[Any], emu: FoundryEmulator) -> None:
    """Start ``call``, cancel it once its write has reached the emulator (it is in flight)."""
    before = sum(emu.faults_served.values())
    task = asyncio.ensure_future(call)
    deadline = time.monotonic() + 10
    while sum(emu.faults_served.values()) == before and not task.done():
        assert time.monotonic() < deadline, "the write never reached the emulator"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the emulator holds the request: it waits DELAY before serving
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _close_in_time(close: Awaitable[None]) -> float:
    began = time.monotonic()
    await close
    took = time.monotonic() - began
    assert took < FLUSH_SECONDS
    return took


async def test_a_cancelled_aput_writes_lands_and_aclose_waits_for_it(
    emu: FoundryEmulator, options: dict[str, Any]
) -> None:
    thread: RunnableConfig = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
    saver = FoundryCheckpointer(**options)
    first = await saver.aput(thread, empty_checkpoint(), {"step": 0}, {})
    _slow_writes(emu)
    await _cancel_in_flight(saver.aput_writes(first, [("notes", "finished")], "task-1"), emu)
    took = await _close_in_time(saver.aclose())
    assert took > 0.2  # close waited for the write in flight
    emu.clear_faults()

    fresh = FoundryCheckpointer(**options)
    try:
        latest = await fresh.aget_tuple(thread)
        assert latest is not None
        assert latest.pending_writes == [("task-1", "notes", "finished")]
    finally:
        await fresh.aclose()


async def test_a_cancelled_aput_is_cancelled_with_its_run(
    emu: FoundryEmulator, options: dict[str, Any]
) -> None:
    thread: RunnableConfig = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
    saver = FoundryCheckpointer(**options)
    first = await saver.aput(thread, empty_checkpoint(), {"step": 0}, {})
    _slow_writes(emu)
    await _cancel_in_flight(saver.aput(first, empty_checkpoint(), {"step": 1}, {}), emu)
    await _close_in_time(saver.aclose())
    emu.clear_faults()

    fresh = FoundryCheckpointer(**options)
    try:
        latest = await fresh.aget_tuple(thread)
        assert latest is not None
        assert latest.config == first  # the step's checkpoint did not land behind the run's back
    finally:
        await fresh.aclose()


async def test_a_cancelled_maf_save_lands_and_aclose_waits_for_it(
    emu: FoundryEmulator, options: dict[str, Any]
) -> None:
    options = {k: v for k, v in options.items() if k != "retry_total"}
    storage = FoundryCheckpointStorage(context_id="conv-1", **options)
    checkpoint = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h")
    _slow_writes(emu)
    await _cancel_in_flight(storage.save(checkpoint), emu)
    await _close_in_time(storage.aclose())
    emu.clear_faults()

    fresh = FoundryCheckpointStorage(context_id="conv-1", **options)
    try:
        loaded = await fresh.load(checkpoint.checkpoint_id)
        assert loaded.checkpoint_id == checkpoint.checkpoint_id
    finally:
        await fresh.aclose()


async def test_a_cancelled_autogen_save_lands_and_aclose_waits_for_it(
    emu: FoundryEmulator, options: dict[str, Any]
) -> None:
    options = {k: v for k, v in options.items() if k != "retry_total"}
    store = AutoGenStateStore(**options)
    _slow_writes(emu)
    await _cancel_in_flight(store.asave("conv", "agent", "helper", {"turns": 3}), emu)
    await _close_in_time(store.aclose())
    emu.clear_faults()

    fresh = AutoGenStateStore(**options)
    try:
        assert await fresh.aload("conv", "agent", "helper") == {"turns": 3}
    finally:
        await fresh.aclose()
