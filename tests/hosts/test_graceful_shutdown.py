"""SIGTERM right after a node finished: the node does not run again, in local and hosted mode.

A redeploy stops the old process with SIGTERM. The host (azure-ai-agentserver-invocations, test
app ``tests/hosts/apps/shutdown_agent.py``, wired as the LangGraph sample is) stops accepting
requests, cancels what still runs after its grace, runs its shutdown handler, and exits. What a
finished node wrote must be durable by then, even when it was still being written as the turn
was stopped: the store is made slow on purpose right before ``first`` returns (the emulator
delays every item write in hosted mode; the test holds the SQLite write lock of the embedded
store in local mode), the process is stopped as soon as ``first`` is done, and the store becomes
fast again only after the host has cancelled what was running. A new process then continues the
thread from its latest checkpoint.

Three ways a turn meets the SIGTERM:

* ``request``: the turn runs inside the request; the host lets it go on for its grace, then
  cancels it;
* ``background``: the handler answered ``202`` and runs the turn in a task of its own; the
  shutdown handler (``checkpointer.aclose``) runs while that task still runs, and the process
  ends by cancelling it. ``close()`` lets the saves in flight finish first (before this package
  flushed, the old process exited 0.4 s after SIGTERM and ``first`` ran again);
* ``background-unclosed``: the same, and nothing closes the checkpointer (as in a Responses host,
  whose one shutdown-handler slot holds its own handler): ending the host's loop cancels the
  saves' callers; the saves go on (they are shielded) and the interpreter's exit waits for them
  (unshielded, ``first`` ran again).

Each time the journal of the steps shows ``first`` ran once, in the old process; ``second`` (in
flight or not yet started at the SIGTERM) ended in the new one; ``third`` ran there; and the
thread holds each step's message once.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from foundry_checkpoint._loop import FLUSH_SECONDS

from .conftest import Platform

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

APPS = Path(__file__).resolve().parent / "apps"
APP = "shutdown_agent:app"
#: How long the store stays slow after the SIGTERM: past the host's grace for a running request
#: (hypercorn's ``graceful_timeout``, 3 s), so the request is cancelled with ``first``'s saves in
#: flight, and well inside the checkpointer's flush (``FLUSH_SECONDS``).
SLOW_SECONDS = 5.0
HOSTED_ENV = ("FOUNDRY_HOSTING_ENVIRONMENT", "FOUNDRY_PROJECT_ENDPOINT")


def _wait_for(predicate: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _journal(path: Path) -> list[tuple[str, int]]:
    """(step:event, process id) per line of the app's journal."""
    if not path.exists():
        return []
    words = path.read_text(encoding="utf-8").split()
    return [(words[i], int(words[i + 1])) for i in range(0, len(words) - 1, 2)]


class _WriteLock:
    """The write lock of the embedded store's SQLite file, held from this process (a slow disk,
    or another process writing) until :meth:`release`."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._taken = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        db = sqlite3.connect(self._path, timeout=30, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            self._taken.set()
            self._release.wait(60)
            db.execute("ROLLBACK")
        finally:
            db.close()

    def take(self) -> None:
        self._thread.start()
        assert self._taken.wait(30)

    def release(self) -> None:
        self._release.set()
        self._thread.join(30)


@pytest.mark.parametrize("turn", ["request", "background", "background-unclosed"])
@pytest.mark.parametrize("mode", ["local", "hosted"])
def test_sigterm_right_after_a_node_finished_does_not_run_it_again(
    platform: Platform, tmp_path: Path, mode: str, turn: str
) -> None:
    journal = tmp_path / "journal.txt"
    gate = journal.with_name(journal.name + ".gate")
    release = journal.with_name(journal.name + ".release")
    platform.env["SHUTDOWN_JOURNAL"] = str(journal)
    platform.env["SHUTDOWN_CLOSE"] = "0" if turn.endswith("unclosed") else "1"
    if mode == "local":
        for name in HOSTED_ENV:
            platform.env.pop(name)
    host = platform.start(APP, apps=APPS)
    old = host.process.pid
    answers: list[object] = []
    body = {"thread_id": "t", "message": "hi", "background": turn != "request"}

    def send() -> None:
        try:
            answers.append(host.post("alice", "/invocations", body))
        except httpx.HTTPError as error:  # a turn in the request: the stop cuts it off
            answers.append(error)

    request = threading.Thread(target=send, daemon=True)
    request.start()
    _wait_for(lambda: ("first:start", old) in _journal(journal), "first to start")

    # The store turns slow while `first` finishes: its saves are in flight when the host stops.
    lock: _WriteLock | None = None
    if mode == "hosted":
        for route in ("create_item", "put_item"):
            platform.emulator.inject(route, status=None, delay=SLOW_SECONDS, times=None)
    else:
        lock = _WriteLock(platform.root / "state" / "foundry_checkpoint" / "state.sqlite3")
        lock.take()
    gate.touch()
    _wait_for(lambda: ("first:end", old) in _journal(journal), "first to finish")
    stopped = time.monotonic()
    fast_again = threading.Timer(
        SLOW_SECONDS, platform.emulator.clear_faults if lock is None else lock.release
    )
    fast_again.start()
    host.stop()  # SIGTERM, right after `first` finished
    took = time.monotonic() - stopped
    fast_again.join()
    request.join(30)
    if turn != "request":  # answered at once, before the stop
        [accepted] = answers
        assert isinstance(accepted, httpx.Response) and accepted.status_code == 202, accepted
    assert host.process.returncode == 0, host.log_text()[-4000:]
    assert took < SLOW_SECONDS + FLUSH_SECONDS, took
    print(f"\n[{turn}/{mode}] the old process exited {took:.1f} s after SIGTERM")

    release.touch()
    host = platform.start(APP, apps=APPS)
    resumed = host.post("alice", "/invocations", {"thread_id": "t", "action": "resume"})
    assert resumed.status_code == 200, (resumed.text, host.log_text()[-4000:])
    assert resumed.json()["messages"] == ["hi", "first", "second", "third"]

    new = host.process.pid
    steps = _journal(journal)
    print(f"[{turn}/{mode}] journal: {steps}")
    # `first` ran once, in the old process; `second` (in flight, or not yet started, when the
    # old process stopped) ended in the new one, and `third` ran there.
    assert [step for step in steps if step[0].startswith("first:")] == [
        ("first:start", old),
        ("first:end", old),
    ]
    assert [step for step in steps if step[0].endswith(":end")] == [
        ("first:end", old),
        ("second:end", new),
        ("third:end", new),
    ]
    assert steps[-4:] == [
        ("second:start", new),
        ("second:end", new),
        ("third:start", new),
        ("third:end", new),
    ]
