"""gRPC workers on a loopback host: failover between workers, state methods, lifecycle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from autogen_core import AgentId, try_get_known_serializers_for_type
from autogen_ext.runtimes.grpc import GrpcWorkerAgentRuntime

from foundry_checkpoint_autogen import (
    AutoGenStateStore,
    DurableGrpcWorkerAgentRuntime,
    durable_factory,
    load_runtime,
    running,
    save_runtime,
)
from foundry_checkpoint_autogen.testing import GRPC_OPTIONS, loopback_host

from ._agents import Add, Count, Counter
from .conftest import MakeStore

pytestmark = pytest.mark.timeout(60)

ANN = AgentId("counter", "ann")
_SERIALIZERS = [
    *try_get_known_serializers_for_type(Add),
    *try_get_known_serializers_for_type(Count),
]


def _worker(address: str) -> DurableGrpcWorkerAgentRuntime:
    worker = DurableGrpcWorkerAgentRuntime(address, extra_grpc_config=GRPC_OPTIONS)
    worker.add_message_serializer(_SERIALIZERS)
    return worker


@asynccontextmanager
async def _hosting(
    address: str, store: AutoGenStateStore, *, attempts: int = 50
) -> AsyncIterator[DurableGrpcWorkerAgentRuntime]:
    """A started worker hosting the counter type; retried while the host still holds the type
    for a worker that just disconnected."""
    for attempt in range(attempts):
        worker = _worker(address)
        try:
            await worker.start()
            await Counter.register(worker, "counter", durable_factory(Counter, store, scope="c"))
        except Exception as exc:
            await worker.stop()
            if "already registered" not in str(exc) or attempt == attempts - 1:
                raise
            await asyncio.sleep(0.05)
            continue
        try:
            yield worker
        finally:
            await worker.stop()
        return


async def _send(client: GrpcWorkerAgentRuntime, message: Add, to: AgentId = ANN) -> Count:
    reply = await asyncio.wait_for(client.send_message(message, to), timeout=15)
    assert isinstance(reply, Count)
    return reply


async def test_failover_continues_each_agent_from_its_saved_state(make_store: MakeStore) -> None:
    async with loopback_host() as address:
        client = _worker(address)
        async with client, _hosting(address, make_store()) as worker_1:
            for note in ("a", "b", "c"):
                await _send(client, Add(1, note))
            assert await _send(client, Add(10, "x"), AgentId("counter", "bob")) == Count(10, ["x"])
            assert sorted(worker_1.hosted_types) == ["counter"]
        # worker 1 is stopped; worker 2, with a new store object, takes the agent type over
        client = _worker(address)
        async with client, _hosting(address, make_store()) as worker_2:
            assert await _send(client, Add(1, "d")) == Count(4, ["a", "b", "c", "d"])
            assert await _send(client, Add(1, "y"), AgentId("counter", "bob")) == Count(
                11, ["x", "y"]
            )
            assert await worker_2.agent_save_state(ANN) == {
                "count": 4,
                "history": ["a", "b", "c", "d"],
            }


async def test_state_methods_round_trip_and_refuse_foreign_agents(make_store: MakeStore) -> None:
    store = make_store()
    async with loopback_host() as address, _hosting(address, store) as worker:
        assert await worker.save_state() == {}
        await worker.agent_load_state(ANN, {"count": 3, "history": ["x", "y", "z"]})
        meta = await worker.agent_metadata(ANN)
        assert (meta["type"], meta["key"]) == ("counter", "ann")
        saved = await worker.save_state()
        assert saved == {"counter/ann": {"count": 3, "history": ["x", "y", "z"]}}
        version = await save_runtime(worker, store, "deploy")
        await worker.load_state({"counter/ann": {"count": 0, "history": []}})
        assert await worker.agent_save_state(ANN) == {"count": 0, "history": []}
        assert await load_runtime(worker, store, "deploy", version=version) is True
        assert await worker.save_state() == saved
        elsewhere = AgentId("planner", "ann")
        for call in (
            worker.agent_save_state(elsewhere),
            worker.agent_metadata(elsewhere),
            worker.agent_load_state(elsewhere, {}),
            worker.load_state({"planner/ann": {}, "counter/ann": {"count": 9, "history": []}}),
        ):
            with pytest.raises(LookupError, match=r"store|hosts them"):
                await call
        assert await worker.agent_save_state(ANN) == saved["counter/ann"]  # nothing loaded
        with pytest.warns(RuntimeWarning, match="planner/ann"):
            await store.asave("deploy", "runtime", "mixed", {"planner/ann": {}, **saved})
            assert await load_runtime(worker, store, "deploy", name="mixed") is True


async def test_lifecycle_is_forgiving_and_the_stock_errors_do_not_occur() -> None:
    async with loopback_host() as address:
        worker = _worker(address)
        await worker.stop()  # before start: nothing
        await worker.start()
        await worker.start()  # idempotent
        assert worker.phase == "running"
        await worker.stop()
        await worker.stop()  # twice: nothing
        with pytest.raises(RuntimeError, match="create a new runtime"):
            await worker.start()
        # the stock worker through running(): no "Runtime is not running", no restart hang
        stock = GrpcWorkerAgentRuntime(address, extra_grpc_config=GRPC_OPTIONS)
        async with running(stock), running(stock):
            pass
        with pytest.raises(RuntimeError, match="create a new runtime"):
            async with running(stock):
                pass
        with pytest.raises(TypeError, match="DurableGrpcWorkerAgentRuntime"):
            await save_runtime(stock, AutoGenStateStore(), "x")
        async with running(_worker(address)) as durable:
            during = durable.phase
        assert (during, durable.phase) == ("running", "stopped")
