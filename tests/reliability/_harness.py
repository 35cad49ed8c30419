"""The test-process side of the kill -9 tests: workers, kills, the emulator process, checks.

Workers are forked from a ``multiprocessing`` fork server that preloads
:mod:`tests.reliability._worker` (so each starts in milliseconds), and are killed either by
their own kill switch (an exact moment) or from here: :func:`run_worker` waits until the worker's
side log shows a chosen token, waits a chosen offset and sends ``SIGKILL``.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from foundry_checkpoint import FoundryCheckpointer, MissingBlobError
from foundry_checkpoint._langgraph._records import (
    KIND_CHECKPOINT,
    KIND_WRITES,
    TAG_KIND,
    unpack_checkpoint,
)

from ._worker import GraphState, done_marker, read_side_log, thread_config

REPO = Path(__file__).resolve().parents[2]
WORKER_MODULE = "tests.reliability._worker"
_POLL = 0.002
_JOIN_TIMEOUT = 120.0


def worker_context() -> ForkServerContext:
    """The fork-server context, with the worker module preloaded in the server.

    The preload takes effect when the fork server starts (on the first worker of the session);
    a server already started without it still works, only its workers start slower.
    """
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([WORKER_MODULE])
    return ctx


@dataclass(frozen=True)
class ExternalKill:
    """Kill the worker ``offset`` seconds after ``token`` of its attempt enters its side log."""

    token: str
    offset: float


def run_worker(
    ctx: ForkServerContext,
    target: Callable[[Mapping[str, Any]], None],
    job: Mapping[str, Any],
    *,
    external: ExternalKill | None = None,
) -> int:
    """Run one worker to its end and return its exit code (``-9`` when killed).

    Example::

        kill = ExternalKill("4:loop", 0.01)
        code = run_worker(worker_context(), run_langgraph, job, external=kill)
        assert code in (0, -signal.SIGKILL)
    """
    proc = ctx.Process(target=target, args=(dict(job),), daemon=True)
    proc.start()
    try:
        if external is not None:
            _kill_after(proc, job, external)
        proc.join(_JOIN_TIMEOUT)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
            raise AssertionError(f"worker {job} did not finish")
    code = proc.exitcode
    proc.close()
    assert code is not None
    if code == _STATUS_LOST:
        return _recovered_status(job)
    return code


# The fork server reports 255 when it could not pass a child's status on (its status pipe
# broke; CPython's popen_forkserver). Under load this happens, rarely, to a worker that
# killed itself or finished. The worker's own files tell which: a traceback means it failed
# (1), the done marker that it finished (0), neither that it died by SIGKILL.
_STATUS_LOST = 255


def _recovered_status(job: Mapping[str, Any]) -> int:
    if Path(job["error_file"]).exists():
        return 1
    if done_marker(job).exists():
        return 0
    return -signal.SIGKILL


def _kill_after(proc: BaseProcess, job: Mapping[str, Any], external: ExternalKill) -> None:
    wanted = (int(job["attempt"]), external.token)
    while proc.is_alive() and wanted not in read_side_log(job["side_log"]):
        time.sleep(_POLL)
    if not proc.is_alive():
        return
    time.sleep(external.offset)
    assert proc.pid is not None
    with suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)


def worker_error(job: Mapping[str, Any]) -> str:
    """The traceback a worker left in its error file ('' when none)."""
    path = Path(job["error_file"])
    return path.read_text() if path.exists() else ""


@dataclass(frozen=True)
class EmulatorProcess:
    """A running ``python -m foundry_checkpoint.emulator`` process."""

    endpoint: str
    ca_file: str
    pid: int


@contextmanager
def emulator_process(data: Path) -> Iterator[EmulatorProcess]:
    """Start the emulator as its own process on ``data`` (SQLite) and stop it afterwards.

    Example::

        with emulator_process(tmp_path / "state.sqlite3") as emu:
            job["endpoint"], job["ca_file"] = emu.endpoint, emu.ca_file
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "foundry_checkpoint.emulator", "--port", "0", "--data", str(data)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        found: dict[str, str] = {}
        while len(found) < 2:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"the emulator exited early with {proc.wait()}")
            name, _, value = line.strip().partition(": ")
            if name in ("endpoint", "ca_file"):
                found[name] = value
        yield EmulatorProcess(found["endpoint"], found["ca_file"], proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- checks on a LangGraph thread -----------------------------------------------------------------
@dataclass
class ThreadSnapshot:
    """What a thread's saved checkpoints hold: node runs captured, and checkpoint steps."""

    tokens: set[str] = field(default_factory=set)
    steps: list[int] = field(default_factory=list)


def snapshot_thread(saver: FoundryCheckpointer, thread_id: str) -> ThreadSnapshot:
    """Node runs captured by the thread's saved checkpoints: in a ``log`` value or pending write.

    Listing loads every checkpoint with its channel values (spilled blobs included, verified by
    sha256) and pending writes, so a dangling reference raises here.

    Example::

        snap = snapshot_thread(saver, "kill-1")
        assert "4:loop" not in snap.tokens or 3 in snap.steps
    """
    snap = ThreadSnapshot()
    for tup in saver.list(thread_config(thread_id)):
        snap.steps.append(int(tup.metadata["step"]))
        snap.tokens.update(tup.checkpoint["channel_values"].get("log", []))
        for _task, channel, value in tup.pending_writes or []:
            if channel == "log":
                snap.tokens.update(value)
    return snap


@dataclass
class BlobScan:
    """What :func:`scan_blobs` looked at and found."""

    items: int = 0
    references: int = 0
    dangling: list[str] = field(default_factory=list)


def scan_blobs(saver: FoundryCheckpointer, thread_id: str) -> BlobScan:
    """Every checkpoint and writes item of the thread, raw: does each referenced blob exist?

    Reads item values directly (also orphans no checkpoint lists), decodes spilled items and
    fetches every channel blob a checkpoint item names (each distinct blob once).

    Example::

        assert scan_blobs(saver, "kill-1").dangling == []
    """
    core = saver._core

    async def scan() -> BlobScan:
        report = BlobScan()
        scope = await core.scope(thread_id)
        spill = core.spill
        namespace = await scope.namespace(create=False)
        named: dict[str, str] = {}  # digest -> the first checkpoint item naming it
        for key in await scope.keys():
            kind = (key.tags or {}).get(TAG_KIND)
            if kind not in (KIND_CHECKPOINT, KIND_WRITES):
                continue
            item = await scope.store.get_item(key.key)
            if item is None:
                continue
            report.items += 1
            try:
                payload = await scope.decode(item.value, key=key.key)  # fetches a spilled item
            except MissingBlobError as exc:
                report.dangling.append(f"{key.key}: {exc}")
                continue
            if "s" in item.value:
                report.references += 1
            if kind == KIND_CHECKPOINT:
                for digest in unpack_checkpoint(payload, where=key.key).digests():
                    report.references += 1
                    named.setdefault(digest, key.key)
        for digest, holder in sorted(named.items()):
            if spill is None or namespace is None:
                report.dangling.append(f"{holder}: no spill store for blob {digest}")
                continue
            try:
                await spill.get(namespace, digest)
            except MissingBlobError as exc:
                report.dangling.append(f"{holder}: {exc}")
        return report

    return core.run(scan())


def summary(values: Mapping[str, Any]) -> dict[str, Any]:
    """The graph's state channels, large byte strings replaced by their sha256 (short diffs)."""
    return {
        k: hashlib.sha256(v).hexdigest() if isinstance(v, bytes) else v
        for k, v in sorted(values.items())
        if k in GraphState.__annotations__
    }


def final_values(saver: FoundryCheckpointer, thread_id: str) -> dict[str, Any]:
    """The thread's latest channel values, summarised."""
    tup = saver.get_tuple(thread_config(thread_id))
    assert tup is not None, f"thread {thread_id} has no checkpoint"
    return summary(tup.checkpoint["channel_values"])
