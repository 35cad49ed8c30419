"""SIGKILL langchain-azure-ai's LangGraph hosts mid-turn: each restart finishes the turn by itself.

The samples ``samples/hosted_agents/langgraph_responses_host.py`` and
``langgraph_invocations_host.py`` (``resilient_background=True``, one ``FoundryCheckpointer``,
nothing configured for the platform) first run unchanged on ``agent_environment()``: a
background request completes through the emulator's task API and response store.

Then their graph, slowed down and journaled (``tests/hosts/apps/recovery_*.py``), serves a
conversation of four turns in each host, in local mode (no hosting environment: the embedded
store, the task runtime's and the response store's files) and in hosted mode (the emulator).
Ten times per host and mode, at a point a seeded RNG picks, the process is killed with SIGKILL:
inside a step, right after a step's work (its writes not yet stored), right after its writes are
stored and before the checkpoint that follows them, or while ``research``'s report (over the
item limit) is being spilled. A new process starts (the same agent and
session) and nobody sends anything: the task runtime reclaims the stale task at start-up and
the turn resumes from its checkpoints. Then every turn answered once, completed, with what an
uninterrupted run answers; the thread's final state is an uninterrupted run's; a step's side
effect ran again only where a process died with that step as its last (its work done, or its
writes stored, but not the checkpoint after it), at most once per kill; and ``gc`` leaves
nothing orphaned. The counts are printed (``-s``) and asserted. For
contrast, the same kill with the graph on ``InMemorySaver``: the reclaimed turn fails
(``Received no input for __start__``).

Both hosts resume a reclaimed turn from the checkpoint id they recorded last (input ``None``
with that ``checkpoint_id``), which LangGraph runs as a replay of that checkpoint: a step whose
writes were stored, but not the checkpoint after them, runs again (``InMemorySaver`` behaves the
same). Resumed without the id, LangGraph would hand the stored writes back instead. The count of
such repeats is printed (``after-writes``), and the last test shows the difference in one
process, on ``FoundryCheckpointer`` and on ``InMemorySaver``.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from foundry_checkpoint import FoundryCheckpointer
from samples.hosted_agents.langgraph_pipeline import STEPS, Step, build
from tests.hosts.apps.recovery_pipeline import ReportState, report

from .conftest import Host, Platform

APPS = Path(__file__).resolve().parent / "apps"
STEP_NAMES = [name for name, _ in STEPS]
STEP_SECONDS = 0.5
REPORT_BYTES = 1_200_000  # base64 of 1.2 MB of random bytes: ~1.2 MB compressed, over 1 MB
KILLS = 10
TURNS = [
    "file the claim",
    "the parcel never arrived although the tracking page says it was delivered",
    "refund it",
    "and send me the receipt by mail please",
    "thanks",  # kills a busy turn could not place land here
]
USER = "alice"
#: What the platform sets on a hosted agent; local mode runs without it.
HOSTED_ENV = (
    "FOUNDRY_HOSTING_ENVIRONMENT",
    "FOUNDRY_PROJECT_ENDPOINT",
    "FOUNDRY_AGENT_SESSION_ID",
    "IDENTITY_ENDPOINT",
    "IDENTITY_HEADER",
    "AZURE_TOKEN_CREDENTIALS",
    "SSL_CERT_FILE",
)
_WAIT_SECONDS = 60.0
#: How long the client waits after a recovered turn completed before it sends the next one. A
#: turn sent while the recovered task is still writing its end (a few ms after the response
#: reads ``completed``) was once queued as a steering input and never run.
_SETTLE_SECONDS = 0.5


@dataclass(frozen=True)
class HostKind:
    """One of the two hosts: its apps, its store prefix, and how a client talks to it."""

    name: str
    sample: str
    app: str
    prefix: str

    def start_turn(self, host: Host, said: str, previous: str | None) -> str:
        """Send one turn as a background request; its id."""
        if self.name == "responses":
            body: dict[str, Any] = {"input": said, "background": True, "store": True}
            if previous is not None:
                body["previous_response_id"] = previous
            accepted = host.post(USER, "/responses", body)
            assert accepted.status_code == 200, accepted.text
        else:
            path = "/invocations?agent_session_id=conversation-1"
            accepted = host.post(USER, path, {"message": said, "background": True})
            assert accepted.status_code == 202, accepted.text
        turn_id: str = accepted.json()["id"]
        return turn_id

    def read(self, host: Host, turn_id: str) -> dict[str, Any] | None:
        """The turn as the client reads it; None for a ``404`` (see :func:`wait_done`)."""
        path = f"/responses/{turn_id}" if self.name == "responses" else f"/invocations/{turn_id}"
        got = host.get(USER, path)
        if got.status_code == 404:
            return None
        assert got.status_code == 200, (got.text, host.log_text()[-4000:])
        answer: dict[str, Any] = got.json()
        return answer

    def answers(self, final: dict[str, Any]) -> list[str]:
        """What the client reads as the turn's answer."""
        if self.name == "responses":
            return [
                part["text"]
                for item in final["output"]
                if item["type"] == "message"
                for part in item["content"]
            ]
        return [final["response"]]


RESPONSES = HostKind(
    "responses",
    "langgraph_responses_host:app",
    "recovery_responses_agent:app",
    "recovery-responses",
)
INVOCATIONS = HostKind(
    "invocations",
    "langgraph_invocations_host:app",
    "recovery_invocations_agent:app",
    "recovery-invocations",
)


def wait_done(kind: HostKind, host: Host, turn_id: str, misses: list[str] | None = None) -> Any:
    """Read the turn until it is no longer queued or in progress.

    A ``404`` is an answer only when ``misses`` is None. Otherwise (just after a restart) it is
    noted there and read again: ``ResponsesAgentServerHost`` answers ``404`` for a response it
    is recovering until the handler has emitted it again (its record is not yet
    ``visible_via_get``).
    """
    deadline = time.monotonic() + _WAIT_SECONDS
    while True:
        answer = kind.read(host, turn_id)
        if answer is None:
            if misses is None:
                raise AssertionError(f"{turn_id}: 404\n{host.log_text()[-4000:]}")
            misses.append(turn_id)
        elif answer["status"] not in ("queued", "in_progress"):
            return answer
        assert time.monotonic() < deadline, host.log_text()[-4000:]
        time.sleep(0.05)


# --- the samples, unchanged -------------------------------------------------------------------


@pytest.mark.parametrize("kind", [RESPONSES, INVOCATIONS], ids=lambda k: k.name)
def test_the_sample_runs_unchanged_on_agent_environment(platform: Platform, kind: HostKind) -> None:
    assert "AGENTSERVER_TASKS_BACKEND" not in platform.env
    host = platform.start(kind.sample)
    turn_id = kind.start_turn(host, "file the claim", None)
    final = wait_done(kind, host, turn_id)
    assert final["status"] == "completed", (final, host.log_text()[-4000:])
    expected = ["triage: a short request", "research: turn 1, 3 words", "reply 1: FILE THE CLAIM"]
    assert kind.answers(final) == (expected if kind.name == "responses" else expected[-1:])

    calls = platform.settled_requests(update_task=1)
    assert calls["create_task"] == 1 and calls["update_task"] >= 1, calls
    if kind.name == "responses":  # the response store too
        assert calls["create_response"] == 1 and calls["update_response"] >= 1, calls
    assert platform.emulator.requests["put_item"] >= 3  # the checkpoints, in the state store
    assert "status=404" not in host.log_text(), host.log_text()[-4000:]
    # the other user does not see alice's turn
    path = f"/{kind.name}/{turn_id}"
    assert host.get("bob", path).status_code == 404


# --- kill and recover -------------------------------------------------------------------------


@dataclass
class Journal:
    """The steps' journal: one ``(pid, event, step, turn)`` per line, read as it grows."""

    path: Path
    lines: list[tuple[int, str, str, int]] = field(default_factory=list)
    _offset: int = 0

    def read(self) -> list[tuple[int, str, str, int]]:
        """The lines added since the last read."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        new = []
        for raw in complete.decode().splitlines():
            pid, event, step, turn = raw.split()
            new.append((int(pid), event, step, int(turn)))
        self.lines += new
        return new

    def ended(self, turn: int) -> set[str]:
        return {step for _, event, step, t in self.lines if event == "end" and t == turn}

    def wait(self, pid: int, event: str, step: str, turn: int, host: Host) -> None:
        """Until ``pid`` journals ``event`` for ``step`` of ``turn`` (polled every 2 ms)."""
        deadline = time.monotonic() + _WAIT_SECONDS
        while time.monotonic() < deadline:
            self.read()
            if (pid, event, step, turn) in self.lines:
                return
            time.sleep(0.002)
        raise AssertionError(f"no {event} {step} {turn} from {pid}:\n{host.log_text()[-4000:]}")


@dataclass
class Kill:
    """A kill: the process, the point aimed at, and what its journal shows last (the point hit).

    ``landed`` is ``"inside"`` when the process's last ``begin`` or ``end`` is a step's
    ``begin`` (its work not done), ``"after-work"`` when it is an ``end`` (the work done, its
    writes maybe not stored), ``"after-writes"`` when a ``saved`` of that step follows (its writes
    stored, the checkpoint after them maybe not).
    """

    pid: int
    aimed: str
    landed: str = ""
    step: str = ""
    turn: int = 0


def expected_run() -> tuple[list[list[str]], list[tuple[str, str]], str]:
    """An uninterrupted run of the same graph: each turn's answers, the messages, the report."""

    def with_report(name: str, step: Step) -> Step:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            update = step(state)
            if name == "research":
                turn = sum(isinstance(m, HumanMessage) for m in state["messages"])
                update["report"] = report(turn, REPORT_BYTES)
            return update

        return run

    graph = build(InMemorySaver(), wrap=with_report, schema=ReportState)
    config: Any = {"configurable": {"thread_id": "reference"}}
    answers = []
    for said in TURNS:
        out = graph.invoke({"messages": [HumanMessage(said)]}, config)
        answers.append([m.text for m in out["messages"][-len(STEPS) :]])
    messages = [(m.type, m.text) for m in out["messages"]]
    return answers, messages, hashlib.sha256(out["report"].encode()).hexdigest()


@pytest.fixture
def reader(platform: Platform, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Opens, in the test process, the checkpointer a host used, as the user of the turns."""
    opened: list[FoundryCheckpointer] = []

    def open_as_user(mode: str, prefix: str) -> FoundryCheckpointer:
        if mode == "local":
            monkeypatch.setenv("AGENTSERVER_STATE_ROOT", platform.env["AGENTSERVER_STATE_ROOT"])
            monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
            made = FoundryCheckpointer(store_prefix=prefix, user_id=USER)
        else:
            monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
            made = FoundryCheckpointer(
                store_prefix=prefix,
                credential=platform.emulator.credential(user=USER),
                endpoint=platform.emulator.endpoint,
                connection_verify=platform.emulator.ca_file,
            )
        opened.append(made)
        return made

    yield open_as_user
    for made in opened:
        made.close()


@pytest.mark.parametrize("mode", ["local", "hosted"])
@pytest.mark.parametrize("kind", [RESPONSES, INVOCATIONS], ids=lambda k: k.name)
def test_killed_ten_times_every_turn_completes_on_its_own(
    platform: Platform, reader: Any, kind: HostKind, mode: str
) -> None:
    rng = random.Random(f"{kind.name}-{mode}")
    journal = Journal(platform.root / "journal.log")
    platform.env.update(
        RECOVERY_JOURNAL=str(journal.path),
        RECOVERY_STEP_SECONDS=str(STEP_SECONDS),
        RECOVERY_REPORT_BYTES=str(REPORT_BYTES),
    )
    if mode == "local":
        for name in HOSTED_ENV:
            platform.env.pop(name, None)
    plan = [3, 3, 2, 2]  # kills per turn, 10 in all
    rng.shuffle(plan)
    plan.append(0)
    aims = ["inside"] * 3 + ["after-work"] * 2 + ["after-writes"] * 3 + ["spill"] * 2
    rng.shuffle(aims)
    want_answers, want_messages, want_report = expected_run()

    host = platform.start(kind.app, apps=APPS)
    kills: list[Kill] = []
    misses: list[str] = []
    finals: list[dict[str, Any]] = []
    previous: str | None = None
    owed = 0
    for turn, said in enumerate(TURNS, start=1):
        turn_id = kind.start_turn(host, said, previous)
        before = len(kills)
        owed += plan[turn - 1]
        while owed:
            left = [s for s in STEP_NAMES if s not in journal.ended(turn)]
            if not left:
                break  # the turn is done: the kill it still owes goes to the next one
            n = len(kills)
            if aims[n] == "spill" and "research" not in left:  # a spill aim for a later turn
                later = [i for i in range(n + 1, KILLS) if aims[i] != "spill"]
                swap = later[0] if later else n
                aims[n], aims[swap] = aims[swap], aims[n]
            elif "research" in left and "spill" in aims[n:] and rng.random() < 0.5:
                swap = aims.index("spill", n)  # while research can still be hit
                aims[n], aims[swap] = aims[swap], aims[n]
            point = aims[n] if aims[n] != "spill" or "research" in left else "inside"
            step = "research" if point == "spill" else rng.choice(left)
            pid = host.process.pid
            if point == "inside":
                journal.wait(pid, "begin", step, turn, host)
                time.sleep(rng.uniform(0.02, STEP_SECONDS * 0.9))
            elif point == "after-writes":  # stored: the checkpoint follows
                journal.wait(pid, "saved", step, turn, host)
            else:  # the step's work done: its writes, the report's blob or chunks, the checkpoint
                journal.wait(pid, "end", step, turn, host)
                time.sleep(rng.uniform(0.0, 0.08 if point == "spill" else 0.01))
            host.kill()
            owed -= 1
            kills.append(Kill(pid, point))
            host = platform.start(kind.app, apps=APPS)
        final = wait_done(kind, host, turn_id, misses if kills else None)
        assert final["status"] == "completed", (final, host.log_text()[-4000:])
        finals.append(final)
        previous = turn_id
        if len(kills) > before:  # this turn was recovered
            time.sleep(_SETTLE_SECONDS)

    # every turn: one completed response, the answers of an uninterrupted run
    for turn, final in enumerate(finals):
        want = want_answers[turn]
        assert kind.answers(final) == (want if kind.name == "responses" else want[-1:]), final

    # nothing orphaned after gc: what it collects (blobs or chunks that a process killed while
    # spilling left behind), and then nothing more
    saver = reader(mode, kind.prefix)
    collected = saver.gc(grace_seconds=0)
    orphans = len(collected.deleted)
    assert collected.referenced >= len(TURNS)  # every turn's report spilled (blob or chunks)
    assert saver.gc(grace_seconds=0, dry_run=True).deleted == []

    # the thread's final state (read after gc) is an uninterrupted run's
    threads = saver.list_threads()
    assert len(threads) == 1, threads
    state = build(saver, schema=ReportState).get_state({"configurable": {"thread_id": threads[0]}})
    assert [(m.type, m.text) for m in state.values["messages"]] == want_messages
    assert hashlib.sha256(state.values["report"].encode()).hexdigest() == want_report
    assert state.next == ()

    # side effects: each step of each turn done; again only where a killed process had it last
    journal.read()
    for kill in kills:
        mine = [line[1:] for line in journal.lines if line[0] == kill.pid]
        # the step the process had last: the next one may begin before a step's writes are
        # stored (its report still spilling), so the last begin or end says which
        event, kill.step, kill.turn = [line for line in mine if line[0] != "saved"][-1]
        saved = ("saved", kill.step, kill.turn) in mine
        kill.landed = "inside" if event == "begin" else "after-writes" if saved else "after-work"
    aimed = Counter(k.aimed for k in kills)
    landed = Counter(k.landed for k in kills)
    done = Counter((step, turn) for _, event, step, turn in journal.lines if event == "end")
    assert set(done) == {(s, t) for s in STEP_NAMES for t in range(1, len(TURNS) + 1)}
    assert owed == 0
    killed = {k.pid for k in kills}
    last_begun = {}
    for pid, event, step, turn in journal.lines:
        if event == "begin":
            last_begun[pid] = (step, turn)
    for pid, event, step, turn in journal.lines:
        later = [p for p, e, s, t in journal.lines if e == "end" and (s, t) == (step, turn)]
        if event == "end" and pid != later[-1]:  # this effect was repeated by a later process
            assert pid in killed and last_begun[pid] == (step, turn), (pid, step, turn)
    repeated = sum(done.values()) - len(done)
    # a kill repeats at most the one step its process had last
    assert repeated <= landed["after-work"] + landed["after-writes"]
    after_writes = sum(done[(k.step, k.turn)] > 1 for k in kills if k.landed == "after-writes")
    interrupted = sum(1 for p, e, _, _ in journal.lines if e == "begin" and p in killed) - sum(
        1 for p, e, _, _ in journal.lines if e == "end" and p in killed
    )

    # every restart reclaimed its stale task at start-up, but one whose kill came after the
    # turn's last step finished (the turn may have completed first: nothing to reclaim)
    restarted = platform.hosts[1:]
    recoveries = sum("Recovered task" in h.log_text() for h in restarted)
    late = [k for k in kills if k.landed != "inside" and k.step == STEP_NAMES[-1]]
    for kill, h in zip(kills, restarted, strict=True):
        if "Recovered task" not in h.log_text():
            assert kill in late, kill
    if mode == "hosted":  # each start-up scanned the emulator's task API for stale tasks
        assert platform.emulator.platform_requests["list_tasks"] >= KILLS + 1
    for h in platform.hosts:
        assert "status=404" not in h.log_text(), h.log_text()[-4000:]

    print(
        f"\n[{kind.name}/{mode}] kills={len(kills)} aimed={dict(aimed)} landed={dict(landed)} "
        f"recoveries={recoveries} (kills after a turn's last step: {len(late)}) "
        f"steps interrupted={interrupted} side effects repeated={repeated} "
        f"(of them after the step's writes were stored: {after_writes}) "
        f"spilled values={collected.referenced} orphans collected by gc={orphans} "
        f"404s while recovering={len(misses)}"
    )
    assert len(kills) == KILLS
    assert recoveries >= KILLS - len(late)
    assert orphans <= landed["after-work"] + landed["after-writes"]


@pytest.mark.parametrize("kind", [RESPONSES, INVOCATIONS], ids=lambda k: k.name)
def test_with_an_in_memory_saver_the_recovered_turn_does_not_resume(
    platform: Platform, kind: HostKind
) -> None:
    """The contrast: the same kill with the graph on ``InMemorySaver``: the turn fails."""
    journal = Journal(platform.root / "journal.log")
    platform.env.update(
        RECOVERY_JOURNAL=str(journal.path),
        RECOVERY_STEP_SECONDS=str(STEP_SECONDS),
        RECOVERY_CHECKPOINTER="memory",
    )
    for name in HOSTED_ENV:
        platform.env.pop(name, None)
    host = platform.start(kind.app, apps=APPS)
    turn_id = kind.start_turn(host, TURNS[0], None)
    journal.wait(host.process.pid, "begin", "research", 1, host)
    host.kill()
    host = platform.start(kind.app, apps=APPS)
    assert "Recovered task" in host.log_text()  # the task runtime did its part
    final = wait_done(kind, host, turn_id, [])
    # the host resumes the graph from its checkpoint, which died with the process
    assert final["status"] == "failed", final
    assert final["error"]["message"] == "Received no input for __start__", final
    journal.read()
    assert journal.ended(1) == {"triage"}  # nothing after the kill ran


class _Died(Exception):
    """The process 'dies' here: before the checkpoint after a step's stored writes."""


async def _die_after_research_writes_then_resume(saver: Any, by_id: bool) -> list[str]:
    """Run turn 1 until the checkpoint after ``research``'s stored writes fails; resume it.

    Returns the steps the resumed run ran.
    """
    runs: list[str] = []

    def counted(name: str, step: Step) -> Step:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            runs.append(name)
            return step(state)

        return run

    armed: list[bool] = []
    put, put_writes = saver.aput, saver.aput_writes

    async def aput_writes(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        if any(getattr(m, "id", "") == "research-1" for _, v in writes for m in v):
            armed.append(True)
        await put_writes(config, writes, task_id, task_path)

    async def aput(config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
        if armed:
            await asyncio.sleep(0.2)  # the writes are stored by then
            raise _Died
        return await put(config, checkpoint, metadata, versions)

    saver.aput, saver.aput_writes = aput, aput_writes
    graph = build(saver, wrap=counted)
    config: Any = {"configurable": {"thread_id": "t-1"}}
    recorded = []
    with pytest.raises(_Died):
        async for event in graph.astream(
            {"messages": [HumanMessage("hello")]},
            config,
            durability="sync",
            stream_mode="checkpoints",
        ):
            recorded.append(event["config"]["configurable"]["checkpoint_id"])
    assert runs == ["triage", "research"]
    saver.aput, saver.aput_writes = put, put_writes  # the next process
    latest = (await graph.aget_state(config)).config["configurable"]["checkpoint_id"]
    assert recorded[-1] == latest  # the id a host recorded is the thread's latest
    if by_id:
        config = {"configurable": {"thread_id": "t-1", "checkpoint_id": latest}}
    out = await graph.ainvoke(None, config, durability="sync")
    assert out["messages"][-1].text == "reply 1: HELLO"
    return runs[2:]


@pytest.mark.parametrize("saver_kind", ["foundry", "memory"])
async def test_a_resume_by_checkpoint_id_reruns_a_step_whose_writes_were_stored(
    saver_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why the hosts repeat a step killed after its writes: they resume by checkpoint id.

    ``research``'s writes are stored, then its checkpoint fails (the process dies there). From
    the thread's latest checkpoint (no id) LangGraph hands the stored writes back and runs only
    ``reply``; addressed by that same checkpoint's id with input ``None`` (what both
    langchain-azure-ai hosts send), it replays the checkpoint and runs ``research`` again.
    ``FoundryCheckpointer`` behaves exactly as ``InMemorySaver``.
    """
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path))
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    reran = {}
    for by_id in (False, True):
        if saver_kind == "memory":
            reran[by_id] = await _die_after_research_writes_then_resume(InMemorySaver(), by_id)
            continue
        async with FoundryCheckpointer(store_prefix=f"replay-{by_id}") as saver:
            reran[by_id] = await _die_after_research_writes_then_resume(saver, by_id)
    assert reran == {False: ["reply"], True: ["research", "reply"]}
