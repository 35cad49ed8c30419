"""Emulator faults during a 50-step LangGraph run: nothing missing, nothing duplicated.

The saver runs in hosted mode against an in-process emulator (its own thread). While the graph
runs, faults are armed on the store's requests as checkpoints of given steps are saved (armed by
the saver's ``put``, so they follow the store's progress under both durability modes): 429 and
503 bursts with ``Retry-After: 0``, dropped connections, and 2-second delays. At most three
faults can meet one request, which the client's three retries absorb (``NoBackoff`` keeps
retries immediate). The run must complete, and its checkpoint history must match a fault-free run of
the same graph on ``InMemorySaver``: the same number of checkpoints with the same step metadata,
an unbroken parent chain, the same pending writes on each, and the same final state. Reads are
faulted too, while the history is listed for the comparison.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Protocol

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    empty_checkpoint,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Durability
from typing_extensions import TypedDict

from foundry_checkpoint import FoundryCheckpointer, LocalSpill
from foundry_checkpoint._langgraph._records import KIND_CHECKPOINT, KIND_WRITES, TAG_KIND
from foundry_checkpoint.emulator import FoundryEmulator
from tests.emulator._harness import NoBackoff

from ._worker import big_value

STEPS = 50
DELAY = 2.0

# checkpoint step -> faults armed when it is saved (keyword arguments of FoundryEmulator.inject)
_FAULTS: dict[int, list[dict[str, Any]]] = {
    3: [{"route": "put_item", "status": 429, "retry_after": 0, "times": 3}],
    7: [{"route": "create_item", "status": 503, "retry_after": 0, "times": 3}],
    11: [{"route": "put_item", "drop": True, "times": 2}],
    15: [{"route": "*", "status": 503, "retry_after": 0, "times": 2}],
    19: [{"route": "create_item", "drop": True, "times": 1}],
    23: [{"route": "put_item", "status": None, "delay": DELAY, "times": 1}],
    27: [{"route": "create_item", "status": 429, "retry_after": 0, "times": 2}],
    31: [{"route": "*", "drop": True, "times": 1}],
    35: [{"route": "create_item", "status": None, "delay": DELAY, "times": 1}],
    39: [{"route": "put_item", "status": 503, "retry_after": 0, "times": 3}],
    43: [{"route": "put_item", "status": None, "delay": DELAY, "times": 1}],
    47: [{"route": "create_item", "status": 503, "times": 2}],
}
_READ_FAULTS: list[dict[str, Any]] = [
    {"route": "list_keys", "status": 503, "retry_after": 0, "times": 2},
    {"route": "get_item", "drop": True, "times": 2},
    {"route": "get_item", "status": 429, "retry_after": 0, "times": 1},
]


class LoopState(TypedDict, total=False):
    """The state of the 50-step loop."""

    n: int
    log: Annotated[list[str], operator.add]


class _Work(Protocol):
    def __call__(self, state: LoopState, config: RunnableConfig) -> LoopState: ...


def _graph(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    def work_node() -> _Work:
        def work(state: LoopState, config: RunnableConfig) -> LoopState:
            n = state.get("n", 0) + 1
            return {"n": n, "log": [f"{config['metadata']['langgraph_step']}:{n}"]}

        return work

    builder: StateGraph[LoopState] = StateGraph(LoopState)
    builder.add_node("work", work_node())
    builder.add_edge(START, "work")
    builder.add_conditional_edges(
        "work", lambda s: "work" if s.get("n", 0) < STEPS else END, ["work", END]
    )
    return builder.compile(checkpointer=checkpointer)


class _ArmingSaver(FoundryCheckpointer):
    """Arms the faults of step ``n`` on the emulator just before that step's store calls.

    ``create_item`` faults are armed when the writes of step ``n`` are saved, the others when
    the checkpoint of step ``n`` is: with ``durability="async"`` writes run ahead of checkpoints,
    so each fault meets the requests it is meant for in both modes.
    """

    def __init__(self, emu: FoundryEmulator, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._emu = emu
        self.armed: list[dict[str, Any]] = []

    def _arm(self, step: int, *, writes: bool) -> None:
        for fault in _FAULTS.get(step, []):
            if (fault["route"] == "create_item") == writes:
                self._emu.inject(**fault)
                self.armed.append(fault)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._arm(int(metadata.get("step", -1)), writes=False)
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        for channel, value in writes:
            for token in value if channel == "log" else []:
                step, _, _ = str(token).partition(":")
                if step.isdigit():
                    self._arm(int(step), writes=True)
        super().put_writes(config, writes, task_id, task_path)


def _config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 4 * STEPS}


def _history(tuples: list[CheckpointTuple]) -> list[dict[str, Any]]:
    """What must match between savers: step metadata, pending writes, values, chain."""
    return [
        {
            "step": t.metadata.get("step"),
            "source": t.metadata.get("source"),
            "parents": t.metadata.get("parents"),
            "writes": sorted(
                (channel, repr(value)) for _, channel, value in t.pending_writes or []
            ),
            "values": {
                k: v for k, v in t.checkpoint["channel_values"].items() if k in ("n", "log")
            },
        }
        for t in tuples
    ]


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[FoundryEmulator]:
    """An emulator of our own (faults must not reach other tests), hosted mode on."""
    with FoundryEmulator(seed=11) as running:
        monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "1")
        monkeypatch.setenv("FOUNDRY_PROJECT_ENDPOINT", running.endpoint)
        monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
        yield running
        running.clear_faults()


def _saver(emu: FoundryEmulator, **extra: Any) -> _ArmingSaver:
    return _ArmingSaver(
        emu,
        credential=emu.credential(user="alice"),
        endpoint=emu.endpoint,
        connection_verify=emu.ca_file,
        per_call_policies=[NoBackoff()],
        **extra,
    )


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_faults_during_a_50_step_run(emu: FoundryEmulator, durability: Durability) -> None:
    thread = f"faults-{durability}"
    reference = InMemorySaver()
    _graph(reference).invoke({"n": 0, "log": []}, _config(thread))
    expected = list(reference.list(_config(thread)))
    assert len(expected) == STEPS + 2

    saver = _saver(emu)
    try:
        out = _graph(saver).invoke({"n": 0, "log": []}, _config(thread), durability=durability)
        assert emu.pending_faults() == []  # every armed fault was served during the run
        during_run = sum(emu.faults_served.values())
        for fault in _READ_FAULTS:
            emu.inject(**fault)
        got = list(saver.list(_config(thread)))
        assert emu.pending_faults() == []
        assert sum(emu.faults_served.values()) == during_run + sum(f["times"] for f in _READ_FAULTS)
        latest = saver.get_tuple(_config(thread))
        kinds = saver._core.run(_item_kinds(saver, thread))
    finally:
        saver.close()

    assert len(saver.armed) == sum(len(f) for f in _FAULTS.values())
    assert during_run == sum(f["times"] for f in saver.armed)
    assert out["n"] == STEPS
    assert _history(got) == _history(expected)
    assert latest is not None and latest.config == got[0].config
    for child, parent in itertools.pairwise(got):
        assert child.parent_config is not None
        assert (
            child.parent_config["configurable"]["checkpoint_id"]
            == (parent.config["configurable"]["checkpoint_id"])
        )
    # nothing duplicated in the store itself: one item per checkpoint, one per task's writes
    assert kinds[KIND_CHECKPOINT] == STEPS + 2
    assert kinds[KIND_WRITES] == sum(1 for t in expected if t.pending_writes)


_INPUT: CheckpointMetadata = {"source": "input", "step": -1, "parents": {}}


def _big_checkpoint() -> Checkpoint:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"big": big_value(7)}
    checkpoint["channel_versions"] = {"big": 1}
    return checkpoint


# azure-core never retries a POST after a transport error. Each case drops the connection of one
# POST the saver depends on; retrying it is safe (a create that did land answers 409 the second
# time, which the saver and the core already treat as "exists"), so the call must succeed.


def test_dropped_connection_on_a_writes_save_is_survived(emu: FoundryEmulator) -> None:
    """Writes are saved with ``create_item``; a duplicate is merged after 409."""
    saver = _saver(emu)
    try:
        config = _config("dropped-writes")
        stored = saver.put(config, empty_checkpoint(), _INPUT, {})
        emu.reset_counts()
        emu.inject("create_item", drop=True, times=1)
        saver.put_writes(stored, [("log", ["x"])], "task-1")
        assert emu.faults_served["create_item"] == 1
        latest = saver.get_tuple(config)
    finally:
        saver.close()
    assert latest is not None and latest.pending_writes == [("task-1", "log", ["x"])]


def test_dropped_connection_on_store_creation_is_survived(emu: FoundryEmulator) -> None:
    """A thread's first checkpoint creates its store (``create_store``, a POST)."""
    saver = _saver(emu)
    try:
        config = _config("dropped-store")
        emu.reset_counts()
        emu.inject("create_store", drop=True, times=1)
        saver.put(config, empty_checkpoint(), _INPUT, {})
        assert emu.faults_served["create_store"] == 1
        latest = saver.get_tuple(config)
    finally:
        saver.close()
    assert latest is not None and latest.metadata["step"] == -1


def test_dropped_connection_on_spill_namespace_creation_is_survived(
    emu: FoundryEmulator, tmp_path: Path
) -> None:
    """A thread's first spilled value creates its spill namespace item (``create_item``)."""
    saver = _saver(emu, spill=LocalSpill(tmp_path, fsync=False))
    try:
        config = _config("dropped-namespace")
        stored = saver.put(config, empty_checkpoint(), _INPUT, {})  # the store exists now
        emu.reset_counts()
        emu.inject("create_item", drop=True, times=1)
        saver.put(
            stored, _big_checkpoint(), {"source": "loop", "step": 0, "parents": {}}, {"big": 1}
        )
        assert emu.faults_served["create_item"] == 1
        latest = saver.get_tuple(config)
    finally:
        saver.close()
    assert latest is not None and latest.checkpoint["channel_values"]["big"] == big_value(7)


async def _item_kinds(saver: FoundryCheckpointer, thread: str) -> dict[str, int]:
    scope = await saver._core.scope(thread)
    counts = {KIND_CHECKPOINT: 0, KIND_WRITES: 0}
    for key in await scope.keys():
        kind = (key.tags or {}).get(TAG_KIND, "")
        if kind in counts:
            counts[kind] += 1
    return counts
