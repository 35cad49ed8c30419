"""SIGKILL an Invocations host mid-turn of a ``@multi_turn_task`` chain: the turn recovers.

``tests/hosts/apps/kill_task_graph.py`` is azure-ai-agentserver-invocations with a handler of
our own: each ``POST /invocations`` runs one turn of a ``@multi_turn_task`` chain (one chain per
user and thread), and the turn runs a LangGraph graph of four slow nodes checkpointed by
``FoundryCheckpointer``. Every turn of one thread is killed at a seeded random point: inside a
node (before its side effect), between a node's stored writes and the checkpoint that follows
them, or while the writes of a state over the item limit are stored (chunk items in hosted
mode, a spill file in local mode). The next process's start-up scan re-enters the handler with
``entry_mode == "recovered"`` and the turn's persisted input; the handler resumes the graph
after its last durable node.

Checked per kill: the turn completes on its own, ``GET /invocations/{turn}`` says completed
with the thread's messages equal to an uninterrupted run's (each turn's messages once), a
node's side effect runs again only if its writes were not yet stored when the process died,
and after all kills a garbage collection leaves no orphaned blob or chunk. The two-replica test
runs two processes of one agent session on one emulator: the one holding a turn's lease is
killed and the other recovers the turn.
"""

from __future__ import annotations

import hashlib
import random
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint.emulator._credential import token_for_user
from foundry_checkpoint.emulator._platform import AGENT_IDENTITY

from ._kills import Counts, effects, events, kill_at, local_tasks, prepare
from .conftest import Host, Platform

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

APP = "kill_task_graph:app"
APPS = Path(__file__).resolve().parent / "apps"
STEPS = 4
WORK, SETTLE, CHECKPOINT = 0.5, 0.2, 0.3  # the app's defaults
KILLS = 10
USER, THREAD = "alice", "research"


def chain_id(user: str, thread_id: str) -> str:
    return "chain-" + hashlib.sha256(f"{user}\0{thread_id}".encode()).hexdigest()[:40]


def turn_messages(turn: str) -> list[str]:
    """What one uninterrupted turn adds to the thread."""
    return [f"say {turn}", *(f"{turn}: step {n}" for n in range(STEPS))]


class Turn:
    """One ``POST /invocations`` sent in the background (the process may die under it)."""

    def __init__(self, host: Host, turn: str, thread_id: str = THREAD) -> None:
        self.body = {"thread_id": thread_id, "turn": turn, "message": f"say {turn}"}
        self.answer: httpx.Response | BaseException | None = None
        self._thread = threading.Thread(target=self._send, args=(host,), daemon=True)
        self._thread.start()

    def _send(self, host: Host) -> None:
        try:
            self.answer = host.post(USER, "/invocations", self.body)
        except BaseException as exc:  # the process died under the request
            self.answer = exc

    def join(self) -> httpx.Response | BaseException | None:
        self._thread.join(30)
        return self.answer


def finished(host: Host, turn: str, thread_id: str = THREAD) -> dict[str, Any]:
    """Poll ``GET /invocations/{turn}`` until the turn is completed."""
    deadline = time.monotonic() + 90
    while True:
        got = host.get(USER, f"/invocations/{turn}?thread_id={thread_id}")
        assert got.status_code == 200, (got.status_code, got.text, host.log_text()[-3000:])
        state: dict[str, Any] = got.json()
        if state["status"] == "completed":
            return state
        assert time.monotonic() < deadline, (state, host.log_text()[-4000:])
        time.sleep(0.1)


def not_stored(journal: Path, run: str) -> set[int]:
    """The nodes of ``run`` that had started but whose writes were not stored yet."""
    seen = [e for e in events(journal) if e["run"] == run]
    started = {e["step"] for e in seen if e["event"] == "start"}
    stored = {e["step"] for e in seen if e["event"] == "writes"}
    return started - stored


def entries(journal: Path, run: str) -> list[str]:
    return [e["event"] for e in events(journal) if e["run"] == run and e["step"] == -1]


def plan(rng: random.Random, mode: str) -> list[tuple[str, str, int, str, float]]:
    """(kind, turn, node, journal event to wait for, delay after it) for each kill."""
    out: list[tuple[str, str, int, str, float]] = []
    for n in range(KILLS):
        kind = ("inside a node", "between writes and checkpoint", "during a chunked write")[n % 3]
        if kind == "inside a node":
            # (margins: the journal is polled, and the machine may be busy)
            out.append(
                (kind, f"k{n}", rng.randrange(STEPS), "start", rng.uniform(0.05, WORK - 0.15))
            )
        elif kind == "between writes and checkpoint":
            delay = rng.uniform(0, CHECKPOINT * 0.8)
            out.append((kind, f"k{n}", rng.randrange(STEPS), "writes", delay))
        else:  # node 0 adds a value over the item limit: its writes are stored after the settle
            # hosted: each item write is slowed (SLOW_WRITE_SECONDS), so the kill lands among
            # the chunk writes; local: the spill file is written within a few milliseconds
            window = (0.3, 0.7) if mode == "hosted" else (0.0, 0.1)
            out.append((kind, f"big:k{n}", 0, "effect", SETTLE + rng.uniform(*window)))
    return out


def checkpointer_for(platform: Platform, mode: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The test's own view of the user's threads, as the app stored them."""
    if mode == "local":
        monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(platform.root / "state"))
        monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
        return FoundryCheckpointer(store_prefix="killable-graph", user_id=USER)
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    return FoundryCheckpointer(
        store_prefix="killable-graph",
        credential=platform.emulator.credential(user=USER),
        endpoint=platform.emulator.endpoint,
        connection_verify=platform.emulator.ca_file,
    )


@pytest.mark.parametrize("mode", ["local", "hosted"])
async def test_sigkill_mid_turn_then_the_chain_recovers_the_turn_on_its_own(
    platform: Platform, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = prepare(platform, mode)
    rng = random.Random(f"task-{mode}")
    counts = Counts(f"Invocations + @multi_turn_task + LangGraph, {mode}")
    host = platform.start(APP, apps=APPS)
    expected: list[str] = []

    # Uninterrupted turns first: the client's POST answers with the thread's state.
    for turn in ("base", "big:base"):
        answer = Turn(host, turn).join()
        assert isinstance(answer, httpx.Response) and answer.status_code == 200, answer
        expected += turn_messages(turn)
        assert answer.json()["messages"] == expected
        assert effects(journal, turn) == dict.fromkeys(range(STEPS), 1)
    assert finished(host, "big:base")["blob"] is not None
    assert entries(journal, "base") == ["entry:fresh"]
    assert entries(journal, "big:base") == ["entry:resumed"]  # the chain's second turn

    for kind, turn, step, event, delay in plan(rng, mode):
        sent = Turn(host, turn)
        slow = platform.emulator if kind == "during a chunked write" and mode == "hosted" else None
        kill_at(host, journal, turn, step, event, delay, slow_writes=slow)
        counts.kills += 1
        counts.points[kind] += 1
        flying = not_stored(journal, turn)
        assert not isinstance(sent.join(), httpx.Response)  # the client lost its answer

        host = platform.start(APP, apps=APPS)
        state = finished(host, turn)
        assert f"Recovered task {chain_id(USER, THREAD)} is now active" in host.log_text()
        assert entries(journal, turn)[-1] == "entry:recovered", entries(journal, turn)
        counts.recoveries += 1
        expected += turn_messages(turn)
        assert state["messages"] == expected, (kind, turn)
        assert state["blob"] is not None
        after = effects(journal, turn)
        assert set(after) == set(range(STEPS)), after
        repeated = {s for s, n in after.items() if n > 1}
        assert repeated <= flying, (kind, turn, flying, after)
        assert all(n <= 2 for n in after.values()), after
        if kind == "inside a node":  # killed before its side effect: it happens once
            assert step in flying and step not in repeated, (flying, after)
        elif kind == "between writes and checkpoint":  # its writes were stored: not again
            assert step not in flying and step not in repeated, (flying, after)
        counts.repeated += len(repeated)

    # The chain takes the next turn as usual after all that, in the same process.
    answer = Turn(host, "last").join()
    assert isinstance(answer, httpx.Response) and answer.status_code == 200, answer
    expected += turn_messages("last")
    assert answer.json()["messages"] == expected
    if mode == "local":
        assert [t["status"] for t in local_tasks(platform.root)] == ["suspended"]

    saver = checkpointer_for(platform, mode, monkeypatch)
    async with saver:
        collected = await saver.agc(grace_seconds=0)
        after_gc = await saver.agc(grace_seconds=0, dry_run=True)
        assert after_gc.referenced == collected.referenced >= 1, after_gc
        # what gc keeps is all the thread needs: it reads back whole
        config: Any = {"configurable": {"thread_id": THREAD}}
        kept = await saver.aget_tuple(config)
        assert kept is not None and kept.checkpoint["channel_values"]["messages"] == expected
    counts.orphans = len(after_gc.deleted)
    counts.report()
    print(f"  unreferenced blobs or chunks left by the kills, collected: {len(collected.deleted)}")
    if mode == "hosted":  # kills among the chunk writes left chunks no checkpoint uses
        assert len(collected.deleted) >= 1
    assert counts.kills == counts.recoveries == KILLS
    assert counts.points == {
        "inside a node": 4,
        "between writes and checkpoint": 3,
        "during a chunked write": 3,
    }
    assert counts.repeated <= KILLS
    assert counts.orphans == 0


def task_record(platform: Platform, task_id: str) -> dict[str, Any]:
    """The task as the emulator's task API keeps it for the agent's own identity."""
    token = token_for_user(AGENT_IDENTITY)
    trust = ssl.create_default_context(cafile=platform.emulator.ca_file)
    with httpx.Client(verify=trust) as client:
        got = client.get(
            f"{platform.emulator.endpoint}/tasks/{task_id}",
            params={"api-version": "v1"},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert got.status_code == 200, got.text
    record: dict[str, Any] = got.json()
    return record


def test_two_replicas_the_one_holding_the_lease_dies_and_the_other_recovers_the_turn(
    platform: Platform,
) -> None:
    """Two processes of one agent session (one lease owner) on one emulator.

    Replica A takes a turn and holds the task's lease; it is killed inside a node. Replica B,
    already running, learns of the turn when the client asks it (``GET /invocations/{turn}``):
    the task is ``in_progress`` under the session's owner but active in no live process, so B
    reclaims the lease (generation + 1) and re-enters the handler as ``recovered``. The runtime's
    lease owner is the agent name and session id: a process of another session never lists or
    reclaims these tasks, expired or not (the task API lets another owner take an expired
    lease; the runtime never asks it to), so the handoff needs no lease to expire.
    """
    journal = prepare(platform, "hosted")
    replica_a = platform.start(APP, apps=APPS)
    replica_b = platform.start(APP, apps=APPS)
    sent = Turn(replica_a, "handoff")
    kill_at(replica_a, journal, "handoff", 1, "start", 0.2)
    assert not isinstance(sent.join(), httpx.Response)
    pids = {e["pid"] for e in events(journal) if e["run"] == "handoff"}
    assert pids == {replica_a.process.pid}  # A ran the turn and held its lease

    # B is asked about the turn: it reclaims the task and runs it on.
    asked = replica_b.get(USER, f"/invocations/handoff?thread_id={THREAD}")
    assert asked.status_code == 200 and asked.json()["status"] == "in_progress", asked.text
    # The lease moved to B: the same owner (agent and session), B's instance, generation 1.
    record = task_record(platform, chain_id(USER, THREAD))
    assert record["status"] == "in_progress", record
    lease = record["lease"]
    assert lease["generation"] == 1, lease
    assert lease["instance_id"].startswith(f"worker-{replica_b.process.pid}-"), lease
    state = finished(replica_b, "handoff")
    assert state["messages"] == turn_messages("handoff")
    by_b = [e for e in events(journal) if e["pid"] == replica_b.process.pid]
    assert [e["event"] for e in by_b if e["step"] == -1] == ["entry:recovered"]
    assert entries(journal, "handoff") == ["entry:fresh", "entry:recovered"]
    ran_b = {e["step"] for e in by_b if e["step"] >= 0}
    assert ran_b == {1, 2, 3}, ran_b  # B went on from the last durable node
    assert replica_a.process.poll() is not None and replica_b.process.poll() is None
    counts = Counts("two replicas, one lease owner")
    counts.kills, counts.recoveries = 1, 1
    counts.repeated = sum(1 for n in effects(journal, "handoff").values() if n > 1)
    counts.report()
    assert counts.repeated == 0  # A died before step 1's side effect
