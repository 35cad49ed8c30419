"""``FoundryHistoryProvider.list_sessions`` and ``inspect`` (what ``maf sessions``, ``maf history``
and the explorer read), in local and hosted mode: the windows they answer, their store calls
(flat in the length of the conversation, reads only), a damaged message reported, not raised;
and ``FoundrySessionStore.inspect``."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agent_framework import AgentSession, Message

from foundry_checkpoint.errors import CorruptPayloadError, InvalidArgumentError
from foundry_checkpoint_maf import FoundryHistoryProvider, StoredHistory
from tests._counting_store import CountingStore

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # MAF marks SessionStore experimental
    from foundry_checkpoint_maf import FoundrySessionStore


@pytest.fixture
async def history(store_env: Any) -> AsyncIterator[FoundryHistoryProvider]:
    async with FoundryHistoryProvider(**store_env.kwargs()) as provider:
        yield provider


async def _fill(history: FoundryHistoryProvider, session: str | None, count: int) -> None:
    for start in range(0, count, 250):
        batch = [Message("user", [f"m-{i}"]) for i in range(start, min(count, start + 250))]
        await history.save_messages(session, batch)


async def _counting(history: FoundryHistoryProvider, session: str) -> CountingStore:
    core = history._core
    scope = await core.arun(core.scope(session))
    counting = CountingStore(scope.store)
    scope.store = counting
    return counting


def _texts(stored: StoredHistory | None) -> list[str]:
    assert stored is not None
    return [m.message.text for m in stored.messages if m.message is not None]


async def test_windows_of_a_history(history: FoundryHistoryProvider) -> None:
    await _fill(history, "w", 30)
    whole = await history.inspect("w")
    assert whole is not None and (whole.first, whole.next, whole.count) == (0, 30, 30)
    assert _texts(whole) == [f"m-{i}" for i in range(30)]
    assert [m.seq for m in whole.messages] == list(range(30))
    assert all(m.size > 0 and not m.spilled and m.error is None for m in whole.messages)
    assert _texts(await history.inspect("w", last=3)) == ["m-27", "m-28", "m-29"]
    assert _texts(await history.inspect("w", offset=5, limit=2)) == ["m-5", "m-6"]
    assert _texts(await history.inspect("w", last=4, offset=3)) == ["m-29"]
    assert _texts(await history.inspect("w", offset=40)) == []
    head = await history.inspect("w", limit=0)
    assert head is not None and head.messages == [] and head.count == 30
    assert await history.inspect("never-written") is None
    for bad in ({"offset": -1}, {"limit": -1}, {"last": True}):
        with pytest.raises(InvalidArgumentError):
            await history.inspect("w", **bad)


async def test_retention_moves_the_window(store_env: Any) -> None:
    async with FoundryHistoryProvider(**store_env.kwargs(), max_messages=5) as history:
        await _fill(history, "kept", 12)
        stored = await history.inspect("kept")
        assert stored is not None and (stored.first, stored.next) == (7, 12)
        assert [m.seq for m in stored.messages] == [7, 8, 9, 10, 11]
        assert _texts(await history.inspect("kept", offset=1, limit=1)) == ["m-8"]


async def test_list_sessions_is_per_user_and_sorted(store_env: Any) -> None:
    async with FoundryHistoryProvider(**store_env.kwargs()) as alice:
        for session in ("b", None, "a"):
            await alice.save_messages(session, [Message("user", ["x"])])
        assert await alice.list_sessions() == [None, "a", "b"]
        await alice.delete_session("a")
        assert await alice.list_sessions() == [None, "b"]
    async with FoundryHistoryProvider(**store_env.kwargs(user="bob")) as bob:
        assert await bob.list_sessions() == []
        assert await bob.inspect("b") is None


async def test_inspect_costs_are_flat_and_only_reads(history: FoundryHistoryProvider) -> None:
    costs: list[tuple[Counter[str], Counter[str]]] = []
    for length in (10, 2000):
        session = f"cost-{length}"
        await _fill(history, session, length)
        counting = await _counting(history, session)
        await history.inspect(session, limit=0)
        head = counting.calls.copy()
        counting.calls.clear()
        stored = await history.inspect(session, last=5)
        assert _texts(stored) == [f"m-{i}" for i in range(length - 5, length)]
        costs.append((head, counting.calls.copy()))
    # the head alone; the head and one read per message of the window; nothing written
    assert costs[0] == costs[1] == (Counter({"get_item": 1}), Counter({"get_item": 6}))


async def test_a_damaged_message_is_reported_not_raised(history: FoundryHistoryProvider) -> None:
    await _fill(history, "d", 3)
    core = history._core
    scope = await core.arun(core.scope("d"))
    key = "msg/000000000001"
    value = await core.arun(scope.encode(key, b"[1, 2]", tags={}))  # JSON, but no message
    await core.arun(scope.store.set_item(key, value))
    stored = await history.inspect("d")
    assert stored is not None
    good, damaged, last = stored.messages
    assert damaged.seq == 1 and damaged.message is None
    assert damaged.error is not None and "not an object" in damaged.error
    assert good.message is not None and last.message is not None
    with pytest.raises(CorruptPayloadError, match="cannot be read"):
        await history.get_messages("d")  # the agent's own read still refuses it


async def test_session_store_inspect(store_env: Any) -> None:
    async with FoundrySessionStore(**store_env.kwargs()) as store:
        session = AgentSession(session_id="s-1")
        session.state["notes"] = ["a" * 50]
        await store.set("s-1", session)
        found = await store.inspect("s-1")
        assert found is not None and found.session_id == "s-1"
        assert found.size > 0 and found.spilled is False and found.updated_at > 0
        assert await store.inspect("s-2") is None
    async with FoundrySessionStore(**store_env.kwargs(user="bob")) as other:
        assert await other.inspect("s-1") is None
