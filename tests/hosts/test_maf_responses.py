"""A MAF workflow behind ResponsesHostServer with one FoundryCheckpointStorageProvider, many users.

The sample app ``samples/hosted_agents/maf_agent.py`` runs in real host processes against the
emulator; every request carries the platform's headers for its user. Users share a conversation
id, the server is killed while their questions are pending, and the answers sent to a new process
resume each user's own workflow from the store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from agent_framework_foundry_hosting import FoundryRequestScope
from agent_framework_foundry_hosting._workflow_state import _key

from foundry_checkpoint_maf import FoundryCheckpointStorage

from .conftest import Host, Platform

APP = "maf_agent:app"
WORKFLOW = "expense-approval"
CONVERSATION = "conv_expenses"  # every user's conversation has the same id
CLAIMS = {
    "alice": "taxi 38 EUR",
    "bob": "hotel 120 EUR",
    "carol": "lunch 25 EUR",
    **{f"user{n}": f"train {n} EUR" for n in range(7)},
}  # 10 users, served at once


def respond(host: Host, user: str, body: dict[str, Any]) -> dict[str, Any]:
    payload = {"conversation": CONVERSATION, "store": True, **body}
    response = host.post(user, "/responses", payload)
    assert response.status_code == 200, (user, body, response.text)
    answer: dict[str, Any] = response.json()
    return answer


def question(response: dict[str, Any]) -> tuple[str, str]:
    """The pending request of a paused turn: its wire call id and the question's text."""
    assert response["status"] == "completed", response
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    assert len(calls) == 1, response["output"]
    arguments = json.loads(calls[0]["arguments"])
    return calls[0]["call_id"], arguments["request"]["text"]


def text(response: dict[str, Any]) -> str:
    assert response["status"] == "completed", response
    return " ".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def answer(call_id: str, reply: str) -> dict[str, Any]:
    return {"input": [{"type": "function_call_output", "call_id": call_id, "output": reply}]}


def everyone(host: Host, bodies: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    with ThreadPoolExecutor(len(bodies)) as pool:
        answers = pool.map(lambda user: respond(host, user, bodies[user]), bodies)
        return dict(zip(bodies, answers, strict=True))


@pytest.fixture
def as_user(platform: Platform, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Open the checkpoint storage the host used for a user's conversation, as that user."""
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    session_id = platform.env["FOUNDRY_AGENT_SESSION_ID"]
    opened: list[FoundryCheckpointStorage] = []

    def storage(reader: str, owner: str, lineage_id: str) -> FoundryCheckpointStorage:
        # The context id hosting derives for a conversation: (owner, session) and its lineage.
        scope = FoundryRequestScope(
            session_id=session_id, user_id=owner, call_id=None, is_hosted=True
        )
        made = FoundryCheckpointStorage(
            _key("native", f"{scope.storage_key}:{lineage_id}"),
            store_prefix="expenses",
            credential=platform.emulator.credential(user=reader),
            endpoint=platform.emulator.endpoint,
            connection_verify=platform.emulator.ca_file,
            allowed_checkpoint_types=["maf_agent:Question"],
        )
        opened.append(made)
        return made

    yield storage
    for made in opened:
        made.close()


async def test_users_share_a_conversation_id_and_answer_after_a_crash(
    platform: Platform, as_user: Any
) -> None:
    host = platform.start(APP)
    asked = everyone(host, {user: {"input": claim} for user, claim in CLAIMS.items()})
    pending = {user: question(asked[user]) for user in CLAIMS}
    for user, claim in CLAIMS.items():
        assert pending[user][1] == f"Approve {claim} (claim 1)?"

    host.kill()  # a crash while every question is pending
    host = platform.start(APP)

    # Carol cannot answer Bob's question: his call id is not pending in her workflow.
    refused = respond(host, "carol", answer(pending["bob"][0], "yes"))
    assert refused["status"] == "failed"
    replies = {user: "no" if user == "bob" else "yes" for user in CLAIMS}
    done = everyone(host, {user: answer(pending[user][0], replies[user]) for user in CLAIMS})
    for user, claim in CLAIMS.items():
        assert text(done[user]) == f"notified: Approve {claim} (claim 1)? -> {replies[user]}"

    # The conversation goes on from the store: the workflow state counted Alice's first claim.
    again = respond(host, "alice", {"input": "train 20 EUR"})
    assert question(again)[1] == "Approve train 20 EUR (claim 2)?"
    # A user new to the conversation id starts from nothing.
    fresh = respond(host, "dave", {"input": "parking 5 EUR"})
    assert question(fresh)[1] == "Approve parking 5 EUR (claim 1)?"

    # The checkpoints are in the provider's stores, in each user's own partition.
    alice_lineage = asked["alice"]["id"]
    mine = await as_user("alice", "alice", alice_lineage).list_checkpoint_ids(
        workflow_name=WORKFLOW
    )
    assert mine
    theirs = await as_user("bob", "alice", alice_lineage).list_checkpoint_ids(
        workflow_name=WORKFLOW
    )
    assert theirs == []


def test_a_pause_answered_after_a_restart_through_previous_response_id(
    platform: Platform,
) -> None:
    def post(host: Host, user: str, body: dict[str, Any]) -> dict[str, Any]:
        response = host.post(user, "/responses", {"store": True, **body})
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    host = platform.start(APP)
    first = post(host, "alice", {"input": "flight 300 EUR"})
    call_id, asked = question(first)
    assert asked == "Approve flight 300 EUR (claim 1)?"
    host.kill()
    host = platform.start(APP)

    # Bob cannot continue Alice's response: it is not in his scope.
    stolen = host.post(
        "bob",
        "/responses",
        {"store": True, "previous_response_id": first["id"], **answer(call_id, "yes")},
    )
    assert stolen.status_code == 200
    assert stolen.json()["status"] == "failed" and stolen.json()["output"] == []
    done = post(host, "alice", {"previous_response_id": first["id"], **answer(call_id, "yes")})
    assert text(done) == "notified: Approve flight 300 EUR (claim 1)? -> yes"
    host.kill()
    host = platform.start(APP)
    nxt = post(host, "alice", {"previous_response_id": done["id"], "input": "hotel 90 EUR"})
    assert question(nxt)[1] == "Approve hotel 90 EUR (claim 2)?"
