"""Fixtures of the CLI tests: seeded threads and the global options for ``store_env``."""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typer.testing import CliRunner, Result

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint.cli import app


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


class _Step(Protocol):
    def __call__(self, state: State) -> dict[str, list[str]]: ...


def _step(name: str) -> _Step:
    def run(state: State) -> dict[str, list[str]]:
        return {"steps": [name]}

    return run


def _ask(state: State) -> dict[str, list[str]]:
    answer = interrupt("go on?")
    return {"steps": [f"answer:{answer}"]}


def build(checkpointer: Any, *, ask: bool = False) -> Any:
    """``a -> b [-> ask]``: a two-step graph, optionally ending in an interrupt."""
    builder = StateGraph(State)
    builder.add_node("a", _step("a"))
    builder.add_node("b", _step("b"))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    if ask:
        builder.add_node("ask", _ask)
        builder.add_edge("b", "ask")
        builder.add_edge("ask", END)
    else:
        builder.add_edge("b", END)
    return builder.compile(checkpointer=checkpointer)


def config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


@dataclass
class Cli:
    """Runs ``foundry-checkpoint`` in-process with the global options of ``store_env``."""

    env: Any
    runner: CliRunner

    def options(self, user: str = "alice") -> list[str]:
        if self.env.mode == "hosted":
            emu = self.env.emulator
            return [
                "--prefix", self.env.prefix,
                "--endpoint", emu.endpoint,
                "--ca-file", emu.ca_file,
                "--emulator-user", user,
            ]  # fmt: skip
        return [] if user == "alice" else ["--user-id", user]

    def __call__(self, *args: str, user: str = "alice", input: str | None = None) -> Result:
        return self.runner.invoke(app, [*self.options(user), *args], input=input)

    def json(self, *args: str, user: str = "alice") -> Any:
        result = self("--json", *args, user=user)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)

    def saver(self, user: str = "alice") -> FoundryCheckpointer:
        return FoundryCheckpointer(**self.env.kwargs(user=user))


@pytest.fixture
def cli(store_env: Any) -> Cli:
    return Cli(store_env, CliRunner())


@pytest.fixture
def seeded(cli: Cli) -> dict[str, list[str]]:
    """Threads ``t1`` (finished, run twice) and ``t2`` (interrupted); their ids newest first."""
    with cli.saver() as saver:
        graph = build(saver)
        graph.invoke({"steps": []}, config("t1"))
        graph.invoke({"steps": ["again"]}, config("t1"))
        build(saver, ask=True).invoke({"steps": []}, config("t2"))
        return {
            t: [c.config["configurable"]["checkpoint_id"] for c in saver.list(config(t))]
            for t in ("t1", "t2")
        }
