"""kill -9 a MAF workflow at 5 seeded moments, resume it from ``get_latest`` in a new process.

The workflow is a chain of 10 executors (10 supersteps, a checkpoint before the first and after
each) on the embedded local store. A worker process runs it and is killed inside a handler,
before or after a checkpoint save, or from outside a random offset after a chosen handler
started. New processes resume from ``get_latest`` until a run finishes. Then the final
checkpoint holds the same state as an uninterrupted run's, the run that finished from a
non-final checkpoint yielded the same output, and no superstep that a saved checkpoint already
covered ran again.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import pytest
from agent_framework import InMemoryCheckpointStorage, WorkflowCheckpoint

from foundry_checkpoint_maf import FoundryCheckpointStorage

from ._harness import ExternalKill, run_worker, worker_error
from ._worker import MAF_STAGES, MAF_WORKFLOW, build_workflow, maf_initial, read_side_log, run_maf

SEED = 4242
NODE_DELAY = 0.01
MAX_ATTEMPTS = 4
_MIX = ("handler", "save-before", "save-after", "external", "external")
_KILLED = -signal.SIGKILL
_STATE_KEYS = ("acc", "result")


@dataclass(frozen=True)
class Reference:
    """An uninterrupted run: its output and the user state of its last checkpoint."""

    outputs: list[Any]
    state: dict[str, Any]


def _user_state(checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
    return {k: checkpoint.state[k] for k in _STATE_KEYS if k in checkpoint.state}


def _tokens(checkpoint: WorkflowCheckpoint) -> set[str]:
    """The supersteps (``"stage<i>"``) a checkpoint's accumulated list says were completed."""
    acc = checkpoint.state.get("acc", [])
    return {entry.split(":")[0] for entry in acc if entry.startswith("stage")}


async def _reference() -> Reference:
    storage = InMemoryCheckpointStorage()
    result = await build_workflow(storage).run(maf_initial())
    latest = await storage.get_latest(workflow_name=MAF_WORKFLOW)
    assert latest is not None
    return Reference(list(result.get_outputs()), _user_state(latest))


def _plan(seed: int) -> list[dict[str, Any]]:
    """Five kills of a seeded mix of kinds, stratified over the run."""
    rng = random.Random(seed)
    kinds = list(_MIX)
    rng.shuffle(kinds)
    plans: list[dict[str, Any]] = []
    for i, kind in enumerate(kinds):
        where = (i + rng.random()) / len(kinds)
        if kind in ("save-before", "save-after"):
            plans.append({"kind": kind, "step": int(where * (MAF_STAGES + 1))})
        else:
            token = f"stage{int(where * MAF_STAGES)}"
            offset = rng.uniform(0.0, 2.5 * NODE_DELAY)
            plans.append({"kind": kind, "token": token, "offset": offset})
    return plans


@pytest.fixture
def local_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh embedded store for this process and the workers."""
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    yield tmp_path


def _scenario(
    ctx: ForkServerContext, root: Path, plan: dict[str, Any], reference: Reference
) -> list[str]:
    """Run one kill scenario; the broken promises, as readable lines."""
    context = f"maf-{uuid.uuid4().hex[:10]}"
    workdir = root / context
    workdir.mkdir()
    side_log = str(workdir / "side.log")
    where = f"{context} ({plan})"
    problems: list[str] = []
    checker = FoundryCheckpointStorage(context)
    captured: list[tuple[int, set[str]]] = []
    finished_from_final = False
    outputs: list[Any] = []
    try:
        for number in range(1, MAX_ATTEMPTS + 1):
            first = number == 1
            kill = {k: v for k, v in plan.items() if k != "offset"} if first else None
            external = None
            if first and plan["kind"] == "external":
                kill, external = None, ExternalKill(plan["token"], plan["offset"])
            out_file = workdir / f"out-{number}.json"
            job: dict[str, Any] = {
                "state_root": str(root / "state"),
                "context": context,
                "side_log": side_log,
                "attempt": number,
                "kill": kill,
                "node_delay": NODE_DELAY,
                "out_file": str(out_file),
                "error_file": str(workdir / f"error-{number}.txt"),
            }
            latest_before = asyncio.run(checker.get_latest(workflow_name=MAF_WORKFLOW))
            code = run_worker(ctx, run_maf, job, external=external)
            if code == 0:
                outputs = json.loads(out_file.read_text())
                finished_from_final = (
                    latest_before is not None and _tokens(latest_before) == _all_tokens()
                )
                break
            assert code == _KILLED, f"{where} attempt {number} exited {code}:\n{worker_error(job)}"
            history = asyncio.run(checker.list_checkpoints(workflow_name=MAF_WORKFLOW))
            captured.append((number, set().union(*(_tokens(cp) for cp in history))))
        else:
            problems.append(f"{where}: not finished after {MAX_ATTEMPTS} attempts")
        latest = asyncio.run(checker.get_latest(workflow_name=MAF_WORKFLOW))
    finally:
        checker.close()
    if plan["kind"] != "external" and (not captured or captured[0][0] != 1):
        problems.append(f"{where}: the kill switch never fired")
    if latest is None or _user_state(latest) != reference.state:
        got = None if latest is None else _user_state(latest)
        problems.append(f"{where}: final state {got} != uninterrupted {reference.state}")
    if not finished_from_final and outputs != reference.outputs:
        problems.append(f"{where}: outputs {outputs} != uninterrupted {reference.outputs}")
    records = read_side_log(side_log)
    for number, tokens in captured:
        again = sorted(tokens & {t for n, t in records if n > number})
        if again:
            problems.append(f"{where}: {again} ran again although a checkpoint had saved them")
    if plan["kind"] == "handler" and captured:
        later = {t for n, t in records if n > 1}
        if plan["token"] in captured[0][1] or plan["token"] not in later:
            problems.append(f"{where}: {plan['token']}, killed inside, was not run again")
    if plan["kind"] == "save-after" and captured:
        held = {f"stage{i}" for i in range(plan["step"])}
        if not held <= captured[0][1]:
            problems.append(f"{where}: checkpoint {plan['step']} lost {held - captured[0][1]}")
    return problems


def _all_tokens() -> set[str]:
    return {f"stage{i}" for i in range(MAF_STAGES)}


def test_kill_9_and_resume_from_get_latest(local_root: Path, worker_ctx: ForkServerContext) -> None:
    reference = asyncio.run(_reference())
    assert len(reference.outputs) == 1 and len(reference.outputs[0]) == MAF_STAGES + 1
    plans = _plan(SEED)
    problems = [p for plan in plans for p in _scenario(worker_ctx, local_root, plan, reference)]
    assert not problems, "\n".join(problems)
