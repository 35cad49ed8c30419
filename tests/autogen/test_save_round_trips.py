"""AutoGenStateStore.asave waits one round trip per save, two when it trims (both modes).

Each store call of the scope is held for one simulated round trip; the longest chain of calls
that ran one after the other is what a save waits for on the service.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from foundry_checkpoint_autogen import AutoGenStateStore

from .conftest import MakeStore

AGENT = "counter/rt"
TRIP_S = 0.02


class TimedStore:
    """Wraps a store: every item-API call waits one round trip and is logged with its times."""

    _TIMED = frozenset({"get_item", "set_item", "create_item", "delete_item", "list_keys"})

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.log: list[tuple[str, float, float]] = []
        self.fail_create = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self._TIMED:
            return attr

        async def timed(*args: Any, **kwargs: Any) -> Any:
            loop = asyncio.get_running_loop()
            start = loop.time()
            try:
                await asyncio.sleep(TRIP_S)
                if name == "create_item" and self.fail_create:
                    raise ConnectionError("the write was lost")
                return await attr(*args, **kwargs)
            finally:
                self.log.append((name, start, loop.time()))

        return timed

    def take(self) -> tuple[int, Counter[str]]:
        """The longest chain of sequential calls since the last take, and the calls by name."""
        ordered = sorted(self.log, key=lambda call: call[2])
        chains: list[int] = []
        for i, (_, start, _end) in enumerate(ordered):
            before = [chains[j] for j in range(i) if ordered[j][2] <= start]
            chains.append(1 + max(before, default=0))
        calls = Counter(name for name, _, _ in self.log)
        self.log.clear()
        return max(chains, default=0), calls


async def _timed(store: AutoGenStateStore, scope_id: str) -> TimedStore:
    core = store._core
    scope = await core.arun(core.scope(scope_id))
    timed = TimedStore(scope.store)
    scope.store = timed
    return timed


@pytest.mark.parametrize("keep", [3, 10])
async def test_a_save_waits_one_round_trip_and_two_when_it_trims(
    make_store: MakeStore, keep: int
) -> None:
    store = make_store(keep_versions=keep)
    await store.asave("conv", "agent", AGENT, {"i": 0})  # creates the scope's store
    timed = await _timed(store, "conv")
    for i in range(1, keep + 3):
        await store.asave("conv", "agent", AGENT, {"i": i})
        chain, calls = timed.take()
        if i < keep:  # nothing to trim yet: the listing rides along with the write
            assert (chain, calls) == (1, Counter({"create_item": 1, "list_keys": 1})), i
        else:  # the oldest version goes once the new one is stored
            assert chain == 2, (i, calls)
            assert calls == Counter({"create_item": 1, "list_keys": 1, "delete_item": 1}), i
        versions = await store.aversions("conv", "agent", AGENT)
        timed.take()
        assert len(versions) == min(i + 1, keep)
    assert await store.aload("conv", "agent", AGENT) == {"i": keep + 2}


async def test_a_lost_write_deletes_no_version(make_store: MakeStore) -> None:
    store = make_store(keep_versions=3)
    for i in range(3):
        await store.asave("conv", "agent", AGENT, {"i": i})
    before = await store.aversions("conv", "agent", AGENT)
    timed = await _timed(store, "conv")
    timed.fail_create = True
    with pytest.raises(ConnectionError):
        await store.asave("conv", "agent", AGENT, {"i": 3})
    _, calls = timed.take()
    assert calls["delete_item"] == 0
    timed.fail_create = False
    assert await store.aversions("conv", "agent", AGENT) == before
    assert await store.aload("conv", "agent", AGENT) == {"i": 2}


async def test_trimming_many_versions_at_once_keeps_the_newest(make_store: MakeStore) -> None:
    unbounded = make_store(keep_versions=None)
    for i in range(40):
        await unbounded.asave("conv", "agent", AGENT, {"i": i})
    store = make_store(keep_versions=5)
    newest = await store.asave("conv", "agent", AGENT, {"i": 40})  # trims 36 at once
    versions = [v.version for v in await store.aversions("conv", "agent", AGENT)]
    assert len(versions) == 5 and versions[-1] == newest
    assert await store.aload("conv", "agent", AGENT) == {"i": 40}
