"""The samples' graph as the recovery tests run it: slow steps, a journal, a report that spills.

``samples/hosted_agents/langgraph_pipeline.py``'s steps, each wrapped so that a test can kill the
process at a chosen point and tell afterwards which steps ran again. Set in the environment:

- ``RECOVERY_JOURNAL``: a file every step run appends to, ``<pid> begin <step> <turn>`` when it
  starts and ``<pid> end <step> <turn>`` once its work (its side effect) is done, just before it
  returns its update; and :class:`JournaledCheckpointer` adds ``<pid> saved <step> <turn>`` once
  the step's writes are stored, before the checkpoint that follows them (one ``write`` of an
  ``O_APPEND`` file each: a killed process loses none);
- ``RECOVERY_STEP_SECONDS``: how long each step works before its side effect (default 0.3);
- ``RECOVERY_REPORT_BYTES``: when set, ``research`` also sets ``report``, that many pseudo-random
  bytes (base64; the same for the same turn) so that its value passes the store's item limit and
  spills (default 0: no report).
"""

from __future__ import annotations

import base64
import os
import random
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from foundry_checkpoint import FoundryCheckpointer
from samples.hosted_agents.langgraph_pipeline import STEPS, State, Step, build

STEP_SECONDS = float(os.environ.get("RECOVERY_STEP_SECONDS", "0.3"))
REPORT_BYTES = int(os.environ.get("RECOVERY_REPORT_BYTES", "0"))


class ReportState(State, total=False):
    """The samples' state and a large ``report`` that ``research`` writes."""

    report: str


def report(turn: int, size: int) -> str:
    """The report of ``turn``: ``size`` pseudo-random bytes, base64 (incompressible enough)."""
    return base64.b64encode(random.Random(turn).randbytes(size)).decode()


def _note(line: str) -> None:
    journal = os.environ.get("RECOVERY_JOURNAL")
    if not journal:
        return
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{os.getpid()} {line}\n".encode())
    finally:
        os.close(fd)


def journaled(name: str, step: Step) -> Step:
    """``step``, slowed down and journaled (see the module docstring)."""

    def run(state: dict[str, Any]) -> dict[str, Any]:
        turn = sum(isinstance(m, HumanMessage) for m in state["messages"])
        _note(f"begin {name} {turn}")
        time.sleep(STEP_SECONDS)
        update = step(state)
        if name == "research" and REPORT_BYTES:
            update["report"] = report(turn, REPORT_BYTES)
        _note(f"end {name} {turn}")
        return update

    return run


class JournaledCheckpointer(FoundryCheckpointer):
    """``FoundryCheckpointer``, journaling ``saved <step> <turn>`` once a step's writes are stored.

    The step is the one whose message (id ``<step>-<turn>``) the writes carry.
    """

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await super().aput_writes(config, writes, task_id, task_path)
        steps = {name for name, _ in STEPS}
        for channel, value in writes:
            for message in value if channel == "messages" and isinstance(value, list) else []:
                step, _, turn = str(getattr(message, "id", "")).rpartition("-")
                if step in steps:
                    _note(f"saved {step} {turn}")


def graph(checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The samples' graph on ``checkpointer``, every step journaled."""
    return build(checkpointer, wrap=journaled, schema=ReportState)
