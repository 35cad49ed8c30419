"""SIGKILL a resilient MAF host mid-workflow, ten times per mode: the platform's runtime recovers.

agent-framework-foundry-hosting's ``ResponsesHostServer(resilient_background=True)`` runs each
background request as a task of azure-ai-agentserver-core's resilient runtime and the workflow
with ``FoundryCheckpointStorageProvider`` (``tests/hosts/apps/kill_maf_workflow.py``: four slow
steps, each one superstep, each journalling its side effect). Each turn is killed at a seeded
random point: inside a step (before its side effect), between a step's side effect and its
checkpoint, or while the checkpoint of a state over the item limit is being written (chunk
items in hosted mode, a spill file in local mode). A new process recovers the stale task at
start-up and resumes the workflow from its last checkpoint, with nothing configured for it.

Checked per kill: the task completes on its own (the new process's start-up scan recovers it),
the client's ``GET`` returns the one completed response with the output of an uninterrupted
run, only the step in flight at the kill journals its side effect twice, and after all kills a
garbage collection finds no orphaned blob or chunk. (The host resumes from the checkpoint its
own record of the run names; when that record is written late, as it is when the emulator
slows every write to aim a kill at the chunks, the step before the one in flight may run again
too. Those cases are counted apart.) Local mode runs without the hosting
variables (tasks, responses and checkpoints under ``AGENTSERVER_STATE_ROOT``); hosted mode runs
on ``agent_environment()`` against the emulator's task API, response store and state store.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint_maf import FoundryCheckpointStorage

from ._kills import Counts, effects, events, in_flight, kill_at, local_tasks, prepare, wait_until
from .conftest import Host, Platform

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

APP = "kill_maf_workflow:app"
TERM_APP = "term_maf_workflow:app"  # the same host, its storage's calls journalled
APPS = Path(__file__).resolve().parent / "apps"
STEPS = 4
WORK, SETTLE = 0.5, 0.3  # the app's defaults: before a step's side effect, and after it
KILLS = 10
USER = "alice"


def submit(host: Host, run: str) -> str:
    accepted = host.post(USER, "/responses", {"input": run, "background": True, "store": True})
    assert accepted.status_code == 200, accepted.text
    response_id: str = accepted.json()["id"]
    return response_id


def outcome(host: Host, response_id: str) -> dict[str, Any]:
    """Poll until the response is terminal. A recovering local host answers 404 for a moment."""
    deadline = time.monotonic() + 90
    while True:
        got = host.get(USER, f"/responses/{response_id}")
        if got.status_code == 200 and got.json()["status"] not in ("queued", "in_progress"):
            final: dict[str, Any] = got.json()
            return final
        assert got.status_code in (200, 404), (got.status_code, got.text)
        assert time.monotonic() < deadline, host.log_text()[-4000:]
        time.sleep(0.1)


def texts(response: dict[str, Any]) -> list[str]:
    assert response["status"] == "completed", response
    return [
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    ]


def plan(rng: random.Random, mode: str) -> list[tuple[str, str, int, str, float]]:
    """(kind, run, step, journal event to wait for, delay after it) for each kill."""
    out: list[tuple[str, str, int, str, float]] = []
    for n in range(KILLS):
        kind = ("inside a step", "between effect and checkpoint", "during a chunked write")[n % 3]
        if kind == "inside a step":
            # (margins: the journal is polled, and the machine may be busy)
            out.append(
                (kind, f"k{n}", rng.randrange(STEPS), "start", rng.uniform(0.05, WORK - 0.15))
            )
        elif kind == "between effect and checkpoint":
            delay = rng.uniform(0.02, SETTLE - 0.12)
            out.append((kind, f"k{n}", rng.randrange(STEPS), "effect", delay))
        else:  # step 0 keeps a value over the item limit; its checkpoint follows the settle
            # hosted: each item write is slowed (SLOW_WRITE_SECONDS), so the kill lands among
            # the chunk writes (after the host's own writes of the superstep); local: the spill
            # file is written within a few milliseconds
            window = (0.7, 1.2) if mode == "hosted" else (0.0, 0.12)
            delay = SETTLE + rng.uniform(*window)
            out.append((kind, f"big:k{n}", 0, "effect", delay))
    return out


def users_storage(
    platform: Platform, mode: str, monkeypatch: pytest.MonkeyPatch, context: str
) -> FoundryCheckpointStorage:
    """The app's checkpoint storage of ``context``, opened by the test as the user ``USER``."""
    if mode == "local":
        monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(platform.root / "state"))
        monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
        return FoundryCheckpointStorage(context, store_prefix="killable", user_id=USER)
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    return FoundryCheckpointStorage(
        context,
        store_prefix="killable",
        credential=platform.emulator.credential(user=USER),
        endpoint=platform.emulator.endpoint,
        connection_verify=platform.emulator.ca_file,
    )


async def collect(
    platform: Platform, mode: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, int]:
    """Garbage-collect the user's checkpoint stores with no grace period, then look again.

    Returns:
        The unreferenced blobs or chunks the kills left (collected), and those found after.
    """
    async with users_storage(platform, mode, monkeypatch, "gc") as storage:
        report = await storage.gc(grace_seconds=0)
        after = await storage.gc(grace_seconds=0, dry_run=True)
    assert report.scanned_scopes >= KILLS, report  # the kills' contexts were looked at
    assert after.referenced == report.referenced >= 1, after  # the big states' data stays live
    return len(report.deleted), len(after.deleted)


@pytest.mark.parametrize("mode", ["local", "hosted"])
async def test_sigkill_at_random_points_then_the_task_recovers_on_its_own(
    platform: Platform, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = prepare(platform, mode)
    rng = random.Random(f"maf-{mode}")
    counts = Counts(f"MAF ResponsesHostServer(resilient_background=True), {mode}")
    host = platform.start(APP, apps=APPS)

    # Uninterrupted runs: what every killed run must end with.
    expected: dict[str, str] = {}
    for run in ("base", "big:base"):
        (said,) = texts(outcome(host, submit(host, run)))
        expected[run] = said.replace(run, "RUN")
        assert effects(journal, run) == dict.fromkeys(range(STEPS), 1)
    assert expected["base"] != expected["big:base"]  # the big state reached the end

    for kind, run, step, event, delay in plan(rng, mode):
        response_id = submit(host, run)
        slow = platform.emulator if kind == "during a chunked write" and mode == "hosted" else None
        kill_at(host, journal, run, step, event, delay, slow_writes=slow)
        counts.kills += 1
        counts.points[kind] += 1
        flying = in_flight(journal, run)
        before = effects(journal, run)

        host = platform.start(APP, apps=APPS)
        final = outcome(host, response_id)
        assert f"Recovered task {response_id} is now active" in host.log_text(), kind
        counts.recoveries += 1
        # One completed response, with the output of an uninterrupted run.
        recovered = texts(final)
        assert recovered == [
            expected["big:base" if run.startswith("big:") else "base"].replace("RUN", run)
        ], (kind, recovered)
        # Every step's side effect happened; only the step in flight may have run twice.
        after = effects(journal, run)
        assert set(after) == set(range(STEPS)) and all(after[s] >= 1 for s in after), after
        repeated = {s for s, n in after.items() if n > 1}
        if kind == "during a chunked write" and repeated - {flying}:
            # The host resumes from the checkpoint its own record of the run names, written
            # after the checkpoint (slowed in hosted mode; on a loaded machine in local mode
            # too): the step before may run again as well.
            assert flying is not None and repeated <= {flying - 1, flying}, (flying, after)
            counts.points["step before the one in flight repeated (host index lag)"] += 1
        else:
            assert repeated <= {flying}, (kind, flying, before, after)
        if kind == "inside a step":  # killed before its side effect: it happens once
            assert flying == step and repeated == set(), (flying, after)
        elif kind == "between effect and checkpoint":  # done but not durable: runs again
            assert flying == step and repeated == {step}, (flying, after)
        assert all(n <= 2 for n in after.values()), after
        counts.repeated += len(repeated)

    if mode == "hosted":
        turns = KILLS + 2
        calls = platform.settled_requests(delete_task=turns)
        # every turn's task was created once and removed once it completed
        assert calls["create_task"] == turns and calls["delete_task"] == turns, calls
    else:
        assert [t["id"] for t in local_tasks(platform.root) if t["status"] != "completed"] == []
    collected, counts.orphans = await collect(platform, mode, monkeypatch)
    counts.report()
    print(f"  unreferenced blobs or chunks left by the kills, collected by gc: {collected}")
    if mode == "hosted":  # kills among the chunk writes left chunks no checkpoint uses
        assert collected >= 1
    assert counts.kills == counts.recoveries == KILLS
    lagged = counts.points.pop("step before the one in flight repeated (host index lag)", 0)
    print(f"  killed steps checkpointed but not yet in the host's record, run again: {lagged}")
    assert counts.points == {
        "inside a step": 4,
        "between effect and checkpoint": 3,
        "during a chunked write": 3,
    }
    assert counts.repeated <= KILLS
    assert counts.orphans == 0


@pytest.mark.parametrize("mode", ["local", "hosted"])
async def test_sigterm_right_after_a_step_finished_then_the_turn_goes_on_in_the_next_process(
    platform: Platform, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redeploy (SIGTERM) just as a step has finished its work: the turn goes on elsewhere.

    The host sets the task's shutdown signal, stops the workflow and leaves the task
    ``in_progress`` for the next process (``exit_for_recovery``), which resumes from a
    checkpoint and completes the response. The steps before the one that had just finished
    never run again, nor do those after it. That step itself runs again exactly when the host
    resumes from the checkpoint before it, and that is the host's doing, in both modes: the
    next process resumes from the checkpoint the host's own record of the run names, and the
    host writes that record only once the superstep's checkpoint is stored *and* its
    ``superstep_completed`` event has reached the response handler. At the end of a superstep
    agent-framework-foundry-hosting (1.0.0b261022) first re-reads its claim on the run
    (``HostedWorkflowRun.assert_claim``, a state-store read), then hands the checkpoint to the
    storage, then emits the event, whose handling checks the claim twice more and writes the
    record. ``TaskManager.shutdown`` sets the shutdown signal some 3 to 20 ms after SIGTERM, and
    the host's iterator then cancels the workflow wherever it is in that chain: in the claim
    read (the checkpoint never reaches the storage) or in the storage's save (the write goes on
    and is stored, but the record still names the checkpoint before). Against the emulator the
    chain takes some 100 to 500 ms (each step is a round trip), locally a few ms, so the
    finished step usually runs again in hosted mode and sometimes in local mode.

    The storage of ``apps/term_maf_workflow.py`` journals each checkpoint it is handed and
    each it reads back. Asserted per SIGTERM: every checkpoint the stopped process handed the
    storage is stored (even when the host stopped waiting for the save); the recovering
    process resumes from the finished step's checkpoint or the one before; and the finished
    step ran again if and only if it resumed from the one before. The counts are printed.
    """
    journal = prepare(platform, mode)
    host = platform.start(TERM_APP, apps=APPS)
    terms = 0
    again: Counter[str] = Counter()
    for step in range(STEPS - 1):
        run = f"term{step}"
        mark = len(events(journal))
        response_id = submit(host, run)

        def done(run: str = run, step: int = step) -> bool:
            return any(
                e["run"] == run and e["step"] == step and e["event"] == "done"
                for e in events(journal)
            )

        wait_until(done, 60, f"step {step} done", host)
        stopped = host.process.pid
        began = time.monotonic()
        host.stop()
        took = time.monotonic() - began
        terms += 1
        assert host.process.returncode == 0, host.log_text()[-3000:]
        assert "exit_for_recovery" in host.log_text(), host.log_text()[-3000:]
        assert took < 15, took  # well inside the platform's grace period

        host = platform.start(TERM_APP, apps=APPS)
        (said,) = texts(outcome(host, response_id))
        assert said == f"done: {run}|s0|s1|s2|s3 blob=-"
        after = effects(journal, run)
        assert set(after) == set(range(STEPS)) and max(after.values()) <= 2, after
        assert all(after[s] == 1 for s in range(step)), after  # checkpointed steps: once
        assert all(after[s] == 1 for s in range(step + 1, STEPS)), after  # not begun before

        seen = [e for e in events(journal)[mark:] if e["run"] == "storage"]
        old = [e for e in seen if e["pid"] == stopped]
        new = [e for e in seen if e["pid"] != stopped]
        handed = [e for e in old if e["event"] == "saving"]
        (context,) = {e["context"] for e in seen}
        async with users_storage(platform, mode, monkeypatch, context) as storage:
            stored = {c.checkpoint_id for c in await storage.list_stored()}
        # what the stopped process handed the storage is stored, acknowledged or not
        assert {e["checkpoint"] for e in handed} <= stored, (handed, stored)
        finished = step + 1  # the superstep of the checkpoint taken after the step
        resumed = next(e["superstep"] for e in new if e["event"] == "loaded")
        assert resumed in (finished - 1, finished), (finished, resumed, seen)
        ran_again = after[step] == 2
        assert ran_again == (resumed == finished - 1), (step, after, resumed, seen)
        if ran_again:
            handed_it = any(e["superstep"] == finished for e in handed)
            again["stored, not in the host's record" if handed_it else "never handed over"] += 1
    print(
        f"MAF ResponsesHostServer(resilient_background=True), {mode}: SIGTERMs={terms} "
        f"recoveries={terms} finished steps run again={sum(again.values())} "
        f"({', '.join(f'{k}={v}' for k, v in sorted(again.items())) or 'none'})"
    )
