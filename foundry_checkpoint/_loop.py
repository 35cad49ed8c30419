"""A private event loop on a background thread, shared by the sync and async faces.

All store I/O of an adapter runs on one loop that the adapter owns. Synchronous callers block on
it; asynchronous callers await it from whatever loop they run on. So sync ``invoke``, async
``ainvoke``, Jupyter (a loop already running in the caller's thread), several threads and
several loops all work, and blocking file I/O of local mode never stalls the caller's loop.

Nothing that has started is dropped at shutdown. A write handed over with ``shield=True`` runs
to its end even when its caller is cancelled (a host cancelling a run at shutdown cancels the
run's pending saves with it); ``close()`` lets the work in flight finish, for at most
:data:`FLUSH_SECONDS`, before it closes the clients; and when the interpreter exits, every loop
still running is given the same time to finish its work, so a process that ends without calling
``close()`` (or whose host reopened the loop after ``close()``) loses nothing that had started.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

__all__ = ["FLUSH_SECONDS", "LoopThread"]

T = TypeVar("T")

FLUSH_SECONDS: Final = 10.0
"""How long ``close()`` (and the exit of the interpreter) waits for the calls in flight on a
loop to finish before it cancels what is left; well inside the hosts' own shutdown grace (10 s
for a Responses host's handlers, 30 s for the whole shutdown of an agent server)."""
_CANCEL_SECONDS: Final = 1.0
"""How long a call cancelled after :data:`FLUSH_SECONDS` may take to unwind."""

_logger = logging.getLogger("foundry_checkpoint")
_live: weakref.WeakSet[LoopThread] = weakref.WeakSet()


class _Running:
    """One started loop: its thread and the calls (tasks) in flight on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        self.loop = loop
        self.thread = thread
        self.work: set[asyncio.Task[Any]] = set()  # touched on the loop only

    def start(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Start ``coro`` as a task of the loop and count it in flight (on the loop)."""
        task = self.loop.create_task(coro)
        self.work.add(task)
        task.add_done_callback(self.work.discard)
        return task

    async def drain(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for the calls in flight; cancel what is left.

        Returns:
            How many calls were cancelled.
        """
        pending = set(self.work)
        if not pending:
            return 0
        _, left = await asyncio.wait(pending, timeout=max(timeout, 0.0))
        if not left:
            return 0
        for task in left:
            task.cancel()
        await asyncio.wait(left, timeout=_CANCEL_SECONDS)
        _logger.warning(
            "foundry-checkpoint: %d store call(s) still running %.1f s after close() began "
            "were cancelled; what they were writing may not be stored",
            len(left),
            timeout,
        )
        return len(left)


class LoopThread:
    """Run coroutines on a lazily started background loop.

    ``close()`` is idempotent and safe before first use; a closed ``LoopThread`` starts again
    on next use. ``close()`` first lets the calls in flight finish (at most ``FLUSH_SECONDS``),
    and so does the exit of the interpreter for every loop still running.

    Args:
        name: The name of the background thread (it shows in thread dumps).

    Example:
        >>> async def answer() -> int:
        ...     return 42
        >>> lt = LoopThread("example")
        >>> lt.run(answer())
        42
        >>> lt.close(); lt.close()
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._guard = threading.Lock()
        self._running: _Running | None = None
        _live.add(self)

    @property
    def running(self) -> bool:
        """True while the background loop is alive."""
        return self._running is not None

    def _ensure(self) -> _Running:
        with self._guard:
            if self._running is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def _main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=_main, name=self._name, daemon=True)
                thread.start()
                ready.wait()
                self._running = _Running(loop, thread)
            return self._running

    def _running_for(self, coro: Coroutine[Any, Any, Any], refusal: str) -> _Running:
        """The background loop (started if need be); ``refusal`` (``coro`` closed) when
        called from that loop itself, where waiting for it would deadlock."""
        running = self._ensure()
        if threading.current_thread() is running.thread:
            coro.close()
            raise RuntimeError(refusal)
        return running

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the background loop and block until it finishes.

        Args:
            coro: The coroutine; it runs on the background loop, never on the caller's.

        Returns:
            What the coroutine returned.

        Raises:
            RuntimeError: called from the background loop itself (it would deadlock); any
                exception of the coroutine propagates unchanged.
        """
        running = self._running_for(
            coro,
            "a synchronous checkpoint method was called from the checkpointer's own loop; "
            "use the async method instead",
        )
        outcome: concurrent.futures.Future[T] = concurrent.futures.Future()

        def start() -> None:  # on the background loop
            running.start(coro).add_done_callback(lambda task: _pass_on(task, outcome))

        running.loop.call_soon_threadsafe(start)
        return outcome.result()

    async def arun(self, coro: Coroutine[Any, Any, T], *, shield: bool = False) -> T:
        """Run a coroutine on the background loop and await it from the caller's loop.

        Cancelling the caller cancels the coroutine (before its first step, when it has not
        started yet), unless ``shield``: then the caller's ``await`` ends at once with
        ``CancelledError`` while the coroutine runs to its end on the background loop, where
        ``close()`` waits for it. Writes pass ``shield=True``: a host that cancels a run at
        shutdown must not cancel the saving of a step that already finished. The result
        crosses back with one callback on each loop, not through a
        ``concurrent.futures.Future`` (a third less CPU per call than ``wrap_future``).

        Args:
            coro: The coroutine; it runs on the background loop, never on the caller's.
            shield: Keep the coroutine running when the caller is cancelled.

        Returns:
            What the coroutine returned.

        Raises:
            RuntimeError: called from the background loop itself (await the coroutine
                there instead); any exception of the coroutine propagates unchanged.
        """
        running = self._running_for(
            coro, "arun() was called from the checkpointer's own loop; await the coroutine instead"
        )
        caller = asyncio.get_running_loop()
        waiter: asyncio.Future[T] = caller.create_future()
        started: list[asyncio.Task[T]] = []

        def finished(task: asyncio.Task[T]) -> None:  # on the background loop
            if not caller.is_closed():
                try:
                    caller.call_soon_threadsafe(_settle, waiter, task)
                except RuntimeError:  # the caller's loop closed meanwhile: nobody to tell
                    _retrieve(task)
            else:
                _retrieve(task)

        def start() -> None:  # on the background loop
            task = running.start(coro)
            started.append(task)
            task.add_done_callback(finished)

        running.loop.call_soon_threadsafe(start)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.cancelled() and not shield:  # the caller was cancelled: so is the coroutine
                running.loop.call_soon_threadsafe(_cancel, started)
            raise

    def flush(self, timeout: float = FLUSH_SECONDS) -> int:
        """Wait for the calls in flight to finish, at most ``timeout`` seconds; the loop stays.

        What is still running after ``timeout`` is cancelled. Nothing to do when the loop is
        not running. The exit of the interpreter calls it on every loop still running.

        Args:
            timeout: Seconds to wait before the calls still running are cancelled.

        Returns:
            How many calls were cancelled.

        Raises:
            RuntimeError: called from the background loop itself.
        """
        running = self._running
        if running is None:
            return 0
        if threading.current_thread() is running.thread:
            raise RuntimeError("flush() cannot be called from the checkpointer's own loop")
        drained = asyncio.run_coroutine_threadsafe(running.drain(timeout), running.loop)
        try:  # bounded even when the loop itself is held up (a blocking call on it)
            return drained.result(max(timeout, 0.0) + _CANCEL_SECONDS + 1.0)
        except concurrent.futures.TimeoutError:
            drained.cancel()
            _logger.warning("foundry-checkpoint: the loop did not answer within %.1f s", timeout)
            return 0

    def close(
        self,
        cleanup: Callable[[], Awaitable[None]] | None = None,
        *,
        timeout: float = FLUSH_SECONDS,
    ) -> None:
        """Let the calls in flight finish, then stop the background loop and join its thread.

        Nothing to do when not running. Calls still running ``timeout`` seconds after close
        began are cancelled (and a warning is logged). A call made while closing starts the
        loop again.

        Args:
            cleanup: Awaited on the loop before it stops (after the calls in flight), when the
                loop is running.
            timeout: Seconds to wait for the calls in flight (default :data:`FLUSH_SECONDS`).

        Raises:
            RuntimeError: called from the background loop itself.
        """
        with self._guard:
            running = self._running
            if running is not None and threading.current_thread() is running.thread:
                raise RuntimeError("close() cannot be called from the checkpointer's own loop")
            self._running = None
        if running is None:
            return
        loop, thread = running.loop, running.thread
        try:
            asyncio.run_coroutine_threadsafe(_finish(running, cleanup, timeout), loop).result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()


async def _finish(
    running: _Running, cleanup: Callable[[], Awaitable[None]] | None, timeout: float
) -> None:
    await running.drain(timeout)
    if cleanup is not None:
        await cleanup()


def _pass_on(task: asyncio.Task[T], outcome: concurrent.futures.Future[T]) -> None:
    """Pass a finished task's outcome to a blocked caller's future (on the background loop)."""
    if task.cancelled():
        outcome.cancel()
        return
    error = task.exception()
    if error is not None:
        outcome.set_exception(error)
    else:
        outcome.set_result(task.result())


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a finished task's exception as seen: its caller went away."""
    if not task.cancelled():
        task.exception()


def _settle(waiter: asyncio.Future[T], task: asyncio.Task[T]) -> None:
    """Pass a finished task's outcome to the caller's future (on the caller's loop)."""
    if waiter.cancelled():
        _retrieve(task)  # the caller went away, nothing to report it to
        return
    if task.cancelled():
        waiter.cancel()
        return
    error = task.exception()
    if error is not None:
        waiter.set_exception(error)
    else:
        waiter.set_result(task.result())


def _cancel(started: list[asyncio.Task[Any]]) -> None:
    """Cancel the task :meth:`LoopThread.arun` started, if it did (on the background loop)."""
    for task in started:
        task.cancel()


@atexit.register
def _flush_at_exit() -> None:
    """At interpreter exit, let the calls in flight on every running loop finish (bounded).

    A host's shutdown may cancel a run whose last saves are still being written (they are
    shielded, so they go on), or reopen a loop after ``close()``; the loop's thread is a daemon
    that would die with the interpreter. All loops share one :data:`FLUSH_SECONDS` budget.
    """
    deadline = time.monotonic() + FLUSH_SECONDS
    for lt in list(_live):
        try:
            lt.flush(max(deadline - time.monotonic(), 0.0))
        except Exception:  # never fail the interpreter's exit
            _logger.warning("foundry-checkpoint: flushing at exit failed", exc_info=True)
