"""The resilient host samples run unchanged on ``agent_environment()`` against the emulator.

``samples/hosted_agents/maf_resilient_workflow.py`` (agent-framework-foundry-hosting's
``ResponsesHostServer(resilient_background=True)``) and
``samples/hosted_agents/langgraph_multi_turn_task.py`` (a ``@multi_turn_task`` handler on
azure-ai-agentserver-invocations) are started as a Foundry-hosted agent's process would be, with
nothing else set: no ``AGENTSERVER_TASKS_BACKEND``, no response store. Their tasks go through
the emulator's task API, their responses through its response store, their checkpoints into
each user's partition of its state store.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from .conftest import Host, Platform

pytestmark = [pytest.mark.multiprocess]


def nothing_configured(platform: Platform) -> None:
    assert "AGENTSERVER_TASKS_BACKEND" not in platform.env
    assert platform.env["FOUNDRY_HOSTING_ENVIRONMENT"] == "emulator"


def clean_log(host: Host) -> None:
    log = host.log_text()
    assert "status=404" not in log and "Traceback" not in log, log[-4000:]


def test_the_resilient_maf_workflow_sample(platform: Platform) -> None:
    nothing_configured(platform)
    host = platform.start("maf_resilient_workflow:app")
    body = {"input": "taxi 38 EUR", "background": True, "store": True}
    accepted = host.post("alice", "/responses", body)
    assert accepted.status_code == 200, accepted.text
    response_id = accepted.json()["id"]
    deadline = time.monotonic() + 60
    while True:
        got = host.get("alice", f"/responses/{response_id}")
        assert got.status_code == 200, got.text
        if got.json()["status"] not in ("queued", "in_progress"):
            break
        assert time.monotonic() < deadline, host.log_text()[-4000:]
        time.sleep(0.1)
    final = got.json()
    assert final["status"] == "completed", final
    said = [p["text"] for i in final["output"] if i["type"] == "message" for p in i["content"]]
    assert said == ["filed: taxi 38 EUR -> 38"]
    calls = platform.settled_requests(delete_task=1)
    assert calls["create_task"] == 1 and calls["delete_task"] == 1, calls
    assert calls["create_response"] == 1, calls
    assert host.get("bob", f"/responses/{response_id}").status_code == 404
    clean_log(host)


def turn(host: Host, user: str, turn_id: str, message: str) -> dict[str, Any]:
    body = {"thread_id": "t1", "turn": turn_id, "message": message}
    answer = host.post(user, "/invocations", body)
    assert answer.status_code == 200, (answer.text, host.log_text()[-3000:])
    result: dict[str, Any] = answer.json()
    return result


def test_the_langgraph_multi_turn_task_sample(platform: Platform) -> None:
    nothing_configured(platform)
    host = platform.start("langgraph_multi_turn_task:app")
    first = turn(host, "alice", "turn-1", "solar panels")
    assert first["messages"] == [
        "user: solar panels",
        "plan: look up 'solar panels'",
        "gather: 2 keyword(s)",
        "summary 1: solar panels",
    ]
    second = turn(host, "alice", "turn-2", "heat pumps in winter")
    assert second["messages"][4:] == [
        "user: heat pumps in winter",
        "plan: look up 'heat pumps in winter'",
        "gather: 4 keyword(s)",
        "summary 2: heat pumps in winter",
    ]
    # Bob's thread of the same id is his own chain and his own checkpoints.
    assert turn(host, "bob", "turn-1", "wind")["messages"][-1] == "summary 1: wind"
    got = host.get("alice", "/invocations/turn-2?thread_id=t1")
    assert got.json() == {"status": "completed", "turn": "turn-2", "messages": second["messages"]}

    # A new process reads the chain and the thread back: the third turn is "resumed".
    host.stop()
    host = platform.start("langgraph_multi_turn_task:app")
    third = turn(host, "alice", "turn-3", "batteries")
    assert third["messages"][-1] == "summary 3: batteries"
    calls = platform.emulator.platform_requests
    assert calls["create_task"] == 2, calls  # one chain per user and thread
    assert calls["update_task"] >= 4, calls  # each turn resumes the suspended chain
    clean_log(host)
