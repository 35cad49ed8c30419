"""The child processes of the prune/put race: a writer and a pruner on one thread.

``python -m tests.reliability._race put|prune STATE_ROOT THREAD SECONDS REPORT`` runs one side
until ``SECONDS`` have passed and writes ``{"rounds": n}`` (or ``{"error": traceback}``) to
``REPORT``. The writer puts checkpoints whose ``big`` channel (over the 256 KiB spill threshold)
takes one of a few values in turn, or is carried unchanged: every put stores (or refreshes) a
blob first and its item second, the window a concurrent prune must not break; the writer's
spill store widens that window a little, as a slow link to the store would.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from foundry_checkpoint import FoundryCheckpointer, LocalSpill

VALUE_SIZE = 260 * 1024
POOL = 6
LAG = 0.05


class LaggingSpill(LocalSpill):
    """The default local spill directory, with up to :data:`LAG` seconds between a blob being
    stored and the put going on to write its item (as a slow link to the store would)."""

    async def put(self, namespace: str, data: bytes) -> str:
        digest = await super().put(namespace, data)
        await asyncio.sleep(random.uniform(0, LAG))
        return digest


def _values() -> list[bytes]:
    return [random.Random(seed).randbytes(VALUE_SIZE) for seed in range(POOL)]


def put_loop(saver: FoundryCheckpointer, thread: str, deadline: float) -> int:
    """Put a chain of checkpoints until ``deadline``; returns how many."""
    values = _values()
    parent: str | None = None
    version = 0
    rounds = 0
    while time.monotonic() < deadline:
        cp = empty_checkpoint()
        new: dict[str, Any] = {"n": rounds + 1}
        if rounds % 3 != 2:  # two puts in three store a value, the third carries it
            version += 1
            new["big"] = version
        cp["channel_versions"] = {"n": rounds + 1, "big": version}
        cp["channel_values"] = {"n": rounds, "big": values[version % POOL]}
        conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
        if parent:
            conf["checkpoint_id"] = parent
        saver.put({"configurable": conf}, cp, {"source": "loop", "step": rounds}, new)
        parent = cp["id"]
        rounds += 1
    return rounds


def prune_loop(saver: FoundryCheckpointer, thread: str, deadline: float) -> int:
    """Prune the thread to its newest checkpoint until ``deadline``; returns how many times."""
    rounds = 0
    while time.monotonic() < deadline:
        saver.prune([thread])
        rounds += 1
    return rounds


def main(argv: list[str]) -> None:
    role, root, thread, seconds, report = argv
    os.environ["AGENTSERVER_STATE_ROOT"] = root
    os.environ["AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING"] = "true"
    os.environ.pop("FOUNDRY_HOSTING_ENVIRONMENT", None)
    deadline = time.monotonic() + float(seconds)
    try:
        spill = LaggingSpill(Path(root) / "foundry_checkpoint" / "spill") if role == "put" else None
        with FoundryCheckpointer(spill=spill) as saver:
            loop = put_loop if role == "put" else prune_loop
            result: dict[str, Any] = {"rounds": loop(saver, thread, deadline)}
    except BaseException:
        result = {"error": traceback.format_exc()}
    Path(report).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
