"""The private loop bridge: sync, async, inside a running loop, threads, and forgiving close."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from foundry_checkpoint._loop import LoopThread


async def _where() -> str:
    await asyncio.sleep(0)
    return threading.current_thread().name


def test_sync_call_runs_on_the_private_thread() -> None:
    lt = LoopThread("bridge-test")
    try:
        assert lt.run(_where()) == "bridge-test"
    finally:
        lt.close()


async def test_sync_call_from_inside_a_running_loop() -> None:
    # Jupyter: the caller's thread already runs a loop; a plain sync call must still work.
    lt = LoopThread("bridge-test")
    try:
        assert lt.run(_where()) == "bridge-test"
        assert await lt.arun(_where()) == "bridge-test"
    finally:
        await asyncio.to_thread(lt.close)


def test_eight_threads_and_several_loops_at_once() -> None:
    lt = LoopThread("bridge-test")

    def work(i: int) -> str:
        if i % 2:
            return lt.run(_where())
        return asyncio.run(lt.arun(_where()))  # each thread its own event loop

    try:
        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(work, range(64))) == {"bridge-test"}
    finally:
        lt.close()


def test_close_is_idempotent_and_fine_before_use_and_restarts() -> None:
    lt = LoopThread("bridge-test")
    lt.close()
    lt.close()
    assert lt.run(_where()) == "bridge-test"
    lt.close()
    lt.close()
    assert not lt.running
    assert lt.run(_where()) == "bridge-test"
    lt.close()


def test_cleanup_runs_on_the_loop_before_it_stops() -> None:
    lt = LoopThread("bridge-test")
    seen: list[str] = []

    async def cleanup() -> None:
        seen.append(threading.current_thread().name)

    lt.run(_where())
    lt.close(cleanup)
    assert seen == ["bridge-test"]


def test_sync_call_from_the_loop_itself_is_refused_not_deadlocked() -> None:
    lt = LoopThread("bridge-test")

    async def reenter() -> str:
        return lt.run(_where())

    try:
        with pytest.raises(RuntimeError, match="async method"):
            lt.run(reenter())
    finally:
        lt.close()


def test_errors_propagate_to_the_caller() -> None:
    lt = LoopThread("bridge-test")

    async def boom() -> None:
        raise KeyError("x")

    try:
        with pytest.raises(KeyError):
            lt.run(boom())
    finally:
        lt.close()


async def test_async_errors_and_context_cross_to_the_private_loop() -> None:
    """``arun`` runs the coroutine on the private thread, in the caller's context
    (the per-request identity travels that way), and raises its error in the caller."""
    import contextvars

    who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")
    lt = LoopThread("bridge-test")

    async def seen() -> tuple[str, bool]:
        return who.get(), threading.current_thread() is threading.main_thread()

    async def boom() -> None:
        raise KeyError("x")

    try:
        token = who.set("ann")
        assert await lt.arun(seen()) == ("ann", False)
        who.reset(token)
        with pytest.raises(KeyError):
            await lt.arun(boom())
    finally:
        lt.close()


async def test_cancelling_the_caller_cancels_the_coroutine() -> None:
    lt = LoopThread("bridge-test")
    started = threading.Event()
    outcome: list[str] = []

    async def slow() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
            outcome.append("finished")
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise

    try:
        call = asyncio.ensure_future(lt.arun(slow()))
        await asyncio.to_thread(started.wait, 5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        for _ in range(100):
            if outcome:
                break
            await asyncio.sleep(0.01)
        assert outcome == ["cancelled"]
        assert await lt.arun(_where()) != threading.main_thread().name  # still serving
    finally:
        lt.close()


async def test_a_call_cancelled_before_it_starts_never_runs() -> None:
    lt = LoopThread("bridge-test")
    release = threading.Event()
    ran: list[bool] = []

    async def hold() -> None:
        release.wait(5)  # blocks the private loop: nothing else starts meanwhile

    async def mark() -> None:
        ran.append(True)

    try:
        held = asyncio.ensure_future(lt.arun(hold()))
        await asyncio.sleep(0.05)
        call = asyncio.ensure_future(lt.arun(mark()))
        await asyncio.sleep(0.05)  # submitted, not started: the loop is held
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        release.set()
        await held
        await lt.arun(_where())  # everything submitted before has had its turn
        assert ran == []
    finally:
        release.set()
        lt.close()
