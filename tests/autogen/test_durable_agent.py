"""DurableAgent and durable_factory on SingleThreadedAgentRuntime, in both store modes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from autogen_core import AgentId, RoutedAgent, SingleThreadedAgentRuntime

from foundry_checkpoint.errors import FoundryCheckpointError, InvalidStateError
from foundry_checkpoint_autogen import AutoGenStateStore, DurableAgent, durable_factory

from ._agents import Add, Count, Counter, Fail, Leaky
from .conftest import MakeStore

ANN = AgentId("counter", "ann")


@asynccontextmanager
async def _runtime(
    store: AutoGenStateStore, cls: type[Counter] = Counter, scope: str | None = "conv"
) -> AsyncIterator[SingleThreadedAgentRuntime]:
    runtime = SingleThreadedAgentRuntime()
    await cls.register(runtime, "counter", durable_factory(cls, store, scope=scope))
    runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()


async def _send(runtime: SingleThreadedAgentRuntime, message: object, to: AgentId = ANN) -> Count:
    reply = await asyncio.wait_for(runtime.send_message(message, to), timeout=30)
    assert isinstance(reply, Count)
    return reply


async def test_state_survives_a_new_runtime_and_store(make_store: MakeStore) -> None:
    async with _runtime(make_store()) as runtime:
        for note in ("a", "b", "c"):
            await _send(runtime, Add(1, note))
    store = make_store()  # a new process: new store object, new runtime
    async with _runtime(store) as runtime:
        assert await _send(runtime, Add(1, "d")) == Count(4, ["a", "b", "c", "d"])
        bob = await _send(runtime, Add(5, "x"), AgentId("counter", "bob"))
        assert bob == Count(5, ["x"])  # each agent key has its own state
    assert await store.aload("conv", "agent", "counter/ann") == {
        "count": 4,
        "history": ["a", "b", "c", "d"],
    }
    assert len(await store.aversions("conv", "agent", "counter/ann")) == 4
    # another scope does not see it
    async with _runtime(store, scope="other") as runtime:
        assert await _send(runtime, Add(1, "z")) == Count(1, ["z"])


async def test_30_concurrent_first_messages_make_one_instance(make_store: MakeStore) -> None:
    store = make_store()
    await store.asave("conv", "agent", "counter/ann", {"count": 100, "history": ["old"]})
    Counter.instances = 0
    async with _runtime(store) as runtime:
        replies = await asyncio.gather(*(_send(runtime, Add(1, f"m{i}")) for i in range(30)))
        agent = await runtime.try_get_underlying_agent_instance(ANN, Counter)
        in_memory = await agent.save_state()
    assert Counter.instances == 1
    assert sorted(r.count for r in replies) == list(range(101, 131))
    assert all(r.history[0] == "old" for r in replies)  # every message saw the restored state
    assert in_memory["count"] == 130 and len(in_memory["history"]) == 31
    assert await make_store().aload("conv", "agent", "counter/ann") == in_memory


async def test_a_handler_that_raises_saves_nothing(make_store: MakeStore) -> None:
    store = make_store()
    async with _runtime(store) as runtime:
        await _send(runtime, Add(1, "a"))
        with pytest.raises(RuntimeError, match="boom"):
            await asyncio.wait_for(runtime.send_message(Fail("boom"), ANN), timeout=30)
    assert len(await store.aversions("conv", "agent", "counter/ann")) == 1
    async with _runtime(make_store()) as runtime:
        assert await _send(runtime, Add(1, "b")) == Count(2, ["a", "b"])


async def test_an_explicit_load_state_wins_over_the_store(make_store: MakeStore) -> None:
    store = make_store()
    await store.asave("conv", "agent", "counter/ann", {"count": 7, "history": ["stored"]})
    async with _runtime(store) as runtime:
        await runtime.agent_load_state(ANN, {"count": 50, "history": ["loaded"]})
        assert await _send(runtime, Add(1, "n")) == Count(51, ["loaded", "n"])
    assert await store.aload("conv", "agent", "counter/ann") == {
        "count": 51,
        "history": ["loaded", "n"],
    }


async def test_a_state_that_is_not_json_is_refused(make_store: MakeStore) -> None:
    store = make_store()
    async with _runtime(store, Leaky) as runtime:
        with pytest.raises(InvalidStateError, match="counter/ann"):
            await asyncio.wait_for(runtime.send_message(Add(1), ANN), timeout=30)
    assert await store.aversions("conv", "agent", "counter/ann") == []


async def test_factories_that_cannot_be_durable_are_refused(make_store: MakeStore) -> None:
    store = make_store()

    async def awaiting() -> Counter:
        return Counter()

    with pytest.raises(TypeError, match="synchronous"):
        durable_factory(awaiting, store)  # type: ignore[type-var]

    class Plain(RoutedAgent):
        def __init__(self) -> None:
            super().__init__("plain")

    runtime = SingleThreadedAgentRuntime()
    await Plain.register(runtime, "plain", durable_factory(Plain, store))  # type: ignore[type-var]
    runtime.start()
    try:
        with pytest.raises(TypeError, match="not a DurableAgent"):
            await asyncio.wait_for(runtime.send_message(Add(1), AgentId("plain", "x")), timeout=30)
    finally:
        await runtime.stop()


async def test_an_agent_without_a_store_says_how_to_attach_one() -> None:
    runtime = SingleThreadedAgentRuntime()
    await Counter.register(runtime, "counter", Counter)
    runtime.start()
    try:
        with pytest.raises(FoundryCheckpointError, match="durable_factory"):
            await asyncio.wait_for(runtime.send_message(Add(1), ANN), timeout=30)
    finally:
        await runtime.stop()
    assert issubclass(Counter, DurableAgent)


async def test_two_users_with_the_same_agent_ids_are_isolated(make_store: MakeStore) -> None:
    """One store per end user (``user_id=``, or the emulator user in hosted mode): the same
    scope and AgentId keep two separate states."""
    for user, notes in (("alice", ["a1", "a2"]), ("bob", ["b1"])):
        async with _runtime(make_store(user=user)) as runtime:
            for note in notes:
                await _send(runtime, Add(1, note))
    async with _runtime(make_store(user="alice")) as runtime:
        assert await _send(runtime, Add(1, "a3")) == Count(3, ["a1", "a2", "a3"])
    async with _runtime(make_store(user="bob")) as runtime:
        assert await _send(runtime, Add(1, "b2")) == Count(2, ["b1", "b2"])
    assert await make_store(user="carol").aload("conv", "agent", "counter/ann") is None
