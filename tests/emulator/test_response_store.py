"""The response store of the Responses hosts on the emulator, driven by the SDK's own client.

azure-ai-agentserver-responses' ``FoundryStorageProvider`` (the default store of a Responses
host in hosted mode) runs in a process with ``agent_environment()``, as in a hosted agent, and
makes the calls a host makes per turn: create, duplicate create, update, get, the history ids of
the previous response and of the conversation, paged input items, batch item retrieval and
delete. Two callers (call ids bound to two users) see only their own responses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint.emulator import FoundryEmulator

pytestmark = [pytest.mark.emulator, pytest.mark.multiprocess]

CLIENT = Path(__file__).resolve().parent / "_response_store_client.py"


@pytest.fixture(scope="module")
def run() -> tuple[dict[str, Any], FoundryEmulator]:
    with FoundryEmulator() as emu:
        env = {**os.environ, **emu.agent_environment(session_id="s-store")}
        env.pop("AGENTSERVER_TASKS_BACKEND", None)
        done = subprocess.run(
            [sys.executable, str(CLIENT), emu.mint_call("store-alice"), emu.mint_call("store-bob")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout.strip().splitlines()[-1]), emu


def test_create_update_get_and_duplicate(run: tuple[dict[str, Any], FoundryEmulator]) -> None:
    report, emu = run
    assert report["duplicate"] == "already_exists"
    assert report["get"]["status"] == "completed"
    assert [item["id"] for item in report["get"]["output"]] == ["msg_a1"]
    calls = emu.platform_requests
    assert calls["create_response"] == 3 and calls["update_response"] == 1
    assert sum(emu.requests.values()) == 0  # none of it is a state-store call


def test_history_ids_follow_the_chain_and_the_conversation(
    run: tuple[dict[str, Any], FoundryEmulator],
) -> None:
    report, _ = run
    assert report["history_previous"] == ["msg_u1", "msg_a1"]
    assert report["history_conversation"] == ["msg_u1", "msg_a1", "msg_u2", "msg_a2"]
    assert report["history_last_two"] == ["msg_u2", "msg_a2"]


def test_input_items_page_and_batch_retrieve(run: tuple[dict[str, Any], FoundryEmulator]) -> None:
    report, _ = run
    assert report["input_pages"] == [["msg_u1", "msg_a1"], ["msg_u2"]]
    assert report["input_desc"] == ["msg_u2", "msg_a1", "msg_u1"]
    assert report["batch"] == ["msg_a1", None, "msg_u1"]


def test_another_caller_sees_nothing_and_delete_is_final(
    run: tuple[dict[str, Any], FoundryEmulator],
) -> None:
    report, _ = run
    assert report["bob_get"] == "not_found"
    assert report["bob_batch"] == [None]
    assert report["bob_history"] == []
    assert (report["after_delete"], report["delete_again"]) == ("not_found", "not_found")
