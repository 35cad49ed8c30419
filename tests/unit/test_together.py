"""``_aio.together``: two calls in flight together, with a task group's error handling.

The first error wins and is raised as itself (not a group); the other call is cancelled and
has finished before the error reaches the caller; cancelling the caller cancels both; no error
is left unretrieved.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from foundry_checkpoint._aio import together


class _Watched:
    """A call that waits (for ``seconds``, or until cancelled) and records how it ended."""

    def __init__(self) -> None:
        self.ended: list[str] = []

    async def wait(self, seconds: float, result: str) -> str:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # cleanup that takes a while: together must wait for it
            self.ended.append("cancelled")
            raise
        self.ended.append("done")
        return result


async def _fail(after: float, error: BaseException) -> None:
    await asyncio.sleep(after)
    raise error


def _unretrieved(loop: asyncio.AbstractEventLoop, seen: list[Any]) -> None:
    loop.set_exception_handler(lambda _loop, context: seen.append(context))


async def test_both_results_come_back_in_argument_order() -> None:
    watched = _Watched()
    assert await together(watched.wait(0.02, "a"), watched.wait(0.0, "b")) == ("a", "b")
    assert watched.ended == ["done", "done"]


@pytest.mark.parametrize("failing_first", [True, False])
async def test_the_first_error_wins_and_the_other_is_cancelled_and_awaited(
    failing_first: bool,
) -> None:
    watched = _Watched()
    slow = watched.wait(10, "never")
    fails = _fail(0.01, KeyError("first"))
    with pytest.raises(KeyError, match="first"):
        await (together(fails, slow) if failing_first else together(slow, fails))
    assert watched.ended == ["cancelled"]  # finished before the error was raised


async def test_when_both_fail_the_earlier_error_is_raised_and_none_is_left_unretrieved() -> None:
    seen: list[Any] = []
    _unretrieved(asyncio.get_running_loop(), seen)
    with pytest.raises(ValueError, match="early"):
        await together(_fail(0.05, KeyError("late")), _fail(0.0, ValueError("early")))
    with pytest.raises(KeyError, match="a"):  # failed together: the first argument's error
        await together(_fail(0.0, KeyError("a")), _fail(0.0, ValueError("b")))
    await asyncio.sleep(0)
    gc.collect()
    await asyncio.sleep(0)
    assert seen == []


async def test_cancelling_the_caller_cancels_both_and_waits_for_them() -> None:
    watched = _Watched()
    task = asyncio.ensure_future(together(watched.wait(10, "a"), watched.wait(10, "b")))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert watched.ended == ["cancelled", "cancelled"]
