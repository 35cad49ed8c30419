"""A host with ``resilient_background=True`` runs on ``agent_environment()`` with nothing else.

agent-framework-foundry-hosting's ``ResponsesHostServer`` with ``resilient_background=True``
keeps each background request as a task in the platform's task API and its responses in
Foundry's response store. The test host (``tests/hosts/apps/resilient_maf_agent.py``) sets no
``AGENTSERVER_TASKS_BACKEND`` and no response store: against the emulator a background request
runs to completion, its task is created and removed through the emulator's task API, and the
client reads the completed response back.
"""

from __future__ import annotations

import time
from pathlib import Path

from .conftest import Platform

APPS = Path(__file__).resolve().parent / "apps"


def test_a_background_request_completes_with_the_platforms_defaults(platform: Platform) -> None:
    assert "AGENTSERVER_TASKS_BACKEND" not in platform.env
    host = platform.start("resilient_maf_agent:app", apps=APPS)
    accepted = host.post(
        "alice", "/responses", {"input": "file the claim", "background": True, "store": True}
    )
    assert accepted.status_code == 200, accepted.text
    response_id = accepted.json()["id"]
    assert accepted.json()["status"] in ("queued", "in_progress", "completed")

    deadline = time.monotonic() + 60
    while True:
        got = host.get("alice", f"/responses/{response_id}")
        assert got.status_code == 200, (got.text, host.log_text()[-4000:])
        if got.json()["status"] not in ("queued", "in_progress"):
            break
        assert time.monotonic() < deadline, host.log_text()[-4000:]
        time.sleep(0.2)
    final = got.json()
    assert final["status"] == "completed", (final, host.log_text()[-4000:])
    texts = [
        p["text"] for item in final["output"] if item["type"] == "message" for p in item["content"]
    ]
    assert texts == ["done: FILE THE CLAIM"]

    calls = platform.settled_requests(delete_task=1)
    # the task was created with its lease and removed once the request completed
    assert calls["create_task"] == 1 and calls["delete_task"] == 1, calls
    assert calls["create_response"] >= 1 and calls["get_response"] + calls["update_response"] >= 1
    assert "status=404" not in host.log_text(), host.log_text()[-4000:]
    # the other user does not see alice's response
    assert host.get("bob", f"/responses/{response_id}").status_code == 404
