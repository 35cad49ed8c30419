"""AutoGen on gRPC workers: when a worker stops, another continues its agents from the store.

What it shows:
- a ``DurableAgent`` registered with ``durable_factory`` on a ``DurableGrpcWorkerAgentRuntime``:
  the agent saves its state to an ``AutoGenStateStore`` after every message it handles;
- worker 1 handles three messages, then stops (as a crashed or redeployed worker would);
- worker 2, a new runtime with a new store object, registers the same agent type; the host
  routes the next message to it, and the agent continues from its last saved state;
- the lifecycle the stock gRPC worker lacks: ``stop()`` twice is fine, ``save_state()`` works.

Local mode needs nothing (``AGENTSERVER_STATE_ROOT`` is a temporary folder here unless you set
it); inside a Foundry-hosted agent the same code uses the hosted state store. The gRPC host runs
on a free loopback port of this machine.

Run: ``python samples/autogen_grpc_failover.py``
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autogen_core import AgentId, MessageContext, RoutedAgent, message_handler
from autogen_core import try_get_known_serializers_for_type as serializers

from foundry_checkpoint_autogen import (
    AutoGenStateStore,
    DurableAgent,
    DurableGrpcWorkerAgentRuntime,
    durable_factory,
)
from foundry_checkpoint_autogen.testing import GRPC_OPTIONS, loopback_host

ANN = AgentId("counter", "ann")


@dataclass
class Add:
    note: str


@dataclass
class Count:
    count: int
    history: list[str]


class Counter(DurableAgent, RoutedAgent):
    """Counts the notes it is sent and remembers them."""

    def __init__(self) -> None:
        super().__init__("counts notes")
        self.history: list[str] = []

    @message_handler
    async def add(self, message: Add, ctx: MessageContext) -> Count:
        self.history.append(message.note)
        return Count(len(self.history), list(self.history))

    async def save_state(self) -> Mapping[str, Any]:
        return {"history": self.history}

    async def load_state(self, state: Mapping[str, Any]) -> None:
        self.history = list(state["history"])


def runtime(address: str) -> DurableGrpcWorkerAgentRuntime:
    worker = DurableGrpcWorkerAgentRuntime(address, extra_grpc_config=GRPC_OPTIONS)
    worker.add_message_serializer([*serializers(Add), *serializers(Count)])
    return worker


async def worker_for(address: str, store: AutoGenStateStore) -> DurableGrpcWorkerAgentRuntime:
    """A started worker hosting 'counter' (retried while the host frees the type)."""
    for _ in range(100):
        worker = runtime(address)
        await worker.start()
        try:
            await Counter.register(worker, "counter", durable_factory(Counter, store, scope="demo"))
        except Exception as exc:
            await worker.stop()
            if "already registered" not in str(exc):
                raise
            await asyncio.sleep(0.05)
        else:
            return worker
    raise RuntimeError("the host kept the agent type registered")


async def send(client: DurableGrpcWorkerAgentRuntime, note: str) -> Count:
    reply = await asyncio.wait_for(client.send_message(Add(note), ANN), timeout=30)
    assert isinstance(reply, Count)
    return reply


async def main() -> None:
    os.environ.setdefault("AGENTSERVER_STATE_ROOT", tempfile.mkdtemp(prefix="foundry-autogen-"))
    os.environ.setdefault("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    async with loopback_host() as address, runtime(address) as client:
        print("1) worker 1 hosts the counter agents:")
        store_1 = AutoGenStateStore()
        worker_1 = await worker_for(address, store_1)
        try:
            for note in ("a", "b", "c"):
                reply = await send(client, note)
                print(f"   worker 1 replied: count={reply.count} history={reply.history}")
            print(f"   worker 1 save_state(): {dict(await worker_1.save_state())}")
        finally:
            await worker_1.stop()
            await store_1.aclose()
        await worker_1.stop()  # a second stop is fine
        print("2) worker 1 stopped")

        print("3) worker 2 (a new runtime and a new store object) takes the agent type over:")
        async with AutoGenStateStore() as store_2:
            worker_2 = await worker_for(address, store_2)
            try:
                reply = await send(client, "d")
                print(f"   worker 2 replied: count={reply.count} history={reply.history}")
                versions = await store_2.aversions("demo", "agent", str(ANN))
                print(f"   versions stored for {ANN}: {len(versions)}")
            finally:
                await worker_2.stop()


if __name__ == "__main__":
    asyncio.run(main())
