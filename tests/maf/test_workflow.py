"""End to end: real MAF workflows checkpoint every superstep and resume from a new storage."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpointException

from foundry_checkpoint_maf import FoundryCheckpointStorage

from . import _workflows as wf
from .conftest import MakeStorage

REPO = Path(__file__).resolve().parents[2]
_SUBPROCESS = "from tests.maf._workflows import main; main()"


async def test_checkpoints_every_superstep_and_resumes(make_storage: MakeStorage) -> None:
    storage = make_storage("conv-e2e")
    result = await wf.pipeline(storage).run("hello")
    assert result.get_outputs() == ["HELLO!"]

    # a new storage object (as after a restart) sees the whole chain
    reader = make_storage("conv-e2e")
    checkpoints = await reader.list_checkpoints(workflow_name=wf.PIPELINE)
    assert [cp.iteration_count for cp in checkpoints] == [0, 1, 2]
    assert checkpoints[0].previous_checkpoint_id is None
    for parent, child in itertools.pairwise(checkpoints):
        assert child.previous_checkpoint_id == parent.checkpoint_id
    latest = await reader.get_latest(workflow_name=wf.PIPELINE)
    assert latest is not None and latest.checkpoint_id == checkpoints[-1].checkpoint_id

    # resume after the first superstep: only the second executor runs again
    upper_calls, exclaim_calls = wf.Upper.calls, wf.Exclaim.calls
    resumed = await wf.pipeline(make_storage("conv-e2e")).run(
        checkpoint_id=checkpoints[1].checkpoint_id
    )
    assert resumed.get_outputs() == ["HELLO!"]
    assert (wf.Upper.calls, wf.Exclaim.calls) == (upper_calls, exclaim_calls + 1)
    after = await reader.list_checkpoints(workflow_name=wf.PIPELINE)
    assert len(after) > len(checkpoints)


async def test_resume_with_per_run_storage(make_storage: MakeStorage) -> None:
    storage = make_storage("conv-per-run")
    await wf.pipeline(storage).run("abc")
    first = (await storage.list_checkpoints(workflow_name=wf.PIPELINE))[1]
    resumed = await wf.pipeline(None).run(
        checkpoint_id=first.checkpoint_id, checkpoint_storage=make_storage("conv-per-run")
    )
    assert resumed.get_outputs() == ["ABC!"]


async def test_human_in_the_loop_resume(make_storage: MakeStorage) -> None:
    allowed = [wf.Question]
    storage = make_storage("conv-hitl", allowed_checkpoint_types=allowed)
    first = await wf.approval(storage).run("report")
    requests = first.get_request_info_events()
    assert len(requests) == 1 and isinstance(requests[0].data, wf.Question)
    assert first.get_outputs() == []

    # another process would only know the context: the latest checkpoint carries the request
    fresh = make_storage("conv-hitl", allowed_checkpoint_types=allowed)
    latest = await fresh.get_latest(workflow_name=wf.APPROVAL)
    assert latest is not None
    assert requests[0].request_id in latest.pending_request_info_events
    answered = await wf.approval(fresh).run(
        checkpoint_id=latest.checkpoint_id, responses={requests[0].request_id: "yes"}
    )
    assert answered.get_outputs() == ["send report? yes!"]


async def test_runner_swallows_but_storage_reports_refused_saves(
    make_storage: MakeStorage, caplog: pytest.LogCaptureFixture
) -> None:
    storage = make_storage("conv-refused")  # Question not allowed
    with caplog.at_level(logging.ERROR, logger="foundry_checkpoint_maf"):
        result = await wf.approval(storage).run("report")
    assert len(result.get_request_info_events()) == 1  # the run itself went on
    assert storage.save_failures >= 1
    assert any("Question" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    for cp_id in await storage.list_checkpoint_ids(workflow_name=wf.APPROVAL):
        # whatever was stored can be restored by this storage
        await storage.load(cp_id)
    latest = await storage.get_latest(workflow_name=wf.APPROVAL)
    assert latest is None or not latest.pending_request_info_events


async def test_checkpoint_saved_in_another_process(
    store_env: Any, make_storage: MakeStorage
) -> None:
    options: dict[str, Any] = {"context_id": "conv-xproc", "input": "from afar"}
    kwargs = store_env.kwargs()
    if store_env.mode == "hosted":
        options.update(
            store_prefix=kwargs["store_prefix"],
            endpoint=kwargs["endpoint"],
            connection_verify=kwargs["connection_verify"],
            credential_user="alice",
        )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _SUBPROCESS, json.dumps(options)],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["FROM AFAR!"]

    storage = make_storage("conv-xproc")
    checkpoints = await storage.list_checkpoints(workflow_name=wf.PIPELINE)
    assert [cp.iteration_count for cp in checkpoints] == [0, 1, 2]
    resumed = await wf.pipeline(storage).run(checkpoint_id=checkpoints[1].checkpoint_id)
    assert resumed.get_outputs() == ["FROM AFAR!"]
    assert (
        await make_storage("conv-xproc", user="bob").list_checkpoint_ids(workflow_name=wf.PIPELINE)
        == []
    )


async def test_resume_from_unknown_checkpoint_fails(make_storage: MakeStorage) -> None:
    with pytest.raises(WorkflowCheckpointException):
        await wf.pipeline(make_storage("conv-none")).run(checkpoint_id="no-such-checkpoint")


def test_storage_satisfies_the_protocol() -> None:
    """Every method of MAF's ``CheckpointStorage`` protocol, async, with its very parameters
    and annotations (the protocol is not runtime-checkable); ``mypy tests`` (``make lint``)
    checks the same statically through ``as_protocol``."""
    import inspect

    from agent_framework import CheckpointStorage

    def as_protocol(storage: FoundryCheckpointStorage) -> CheckpointStorage:
        return storage

    methods = {
        name: member
        for name, member in vars(CheckpointStorage).items()
        if not name.startswith("_") and inspect.isfunction(member)
    }
    assert {"save", "load", "list_checkpoints", "delete", "get_latest"} <= set(methods)
    for name, member in methods.items():
        ours = getattr(FoundryCheckpointStorage, name)
        assert inspect.iscoroutinefunction(ours), name
        assert inspect.signature(ours) == inspect.signature(member), name
