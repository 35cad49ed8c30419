"""Async patterns every adapter shares: bounded concurrency, two calls in flight together,
reading the newest item, and ``async with`` over ``aclose()``.

Example:
    >>> import asyncio
    >>> async def double(n: int) -> int:
    ...     return 2 * n
    >>> asyncio.run(bounded((double(n) for n in range(5)), limit=2))
    [0, 2, 4, 6, 8]
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, Final, TypeVar

__all__ = [
    "CONCURRENCY",
    "LATEST_ATTEMPTS",
    "AsyncClosing",
    "bounded",
    "read_newest",
    "together",
]

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")
K = TypeVar("K")
V = TypeVar("V")
_C = TypeVar("_C", bound="AsyncClosing")

CONCURRENCY: Final = 16
"""Store calls one operation runs at once, unless it says otherwise."""
LATEST_ATTEMPTS: Final = 3
"""How many times "latest" lists again when the newest item went between listing and read."""


async def bounded(coros: Iterable[Awaitable[T]], limit: int = CONCURRENCY) -> list[T]:
    """Await ``coros`` concurrently, at most ``limit`` at a time.

    Args:
        coros: the awaitables (a generator is consumed at once, its awaitables gated).
        limit: how many run at once.

    Returns:
        Their results, in the order of ``coros``.
    """
    awaitables = list(coros)
    if len(awaitables) <= 1:  # nothing to run concurrently: no task, no semaphore
        return [await aw for aw in awaitables]
    semaphore = asyncio.Semaphore(limit)

    async def one(aw: Awaitable[T]) -> T:
        async with semaphore:
            return await aw

    return list(await asyncio.gather(*(one(c) for c in awaitables)))


async def together(first: Awaitable[A], second: Awaitable[B]) -> tuple[A, B]:
    """Await ``first`` and ``second`` in flight together (one round trip instead of two).

    As a task group would, but with the error itself, not a group: the first to fail wins,
    the other is cancelled and awaited before the error is raised (nothing is left running).
    Cancelling the caller cancels both and waits for them.

    Args:
        first: an awaitable (run as a task of its own, in a copy of the current context).
        second: another.

    Returns:
        Their results, in argument order.

    Raises:
        BaseException: the error of the one that failed first (of ``first`` when both had
            failed by the time either was seen).

    Example:
        >>> import asyncio
        >>> async def slow() -> str:
        ...     try:
        ...         await asyncio.sleep(10)
        ...     except asyncio.CancelledError:
        ...         seen.append("slow cancelled")
        ...         raise
        ...     return "never"
        >>> async def fails() -> None:
        ...     raise KeyError("k")
        >>> seen: list[str] = []
        >>> asyncio.run(together(asyncio.sleep(0, "a"), asyncio.sleep(0, "b")))
        ('a', 'b')
        >>> try:
        ...     asyncio.run(together(slow(), fails()))
        ... except KeyError as exc:
        ...     print(repr(exc), seen)
        KeyError('k') ['slow cancelled']
    """
    one, two = asyncio.ensure_future(first), asyncio.ensure_future(second)
    tasks: tuple[asyncio.Future[Any], ...] = (one, two)
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:  # the caller was cancelled: so are both, and they are awaited
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        for task in tasks:
            if not task.cancelled():
                task.exception()  # retrieved: the caller's cancellation is what is raised
        raise
    if not pending:  # both finished: a failure of ``first`` before one of ``second``
        for task in tasks:
            if not task.cancelled():
                task.exception()  # retrieved (the one raised is the first in argument order)
        return one.result(), two.result()
    failed = next(task for task in tasks if task in done)
    for task in pending:
        task.cancel()
    await asyncio.wait(pending)
    for task in pending:
        if not task.cancelled():
            task.exception()  # retrieved: the first error is the one raised
    failed.result()  # raises the first error
    raise AssertionError("unreachable")  # pragma: no cover


async def read_newest(
    find: Callable[[], Awaitable[K | None]],
    read: Callable[[K], Awaitable[V | None]],
    attempts: int = LATEST_ATTEMPTS,
) -> tuple[K, V] | None:
    """Find the newest key and read its item; list again when the item went meanwhile.

    A listing and the read after it are two calls: a prune or delete in between removes the
    item the listing named, and the next listing names the new newest.

    Args:
        find: lists and picks the newest key (None: there is none).
        read: reads the item of a key (None: it is gone).
        attempts: how many listings before giving up.

    Returns:
        The key and its item, or None when nothing is found (or every read found it gone).

    Example:
        >>> import asyncio
        >>> items = {"a": 1, "b": 2}
        >>> async def find() -> str | None:
        ...     return max(items, default=None)
        >>> async def read(key: str) -> int | None:
        ...     if key == "b":  # deleted between the listing and the read
        ...         del items["b"]
        ...         return None
        ...     return items.get(key)
        >>> asyncio.run(read_newest(find, read))
        ('a', 1)
    """
    for _ in range(attempts):
        key = await find()
        if key is None:
            return None
        value = await read(key)
        if value is not None:
            return key, value
    return None


class AsyncClosing:
    """``async with`` for an object that releases what it opened in :meth:`aclose`.

    The block yields the object itself and awaits ``aclose()`` on the way out, error or not.
    """

    async def aclose(self) -> None:
        """Release what the object opened; this base opens nothing."""

    async def __aenter__(self: _C) -> _C:
        """The object itself; leaving the block calls :meth:`aclose`."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close what the object opened (see :meth:`aclose`)."""
        await self.aclose()
