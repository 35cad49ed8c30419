"""FoundryCheckpointStorage beyond the upstream conformance suite, in both store modes."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from agent_framework._workflows._checkpoint_encoding import encode_checkpoint_value

from foundry_checkpoint.spill import LocalSpill
from foundry_checkpoint_maf import FoundryCheckpointStorage
from tests._counting_store import CountingStore

from .conftest import MakeStorage

WF = "triage"
SAME_TIME = "2025-05-05T12:00:00.000000+00:00"


class Secret:
    """An application class that nobody allowed."""

    def __init__(self, value: str) -> None:
        self.value = value


class Reducer:
    """Pickles to a call of an arbitrary function: the classic pickle attack shape."""

    def __reduce__(self) -> Any:
        return (os.getcwd, ())


def _cp(**fields: Any) -> WorkflowCheckpoint:
    fields.setdefault("workflow_name", WF)
    fields.setdefault("graph_signature_hash", "g")
    return WorkflowCheckpoint(**fields)


def _chain(length: int, *, timestamp: str | None = None) -> list[WorkflowCheckpoint]:
    """A lineage of checkpoints; with ``timestamp``, all equal and ids sorting against lineage."""
    out: list[WorkflowCheckpoint] = []
    for i in range(length):
        extra: dict[str, Any] = {}
        if timestamp:
            extra = {"timestamp": timestamp, "checkpoint_id": f"cp-{999 - i:03d}-{uuid.uuid4()}"}
        previous = out[-1].checkpoint_id if out else None
        out.append(_cp(previous_checkpoint_id=previous, iteration_count=i, **extra))
    return out


async def _count_store_calls(storage: FoundryCheckpointStorage) -> CountingStore:
    core = storage._core
    scope = await core.arun(core.scope(storage.context_id))
    counting = CountingStore(scope.store)
    scope.store = counting
    return counting


# -- delete and ids ----------------------------------------------------------------------------
async def test_delete_and_list_checkpoint_ids(storage: FoundryCheckpointStorage) -> None:
    chain = _chain(3)
    for cp in chain:
        await storage.save(cp)
    await storage.save(_cp(workflow_name="other"))
    ids = [cp.checkpoint_id for cp in chain]
    assert await storage.list_checkpoint_ids(workflow_name=WF) == ids

    assert await storage.delete(ids[1]) is True
    assert await storage.delete(ids[1]) is False
    assert await storage.delete("never-saved") is False
    assert await storage.list_checkpoint_ids(workflow_name=WF) == [ids[0], ids[2]]
    with pytest.raises(WorkflowCheckpointException, match=ids[1]):
        await storage.load(ids[1])
    assert [cp.checkpoint_id for cp in await storage.list_checkpoints(workflow_name=WF)] == [
        ids[0],
        ids[2],
    ]
    assert len(await storage.list_checkpoint_ids(workflow_name="other")) == 1


async def test_save_twice_replaces(storage: FoundryCheckpointStorage) -> None:
    cp = _cp(state={"n": 1})
    await storage.save(cp)
    cp.state["n"] = 2
    await storage.save(cp)
    assert (await storage.load(cp.checkpoint_id)).state == {"n": 2}
    assert await storage.list_checkpoint_ids(workflow_name=WF) == [cp.checkpoint_id]


async def test_long_names_and_ids_are_kept_in_full(storage: FoundryCheckpointStorage) -> None:
    name = "workflow/" + "n" * 400
    cid = "id with spaces/" + "x" * 300
    await storage.save(
        _cp(workflow_name=name, checkpoint_id="short", timestamp="2000-01-01T00:00:00")
    )
    await storage.save(_cp(workflow_name=name, checkpoint_id=cid))
    assert (await storage.load(cid)).workflow_name == name
    assert await storage.list_checkpoint_ids(workflow_name=name) == ["short", cid]
    latest = await storage.get_latest(workflow_name=name)
    assert latest is not None and latest.checkpoint_id == cid
    assert await storage.delete(cid) is True
    assert await storage.list_checkpoint_ids(workflow_name=name) == ["short"]


async def test_contexts_are_separate(make_storage: MakeStorage) -> None:
    conv_a, conv_b, default = make_storage("conv-a"), make_storage("conv-b"), make_storage(None)
    cp = _cp()
    await conv_a.save(cp)
    assert await conv_b.get_latest(workflow_name=WF) is None
    assert await default.list_checkpoint_ids(workflow_name=WF) == []
    with pytest.raises(WorkflowCheckpointException, match=cp.checkpoint_id):
        await conv_b.load(cp.checkpoint_id)
    await default.save(_cp(checkpoint_id="in-default"))
    assert await make_storage(None).list_checkpoint_ids(workflow_name=WF) == ["in-default"]


# -- which checkpoint get_latest picks ---------------------------------------------------------
async def test_get_latest_follows_lineage_on_equal_timestamps(
    storage: FoundryCheckpointStorage,
) -> None:
    chain = _chain(12, timestamp=SAME_TIME)
    for cp in chain:
        await storage.save(cp)
    latest = await storage.get_latest(workflow_name=WF)
    assert latest is not None
    assert latest.checkpoint_id == chain[-1].checkpoint_id
    assert await storage.list_checkpoint_ids(workflow_name=WF) == [c.checkpoint_id for c in chain]


async def test_get_latest_under_a_burst_of_30_saves(storage: FoundryCheckpointStorage) -> None:
    distinct = _chain(30)
    tied = _chain(30, timestamp=SAME_TIME)
    for a, b in zip(distinct, tied, strict=True):
        await storage.save(a)
        await storage.save(b.__class__(**{**b.to_dict(), "workflow_name": "tied"}))
    latest = await storage.get_latest(workflow_name=WF)
    assert latest is not None and latest.checkpoint_id == distinct[-1].checkpoint_id
    latest_tied = await storage.get_latest(workflow_name="tied")
    assert latest_tied is not None and latest_tied.checkpoint_id == tied[-1].checkpoint_id


async def test_get_latest_skips_a_deleted_newest(storage: FoundryCheckpointStorage) -> None:
    chain = _chain(3, timestamp=SAME_TIME)
    for cp in chain:
        await storage.save(cp)
    await storage.delete(chain[2].checkpoint_id)
    latest = await storage.get_latest(workflow_name=WF)
    assert latest is not None and latest.checkpoint_id == chain[1].checkpoint_id


async def test_get_latest_cost_is_flat_in_history(
    store_env: Any, make_storage: MakeStorage
) -> None:
    costs: list[Counter[str]] = []
    emulator_costs: list[Counter[str]] = []
    for history in (10, 1000):
        storage = make_storage(f"budget-{history}")
        old = [_cp(state={"i": i}) for i in range(history)]
        for start in range(0, history, 250):
            await asyncio.gather(*(storage.save(cp) for cp in old[start : start + 250]))
        await asyncio.sleep(1.1)  # the newest checkpoint gets a created_at second of its own
        newest = _cp(state={"newest": True})
        await storage.save(newest)
        counting = await _count_store_calls(storage)
        if store_env.emulator is not None:
            store_env.emulator.reset_counts()
        latest = await storage.get_latest(workflow_name=WF)
        assert latest is not None and latest.checkpoint_id == newest.checkpoint_id
        costs.append(counting.calls)
        if store_env.emulator is not None:
            emulator_costs.append(store_env.emulator.requests)
    # One call finds the newest (the embedded store ranks by the timestamp tag), one reads it.
    find = "list_keys" if store_env.mode == "hosted" else "greatest"
    assert costs[0] == costs[1] == Counter({find: 1, "get_item": 1})
    if store_env.emulator is not None:
        assert emulator_costs[0] == emulator_costs[1]
        assert sum(emulator_costs[0].values()) == 2


async def test_no_store_round_trip_per_call(
    store_env: Any, storage: FoundryCheckpointStorage
) -> None:
    await storage.save(_cp())
    counting = await _count_store_calls(storage)
    if store_env.emulator is not None:
        store_env.emulator.reset_counts()
    for _ in range(3):
        await storage.load_with_hash((await storage.list_checkpoint_ids(workflow_name=WF))[0])
    # list_checkpoint_ids reads the checkpoint to check it decodes; load reads it again.
    assert counting.calls == Counter({"list_keys": 3, "get_item": 6})
    if store_env.emulator is not None:
        assert sum(store_env.emulator.requests.values()) == 9


# -- safety -----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [Secret("s"), Reducer()], ids=["class", "reduce"])
async def test_disallowed_type_refused_at_save(
    storage: FoundryCheckpointStorage, value: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cp = _cp(state={"x": value})
    with (
        caplog.at_level(logging.ERROR, logger="foundry_checkpoint_maf"),
        pytest.raises(WorkflowCheckpointException, match=cp.checkpoint_id),
    ):
        await storage.save(cp)
    assert any(
        r.levelno == logging.ERROR and cp.checkpoint_id in r.getMessage() for r in caplog.records
    )
    assert storage.save_failures == 1
    assert await storage.list_checkpoint_ids(workflow_name=WF) == []
    with pytest.raises(WorkflowCheckpointException, match=cp.checkpoint_id):
        await storage.load(cp.checkpoint_id)


async def test_disallowed_type_refused_at_load(make_storage: MakeStorage) -> None:
    permissive = make_storage(allowed_checkpoint_types=[Secret])
    cp = _cp(state={"x": Secret("s")})
    await permissive.save(cp)
    assert (await permissive.load(cp.checkpoint_id)).state["x"].value == "s"

    strict = make_storage()
    with pytest.raises(WorkflowCheckpointException, match=cp.checkpoint_id) as caught:
        await strict.load(cp.checkpoint_id)
    assert "Secret" in str(caught.value)
    assert await strict.get_latest(workflow_name=WF) is None
    assert await strict.list_checkpoints(workflow_name=WF) == []
    assert await strict.list_checkpoint_ids(workflow_name=WF) == []


async def test_undecodable_checkpoints_are_skipped_alike_by_lists_and_latest(
    make_storage: MakeStorage, caplog: pytest.LogCaptureFixture
) -> None:
    """Reopened with a narrower allow-list: both lists and get_latest skip the same checkpoints
    (MAF's FileCheckpointStorage since #8181), get_latest falls back to the newest that decodes,
    and every skip is logged with the checkpoint id."""
    permissive = make_storage(allowed_checkpoint_types=[Secret])
    plain = _chain(2)
    for cp in plain:
        await permissive.save(cp)
    hidden = [
        _cp(previous_checkpoint_id=plain[-1].checkpoint_id, state={"x": Secret("a")}),
        _cp(state={"x": Secret("b")}),  # newest by timestamp, also undecodable
    ]
    hidden[1].previous_checkpoint_id = hidden[0].checkpoint_id
    for cp in hidden:
        await permissive.save(cp)
    assert len(await permissive.list_checkpoint_ids(workflow_name=WF)) == 4

    strict = make_storage()
    with caplog.at_level(logging.ERROR, logger="foundry_checkpoint_maf"):
        ids = await strict.list_checkpoint_ids(workflow_name=WF)
        listed = await strict.list_checkpoints(workflow_name=WF)
        latest = await strict.get_latest(workflow_name=WF)
    wanted = [cp.checkpoint_id for cp in plain]
    assert ids == wanted
    assert [cp.checkpoint_id for cp in listed] == wanted
    assert latest is not None and latest.checkpoint_id == plain[-1].checkpoint_id
    logged = " ".join(r.getMessage() for r in caplog.records)
    for caller in ("list_checkpoint_ids", "list_checkpoints", "get_latest"):
        assert caller in logged
    assert all(cp.checkpoint_id in logged for cp in hidden)
    for cp_id in ids:  # every id listed loads
        assert (await strict.load(cp_id)).checkpoint_id == cp_id


async def test_missing_checkpoint_message_uses_maf_wording(
    storage: FoundryCheckpointStorage,
) -> None:
    # MAF's runner tests match this text; the context follows it.
    with pytest.raises(WorkflowCheckpointException) as caught:
        await storage.load("nonexistent_checkpoint_id")
    message = str(caught.value)
    assert message.startswith("No checkpoint found with ID nonexistent_checkpoint_id")
    assert "conv-42" in message


@pytest.mark.parametrize(
    "timestamps",
    [
        ["1969-12-31T23:59:59.000001+00:00", "1970-01-01T00:00:00+00:00"],
        ["0001-01-01T00:00:00+00:00", "1900-06-01T12:00:00+00:00", "2025-01-01T00:00:00+00:00"],
    ],
)
async def test_timestamps_before_1970_round_trip(
    make_storage: MakeStorage, timestamps: list[str]
) -> None:
    storage = make_storage()
    saved: list[WorkflowCheckpoint] = []
    for ts in reversed(timestamps):  # saved newest first: only the timestamps order them
        cp = _cp(timestamp=ts)
        await storage.save(cp)
        saved.append(cp)
    fresh = make_storage()
    for cp in saved:
        assert await fresh.load(cp.checkpoint_id) == cp
    listed = await fresh.list_checkpoints(workflow_name=WF)
    assert [cp.timestamp for cp in listed] == timestamps
    # Saved in time order (as the runner does), the newest is the latest.
    ordered = make_storage("conv-ordered")
    for ts in timestamps:
        await ordered.save(_cp(timestamp=ts))
    latest = await ordered.get_latest(workflow_name=WF)
    assert latest is not None and latest.timestamp == timestamps[-1]


async def test_allowed_types_as_strings(make_storage: MakeStorage) -> None:
    key = f"{Secret.__module__}:{Secret.__qualname__}"
    storage = make_storage(allowed_checkpoint_types=[key])
    assert storage.allowed_checkpoint_types == frozenset({key})
    cp = _cp(state={"x": Secret("s")})
    await storage.save(cp)
    latest = await storage.get_latest(workflow_name=WF)
    assert latest is not None and isinstance(latest.state["x"], Secret)
    # an allow-listed class still cannot smuggle a function call in
    with pytest.raises(WorkflowCheckpointException):
        await storage.save(_cp(state={"x": Reducer()}))


def test_bad_allowed_types_are_rejected(store_env: Any) -> None:
    with pytest.raises(ValueError, match="module:qualname"):
        FoundryCheckpointStorage("c", allowed_checkpoint_types=["Secret"], **store_env.kwargs())
    with pytest.raises(TypeError):
        FoundryCheckpointStorage("c", allowed_checkpoint_types=[42], **store_env.kwargs())  # type: ignore[list-item]


async def test_unencodable_checkpoint_is_refused(storage: FoundryCheckpointStorage) -> None:
    cp = _cp(state={"f": lambda: 1})
    with pytest.raises(WorkflowCheckpointException, match="cannot be encoded"):
        await storage.save(cp)
    assert await storage.list_checkpoint_ids(workflow_name=WF) == []


# -- hashes, sizes, users, loops ---------------------------------------------------------------
async def test_load_with_hash_matches_foundry_hosting(make_storage: MakeStorage) -> None:
    from agent_framework_foundry_hosting._state_store import _encoded_checkpoint_hash

    cp = _cp(state={"text": "héllo", "n": [1, 2.5, None]}, metadata={"k": "v"})
    await make_storage().save(cp)
    loaded, digest = await make_storage().load_with_hash(cp.checkpoint_id)
    assert loaded == cp
    assert digest == _encoded_checkpoint_hash(encode_checkpoint_value(cp.to_dict()))
    _, again = await make_storage().load_with_hash(cp.checkpoint_id)
    assert again == digest


async def test_large_checkpoint_round_trips_through_spill(
    store_env: Any, make_storage: MakeStorage
) -> None:
    blob = os.urandom(3 * 1024 * 1024)
    cp = _cp(state={"blob": blob})
    if store_env.mode == "hosted":
        # no spill store configured in hosted mode: chunk items of the context's own store
        await make_storage().save(cp)
        assert (await make_storage().load(cp.checkpoint_id)).state["blob"] == blob
        assert await make_storage().delete(cp.checkpoint_id) is True
        assert await make_storage().list_checkpoint_ids(workflow_name=WF) == []
        spill_dir = store_env.root / "spill"
        storage = make_storage(spill=LocalSpill(spill_dir))
    else:
        spill_dir = store_env.root / "state" / "foundry_checkpoint" / "spill"
        storage = make_storage()
    await storage.save(cp)
    assert _big_files(spill_dir) == 1
    loaded = await storage.load(cp.checkpoint_id)
    assert loaded.state["blob"] == blob
    latest = await storage.get_latest(workflow_name=WF)
    assert latest is not None and latest.state["blob"] == blob
    assert await storage.delete(cp.checkpoint_id) is True
    assert _big_files(spill_dir) == 0


def _big_files(directory: Path) -> int:
    return sum(1 for p in directory.rglob("*") if p.is_file() and p.stat().st_size > 1_000_000)


async def test_users_are_isolated(make_storage: MakeStorage) -> None:
    alice, bob = make_storage(user="alice"), make_storage(user="bob")
    hers = _cp(state={"owner": "alice"})
    await alice.save(hers)
    assert await bob.get_latest(workflow_name=WF) is None
    assert await bob.list_checkpoints(workflow_name=WF) == []
    assert await bob.list_checkpoint_ids(workflow_name=WF) == []
    with pytest.raises(WorkflowCheckpointException, match=hers.checkpoint_id):
        await bob.load(hers.checkpoint_id)
    assert await bob.delete(hers.checkpoint_id) is False

    his = _cp(state={"owner": "bob"})
    await bob.save(his)
    assert await alice.list_checkpoint_ids(workflow_name=WF) == [hers.checkpoint_id]
    assert await bob.list_checkpoint_ids(workflow_name=WF) == [his.checkpoint_id]
    assert (await alice.load(hers.checkpoint_id)).state == {"owner": "alice"}


async def test_usable_from_another_loop(storage: FoundryCheckpointStorage) -> None:
    cp = _cp()
    await storage.save(cp)
    result: list[str] = []

    def _other_thread() -> None:
        loaded = asyncio.run(storage.load(cp.checkpoint_id))
        result.append(loaded.checkpoint_id)

    thread = threading.Thread(target=_other_thread)
    thread.start()
    await asyncio.to_thread(thread.join)
    assert result == [cp.checkpoint_id]


async def test_lifecycle_and_repr(store_env: Any) -> None:
    storage = FoundryCheckpointStorage("conv-42", **store_env.kwargs())
    storage.close()  # never used: fine
    assert "conv-42" in repr(storage) and "backend=" in repr(storage)
    async with storage:
        await storage.save(_cp())
    await storage.aclose()
    storage.close()
    with storage:  # usable again after close
        assert len(await storage.list_checkpoint_ids(workflow_name=WF)) == 1
