"""A save into a context already open skips the core's loop where the store allows it.

The embedded store takes a write from any event loop (``WritesSoon``): the second and later
saves of a context hand their write to the engine's thread from the caller's loop, without the
two hops to the core's private loop and back (what kept a local superstep above
``FileCheckpointStorage``). Hosted clients belong to the core's loop: every hosted save goes
there. Either way a save whose caller is cancelled once it started is still committed, and
the exit of the interpreter waits for it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint

from foundry_checkpoint._loop import LoopThread
from foundry_checkpoint_maf import FoundryCheckpointStorage

from .conftest import MakeStorage

ROOT = Path(__file__).resolve().parents[2]


def _checkpoint(n: int) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf", graph_signature_hash="h", checkpoint_id=f"cp-{n}", state={"n": n}
    )


class _LoopCalls:
    """Counts the coroutines handed to any core's private loop."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        arun = LoopThread.arun

        async def counted(loop: LoopThread, coro: Any, *, shield: bool = False) -> Any:
            self.count += 1
            return await arun(loop, coro, shield=shield)

        monkeypatch.setattr(LoopThread, "arun", counted)


async def test_saves_into_an_open_context_skip_the_core_loop_only_where_the_store_allows(
    storage: FoundryCheckpointStorage, store_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _LoopCalls(monkeypatch)
    await storage.save(_checkpoint(0))  # opens the context's store and registers it
    assert calls.count == 1
    for n in range(1, 6):
        await storage.save(_checkpoint(n))
    expected = 1 if store_env.mode == "local" else 6
    assert calls.count == expected
    loaded = await storage.load("cp-5")
    assert loaded.state == {"n": 5}
    ids = await storage.list_checkpoint_ids(workflow_name="wf")
    assert sorted(ids) == [f"cp-{n}" for n in range(6)]


async def test_a_save_whose_caller_is_cancelled_once_started_is_committed(
    make_storage: MakeStorage,
) -> None:
    storage = make_storage()
    await storage.save(_checkpoint(0))
    saving = asyncio.ensure_future(storage.save(_checkpoint(1)))
    await asyncio.sleep(0)  # the save has started: its write is handed over
    saving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await saving
    await storage.aclose()  # waits for the write in flight
    assert (await make_storage().load("cp-1")).state == {"n": 1}


async def test_an_open_context_of_another_user_is_not_this_users(
    make_storage: MakeStorage,
) -> None:
    alice, bob = make_storage(user="alice"), make_storage(user="bob")
    await alice.save(_checkpoint(0))
    await bob.save(_checkpoint(10))
    await alice.save(_checkpoint(1))
    await bob.save(_checkpoint(11))
    assert sorted(await alice.list_checkpoint_ids(workflow_name="wf")) == ["cp-0", "cp-1"]
    assert sorted(await bob.list_checkpoint_ids(workflow_name="wf")) == ["cp-10", "cp-11"]


_EXIT = textwrap.dedent(
    """
    import asyncio, sys, threading
    from agent_framework import WorkflowCheckpoint
    from foundry_checkpoint._store._embedded import default_engine
    from foundry_checkpoint_maf import FoundryCheckpointStorage

    def checkpoint(n):
        return WorkflowCheckpoint(
            workflow_name="wf", graph_signature_hash="h", checkpoint_id=f"cp-{n}")

    async def main():
        storage = FoundryCheckpointStorage(context_id="c")  # never closed
        await storage.save(checkpoint(0))
        release = threading.Event()
        busy = default_engine().worker.submit(lambda: release.wait(2))  # holds the thread
        saving = asyncio.ensure_future(storage.save(checkpoint(1)))
        await asyncio.sleep(0)  # started: the write waits behind the busy call
        saving.cancel()         # what asyncio.run does to a host's tasks when it stops
        try:
            await saving
        except asyncio.CancelledError:
            print("cancelled")
        busy.cancel()

    asyncio.run(main())
    """
)

_READ = textwrap.dedent(
    """
    import asyncio
    from foundry_checkpoint_maf import FoundryCheckpointStorage

    async def main():
        async with FoundryCheckpointStorage(context_id="c") as storage:
            print(sorted(await storage.list_checkpoint_ids(workflow_name="wf")))

    asyncio.run(main())
    """
)


@pytest.mark.multiprocess
def test_the_exit_of_the_interpreter_commits_a_save_whose_caller_went_away(
    tmp_path: Path,
) -> None:
    env = {"AGENTSERVER_STATE_ROOT": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}

    def run(code: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert run(_EXIT).split() == ["cancelled"]
    assert run(_READ).strip() == "['cp-0', 'cp-1']"
