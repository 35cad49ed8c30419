"""Shutdown loses nothing that started: shielded calls, ``close()`` flushing, the exit flush.

A host that stops (SIGTERM) cancels the runs still going, and with them the saves LangGraph runs
in the background; the process then exits, and the private loop's daemon thread with it. These
tests pin what the loop guarantees: a call made with ``shield=True`` outlives its cancelled
caller, ``close()`` lets the calls in flight finish within its bound (and cancels what is left
after it), and the interpreter's exit gives every running loop the same chance.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint._loop import FLUSH_SECONDS, LoopThread

ROOT = Path(__file__).resolve().parents[2]


def _slow(
    started: threading.Event, outcome: list[str], seconds: float = 0.3
) -> Coroutine[Any, Any, str]:
    async def slow() -> str:
        started.set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        outcome.append("finished")
        return "stored"

    return slow()


async def test_a_shielded_call_outlives_its_cancelled_caller() -> None:
    lt = LoopThread("shield-test")
    started = threading.Event()
    outcome: list[str] = []
    try:
        call = asyncio.ensure_future(lt.arun(_slow(started, outcome), shield=True))
        await asyncio.to_thread(started.wait, 5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call  # the caller stops at once...
        assert outcome == []
        for _ in range(200):
            if outcome:
                break
            await asyncio.sleep(0.01)
        assert outcome == ["finished"]  # ...and the call runs to its end
    finally:
        await asyncio.to_thread(lt.close)


async def test_an_unshielded_call_is_cancelled_with_its_caller() -> None:
    lt = LoopThread("shield-test")
    started = threading.Event()
    outcome: list[str] = []
    try:
        call = asyncio.ensure_future(lt.arun(_slow(started, outcome)))
        await asyncio.to_thread(started.wait, 5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.to_thread(lt.close)
        assert outcome == ["cancelled"]
    finally:
        await asyncio.to_thread(lt.close)


async def test_close_waits_for_a_shielded_call_whose_caller_went_away() -> None:
    lt = LoopThread("shield-test")
    started = threading.Event()
    outcome: list[str] = []
    call = asyncio.ensure_future(lt.arun(_slow(started, outcome, 0.5), shield=True))
    await asyncio.to_thread(started.wait, 5)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    began = time.monotonic()
    await asyncio.to_thread(lt.close)
    assert outcome == ["finished"]  # close returned only after the call had finished
    assert time.monotonic() - began < FLUSH_SECONDS


def test_close_waits_for_a_blocked_callers_call_and_cleans_up_after_it() -> None:
    lt = LoopThread("shield-test")
    started = threading.Event()
    outcome: list[str] = []
    order: list[str] = []
    results: list[object] = []

    async def cleanup() -> None:
        order.append(f"cleanup after {outcome}")

    caller = threading.Thread(target=lambda: results.append(lt.run(_slow(started, outcome))))
    caller.start()
    assert started.wait(5)
    lt.close(cleanup)
    caller.join(5)
    assert results == ["stored"] and outcome == ["finished"]
    assert order == ["cleanup after ['finished']"]


def test_close_cancels_what_is_still_running_after_its_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lt = LoopThread("shield-test")
    started = threading.Event()
    outcome: list[str] = []
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            lt.run(_slow(started, outcome, 30))
        except BaseException as error:
            errors.append(error)

    caller = threading.Thread(target=blocked)
    caller.start()
    assert started.wait(5)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="foundry_checkpoint"):
        lt.close(timeout=0.2)
    took = time.monotonic() - began
    caller.join(5)
    assert 0.2 <= took < 3
    assert outcome == ["cancelled"]
    assert len(errors) == 1 and "Cancelled" in type(errors[0]).__name__  # never left hanging
    assert "1 store call(s) still running" in caplog.text


def test_flush_waits_and_keeps_the_loop() -> None:
    lt = LoopThread("shield-test")
    started = threading.Event()
    outcome: list[str] = []
    caller = threading.Thread(target=lambda: lt.run(_slow(started, outcome)))
    caller.start()
    assert started.wait(5)
    assert lt.flush() == 0
    assert outcome == ["finished"] and lt.running
    caller.join(5)
    lt.close()
    assert lt.flush() == 0  # nothing to do once closed


_EXIT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from foundry_checkpoint._loop import LoopThread

    target, shield = Path(sys.argv[1]), sys.argv[2] == "shield"
    lt = LoopThread("exit-test")  # never closed: the process just ends

    async def save() -> None:
        await asyncio.sleep(0.5)
        target.write_text("saved")

    async def main() -> None:
        run = asyncio.ensure_future(lt.arun(save(), shield=shield))
        await asyncio.sleep(0.1)  # the save has started on the private loop
        run.cancel()              # what asyncio.run does to a host's tasks when it stops
        try:
            await run
        except asyncio.CancelledError:
            pass

    asyncio.run(main())
    """
)


@pytest.mark.multiprocess
@pytest.mark.parametrize("shield", [True, False])
def test_the_exit_of_the_interpreter_flushes_a_started_shielded_save(
    tmp_path: Path, shield: bool
) -> None:
    target = tmp_path / "saved.txt"
    done = subprocess.run(
        [sys.executable, "-c", _EXIT, str(target), "shield" if shield else "plain"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # Shielded, the save finished before the process ended; unshielded, it was cancelled.
    assert target.exists() is shield


async def test_a_queued_engine_call_of_a_cancelled_caller_never_runs() -> None:
    """The embedded store's thread drops a call whose caller went away before it started, as
    a hosted request that was never sent: a run cancelled at shutdown leaves no late write."""
    from foundry_checkpoint._store._engine_db import CallThread

    worker = CallThread("shield-engine")
    release = threading.Event()
    order: list[str] = []

    def slow() -> None:
        release.wait(5)
        order.append("started before the cancel")

    try:
        running = asyncio.ensure_future(worker.call(slow))
        await asyncio.sleep(0.05)  # running on the thread
        queued = asyncio.ensure_future(worker.call(lambda: order.append("queued")))
        await asyncio.sleep(0.05)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        release.set()
        await running
        await worker.call(lambda: order.append("later"))
    finally:
        release.set()
        worker.close()
    assert order == ["started before the cancel", "later"]


def test_flush_is_bounded_even_when_the_loop_is_held_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lt = LoopThread("shield-test")
    started = threading.Event()

    async def hold() -> None:
        started.set()
        time.sleep(3)  # noqa: ASYNC251 - a blocking call holds the loop: nothing else runs

    caller = threading.Thread(target=lambda: lt.run(hold()))
    caller.start()
    assert started.wait(5)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="foundry_checkpoint"):
        assert lt.flush(timeout=0.1) == 0
    assert time.monotonic() - began < 2.9
    assert "did not answer" in caplog.text
    caller.join(10)
    lt.close()
