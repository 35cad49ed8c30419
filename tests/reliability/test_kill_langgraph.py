"""kill -9 a LangGraph run at 20 seeded moments, resume it in new processes, check what survived.

For each mode (the embedded local store; the emulator as its own process with ``--data``) and
each of 20 moments, a worker process runs the test graph (13 steps, a parallel pair, three
values over 1 MB kept in a ``LocalSpill``) on a fresh thread and is killed with ``SIGKILL``:
either from inside at an exact moment (in a node after it logged, before or after a writes
save, before or after a checkpoint save, right after a blob upload) or from this process a
random offset after a chosen node started. New processes resume the thread until it finishes
(some are killed once more). Then:

* the final state equals an uninterrupted run's (so no write was lost or applied twice);
* after every kill, no item references a missing blob (raw scan of every item, and a full
  ``list`` that loads every checkpoint, blob and pending write);
* no node run whose writes a saved checkpoint held (as channel value or pending write) ran
  again in a later process. A node killed before its writes were saved does run again, which
  is correct; for kills inside a node the test requires exactly that re-run.
"""

from __future__ import annotations

import random
import signal
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from foundry_checkpoint import FoundryCheckpointer, LocalSpill
from foundry_checkpoint.emulator import EmulatorCredential

from ._harness import (
    BlobScan,
    EmulatorProcess,
    ExternalKill,
    final_values,
    run_worker,
    scan_blobs,
    snapshot_thread,
    summary,
    worker_error,
)
from ._worker import compiled_reference, initial_state, read_side_log, run_langgraph, thread_config

SEED = 1709
KILLS = 20
PARALLEL = 4
NODE_DELAY = 0.01
BLOBS_PER_RUN = 6  # a, b2 and loop each write one large value: a spilled writes item + a blob
MAX_ATTEMPTS = 6
_MIX = (
    ("external",) * 7
    + ("node",) * 3
    + ("writes-before", "writes-after") * 2
    + ("put-before", "put-after") * 2
    + ("blob-after",) * 2
)
_KILLED = -signal.SIGKILL


@dataclass(frozen=True)
class Reference:
    """An uninterrupted run: node runs in order, and the final state."""

    schedule: list[str]
    final: dict[str, Any]


@dataclass(frozen=True)
class Moment:
    """Where the first attempt is killed, and how the scenario runs."""

    kind: str
    token: str | None = None
    step: int | None = None
    index: int | None = None
    offset: float = 0.0
    durability: str = "async"
    kill_resume: bool = False

    def spec(self) -> dict[str, Any] | None:
        """The kill switch of the first attempt (None for an external kill)."""
        if self.kind == "external":
            return None
        spec: dict[str, Any] = {"kind": self.kind}
        if self.token is not None:
            spec["token"] = self.token
        if self.step is not None:
            spec["step"] = self.step
        if self.index is not None:
            spec["index"] = self.index
        return spec

    def external(self) -> ExternalKill | None:
        """The external kill of the first attempt (None for a self kill)."""
        if self.kind != "external":
            return None
        assert self.token is not None
        return ExternalKill(self.token, self.offset)


@dataclass
class Attempt:
    """One worker process of a scenario."""

    number: int
    code: int
    kill: dict[str, Any] | None
    captured: set[str] = field(default_factory=set)
    steps: list[int] = field(default_factory=list)
    scan: BlobScan | None = None


@dataclass
class Outcome:
    """Everything a scenario produced."""

    moment: Moment
    thread: str
    attempts: list[Attempt]
    records: list[tuple[int, str]]
    final: dict[str, Any]
    final_scan: BlobScan


def _step(token: str) -> int:
    return int(token.split(":")[0])


def _plan(seed: int, schedule: list[str]) -> list[Moment]:
    """20 moments of a seeded mix of kinds; each kind's moments stratified over the run.

    The j-th of the n moments of a kind falls at a random point of the j-th n-th of the run
    (its node runs, checkpoint steps or blob uploads), so every kind is spread over the run.
    """
    rng = random.Random(seed)
    kinds = list(_MIX)
    rng.shuffle(kinds)
    last_step = _step(schedule[-1])
    seen: Counter[str] = Counter()
    moments: list[Moment] = []
    for kind in kinds:
        where = (seen[kind] + rng.random()) / _MIX.count(kind)
        seen[kind] += 1
        durability = "sync" if rng.random() < 0.25 else "async"
        kill_resume = rng.random() < 0.25
        token = schedule[min(int(where * len(schedule)), len(schedule) - 1)]
        if kind in ("external", "node", "writes-before", "writes-after"):
            offset = rng.uniform(0.0, 2.5 * NODE_DELAY) if kind == "external" else 0.0
            moments.append(
                Moment(
                    kind, token=token, offset=offset, durability=durability, kill_resume=kill_resume
                )
            )
        elif kind in ("put-before", "put-after"):
            step = -1 + int(where * (last_step + 2))  # checkpoints have steps -1 .. last_step
            moments.append(Moment(kind, step=step, durability=durability, kill_resume=kill_resume))
        else:
            index = 1 + int(where * BLOBS_PER_RUN)
            moments.append(
                Moment(kind, index=index, durability=durability, kill_resume=kill_resume)
            )
    return moments


def _reference() -> Reference:
    saver = InMemorySaver()
    graph = compiled_reference(saver)
    config = thread_config("reference")
    graph.invoke(initial_state(), config)
    tup = saver.get_tuple(config)
    assert tup is not None
    values = tup.checkpoint["channel_values"]
    return Reference(list(values["log"]), summary(values))


def _run_scenario(
    ctx: ForkServerContext,
    checker: FoundryCheckpointer,
    base: dict[str, Any],
    moment: Moment,
    schedule: list[str],
    seed: int,
) -> Outcome:
    rng = random.Random(seed)
    thread = f"kill-{uuid.uuid4().hex[:10]}"
    workdir = Path(base["workdir"]) / thread
    workdir.mkdir()
    side_log = str(workdir / "side.log")
    kill, external = moment.spec(), moment.external()
    attempts: list[Attempt] = []
    for number in range(1, MAX_ATTEMPTS + 1):
        job = {
            **base,
            "thread": thread,
            "side_log": side_log,
            "attempt": number,
            "kill": kill,
            "durability": moment.durability,
            "node_delay": NODE_DELAY,
            "error_file": str(workdir / f"error-{number}.txt"),
        }
        code = run_worker(ctx, run_langgraph, job, external=external)
        attempt = Attempt(number, code, kill)
        attempts.append(attempt)
        if code == 0:
            break
        assert code == _KILLED, f"{thread} attempt {number} exited {code}:\n{worker_error(job)}"
        snap = snapshot_thread(checker, thread)
        attempt.captured, attempt.steps = snap.tokens, snap.steps
        attempt.scan = scan_blobs(checker, thread)
        kill, external = None, None
        if number == 1 and moment.kill_resume:
            ran = [schedule.index(t) for _, t in read_side_log(side_log)]
            later = schedule[max(ran, default=-1) + 1 :]
            if later:
                kill = {"kind": "node", "token": rng.choice(later)}
    return Outcome(
        moment,
        thread,
        attempts,
        read_side_log(side_log),
        final_values(checker, thread),
        scan_blobs(checker, thread),
    )


def _problems(outcome: Outcome, reference: Reference) -> list[str]:
    """Every broken promise of one scenario, as readable lines."""
    where = f"{outcome.thread} ({outcome.moment})"
    out: list[str] = []
    first, last = outcome.attempts[0], outcome.attempts[-1]
    if last.code != 0:
        out.append(f"{where}: not finished after {len(outcome.attempts)} attempts")
    if outcome.moment.kind != "external" and first.code != _KILLED:
        out.append(f"{where}: the kill switch never fired")
    for attempt in outcome.attempts:
        if attempt.kill is not None and attempt.code != _KILLED:
            out.append(f"{where}: attempt {attempt.number} was not killed by {attempt.kill}")
    if outcome.final != reference.final:
        out.append(f"{where}: final state {outcome.final} != uninterrupted {reference.final}")
    scans = [a.scan for a in outcome.attempts if a.scan is not None] + [outcome.final_scan]
    for scan in scans:
        out.extend(f"{where}: dangling blob reference {d}" for d in scan.dangling)
    by_attempt: dict[int, list[str]] = {}
    for number, token in outcome.records:
        by_attempt.setdefault(number, []).append(token)
    for number, tokens in by_attempt.items():
        if len(tokens) != len(set(tokens)):
            out.append(f"{where}: attempt {number} ran a node twice: {tokens}")
    ran_at_all = {t for _, t in outcome.records}
    if ran_at_all != set(reference.schedule):
        out.append(f"{where}: node runs {sorted(ran_at_all)} != {sorted(reference.schedule)}")
    for attempt in outcome.attempts:
        if attempt.code != _KILLED:
            continue
        later = {t for n, t in outcome.records if n > attempt.number}
        again = sorted(attempt.captured & later)
        if again:
            out.append(
                f"{where}: {again} ran again after attempt {attempt.number} was killed although "
                "a saved checkpoint already held their writes"
            )
        kill = attempt.kill or {}
        token = str(kill.get("token"))
        if kill.get("kind") == "node" and (token in attempt.captured or token not in later):
            out.append(f"{where}: {token}, killed before returning, was not run again")
        if kill.get("kind") == "writes-after":
            # The writes belong to the checkpoint of the previous step. With durability="async"
            # LangGraph may save them before that checkpoint (which the kill can then prevent):
            # such orphan writes are rightly not resumed from. Once the checkpoint is there,
            # the writes must be found on it.
            parent_saved = _step(token) - 1 in attempt.steps
            if outcome.moment.durability == "sync" and not parent_saved:
                out.append(f"{where}: durability=sync, but the checkpoint of {token} is missing")
            if parent_saved and token not in attempt.captured:
                out.append(f"{where}: the saved writes of {token} are not on their checkpoint")
        if kill.get("kind") == "put-after":
            held = {t for t in reference.schedule if _step(t) <= kill["step"]}
            if not held <= attempt.captured:
                out.append(
                    f"{where}: checkpoint step {kill['step']} lost {held - attempt.captured}"
                )
    return out


def _report(mode: str, outcomes: list[Outcome]) -> str:
    kills = sum(a.code == _KILLED for o in outcomes for a in o.attempts)
    reruns = sum(
        len({t for n, t in o.records if n > a.number} & {t for n, t in o.records if n == a.number})
        for o in outcomes
        for a in o.attempts
        if a.code == _KILLED
    )
    mid_step = sum(
        1
        for o in outcomes
        for a in o.attempts
        if a.code == _KILLED and any(t not in a.captured for n, t in o.records if n == a.number)
    )
    references = sum(o.final_scan.references for o in outcomes)
    return (
        f"[{mode}] {len(outcomes)} scenarios, {kills} kills ({mid_step} of them left node runs "
        f"unsaved), {reruns} node runs legitimately repeated, {references} blob references checked"
    )


@dataclass
class KillEnv:
    """One mode of the test: a saver in this process reading what the workers wrote, and the
    workers' base job."""

    mode: str
    checker: FoundryCheckpointer
    base: dict[str, Any]


@pytest.fixture
def kill_env(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KillEnv]:
    """``"local"``: the embedded store under a fresh state root; ``"emulator"``: hosted mode
    against the emulator process (``--data``). Both spill to a ``LocalSpill`` directory."""
    mode = str(request.param)
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    for name in (
        "FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING",
        "FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    spill_dir = tmp_path / "spill"
    base: dict[str, Any] = {
        "state_root": str(tmp_path / "state"),
        "spill_dir": str(spill_dir),
        "workdir": str(tmp_path),
    }
    kwargs: dict[str, Any] = {}
    if mode == "emulator":
        emu: EmulatorProcess = request.getfixturevalue("emulator_proc")
        prefix = f"rel{uuid.uuid4().hex[:10]}"
        monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "1")
        monkeypatch.setenv("FOUNDRY_PROJECT_ENDPOINT", emu.endpoint)
        base.update(endpoint=emu.endpoint, ca_file=emu.ca_file, store_prefix=prefix)
        kwargs = {
            "credential": EmulatorCredential("alice"),
            "endpoint": emu.endpoint,
            "connection_verify": emu.ca_file,
            "store_prefix": prefix,
        }
    else:
        monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    saver = FoundryCheckpointer(spill=LocalSpill(spill_dir, fsync=False), **kwargs)
    try:
        yield KillEnv(mode, saver, base)
    finally:
        saver.close()


@pytest.mark.parametrize("kill_env", ["local", "emulator"], indirect=True)
def test_kill_9_and_resume(
    kill_env: KillEnv, worker_ctx: ForkServerContext, capsys: pytest.CaptureFixture[str]
) -> None:
    checker, base = kill_env.checker, kill_env.base
    reference = _reference()
    assert len(reference.schedule) == 13 and _step(reference.schedule[-1]) == 12
    moments = _plan(SEED, reference.schedule)
    assert len(moments) == KILLS
    with ThreadPoolExecutor(PARALLEL) as pool:
        outcomes = list(
            pool.map(
                lambda pair: _run_scenario(
                    worker_ctx, checker, base, pair[1], reference.schedule, SEED + pair[0]
                ),
                enumerate(moments),
            )
        )
    problems = [p for o in outcomes for p in _problems(o, reference)]
    assert not problems, "\n".join(problems)
    assert sum(o.final_scan.references for o in outcomes) >= KILLS  # the scans saw blobs
    with capsys.disabled():
        print("\n" + _report(kill_env.mode, outcomes))
