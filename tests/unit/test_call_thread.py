"""``CallThread``: the engine's thread without an event loop, and ``EngineStore`` on it."""

from __future__ import annotations

import asyncio
import functools
import gc
import threading
from pathlib import Path

import pytest

from foundry_checkpoint._store._embedded import EngineStore, default_engine, shared_engine
from foundry_checkpoint._store._engine import StateEngine
from foundry_checkpoint._store._engine_db import CallThread
from foundry_checkpoint.errors import FoundryCheckpointError
from tests._blockbuster import langgraph_dev_blockbuster


def _where() -> tuple[str, bool]:
    """This thread's name, and whether an event loop runs in it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return threading.current_thread().name, False
    return threading.current_thread().name, True


def _threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


async def test_calls_run_in_order_on_one_thread_without_a_loop() -> None:
    worker = CallThread("ct-order")
    seen: list[int] = []

    def record(n: int) -> tuple[str, bool]:
        seen.append(n)
        return _where()

    try:
        places = await asyncio.gather(
            *(worker.call(functools.partial(record, n)) for n in range(50))
        )
    finally:
        worker.close()
    assert seen == list(range(50))
    assert set(places) == {("ct-order", False)}


async def test_an_error_reaches_the_caller_and_the_thread_goes_on() -> None:
    worker = CallThread("ct-error")

    def fail() -> None:
        raise KeyError("nope")

    try:
        with pytest.raises(KeyError, match="nope"):
            await worker.call(fail)
        assert await worker.call(lambda: 7) == 7
    finally:
        worker.close()


async def test_a_cancelled_caller_stops_waiting_and_its_call_still_runs_first() -> None:
    worker = CallThread("ct-cancel")
    release = threading.Event()
    order: list[str] = []

    def slow() -> None:
        release.wait(5)
        order.append("slow")

    try:
        task = asyncio.ensure_future(worker.call(slow))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        later = asyncio.ensure_future(worker.call(lambda: order.append("later")))
        release.set()
        await later
    finally:
        worker.close()
    assert order == ["slow", "later"]


def test_calls_from_several_loops_share_the_thread() -> None:
    worker = CallThread("ct-loops")
    places: list[tuple[str, bool]] = []

    def run_loop() -> None:
        async def calls() -> None:
            for _ in range(20):
                places.append(await worker.call(_where))

        asyncio.run(calls())

    threads = [threading.Thread(target=run_loop) for _ in range(3)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        worker.close()
    assert places == [("ct-loops", False)] * 60


async def test_close_is_idempotent_and_a_closed_worker_starts_again() -> None:
    worker = CallThread("ct-close")
    worker.close()  # never started: nothing to do
    assert await worker.call(lambda: 1) == 1
    assert len(_threads("ct-close")) == 1
    worker.close()
    worker.close()
    assert _threads("ct-close") == []
    assert await worker.call(lambda: 2) == 2
    worker.close()
    assert _threads("ct-close") == []


async def test_a_worker_dropped_without_close_stops_its_thread() -> None:
    worker = CallThread("ct-dropped")
    assert await worker.call(lambda: 3) == 3
    (thread,) = _threads("ct-dropped")
    del worker
    gc.collect()
    thread.join(5)
    assert not thread.is_alive()


async def test_engine_store_runs_every_engine_call_on_the_engines_thread() -> None:
    """The engine reads its clock inside its calls: each reading says where the call ran."""
    places: set[tuple[str, bool]] = set()

    def clock() -> float:
        places.add(_where())
        return 1_000.0

    engine = StateEngine(clock=clock)
    try:
        store = await EngineStore.get_or_create(
            engine, "s", user_isolation=True, item_ttl_seconds=60, user="ann"
        )
        await store.create_item("a", {"n": 1}, tags={"kind": "x", "rank": "1"})
        await store.set_item("b", {"n": 2}, tags={"kind": "x", "rank": "2"})
        assert (await store.get_item("a")) is not None
        assert [k.key for k in (await store.list_keys(tags={"kind": "x"})).keys] == ["b", "a"]
        assert [k.key for k in await store.greatest("rank", tags={"kind": "x"})] == ["b"]
        await store.delete_item("a")
        assert (await store.get()).name == "s"
        await store.delete()
        assert await store.get_item("b") is None
    finally:
        engine.close()
    assert places == {("foundry-checkpoint-engine", False)}


async def test_a_closed_engine_answers_at_once_without_a_thread() -> None:
    engine = StateEngine()
    store = await EngineStore.get_or_create(engine, "s", user_isolation=True, item_ttl_seconds=-1)
    await store.set_item("a", {})
    engine.close()
    running = len(_threads("foundry-checkpoint-engine"))  # other tests' engines may run
    with pytest.raises(FoundryCheckpointError, match="closed"):
        await store.get_item("a")
    assert len(_threads("foundry-checkpoint-engine")) == running


async def test_the_shared_engine_is_opened_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh state root: the folder and the database are created with blockbuster armed."""
    root = tmp_path / "fresh" / "root"
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(root))
    with langgraph_dev_blockbuster():
        engine = await shared_engine()
        again = await shared_engine()
        store = await EngineStore.get_or_create(
            engine, "s", user_isolation=True, item_ttl_seconds=-1
        )
        await store.set_item("k", {"v": 1})
    try:
        assert again is engine is default_engine()
        assert engine.path is not None and engine.path.is_file()
    finally:
        engine.close()


async def test_a_kept_call_runs_although_its_caller_went_away_before_it_started() -> None:
    """``submit(keep=True)``: a write handed over goes on when its caller stops waiting, as a
    shielded write does, while a plain call queued behind the same slow call is dropped."""
    worker = CallThread("ct-keep")
    release = threading.Event()
    order: list[str] = []
    try:
        slow = worker.submit(lambda: release.wait(5))
        kept = worker.submit(lambda: order.append("kept"), keep=True)
        dropped = worker.submit(lambda: order.append("dropped"))
        kept.cancel()
        dropped.cancel()
        release.set()
        await slow
        await worker.call(lambda: order.append("later"))
    finally:
        release.set()
        worker.close()
    assert order == ["kept", "later"]


def test_drain_waits_for_every_call_handed_over_and_is_bounded() -> None:
    worker = CallThread("ct-drain")
    release = threading.Event()
    ran: list[str] = []

    async def hand_over() -> None:
        worker.submit(lambda: release.wait(5), keep=True)
        worker.submit(lambda: ran.append("after the slow one"), keep=True)

    try:
        asyncio.run(hand_over())  # the loop is gone: nobody awaits the calls
        assert worker.drain(0.1) is False  # still blocked behind the slow call
        release.set()
        assert worker.drain(5) is True
        assert ran == ["after the slow one"]
    finally:
        release.set()
        worker.close()
    assert worker.drain(0.1) is True  # not running: nothing to wait for
