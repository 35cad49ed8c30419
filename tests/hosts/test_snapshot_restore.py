"""What a long-lived checkpointer does when a restore rewrites its environment (docs/hosted.md).

azure-ai-agentserver-core 2.3's ``/_agent/after-restore`` rewrites environment variables in the
running process. A store client opened before keeps its endpoint; ``close()`` (the recommended
``before_snapshot_handler``) drops the clients, and the same object reopens them on the next call
from the environment of that moment.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint.emulator import FoundryEmulator


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
