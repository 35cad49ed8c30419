"""The shared async patterns: bounded concurrency and reading the newest item."""

from __future__ import annotations

import asyncio

from foundry_checkpoint._aio import LATEST_ATTEMPTS, bounded, read_newest


def test_bounded_keeps_order_and_the_limit() -> None:
    running = 0
    peak = 0

    async def work(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.001 * (10 - n))
        running -= 1
        return n

    assert asyncio.run(bounded((work(n) for n in range(10)), limit=3)) == list(range(10))
    assert peak == 3


def test_read_newest_lists_again_when_the_item_went() -> None:
    items = {"a": 1, "b": 2, "c": 3}
    listings = 0

    async def find() -> str | None:
        nonlocal listings
        listings += 1
        return max(items, default=None)

    async def read(key: str) -> int | None:
        if key != "a":
            del items[key]  # deleted between the listing and the read
            return None
        return items[key]

    assert asyncio.run(read_newest(find, read)) == ("a", 1)
    assert listings == 3


def test_read_newest_gives_up_after_its_attempts() -> None:
    listings = 0

    async def find() -> str:
        nonlocal listings
        listings += 1
        return "gone"

    async def read(key: str) -> int | None:
        return None

    assert asyncio.run(read_newest(find, read)) is None
    assert listings == LATEST_ATTEMPTS


def test_read_newest_of_nothing_lists_once() -> None:
    listings = 0

    async def find() -> str | None:
        nonlocal listings
        listings += 1
        return None

    async def read(key: str) -> int | None:
        raise AssertionError("nothing to read")

    assert asyncio.run(read_newest(find, read)) is None
    assert listings == 1
