"""A MAF chat agent behind ResponsesHostServer: sessions and history on the state store, many users.

The sample app ``samples/hosted_agents/maf_chat_agent.py`` (an ``Agent`` with
``FoundryHistoryProvider``, ``history_source="agent"`` and one ``FoundrySessionStoreProvider``)
runs in real host processes, driven over HTTP with the platform's headers for each request's
user (a new ``x-agent-foundry-call-id`` per request and ``x-agent-user-id``). Local mode runs
without the hosting variables (responses, sessions and history under ``AGENTSERVER_STATE_ROOT``);
hosted mode on ``agent_environment()`` against the emulator.

Every user talks in a conversation with the same id, and one user follows responses by
``previous_response_id`` instead; the server is killed mid-conversation and a new process goes on
with each user's history. The stand-in model lists the user messages it was sent, so each reply
shows the history the agent loaded; the stores are then read as each user directly.

A server killed in the middle of a turn shows the host's own rule for conversations whose
history the agent keeps: it claims the conversation in the session store before the run and
releases the claim when it saves the session after it, so a conversation whose turn died with
its process is refused from then on ("start a new conversation"); the turns before it stay in
the history, and the dead turn stored nothing (MAF stores a run's messages after the run).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from agent_framework import AgentSession

from foundry_checkpoint_maf import FoundryHistoryProvider, FoundrySessionStore

from ._kills import events, prepare, wait_until
from .conftest import Host, Platform

APP = "maf_chat_agent:app"
SLOW_APP = "slow_chat_agent:app"  # the sample's agent, with a model that can be slow
APPS = Path(__file__).resolve().parent / "apps"
CONVERSATION = "conv_notes"  # every user's conversation has the same id
USERS = ["alice", "bob", "carol", "dave", "erin"]
CHAINED = "frank"  # follows previous_response_id, no conversation
SAID = ["buy milk", "call the bank", "book a table"]


def note(user: str, turn: int) -> str:
    return f"{user}: {SAID[turn]}"


def reply(notes: list[str]) -> str:
    return f"{len(notes)} notes: " + "; ".join(notes)


def respond(host: Host, user: str, body: dict[str, Any]) -> dict[str, Any]:
    response = host.post(user, "/responses", {"store": True, **body})
    assert response.status_code == 200, (user, body, response.text)
    answer: dict[str, Any] = response.json()
    assert answer["status"] == "completed", (user, answer, host.log_text()[-3000:])
    return answer


def text(response: dict[str, Any]) -> str:
    return " ".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def everyone(host: Host, turn: int, previous: str | None) -> dict[str, dict[str, Any]]:
    """Turn ``turn`` of every user at once: the conversation's users and the chained one."""
    bodies: dict[str, dict[str, Any]] = {
        user: {"conversation": CONVERSATION, "input": note(user, turn)} for user in USERS
    }
    bodies[CHAINED] = {"input": note(CHAINED, turn)}
    if previous is not None:
        bodies[CHAINED]["previous_response_id"] = previous
    with ThreadPoolExecutor(len(bodies)) as pool:
        answers = pool.map(lambda user: respond(host, user, bodies[user]), bodies)
        return dict(zip(bodies, answers, strict=True))


Opened = tuple[FoundrySessionStore, FoundryHistoryProvider]


@pytest.fixture
async def as_user(
    platform: Platform, mode: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[[str], Opened]]:
    """The sample's session store and history provider, opened as ``user`` from outside."""
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(platform.root / "state"))
    opened: list[Opened] = []

    def open_as(user: str) -> Opened:
        if mode == "local":
            monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
            options: dict[str, Any] = {"user_id": user}
        else:
            monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
            options = {
                "credential": platform.emulator.credential(user=user),
                "endpoint": platform.emulator.endpoint,
                "connection_verify": platform.emulator.ca_file,
            }
        made = (
            FoundrySessionStore(store_prefix="notes-sessions", **options),
            FoundryHistoryProvider(store_prefix="notes-history", **options),
        )
        opened.append(made)
        return made

    yield open_as
    for sessions, history in opened:
        await sessions.aclose()
        await history.aclose()


@pytest.mark.parametrize("mode", ["local", "hosted"])
async def test_users_with_one_conversation_id_keep_their_own_history_across_a_restart(
    platform: Platform, mode: str, as_user: Callable[[str], Opened]
) -> None:
    prepare(platform, mode)
    everybody = [*USERS, CHAINED]
    host = platform.start(APP)
    first = everyone(host, 0, None)
    second = everyone(host, 1, first[CHAINED]["id"])
    for user in everybody:
        assert text(first[user]) == reply([note(user, 0)])
        assert text(second[user]) == reply([note(user, 0), note(user, 1)])

    host.kill()  # mid-conversation: nothing is flushed
    host = platform.start(APP)
    third = everyone(host, 2, second[CHAINED]["id"])
    for user in everybody:
        assert text(third[user]) == reply([note(user, n) for n in range(3)]), user

    # A user new to the conversation id starts from nothing.
    fresh = respond(host, "grace", {"conversation": CONVERSATION, "input": "grace: hello"})
    assert text(fresh) == reply(["grace: hello"])

    # The stores, read as each user: their own session of the conversation and its history.
    found: dict[str, AgentSession] = {}
    for user in USERS:
        sessions, history = as_user(user)
        session = await sessions.get(CONVERSATION)
        assert session is not None, user
        found[user] = session
        messages = await history.get_messages(session.session_id)
        assert [(m.role, m.text) for m in messages] == [
            pair
            for n in range(3)
            for pair in (
                ("user", note(user, n)),
                ("assistant", reply([note(user, k) for k in range(n + 1)])),
            )
        ], user
        assert await sessions.get(third[user]["id"]) is not None  # saved by response id too
    assert len({session.session_id for session in found.values()}) == len(USERS)
    # Nobody reads another user's session or history, with the same ids in hand.
    sessions, history = as_user("bob")
    assert await history.get_messages(found["alice"].session_id) == []
    assert await sessions.get(third["alice"]["id"]) is None
    chained_sessions, _ = as_user(CHAINED)
    assert await chained_sessions.get(CONVERSATION) is None  # frank never named it


async def test_store_calls_of_a_turn(platform: Platform) -> None:
    """Hosted mode, the emulator's counts of one user's turn once the process has its stores
    open: the host's session read, claim and two commits, and the history's load (head and
    every message: MAF's history providers load the whole conversation) and append (head, the
    tail it compares with, the head's compare-and-set and the two new messages)."""
    host = platform.start(APP)
    respond(host, "alice", {"conversation": CONVERSATION, "input": note("alice", 0)})
    per_turn: list[dict[str, int]] = []
    for turn in (1, 2):
        platform.emulator.reset_counts()
        said = respond(host, "alice", {"conversation": CONVERSATION, "input": note("alice", turn)})
        assert text(said) == reply([note("alice", n) for n in range(turn + 1)])
        counted = platform.emulator.requests
        per_turn.append({name: n for name, n in sorted(counted.items()) if n})
    stored = [2, 4]  # messages in the history before turns 1 and 2
    for before, calls in zip(stored, per_turn, strict=True):
        assert calls == {
            # session get, history head, every message, append's head, its tail of 2
            "get_item": 1 + 1 + before + 1 + 2,
            # session claim, commit by response id and by conversation; head; two messages
            "put_item": 3 + 1 + 2,
        }, per_turn


@pytest.mark.parametrize("mode", ["local", "hosted"])
async def test_a_turn_killed_mid_run_leaves_the_hosts_claim_on_its_conversation(
    platform: Platform, mode: str, as_user: Callable[[str], Opened]
) -> None:
    journal = prepare(platform, mode)
    host = platform.start(SLOW_APP, apps=APPS)
    for user in ("alice", "bob"):
        said = respond(host, user, {"conversation": CONVERSATION, "input": note(user, 0)})
        assert text(said) == reply([note(user, 0)])
    slow = {"store": True, "conversation": CONVERSATION, "input": "alice: slowly, please"}
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(host.post, "alice", "/responses", slow)

        def running() -> bool:
            return any(e["text"] == slow["input"] for e in events(journal))

        wait_until(running, 60, "the slow turn", host)
        host.kill()  # while the model is answering
        assert pending.exception(timeout=60) is not None  # the connection died with the server
    host = platform.start(SLOW_APP, apps=APPS)

    # Bob's conversation with the same id goes on; Alice's is refused by the host.
    said = respond(host, "bob", {"conversation": CONVERSATION, "input": note("bob", 1)})
    assert text(said) == reply([note("bob", 0), note("bob", 1)])
    refused = host.post(
        "alice", "/responses", {"store": True, "conversation": CONVERSATION, "input": "again"}
    )
    assert refused.status_code == 200 and refused.json()["status"] == "failed", refused.text
    assert "already has an in-flight turn" in refused.json()["error"]["message"]
    # Her history holds the turn before; the killed turn stored nothing.
    sessions, history = as_user("alice")
    session = await sessions.get(CONVERSATION)
    assert session is not None
    messages = await history.get_messages(session.session_id)
    assert [m.text for m in messages] == [note("alice", 0), reply([note("alice", 0)])]
    # A new conversation starts from nothing.
    fresh = respond(host, "alice", {"conversation": "conv_notes_2", "input": "alice: hello"})
    assert text(fresh) == reply(["alice: hello"])


@pytest.mark.parametrize("mode", ["local", "hosted"])
async def test_a_reply_regenerated_twice_keeps_each_branch_apart(
    platform: Platform, mode: str, as_user: Callable[[str], Opened]
) -> None:
    """Continuing one response twice by ``previous_response_id`` (a regenerated reply) loads the
    same saved session twice: each branch, and each branch's next turn, sees only its own
    messages, as with MAF's ``InMemoryHistoryProvider``."""
    prepare(platform, mode)
    host = platform.start(APP)
    user = CHAINED
    root = respond(host, user, {"input": "frank: hello"})
    branches: dict[str, dict[str, Any]] = {}
    for name in ("left", "right"):
        said = f"frank: {name} 1"
        branches[name] = respond(host, user, {"input": said, "previous_response_id": root["id"]})
        assert text(branches[name]) == reply(["frank: hello", said]), name
    for name in ("right", "left"):
        said = f"frank: {name} 2"
        after = respond(host, user, {"input": said, "previous_response_id": branches[name]["id"]})
        assert text(after) == reply(["frank: hello", f"frank: {name} 1", said]), name
    # the session saved with the root response still reads only the turn before the fork
    sessions, history = as_user(user)
    saved = await sessions.get(root["id"])
    assert saved is not None
    state = saved.state.get(history.source_id)
    assert [m.text for m in await history.get_messages(saved.session_id, state=state)] == [
        "frank: hello",
        reply(["frank: hello"]),
    ]
    assert len(await history.get_messages(saved.session_id)) == 2 + 4 * 2  # the store holds all
