"""One AutoGen runtime, many end users: each handler runs in its sender's request context.

A stock AutoGen runtime handles every message in the context it was started in, so a durable
agent would save into the starter's partition. ``DurableSingleThreadedAgentRuntime`` and
``DurableGrpcWorkerAgentRuntime`` carry the sender's request context (the platform call id the
store calls forward, and the user id) to the handler. Hosted cases run against the session
emulator in its strict identity mode (no ``x-ms-user-id`` is honoured): the partition comes
from the carried call id alone.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager
from typing import Any

import pytest
from autogen_core import (
    AgentId,
    ClosureAgent,
    ClosureContext,
    DefaultTopicId,
    MessageContext,
    SingleThreadedAgentRuntime,
    TypeSubscription,
    try_get_known_serializers_for_type,
)
from azure.ai.agentserver.core import (
    FoundryAgentRequestContext,
    get_request_context,
    reset_request_context,
    set_request_context,
)

from foundry_checkpoint_autogen import (
    AutoGenStateStore,
    DurableGrpcWorkerAgentRuntime,
    DurableSingleThreadedAgentRuntime,
    durable_factory,
)
from foundry_checkpoint_autogen.testing import GRPC_OPTIONS, loopback_host
from tests._request import in_request
from tests.conftest import StoreEnv

from ._agents import Add, Count, Counter

pytestmark = pytest.mark.timeout(120)

USERS = ("alice", "bob")
KIND = "agent"


@pytest.fixture(params=["context-user", "call-id-only"])
def context_user(request: pytest.FixtureRequest, store_env: StoreEnv) -> bool:
    if request.param == "call-id-only" and store_env.mode != "hosted":
        pytest.skip("locally a call id names no user: the context's user id partitions")
    return str(request.param) == "context-user"


def request_of(
    env: StoreEnv, user: str | None, *, with_user: bool = True
) -> AbstractContextManager[None]:
    """A request of ``user`` as the hosts set it (None: no request at all)."""
    if user is None:
        return in_request(FoundryAgentRequestContext())
    return in_request(
        FoundryAgentRequestContext(call_id=env.call_id(user), user_id=user if with_user else None)
    )


def _agent_store(env: StoreEnv) -> AutoGenStateStore:
    """The process's one store: the agent's own identity, no ``user_id=``."""
    return AutoGenStateStore(**env.kwargs(user="agent"))


def _owners(env: StoreEnv, store: AutoGenStateStore, name: str, *, with_user: bool) -> list[Any]:
    """What each user (and the agent outside any request) reads for ``name``."""
    out = []
    for user in (*USERS, None):
        with request_of(env, user, with_user=with_user):
            out.append(store.load("conv", KIND, name))
    return out


async def test_single_threaded_handlers_save_into_the_sender_s_partition(
    store_env: StoreEnv, context_user: bool
) -> None:
    store = _agent_store(store_env)
    runtime = DurableSingleThreadedAgentRuntime()
    await Counter.register(runtime, "counter", durable_factory(Counter, store, scope="conv"))
    try:
        with request_of(store_env, "bob", with_user=context_user):
            runtime.start()  # started inside bob's request: that must not matter
        for user in USERS:
            with request_of(store_env, user, with_user=context_user):
                reply = await runtime.send_message(Add(1, user), AgentId("counter", user))
            assert reply == Count(1, [user])
        await runtime.stop_when_idle()
        for user in USERS:
            seen = await asyncio.to_thread(
                _owners, store_env, store, f"counter/{user}", with_user=context_user
            )
            # only the sender's partition holds the agent's state
            expected = [{"count": 1, "history": [user]} if u == user else None for u in USERS]
            assert seen == [*expected, None], user
    finally:
        await store.aclose()


async def test_nested_sends_and_publications_keep_the_sender_s_context() -> None:
    """A handler's own sends carry the context it runs in; a publication reaches every
    subscriber in the publisher's context; a message sent outside any request is handled
    outside any (never in the starter's)."""
    seen: list[tuple[str, str | None, str | None]] = []

    async def relay(_: ClosureContext, message: str, ctx: MessageContext) -> str:
        seen.append(("relay", get_request_context().call_id, get_request_context().user_id))
        return str(await runtime.send_message(message, AgentId("echo", "k")))

    async def echo(_: ClosureContext, message: str, ctx: MessageContext) -> str:
        context = get_request_context()
        seen.append(("echo", context.call_id, context.user_id))
        return f"{message}:{context.user_id}"

    async def listen(_: ClosureContext, message: str, ctx: MessageContext) -> None:
        seen.append(("listen", get_request_context().call_id, get_request_context().user_id))

    runtime = DurableSingleThreadedAgentRuntime()
    await ClosureAgent.register_closure(runtime, "relay", relay)
    await ClosureAgent.register_closure(runtime, "echo", echo)
    await ClosureAgent.register_closure(
        runtime, "listen", listen, subscriptions=lambda: [TypeSubscription("default", "listen")]
    )
    starter = set_request_context(FoundryAgentRequestContext(call_id="c-start", user_id="zed"))
    runtime.start()
    reset_request_context(starter)
    for user in USERS:
        token = set_request_context(FoundryAgentRequestContext(call_id=f"c-{user}", user_id=user))
        try:
            assert await runtime.send_message("hi", AgentId("relay", "k")) == f"hi:{user}"
            await runtime.publish_message("news", DefaultTopicId())
        finally:
            reset_request_context(token)
    assert await runtime.send_message("bare", AgentId("echo", "k")) == "bare:None"
    await runtime.stop_when_idle()
    for user in USERS:
        for role in ("relay", "echo", "listen"):
            assert (role, f"c-{user}", user) in seen
    assert ("echo", None, None) in seen
    assert not any(call == "c-start" for _, call, _ in seen)
    assert not runtime._carried  # every captured context was handed to its handler


async def test_the_stock_runtime_handles_messages_in_the_starter_s_context() -> None:
    """Why the runtimes above exist (autogen-core 0.7.5): the sender's context is lost."""

    async def who(_: ClosureContext, message: str, ctx: MessageContext) -> str:
        return str(get_request_context().user_id)

    runtime = SingleThreadedAgentRuntime()
    await ClosureAgent.register_closure(runtime, "who", who)
    starter = set_request_context(FoundryAgentRequestContext(call_id="c-bob", user_id="bob"))
    runtime.start()
    reset_request_context(starter)
    token = set_request_context(FoundryAgentRequestContext(call_id="c-cy", user_id="cy"))
    try:
        assert await runtime.send_message("hi", AgentId("who", "k")) == "bob"
    finally:
        reset_request_context(token)
        await runtime.stop()


_SERIALIZERS = [
    *try_get_known_serializers_for_type(Add),
    *try_get_known_serializers_for_type(Count),
]


def _worker(address: str) -> DurableGrpcWorkerAgentRuntime:
    worker = DurableGrpcWorkerAgentRuntime(address, extra_grpc_config=GRPC_OPTIONS)
    worker.add_message_serializer(_SERIALIZERS)
    return worker


async def test_grpc_workers_carry_the_sender_s_context_to_the_handler(
    store_env: StoreEnv, context_user: bool
) -> None:
    store = _agent_store(store_env)
    try:
        async with loopback_host() as address:
            client, worker = _worker(address), _worker(address)
            async with client, worker:
                await Counter.register(
                    worker, "counter", durable_factory(Counter, store, scope="conv")
                )
                for user in USERS:
                    with request_of(store_env, user, with_user=context_user):
                        reply = await asyncio.wait_for(
                            client.send_message(Add(2, user), AgentId("counter", user)), 30
                        )
                    assert reply == Count(2, [user])
        for user in USERS:
            seen = await asyncio.to_thread(
                _owners, store_env, store, f"counter/{user}", with_user=context_user
            )
            expected = [{"count": 2, "history": [user]} if u == user else None for u in USERS]
            assert seen == [*expected, None], user
    finally:
        await store.aclose()


async def test_one_agent_instance_never_serves_two_users(store_env: StoreEnv) -> None:
    """The same ``AgentId`` messaged in two users' requests: the second is refused before its
    handler runs, so the first user's state never reaches the second user's partition."""
    from foundry_checkpoint.errors import CrossUserMessageError

    store = _agent_store(store_env)
    runtime = DurableSingleThreadedAgentRuntime()
    await Counter.register(runtime, "counter", durable_factory(Counter, store, scope="conv"))
    shared = AgentId("counter", "same-key")
    runtime.start()
    try:
        with request_of(store_env, "alice"):
            assert await runtime.send_message(Add(1, "secret"), shared) == Count(1, ["secret"])
        with request_of(store_env, "bob"), pytest.raises(CrossUserMessageError, match="alice"):
            await runtime.send_message(Add(1, "b"), shared)
        with request_of(store_env, "alice"):  # its owner goes on as before
            assert await runtime.send_message(Add(1, "more"), shared) == Count(
                2, ["secret", "more"]
            )
    finally:
        await runtime.stop()
    seen = await asyncio.to_thread(_owners, store_env, store, "counter/same-key", with_user=True)
    assert seen == [{"count": 2, "history": ["secret", "more"]}, None, None]
    await store.aclose()
