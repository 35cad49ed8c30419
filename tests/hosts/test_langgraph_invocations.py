"""A LangGraph graph behind azure-ai-agentserver-invocations, one FoundryCheckpointer, many users.

The sample app ``samples/hosted_agents/langgraph_agent.py`` runs in real host processes against
the emulator; every request carries the platform's headers for its user. Users share thread ids,
a server is killed mid-conversation and a new process carries on from the store, and a pending
``interrupt()`` is answered after the restart.
"""

from __future__ import annotations

import hashlib
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from azure.storage.blob import BlobServiceClient

from .conftest import Host, Platform

APP = "langgraph_agent:app"
THREAD = "main"  # every user's conversation has the same thread id
USERS = ["alice", "bob", *(f"user{n:02}" for n in range(18))]  # 20 users, served at once


def talk(host: Host, user: str, body: dict[str, Any]) -> dict[str, Any]:
    response = host.post(user, "/invocations", {"thread_id": THREAD, **body})
    assert response.status_code == 200, (user, body, response.text)
    answer: dict[str, Any] = response.json()
    return answer


def everyone(host: Host, users: list[str], body: Any) -> dict[str, dict[str, Any]]:
    """One request per user, all at once; ``body(user)`` gives each user's body."""
    with ThreadPoolExecutor(len(users)) as pool:
        answers = pool.map(lambda user: talk(host, user, body(user)), users)
        return dict(zip(users, answers, strict=True))


def turn(n: int, said: str) -> list[str]:
    return [f"user: {said}", f"agent: turn {n}: noted {said!r}"]


def test_users_share_a_thread_id_across_a_crash_and_an_interrupt(platform: Platform) -> None:
    host = platform.start(APP)
    assert host.post("alice", "/invocations", {"message": "no thread id"}).status_code == 400
    first = everyone(host, USERS, lambda user: {"message": f"hello from {user}"})
    for user in USERS:
        assert first[user] == {
            "thread_id": THREAD,
            "messages": turn(1, f"hello from {user}"),
            "pending": [],
        }

    question = "Approve the refund in 'refund order 17'?"
    paused = talk(host, "alice", {"message": "refund order 17"})
    assert paused["pending"] == [question]
    assert talk(host, "bob", {"message": "where is my parcel?"})["pending"] == []

    host.kill()  # a crash mid-conversation: alice's question is pending
    host = platform.start(APP)

    assert talk(host, "alice", {"action": "state"})["pending"] == [question]
    refused = host.post("alice", "/invocations", {"thread_id": THREAD, "message": "hello?"})
    assert refused.status_code == 409  # the pending question is not replaced
    done = talk(host, "alice", {"resume": "yes"})
    assert done["pending"] == []
    assert done["messages"] == [
        *turn(1, "hello from alice"),
        *turn(2, "refund order 17"),
        "agent: refund approved",
    ]

    later = everyone(host, USERS[1:], lambda user: {"message": f"{user} again"})
    assert later["bob"]["messages"] == [
        *turn(1, "hello from bob"),
        *turn(2, "where is my parcel?"),
        *turn(3, "bob again"),
    ]
    for user in USERS[2:]:
        assert later[user]["messages"] == [
            *turn(1, f"hello from {user}"),
            *turn(2, f"{user} again"),
        ]
    # A user who never wrote to "main" finds nothing there, although twenty others did.
    assert talk(host, "grace", {"action": "state"}) == {
        "thread_id": THREAD,
        "messages": [],
        "pending": [],
    }


def test_interrupt_survives_two_restarts_and_one_users_delete_spares_the_others(
    platform: Platform,
) -> None:
    host = platform.start(APP)
    everyone(host, ["alice", "bob"], lambda user: {"message": f"refund for {user}"})
    host.stop()  # graceful: the host's shutdown handler closes the checkpointer
    host = platform.start(APP)
    host.kill()
    host = platform.start(APP)

    answers = everyone(
        host, ["alice", "bob"], lambda user: {"resume": "yes" if user == "alice" else "no"}
    )
    assert answers["alice"]["messages"][-1] == "agent: refund approved"
    assert answers["bob"]["messages"][-1] == "agent: refund declined"

    emptied = talk(host, "alice", {"action": "delete"})
    assert emptied["messages"] == [] and emptied["pending"] == []
    kept = talk(host, "bob", {"action": "state"})
    assert kept["messages"] == [*turn(1, "refund for bob"), "agent: refund declined"]
    assert talk(host, "bob", {"message": "thanks"})["messages"][-2:] == turn(2, "thanks")
    assert talk(host, "alice", {"message": "hello"})["messages"] == turn(1, "hello")


def test_spilled_values_of_users_sharing_a_thread_id(platform: Platform, azurite: Any) -> None:
    """Values over the inline limit go to one blob container shared by every user."""
    container = f"hosts-{uuid.uuid4().hex[:12]}"
    platform.env["FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING"] = azurite.connection_string
    platform.env["FOUNDRY_CHECKPOINT_BLOB_CONTAINER"] = container
    big = {user: hashlib.sha256(user.encode()).hexdigest() * 10_000 for user in ("alice", "bob")}
    host = platform.start(APP)
    said = everyone(host, ["alice", "bob"], lambda user: {"message": big[user]})
    for user in ("alice", "bob"):
        assert said[user]["messages"] == turn(1, big[user])
    with BlobServiceClient.from_connection_string(azurite.connection_string) as service:
        blobs = list(service.get_container_client(container).list_blobs())
    assert len(blobs) >= 2  # spilled, in the one shared container

    assert talk(host, "alice", {"action": "delete"})["messages"] == []
    host.kill()
    host = platform.start(APP)
    kept = talk(host, "bob", {"action": "state"})
    assert kept["messages"] == turn(1, big["bob"])  # read back through the spill store, intact
    assert talk(host, "bob", {"message": "still there?"})["messages"][-2:] == turn(
        2, "still there?"
    )
    assert talk(host, "alice", {"action": "state"})["messages"] == []
