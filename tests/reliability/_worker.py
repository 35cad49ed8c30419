"""The child-process side of the kill -9 tests: the graphs, the workflow and their entry points.

The test process starts each worker from a fork server that has this module preloaded, so a
worker starts in milliseconds instead of re-importing LangGraph. A worker is given one *job*
(a plain dict): which store to use, which thread or context to run, its attempt number, and
optionally a *kill switch* that makes it ``SIGKILL`` itself at an exact moment (inside a node,
before or after a checkpoint or writes save, after a spilled blob is written). The test process
also kills workers from outside at random moments.

Every node (LangGraph) or handler (MAF) appends ``{"a": attempt, "t": token}`` to an
append-only *side log* before returning, with one ``write`` on an ``O_APPEND`` descriptor, so a
``SIGKILL`` never leaves half a record. ``token`` names the step and node (``"4:loop"``) and is
also what the node writes into the graph state, so the test can tell which node runs were
captured by a saved checkpoint.

Example (what the test process does, in short)::

    ctx = multiprocessing.get_context("forkserver")
    proc = ctx.Process(target=run_langgraph, args=(job,))
    proc.start(); proc.join()
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import operator
import os
import random
import signal
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn, Protocol

from agent_framework import (
    CheckpointID,
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowCheckpoint,
    WorkflowContext,
    handler,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

from foundry_checkpoint import FoundryCheckpointer, LocalSpill
from foundry_checkpoint.emulator import EmulatorCredential
from foundry_checkpoint_maf import FoundryCheckpointStorage

__all__ = [
    "BIG_SIZE",
    "LOOP_UNTIL",
    "MAF_STAGES",
    "MAF_WORKFLOW",
    "GraphState",
    "append_side_log",
    "big_value",
    "build_graph",
    "build_workflow",
    "compiled_reference",
    "initial_state",
    "maf_initial",
    "read_side_log",
    "run_langgraph",
    "run_maf",
    "thread_config",
]

Job = Mapping[str, Any]

BIG_SIZE = 1_100_000
"""Bytes of the large channel values: over the 1 MB item limit, and random, so neither the
channel value nor a writes item holding it can be compressed into one item."""

LOOP_UNTIL = 8
"""The ``loop`` node runs until ``n`` reaches this."""

MAF_WORKFLOW = "reliability-chain"
MAF_STAGES = 10


# -- side log --------------------------------------------------------------------------------
def append_side_log(path: str | os.PathLike[str], attempt: int, token: str) -> None:
    """Append one record with a single ``write`` (atomic with respect to ``SIGKILL``).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     append_side_log(f"{d}/log", 1, "0:a")
        ...     read_side_log(f"{d}/log")
        [(1, '0:a')]
    """
    line = (json.dumps({"a": attempt, "t": token}) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_side_log(path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """Every ``(attempt, token)`` record, in append order (empty when the file is absent)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    records: list[tuple[int, str]] = []
    for line in text.splitlines():
        data = json.loads(line)
        records.append((int(data["a"]), str(data["t"])))
    return records


# -- kill switch -----------------------------------------------------------------------------
def _die() -> NoReturn:
    os.kill(os.getpid(), signal.SIGKILL)
    while True:  # pragma: no cover - SIGKILL cannot be caught
        time.sleep(1)


class _KillSwitch:
    """Kills this process with ``SIGKILL`` when the moment named by ``spec`` comes.

    ``spec`` keys: ``kind`` (``"node"``, ``"writes-before"``, ``"writes-after"``,
    ``"put-before"``, ``"put-after"``, ``"blob-after"``, ``"save-before"``, ``"save-after"``),
    ``token`` (node and writes kinds), ``step`` (put and save kinds), ``index`` (blob: the n-th
    blob written by this process, from 1).
    """

    def __init__(self, spec: Mapping[str, Any] | None) -> None:
        self._spec = dict(spec or {})
        self._blobs = 0

    def at(self, kind: str, *, token: str | None = None, step: object = None) -> None:
        spec = self._spec
        if spec.get("kind") != kind:
            return
        if "token" in spec and spec["token"] != token:
            return
        if "step" in spec and spec["step"] != step:
            return
        _die()

    def blob_written(self) -> None:
        self._blobs += 1
        if self._spec.get("kind") == "blob-after" and self._spec.get("index") == self._blobs:
            _die()


def _apply_env(job: Job) -> None:
    """The fork server's environment is the test process's at some past moment: set ours."""
    for name in (
        "FOUNDRY_HOSTING_ENVIRONMENT",
        "FOUNDRY_PROJECT_ENDPOINT",
        "FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING",
        "FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL",
    ):
        os.environ.pop(name, None)
    os.environ["AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING"] = "true"
    os.environ["AGENTSERVER_STATE_ROOT"] = str(job["state_root"])
    if job.get("endpoint"):
        os.environ["FOUNDRY_HOSTING_ENVIRONMENT"] = "1"
        os.environ["FOUNDRY_PROJECT_ENDPOINT"] = str(job["endpoint"])


def _client_kwargs(job: Job) -> dict[str, Any]:
    """Hosted mode against the emulator when the job names an endpoint; else local mode."""
    if not job.get("endpoint"):
        return {}
    return {
        "credential": EmulatorCredential(str(job.get("user", "alice"))),
        "endpoint": str(job["endpoint"]),
        "connection_verify": str(job["ca_file"]),
        "store_prefix": str(job["store_prefix"]),
    }


def _guarded(job: Job, body: Callable[[], None]) -> None:
    """Run ``body``; on an exception write the traceback to ``job["error_file"]`` and exit 1.

    A body that returns leaves :func:`done_marker` behind, which tells a finished worker from a
    killed one when the fork server loses the exit status (see ``_harness.run_worker``).
    """
    try:
        body()
    except BaseException:
        Path(job["error_file"]).write_text(traceback.format_exc())
        os._exit(1)
    done_marker(job).touch()


def done_marker(job: Job) -> Path:
    """The file a worker whose body returned leaves beside its error file."""
    return Path(job["error_file"]).with_suffix(".done")


class _KillingSpill(LocalSpill):
    """A :class:`LocalSpill` that reports each blob written to the kill switch."""

    def __init__(self, directory: str | os.PathLike[str], switch: _KillSwitch) -> None:
        super().__init__(directory, fsync=False)
        self._switch = switch

    async def put(self, namespace: str, data: bytes) -> str:
        digest = await super().put(namespace, data)
        self._switch.blob_written()
        return digest


# -- LangGraph -------------------------------------------------------------------------------
class GraphState(TypedDict, total=False):
    """The state of the test graph."""

    n: int
    log: Annotated[list[str], operator.add]
    big: bytes
    big2: bytes


def big_value(seed: int) -> bytes:
    """A deterministic, incompressible value of :data:`BIG_SIZE` bytes.

    Example:
        >>> len(big_value(1)), big_value(1) == big_value(1), big_value(1) == big_value(2)
        (1100000, True, False)
    """
    return random.Random(seed).randbytes(BIG_SIZE)


def initial_state() -> GraphState:
    """The input of a fresh run."""
    return {"n": 0, "log": []}


def thread_config(thread_id: str) -> RunnableConfig:
    """The run config of ``thread_id`` (the loop needs more than the default 25 steps)."""
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": 200}


_Update = Callable[[GraphState], GraphState]


class _NodeFn(Protocol):
    def __call__(self, state: GraphState, config: RunnableConfig) -> GraphState: ...


def _loop_update(state: GraphState) -> GraphState:
    n = state.get("n", 0) + 1
    out: GraphState = {"n": n}
    if n == LOOP_UNTIL // 2:
        out["big"] = big_value(3)
    return out


def _route(state: GraphState) -> str:
    return "loop" if state.get("n", 0) < LOOP_UNTIL else "z"


def build_graph(
    side_log: str | os.PathLike[str] | None,
    attempt: int,
    *,
    on_node: Callable[[str], None] | None = None,
    node_delay: float = 0.0,
) -> StateGraph[GraphState]:
    """``a -> (b1 | b2) -> c -> loop x LOOP_UNTIL -> z``: 13 steps, 13 node runs.

    ``a`` sets a large value, ``b2`` a second one and ``loop`` replaces the first halfway, so
    checkpoints reference several spilled blobs and some writes items spill too. Each node
    logs ``"<step>:<node>"`` to ``side_log`` (when given) and to the ``log`` channel, then calls
    ``on_node(token)``.

    Example:
        >>> from langgraph.checkpoint.memory import InMemorySaver
        >>> graph = build_graph(None, 0).compile(checkpointer=InMemorySaver())
        >>> out = graph.invoke(initial_state(), thread_config("t"))
        >>> out["log"][:4], out["n"]
        (['1:a', '2:b1', '2:b2', '3:c'], 8)
    """
    updates: dict[str, _Update] = {
        "a": lambda s: {"big": big_value(1)},
        "b1": lambda s: {},
        "b2": lambda s: {"big2": big_value(2)},
        "c": lambda s: {},
        "loop": _loop_update,
        "z": lambda s: {},
    }
    builder: StateGraph[GraphState] = StateGraph(GraphState)

    def make(name: str, update: _Update) -> _NodeFn:
        def node(state: GraphState, config: RunnableConfig) -> GraphState:
            token = f"{config['metadata']['langgraph_step']}:{name}"
            if side_log is not None:
                append_side_log(side_log, attempt, token)
            if node_delay:
                time.sleep(node_delay)
            if on_node is not None:
                on_node(token)
            out = update(state)
            out["log"] = [token]
            return out

        return node

    for name, update in updates.items():
        builder.add_node(name, make(name, update))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b1")
    builder.add_edge("a", "b2")
    builder.add_edge("b1", "c")
    builder.add_edge("b2", "c")
    builder.add_edge("c", "loop")
    builder.add_conditional_edges("loop", _route, ["loop", "z"])
    builder.add_edge("z", END)
    return builder


def _log_tokens(writes: Sequence[tuple[str, Any]]) -> list[str]:
    return [t for channel, value in writes if channel == "log" for t in value]


class _KillingSaver(FoundryCheckpointer):
    """The real saver, with the kill switch consulted around ``put`` and ``put_writes``."""

    def __init__(self, switch: _KillSwitch, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._switch = switch

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        step = metadata.get("step")
        self._switch.at("put-before", step=step)
        out = super().put(config, checkpoint, metadata, new_versions)
        self._switch.at("put-after", step=step)
        return out

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        tokens = _log_tokens(writes)
        for token in tokens:
            self._switch.at("writes-before", token=token)
        super().put_writes(config, writes, task_id, task_path)
        for token in tokens:
            self._switch.at("writes-after", token=token)


def run_langgraph(job: Job) -> None:
    """Worker entry point: run (or resume) the test graph on ``job["thread"]`` to the end.

    Resumes from the thread's latest checkpoint when there is one (``invoke(None)``), else
    starts with :func:`initial_state`.
    """

    def body() -> None:
        _apply_env(job)
        switch = _KillSwitch(job.get("kill"))
        spill = _KillingSpill(job["spill_dir"], switch)
        saver = _KillingSaver(switch, spill=spill, **_client_kwargs(job))
        graph = build_graph(
            job["side_log"],
            int(job["attempt"]),
            on_node=lambda token: switch.at("node", token=token),
            node_delay=float(job.get("node_delay", 0.0)),
        ).compile(checkpointer=saver)
        config = thread_config(str(job["thread"]))
        start = None if saver.get_tuple(config) is not None else initial_state()
        graph.invoke(start, config, durability=job.get("durability", "async"))
        saver.close()

    _guarded(job, body)


def compiled_reference(checkpointer: Any) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The test graph compiled on ``checkpointer`` without a side log (for reference runs)."""
    return build_graph(None, 0).compile(checkpointer=checkpointer)


# -- Microsoft Agent Framework -----------------------------------------------------------------
class _Stage(Executor):
    """One superstep of the chain: appends its token to the list it receives and passes it on."""

    def __init__(
        self,
        index: int,
        *,
        side_log: str | None,
        attempt: int,
        switch: _KillSwitch,
        delay: float,
    ) -> None:
        super().__init__(id=f"stage{index}")
        self._index = index
        self._side_log = side_log
        self._attempt = attempt
        self._switch = switch
        self._delay = delay

    @handler
    async def run(self, acc: list[str], ctx: WorkflowContext[list[str], list[str]]) -> None:
        token = f"stage{self._index}"
        if self._side_log is not None:
            append_side_log(self._side_log, self._attempt, token)
        if self._delay:
            await asyncio.sleep(self._delay)
        self._switch.at("handler", token=token)
        digest = hashlib.sha256("|".join(acc).encode()).hexdigest()[:12]
        out = [*acc, f"{token}:{digest}"]
        ctx.set_state("acc", out)
        if self._index == MAF_STAGES - 1:
            ctx.set_state("result", "|".join(out))
            await ctx.yield_output(out)
        else:
            await ctx.send_message(out)


def maf_initial() -> list[str]:
    """The input of a fresh workflow run."""
    return ["start"]


def build_workflow(
    storage: Any,
    *,
    side_log: str | None = None,
    attempt: int = 0,
    kill: Mapping[str, Any] | None = None,
    delay: float = 0.0,
) -> Workflow:
    """A chain of :data:`MAF_STAGES` executors: one superstep each, a checkpoint after each.

    Example:
        >>> from agent_framework import InMemoryCheckpointStorage
        >>> result = asyncio.run(build_workflow(InMemoryCheckpointStorage()).run(maf_initial()))
        >>> len(result.get_outputs()[0])
        11
    """
    switch = _KillSwitch(kill)
    stages = [
        _Stage(i, side_log=side_log, attempt=attempt, switch=switch, delay=delay)
        for i in range(MAF_STAGES)
    ]
    builder = WorkflowBuilder(
        name=MAF_WORKFLOW, start_executor=stages[0], checkpoint_storage=storage
    )
    for source, target in itertools.pairwise(stages):
        builder.add_edge(source, target)
    return builder.build()


class _KillingStorage(FoundryCheckpointStorage):
    """The real storage, with the kill switch consulted around ``save``."""

    def __init__(self, switch: _KillSwitch, context_id: str, **kwargs: Any) -> None:
        super().__init__(context_id, **kwargs)
        self._switch = switch

    async def save(self, checkpoint: WorkflowCheckpoint) -> CheckpointID:
        self._switch.at("save-before", step=checkpoint.iteration_count)
        out = await super().save(checkpoint)
        self._switch.at("save-after", step=checkpoint.iteration_count)
        return out


def run_maf(job: Job) -> None:
    """Worker entry point: run the chain, or resume it from ``get_latest``, to the end.

    Writes the run's outputs as JSON to ``job["out_file"]``.
    """

    async def main() -> list[Any]:
        _apply_env(job)
        switch = _KillSwitch(job.get("kill"))
        storage = _KillingStorage(switch, str(job["context"]), **_client_kwargs(job))
        async with storage:
            workflow = build_workflow(
                storage,
                side_log=str(job["side_log"]),
                attempt=int(job["attempt"]),
                kill=job.get("kill"),
                delay=float(job.get("node_delay", 0.0)),
            )
            latest = await storage.get_latest(workflow_name=MAF_WORKFLOW)
            if latest is None:
                result = await workflow.run(maf_initial())
            else:
                result = await workflow.run(checkpoint_id=latest.checkpoint_id)
            return list(result.get_outputs())

    def body() -> None:
        outputs = asyncio.run(main())
        Path(job["out_file"]).write_text(json.dumps(outputs))

    _guarded(job, body)
