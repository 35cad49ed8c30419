"""Microsoft Agent Framework units: one workflow and one history through every storage.

Storages (``SUBJECTS``): ``InMemoryCheckpointStorage``, ``FileCheckpointStorage``,
``FoundryCheckpointStorage`` (local default, ``local_backend="sdk"``, hosted against the
emulator) and agent-framework-foundry-hosting's ``FoundryCheckpointStore`` against the same
emulator. That store takes its client settings from the environment only, so the benchmark
subclasses it to pass the emulator's credential, endpoint and CA file to
``FoundryStateStore.get_or_create``; every call it makes is otherwise its own.

Workloads:

* ``run``: a workflow whose executor sends itself a ~1 KB message for N supersteps (one
  checkpoint per superstep); time per superstep;
* ``latest``: ``get_latest`` on histories of 10 / 100 / 1,000 checkpoints (a lineage chain,
  the newest written a second after the rest); time and store requests.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agent_framework import (
    Executor,
    FileCheckpointStorage,
    InMemoryCheckpointStorage,
    WorkflowBuilder,
    WorkflowCheckpoint,
    WorkflowContext,
    handler,
)

from ._common import Budget, LocalCounters, median, ms, sleep_to_next_second

__all__ = ["SUBJECTS", "run_unit"]

SUBJECTS: dict[str, str] = {
    "memory": "InMemoryCheckpointStorage",
    "file": "FileCheckpointStorage",
    "fc-local": "FoundryCheckpointStorage (local, embedded SQLite)",
    "fc-sdk": 'FoundryCheckpointStorage (local_backend="sdk")',
    "fc-hosted": "FoundryCheckpointStorage (hosted, emulator)",
    "fh-hosted": "FoundryCheckpointStore, agent-framework-foundry-hosting (hosted, emulator)",
}

WORKFLOW = "bench-loop"


class _Loop(Executor):
    """Sends itself the message back until ``limit`` supersteps have run."""

    def __init__(self, limit: int) -> None:
        super().__init__(id="loop")
        self.limit = limit

    @handler
    async def step(
        self, message: dict[str, Any], ctx: WorkflowContext[dict[str, Any], str]
    ) -> None:
        count = int(message["i"]) + 1
        if count >= self.limit:
            await ctx.yield_output(f"done after {count}")
            return
        await ctx.send_message({"i": count, "note": message["note"]})


def loop_workflow(supersteps: int, storage: Any) -> Any:
    """The workflow every MAF section runs: one executor looping ``supersteps`` times."""
    loop = _Loop(supersteps)
    return (
        WorkflowBuilder(
            name=WORKFLOW,
            start_executor=loop,
            max_iterations=supersteps + 10,
            checkpoint_storage=storage,
        )
        .add_edge(loop, loop)
        .build()
    )


class Subject:
    """One storage to measure: how to open it and what it counts."""

    def __init__(self, key: str, workdir: Path) -> None:
        self.key = key
        self.workdir = workdir
        self.local = LocalCounters()
        self.emulator: Any = None
        self._opened = 0

    def skip_reason(self) -> str | None:
        """Why this storage cannot run here, or None."""
        if self.key.startswith("fc-"):
            try:
                from foundry_checkpoint_maf import FoundryCheckpointStorage  # noqa: F401
            except ImportError as exc:
                return f"FoundryCheckpointStorage not importable: {exc}"
        if self.key == "fh-hosted":
            try:
                from agent_framework_foundry_hosting import _state_store  # noqa: F401
            except ImportError as exc:
                return f"agent-framework-foundry-hosting not importable: {exc}"
        return None

    @contextlib.asynccontextmanager
    async def open(self, context_id: str) -> AsyncIterator[Any]:
        """A storage for ``context_id`` (fresh for in-memory and file storages)."""
        self._opened += 1
        if self.key == "memory":
            yield InMemoryCheckpointStorage()
        elif self.key == "file":
            yield FileCheckpointStorage(self.workdir / f"file-{self._opened}-{context_id}")
        elif self.key == "fh-hosted":
            yield _hosting_store(context_id, self.emulator)
        else:
            from foundry_checkpoint_maf import FoundryCheckpointStorage

            kwargs: dict[str, Any] = {"store_prefix": "bench"}
            if self.key == "fc-sdk":
                kwargs["local_backend"] = "sdk"
            if self.key == "fc-hosted":
                from foundry_checkpoint.emulator import EmulatorCredential

                kwargs.update(
                    credential=EmulatorCredential("alice"),
                    endpoint=self.emulator.endpoint,
                    **self.emulator.client_kwargs(),
                )
            self.local.install(sdk=self.key == "fc-sdk")
            storage = FoundryCheckpointStorage(context_id, **kwargs)
            try:
                yield storage
            finally:
                await storage.aclose()

    def reset(self) -> None:
        """Zero every counter."""
        self.local.reset()
        if self.emulator is not None:
            self.emulator.reset()

    def counts(self) -> dict[str, Any]:
        """Store requests, items and bytes since the last reset (Foundry-backed storages)."""
        if self.emulator is not None:
            out = dict(self.emulator.counts())
            if self.key.startswith("fc-"):
                local = self.local.snapshot()
                out.update(spill_puts=local["spill_puts"], spill_bytes=local["spill_bytes"])
            return out
        if self.key.startswith("fc-"):
            return self.local.snapshot()
        return {}


def _hosting_store(context_id: str, emulator: Any) -> Any:
    from agent_framework_foundry_hosting._state_store import FoundryCheckpointStore
    from azure.ai.agentserver.core import FoundryAgentRequestContext
    from azure.ai.agentserver.core.storage import FoundryStateStore

    from foundry_checkpoint.emulator import EmulatorCredential

    class _EmulatorFoundryCheckpointStore(FoundryCheckpointStore):
        """The hosting package's store, pointed at the emulator (client settings only)."""

        async def _get_store(self) -> FoundryStateStore:
            return await FoundryStateStore.get_or_create(
                f"{self.DEFAULT_ROOT_SCOPE}/{self.context_id}",
                EmulatorCredential("alice"),
                emulator.endpoint,
                user_isolation=True,
                **emulator.client_kwargs(),
            )

    return _EmulatorFoundryCheckpointStore(context_id, FoundryAgentRequestContext())


def _per(counts: dict[str, Any], n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("items", "item_bytes", "file_bytes", "spill_puts", "spill_bytes"):
        if counts.get(name):
            out[name] = counts[name] / n
    requests = {k: v / n for k, v in sorted(counts.get("requests", {}).items()) if v}
    if requests:
        out["requests"] = requests
    return out


async def run(subject: Subject, scale: dict[str, Any]) -> dict[str, Any]:
    """A workflow of N supersteps, one checkpoint each."""
    supersteps, payload = scale["supersteps"], "x" * scale["payload"]
    per_step: list[float] = []
    counts: dict[str, Any] = {}
    written = 0
    for rep in range(scale["reps"] + 1):  # the first run warms imports and clients up
        async with subject.open(f"run-{rep}") as storage:
            workflow = loop_workflow(supersteps, storage)
            subject.reset()
            start = time.perf_counter()
            result = await workflow.run({"i": 0, "note": payload})
            elapsed = time.perf_counter() - start
            outputs = result.get_outputs()
            if outputs != [f"done after {supersteps}"]:
                raise RuntimeError(f"unexpected workflow output {outputs!r}")
            if rep == 1:
                counts = subject.counts()
                written = len(await storage.list_checkpoint_ids(workflow_name=WORKFLOW))
            if rep:
                per_step.append(elapsed / supersteps)
    return {
        "supersteps": supersteps,
        "reps": scale["reps"],
        "ms_per_superstep": ms(median(per_step)),
        "checkpoints": written,
        "per_superstep": _per(counts, supersteps),
    }


def _checkpoint(index: int, previous: str | None, note: str) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=WORKFLOW,
        graph_signature_hash="bench",
        previous_checkpoint_id=previous,
        state={"i": index, "note": note},
        iteration_count=index,
    )


async def latest(subject: Subject, scale: dict[str, Any]) -> dict[str, Any]:
    """``get_latest`` on histories of growing length."""
    note = "y" * 1000
    budget = Budget(scale["budget_s"])
    out: dict[str, Any] = {"sizes": {}, "capped": False}
    async with contextlib.AsyncExitStack() as stack:
        storages: dict[int, Any] = {}
        last: dict[int, str | None] = {}
        written: dict[int, int] = {}
        for size in scale["sizes"]:
            storage = await stack.enter_async_context(subject.open(f"latest-{size}"))
            storages[size], last[size], written[size] = storage, None, 0
            while written[size] < size - 1 and not budget.spent:
                checkpoint = _checkpoint(written[size], last[size], note)
                last[size] = await storage.save(checkpoint)
                written[size] += 1
        sleep_to_next_second()
        for size, storage in storages.items():
            checkpoint = _checkpoint(written[size], last[size], note)
            last[size] = await storage.save(checkpoint)
            written[size] += 1
        for size, storage in storages.items():
            reps = scale["slow_reads"] if size >= 1000 else scale["reads"]
            await storage.get_latest(workflow_name=WORKFLOW)  # warm-up
            subject.reset()
            times: list[float] = []
            correct = True
            for _ in range(reps):
                start = time.perf_counter()
                found = await storage.get_latest(workflow_name=WORKFLOW)
                times.append(time.perf_counter() - start)
                correct = correct and found is not None and found.checkpoint_id == last[size]
            out["sizes"][str(size)] = {
                "checkpoints": written[size],
                "ms": ms(median(times)),
                "correct": correct,
                **_per(subject.counts(), reps),
            }
            out["capped"] = out["capped"] or written[size] < size
    return out


async def run_unit(
    workload: str,
    subject_key: str,
    scale: dict[str, Any],
    workdir: Path,
    *,
    pg_dsn: str | None = None,
    emulator: Any = None,
) -> dict[str, Any]:
    """Run one workload for one storage in this process; returns its figures."""
    subject = Subject(subject_key, workdir)
    subject.emulator = emulator
    reason = subject.skip_reason()
    if reason is not None:
        return {"skipped": reason}
    if workload == "run":
        return await run(subject, scale)
    return await latest(subject, scale)
