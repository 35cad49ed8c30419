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
