"""FoundrySessionStoreProvider: the session store plugged into agent-framework-foundry-hosting.

One provider serves every request: each ``get_store`` is a view bound to the request's platform
context, on the provider's one core. These tests drive the views the way
``ResponsesHostServer`` does for a stored turn of a conversation (read the conversation's
session, claim it, run, save it by response id, commit it), with the host's own conflict
handling (``_set_agent_session``), in local and hosted mode.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from agent_framework import AgentSession
from agent_framework_foundry_hosting import StoreProvider
from agent_framework_foundry_hosting._responses import _PublicResponseFailure, _set_agent_session
from azure.ai.agentserver.core import FoundryAgentRequestContext

from foundry_checkpoint.errors import ConcurrentWriteError
from foundry_checkpoint_maf import FoundrySessionStore, FoundrySessionStoreProvider
from tests._request import agent_config

USERS = ["alice", "bob", "carol"]


@pytest.fixture
async def provider(store_env: Any) -> AsyncIterator[FoundrySessionStoreProvider]:
    made = FoundrySessionStoreProvider(**store_env.kwargs())
    yield made
    await made.aclose()


def request_of(
    store_env: Any, provider: FoundrySessionStoreProvider, user: str
) -> FoundrySessionStore:
    """The session store the host gets for a new request of ``user`` (a fresh call id)."""
    context = FoundryAgentRequestContext(call_id=store_env.call_id(user), user_id=user)
    config = agent_config(hosted=store_env.mode == "hosted")
    return provider.get_store(config=config, platform_context=context)


async def test_one_core_for_every_request_and_user(
    store_env: Any, provider: FoundrySessionStoreProvider
) -> None:
    assert isinstance(provider, StoreProvider)
    views = {user: request_of(store_env, provider, user) for user in USERS}
    assert all(isinstance(view, FoundrySessionStore) for view in views.values())
    assert {id(view._core) for view in views.values()} == {id(provider._core)}
    for user, view in views.items():  # the same id for everyone
        session = AgentSession(session_id=f"{user}-session")
        session.state["owner"] = user
        await view.set("conv_1", session)
    for user in USERS:
        again = await request_of(store_env, provider, user).get("conv_1")
        assert again is not None and again.state == {"owner": user}, user
    assert await request_of(store_env, provider, "dave").get("conv_1") is None
    await views["alice"].aclose()  # a view leaves the provider's core open
    assert await request_of(store_env, provider, "alice").get("conv_1") is not None
    assert repr(provider).startswith("FoundrySessionStoreProvider(")
    provider.close()
    provider.close()  # idempotent; the next request reopens
    assert await request_of(store_env, provider, "bob").get("conv_1") is not None


async def test_a_turn_as_the_host_runs_it_and_a_racing_turn_loses(
    store_env: Any, provider: FoundrySessionStoreProvider
) -> None:
    first = request_of(store_env, provider, "alice")
    assert await first.get("conv_2") is None
    created = AgentSession(session_id="s-2")
    await _set_agent_session(first, "resp_0", created)
    await _set_agent_session(first, "conv_2", created)

    # Two turns of the same conversation at once: both read it, one claims it first.
    winner = request_of(store_env, provider, "alice")
    loser = request_of(store_env, provider, "alice")
    session = await winner.get("conv_2")
    stale = await loser.get("conv_2")
    assert session is not None and stale is not None
    session.state["claim"] = "resp_1"
    await _set_agent_session(winner, "conv_2", session)  # the claim: a compare-and-set
    stale.state["claim"] = "resp_2"
    with pytest.raises(_PublicResponseFailure) as lost:  # the host shows it to the client
        await _set_agent_session(loser, "conv_2", stale)
    assert isinstance(lost.value.error, ConcurrentWriteError)
    assert str(lost.value) == "Another request advanced this agent session; reload before writing."

    # The winner saves by response id, then commits over its own claim.
    session.state.pop("claim")
    session.state["turns"] = 1
    await _set_agent_session(winner, "resp_1", session)
    await _set_agent_session(winner, "conv_2", session)
    committed = await request_of(store_env, provider, "alice").get("conv_2")
    assert committed is not None and committed.state == {"turns": 1}
    assert await request_of(store_env, provider, "alice").get("resp_2") is None
    # Bob's request with the same ids meets none of this.
    bob = request_of(store_env, provider, "bob")
    assert await bob.get("conv_2") is None
    await _set_agent_session(bob, "conv_2", AgentSession(session_id="b-2"))
