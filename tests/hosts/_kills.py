"""What the kill tests share: the side-effect journal, kill points, local mode and the counts.

A test app appends one JSON line per event to the file named by ``KILL_JOURNAL``: ``start``
when a step (a MAF executor, a LangGraph node) begins and ``effect`` when it performs its side
effect. The test kills the host process (SIGKILL) when the journal shows a chosen event, after a
seeded random delay, restarts it, and reads the journal again: a step whose effect is journalled
twice ran again, which is allowed only for the step that was in flight when the process died.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundry_checkpoint.emulator import FoundryEmulator

from .conftest import Host, Platform

#: How long each item write waits while a kill aims at the writing of a large value's chunks.
SLOW_WRITE_SECONDS = 0.25

#: Variables that make a process a Foundry-hosted agent; local mode runs without them.
_HOSTED_ONLY = ("FOUNDRY_HOSTING_ENVIRONMENT", "FOUNDRY_PROJECT_ENDPOINT")


def prepare(platform: Platform, mode: str) -> Path:
    """Point the platform's processes at a fresh journal; local mode drops the hosting variables.

    In local mode the task runtime keeps its tasks under ``AGENTSERVER_STATE_ROOT/tasks``, a
    Responses host its responses under ``.../responses`` and the checkpointer its embedded store
    under the same root: a restarted process finds all three there.
    """
    journal = platform.root / "journal.jsonl"
    platform.env["KILL_JOURNAL"] = str(journal)
    if mode == "local":
        for name in _HOSTED_ONLY:
            platform.env.pop(name, None)
    return journal


def events(journal: Path) -> list[dict[str, Any]]:
    if not journal.exists():
        return []
    return [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]


def wait_until(check: Callable[[], bool], seconds: float, what: str, host: Host) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} in {seconds}s:\n{host.log_text()[-4000:]}")
        if host.process.poll() is not None:
            raise AssertionError(f"{host.target} exited while waiting for {what}")
        time.sleep(0.01)


def kill_at(
    host: Host,
    journal: Path,
    run: str,
    step: int,
    event: str,
    delay: float,
    *,
    slow_writes: FoundryEmulator | None = None,
) -> None:
    """SIGKILL ``host`` ``delay`` seconds after the journal shows ``event`` of ``step``.

    With ``slow_writes``, every item write the emulator receives from then on until the kill
    waits :data:`SLOW_WRITE_SECONDS` first: the chunk items of a large value are then written
    one by one over a window the kill can land in.
    """

    def seen() -> bool:
        return any(
            e["run"] == run and e["step"] == step and e["event"] == event for e in events(journal)
        )

    wait_until(seen, 60, f"{event} of step {step} in {run}", host)
    if slow_writes is not None:
        for route in ("put_item", "create_item"):
            slow_writes.inject(route, status=None, delay=SLOW_WRITE_SECONDS, times=None)
    try:
        time.sleep(delay)
        host.kill()
    finally:
        if slow_writes is not None:
            slow_writes.clear_faults()


def in_flight(journal: Path, run: str) -> int | None:
    """The step of ``run`` that had started last when the process died (None: none had)."""
    started = [e["step"] for e in events(journal) if e["run"] == run and e["event"] == "start"]
    return max(started) if started else None


def effects(journal: Path, run: str) -> Counter[int]:
    return Counter(e["step"] for e in events(journal) if e["run"] == run and e["event"] == "effect")


def local_tasks(root: Path) -> list[dict[str, Any]]:
    """The task records the SDK's local task store keeps under the state root (local mode)."""
    found = []
    for path in (root / "state" / "tasks").rglob("*.json"):
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(record, dict) and "status" in record:
            found.append(record)
    return found


@dataclass
class Counts:
    """What a kill test did and saw, printed and asserted at the end.

    The printed line is shown again at the end of the pytest run (``conftest.py``).
    """

    label: str
    kills: int = 0
    recoveries: int = 0
    repeated: int = 0
    orphans: int = 0
    points: Counter[str] = field(default_factory=Counter)

    def report(self) -> str:
        points = ", ".join(f"{k}={v}" for k, v in sorted(self.points.items()))
        line = (
            f"{self.label}: kills={self.kills} recoveries={self.recoveries} "
            f"repeated={self.repeated} orphans={self.orphans}" + (f" ({points})" if points else "")
        )
        print(line)
        return line
