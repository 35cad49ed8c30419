"""What a long-lived checkpointer does when a restore rewrites its environment (docs/hosted.md).

azure-ai-agentserver-core 2.3's ``/_agent/after-restore`` rewrites environment variables in the
running process. A store client opened before keeps its endpoint; ``close()`` (the recommended
``before_snapshot_handler``) drops the clients, and the same object reopens them on the next call
from the environment of that moment. The first test shows this on the checkpointer alone; the
second drives the real lifecycle routes of the sample host (core 2.3 and later: ``make test-pre``).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint.emulator import FoundryEmulator

from .conftest import Platform

_CORE = tuple(int(part) for part in version("azure-ai-agentserver-core").split(".")[:2])


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


def config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


@pytest.fixture
def restored() -> Iterator[FoundryEmulator]:
    """The emulator the environment points at after the restore."""
    with FoundryEmulator(seed=5) as other:
        yield other


def test_close_makes_the_checkpointer_read_the_endpoint_again(
    emulator: FoundryEmulator,
    restored: FoundryEmulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trusted = tmp_path / "both-cas.pem"
    trusted.write_text(Path(emulator.ca_file).read_text() + Path(restored.ca_file).read_text())
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    monkeypatch.setenv("FOUNDRY_PROJECT_ENDPOINT", emulator.endpoint)
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    builder = StateGraph(State)
    builder.add_node("step", lambda state: {"steps": ["done"]})
    builder.add_edge(START, "step")
    saver = FoundryCheckpointer(
        store_prefix="restore",
        credential=emulator.credential(user="alice"),
        connection_verify=str(trusted),
    )
    graph: Any = builder.compile(checkpointer=saver)
    try:
        graph.invoke({"steps": []}, config("before"))
        monkeypatch.setenv("FOUNDRY_PROJECT_ENDPOINT", restored.endpoint)  # what a restore does

        graph.invoke({"steps": []}, config("before"))  # an open client keeps its endpoint
        assert graph.get_state(config("before")).values["steps"] == ["done", "done"]
        assert sum(restored.requests.values()) == 0

        saver.close()  # the before-snapshot handler
        graph.invoke({"steps": []}, config("after"))  # reopened: the new endpoint
        assert restored.requests["put_item"] > 0
        assert graph.get_state(config("after")).values["steps"] == ["done"]
        assert graph.get_state(config("before")).values == {}  # that thread is on the old one
    finally:
        saver.close()


@pytest.mark.skipif(_CORE < (2, 3), reason="snapshot hooks arrive in azure-ai-agentserver-core 2.3")
def test_the_sample_host_follows_a_restore_to_a_new_endpoint(
    platform: Platform, restored: FoundryEmulator, tmp_path: Path
) -> None:
    trusted = tmp_path / "both-cas.pem"
    trusted.write_text(
        Path(platform.emulator.ca_file).read_text() + Path(restored.ca_file).read_text()
    )
    platform.env["SSL_CERT_FILE"] = str(trusted)
    platform.other_emulators.append(restored)
    host = platform.start("langgraph_agent:app")

    def say(thread_id: str, message: str) -> list[str]:
        response = host.post("alice", "/invocations", {"thread_id": thread_id, "message": message})
        assert response.status_code == 200, response.text
        messages: list[str] = response.json()["messages"]
        return messages

    assert len(say("t1", "before the snapshot")) == 2
    assert host.lifecycle("/_agent/before-snapshot", {}).status_code == 200
    session = platform.env["FOUNDRY_AGENT_SESSION_ID"]
    context = {
        "session_id": session,
        "restore_id": "restore-1",
        "session_env_overrides": {"FOUNDRY_PROJECT_ENDPOINT": restored.endpoint},
    }
    answer = host.lifecycle("/_agent/after-restore", {"session_context": context})
    assert answer.status_code == 200, answer.text

    assert sum(restored.requests.values()) == 0
    # The thread's client was closed before the snapshot: it reopens on the new endpoint.
    assert say("t1", "after the restore") == [
        "user: after the restore",
        "agent: turn 1: noted 'after the restore'",
    ]
    assert restored.requests["put_item"] > 0
