"""A call's identity is captured once, at the adapter's public method, and the call keeps it.

Every adapter (the LangGraph saver, MAF's storage, MAF hosting's bound storage, the AutoGen
store) crosses into the core through ``CheckpointCore.run``/``arun``, which capture one
``Call`` (a snapshot of the request context and the ``Caller`` derived from it) and install it
in the task on the private loop. These tests count the reads of the request context (one per
public call, none on the loop thread), change the context while a call is running (the call
keeps its identity: what it stores lands in the partition it started in, and the call id the
SDK forwards stays the one it started with), and show MAF hosting's bound storage going the
same way as the plain adapters.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint
from azure.ai.agentserver.core import (
    FoundryAgentRequestContext,
    get_request_context,
)
from langgraph.checkpoint.base import empty_checkpoint

import foundry_checkpoint._core as core_module
from foundry_checkpoint import FoundryCheckpointer, StrictSerializer
from foundry_checkpoint._core import Call, Caller
from foundry_checkpoint_autogen import AutoGenStateStore
from foundry_checkpoint_maf import FoundryCheckpointStorage, FoundryCheckpointStorageProvider
from tests._request import agent_config, in_request
from tests.conftest import StoreEnv

_PACKAGES = ("foundry_checkpoint", "foundry_checkpoint_maf", "foundry_checkpoint_autogen")


class Reads:
    """Counts the reads of the request context made by this package's modules, by thread."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def __call__(self) -> FoundryAgentRequestContext:
        self.threads.append(threading.current_thread().name)
        return get_request_context()

    def take(self) -> list[str]:
        taken, self.threads = self.threads, []
        return taken


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    """Every module of the three packages that imported ``get_request_context`` reads through
    a counter (so a read anywhere in them, on any thread, is seen)."""
    counter = Reads()
    for name, module in list(sys.modules.items()):
        ours = module is not None and name.split(".")[0] in _PACKAGES
        if ours and getattr(module, "get_request_context", None) is get_request_context:
            monkeypatch.setattr(module, "get_request_context", counter)
    return counter


def _request(env: StoreEnv, user: str) -> FoundryAgentRequestContext:
    return FoundryAgentRequestContext(call_id=env.call_id(user), user_id=user)


def test_the_request_context_is_read_once_per_call_on_the_calling_thread(
    store_env: StoreEnv, reads: Reads
) -> None:
    """LangGraph's faces (a listing of several pages included), MAF's storage (``prune`` and
    ``get_latest`` run several loop calls) and the AutoGen store: one read each, never on the
    loop thread; MAF hosting's bound storage reads none (it was handed the context)."""
    import asyncio

    main = threading.current_thread().name
    config: Any = {"configurable": {"thread_id": "t-once", "checkpoint_ns": ""}}
    request = _request(store_env, "alice")
    with in_request(request), FoundryCheckpointer(**store_env.kwargs()) as saver:
        stored = config
        for step in range(3):
            stored = saver.put(stored, empty_checkpoint(), {"step": step}, {})
            assert reads.take() == [main]
        saver.put_writes(stored, [("messages", "hi")], "task-1")
        assert reads.take() == [main]
        assert saver.get_tuple(config) is not None
        assert reads.take() == [main]
        plan_pages = list(saver.list(config))
        assert len(plan_pages) == 3
        assert reads.take() == [main]  # the plan and every page: one identity
        assert saver.count_checkpoints("t-once") == 3
        assert reads.take() == [main]
        saver.prune(["t-once"], keep=1)
        assert reads.take() == [main]

        async def faces() -> None:
            assert await saver.aget_tuple(config) is not None
            assert reads.take() == [main]
            assert [t async for t in saver.alist(config)]
            assert reads.take() == [main]

        asyncio.run(faces())

    async def maf() -> None:
        with in_request(request):
            async with FoundryCheckpointStorage("c-once", **store_env.kwargs()) as storage:
                for _ in range(3):
                    cp = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h")
                    await storage.save(cp)
                assert reads.take() == [main] * 3
                assert await storage.get_latest(workflow_name="w") is not None
                assert reads.take() == [main]
                assert await storage.prune(keep=1) == 2  # a listing and two deletes
                assert reads.take() == [main]
        provider = FoundryCheckpointStorageProvider(**store_env.kwargs())
        try:
            bound = provider.get_store(
                config=agent_config(hosted=store_env.mode == "hosted"),
                context_id="c-once",
                platform_context=request,
            )
            assert await bound.get_latest(workflow_name="w") is not None
            assert await bound.prune(keep=1) == 0
            assert reads.take() == []  # the platform context was handed to it
        finally:
            await provider.aclose()

    asyncio.run(maf())

    with in_request(request), AutoGenStateStore(**store_env.kwargs()) as store:
        version = store.save("conv", "agent", "a", {"n": 1})
        assert reads.take() == [main]
        assert store.load("conv", "agent", "a", version=version) == {"n": 1}
        assert reads.take() == [main]


class _Mutating:
    """A serializer that, while a put runs on the loop, rewrites the caller's request context
    (the object the host set) to another user's and records who the core says the call is for."""

    def __init__(self, request: FoundryAgentRequestContext, other: FoundryAgentRequestContext):
        self._inner = StrictSerializer()
        self._request = request
        self._other = other
        self.core: Any = None
        self.seen: list[tuple[Caller, str | None, str]] = []

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        self._request.call_id, self._request.user_id = self._other.call_id, self._other.user_id
        self.seen.append(
            (
                self.core.caller(),
                get_request_context().call_id,
                threading.current_thread().name,
            )
        )
        return self._inner.dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self._inner.loads_typed(data)


def test_a_call_keeps_the_identity_it_started_with(store_env: StoreEnv) -> None:
    """The request context is changed (in place, to bob's) while alice's put runs: the put
    still writes to alice's partition, with alice's call id, keyed by alice in the caches."""
    alice, bob = _request(store_env, "alice"), _request(store_env, "bob")
    alice_call = alice.call_id
    config: Any = {"configurable": {"thread_id": "t-kept", "checkpoint_ns": ""}}
    serde = _Mutating(alice, bob)
    with FoundryCheckpointer(serde=serde, **store_env.kwargs()) as saver:
        serde.core = saver._core
        with in_request(alice):
            saver.put(config, empty_checkpoint(), {"step": 1}, {})
        assert (alice.call_id, alice.user_id) == (bob.call_id, "bob")  # it was changed
        assert serde.seen, "the serializer ran during the put"
        for caller, call_id, thread in serde.seen:
            assert caller.key == "user:alice"
            assert call_id == alice_call  # what the SDK forwards on the store calls
            assert thread != threading.current_thread().name  # on the private loop
        assert [key for key in saver._caches.threads] == [("user:alice", "t-kept")]
    with FoundryCheckpointer(**store_env.kwargs()) as reader:
        with in_request(_request(store_env, "alice")):
            assert reader.get_tuple(config) is not None
        with in_request(_request(store_env, "bob")):
            assert reader.get_tuple(config) is None


@pytest.fixture
def bound_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Call, str | None]]]:
    """Every ``Call`` the core installs on its loop, with the call id the task then sees."""
    seen: list[tuple[Call, str | None]] = []
    original = core_module._bound

    async def spy(call: Call, coro: Coroutine[Any, Any, Any]) -> Any:
        async def observed() -> Any:
            seen.append((call, get_request_context().call_id))
            return await coro

        return await original(call, observed())

    monkeypatch.setattr(core_module, "_bound", spy)
    yield seen


async def test_maf_hosting_and_the_plain_adapters_share_one_mechanism(
    store_env: StoreEnv, bound_calls: list[tuple[Call, str | None]]
) -> None:
    """The LangGraph saver, MAF's storage and the AutoGen store capture the caller's request
    context; hosting's bound storage captures the platform context it was handed, the same
    way, and it wins over whatever context the calling task has (here: alice's)."""
    import asyncio

    alice, bob = _request(store_env, "alice"), _request(store_env, "bob")
    config: Any = {"configurable": {"thread_id": "t-shared", "checkpoint_ns": ""}}
    provider = FoundryCheckpointStorageProvider(**store_env.kwargs())
    runs: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {}

    async def langgraph() -> None:
        with FoundryCheckpointer(**store_env.kwargs()) as saver:
            await saver.aput(config, empty_checkpoint(), {}, {})
            await asyncio.to_thread(saver.get_tuple, config)  # the sync face, another thread

    async def maf() -> None:
        async with FoundryCheckpointStorage("c-shared", **store_env.kwargs()) as storage:
            await storage.save(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h"))

    async def hosting() -> None:
        storage = provider.get_store(
            config=agent_config(hosted=store_env.mode == "hosted"),
            context_id="c-shared",
            platform_context=bob,
        )
        await storage.save(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h"))

    async def autogen() -> None:
        with AutoGenStateStore(**store_env.kwargs()) as store:
            await store.asave("conv", "agent", "a", {"n": 1})

    runs.update(langgraph=langgraph, maf=maf, hosting=hosting, autogen=autogen)
    try:
        for name, run in runs.items():
            bound_calls.clear()
            with in_request(alice):
                await run()
            who = bob if name == "hosting" else alice
            assert bound_calls, name
            for call, seen_call_id in bound_calls:
                assert call.caller == Caller(
                    f"user:{who.user_id}", "" if store_env.mode == "hosted" else str(who.user_id)
                ), name
                assert call.context.call_id == who.call_id == seen_call_id, name
    finally:
        await provider.aclose()
    with in_request(bob):
        async with FoundryCheckpointStorage("c-shared", **store_env.kwargs()) as mine:
            assert await mine.get_latest(workflow_name="w") is not None  # hosting wrote bob's
