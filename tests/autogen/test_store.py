"""AutoGenStateStore in both store modes: versions, latest, retention, refusal, spill, users."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint.errors import (
    CorruptPayloadError,
    InvalidStateError,
)
from foundry_checkpoint.spill import LocalSpill
from foundry_checkpoint_autogen import AutoGenStateStore
from tests._counting_store import CountingStore
from tests._request import in_request

from .conftest import MakeStore

AGENT = "counter/default"


async def _count_calls(store: AutoGenStateStore, scope_id: str) -> CountingStore:
    core = store._core
    scope = await core.arun(core.scope(scope_id))
    counting = CountingStore(scope.store)
    scope.store = counting
    return counting


def _big_state(size: int) -> dict[str, Any]:
    return {"blob": base64.b64encode(os.urandom(size)).decode()}


def _big_files(directory: Path) -> int:
    return sum(1 for p in directory.rglob("*") if p.is_file() and p.stat().st_size > 1_000_000)


async def test_versions_round_trip(store: AutoGenStateStore) -> None:
    assert await store.aload("conv", "agent", AGENT) is None
    assert await store.aversions("conv", "agent", AGENT) == []
    first = await store.asave("conv", "agent", AGENT, {"count": 1, "history": ["a"]})
    second = await store.asave("conv", "agent", AGENT, {"count": 2, "history": ["a", "b"]})
    assert first < second
    assert await store.aload("conv", "agent", AGENT) == {"count": 2, "history": ["a", "b"]}
    assert await store.aload("conv", "agent", AGENT, version=first) == {
        "count": 1,
        "history": ["a"],
    }
    assert await store.aload("conv", "agent", AGENT, version="nope") is None
    assert [v.version for v in await store.aversions("conv", "agent", AGENT)] == [first, second]
    # other kinds, names and scopes are separate
    assert await store.aload("conv", "team", AGENT) is None
    assert await store.aload("conv", "agent", "counter/other") is None
    assert await store.aload("other-conv", "agent", AGENT) is None
    assert await store.adelete("conv", "agent", AGENT) == 2
    assert await store.aload("conv", "agent", AGENT) is None
    assert await store.adelete("conv", "agent", AGENT) == 0


def test_sync_face(store: AutoGenStateStore) -> None:
    version = store.save(None, "runtime", "r", {"a/default": {"n": 1}, "text": "héllo ✓"})
    assert store.load(None, "runtime", "r") == {"a/default": {"n": 1}, "text": "héllo ✓"}
    assert [v.version for v in store.versions(None, "runtime", "r")] == [version]
    assert store.prune(None, "runtime", "r", keep=0) == 1
    assert store.load(None, "runtime", "r") is None


async def test_long_names_are_kept_apart(store: AutoGenStateStore) -> None:
    long_a, long_b = "agent/" + "a" * 300, "agent/" + "a" * 299 + "b"
    await store.asave("conv with spaces/and slashes", "agent", long_a, {"who": "a"})
    await store.asave("conv with spaces/and slashes", "agent", long_b, {"who": "b"})
    assert await store.aload("conv with spaces/and slashes", "agent", long_a) == {"who": "a"}
    assert await store.aload("conv with spaces/and slashes", "agent", long_b) == {"who": "b"}


async def test_latest_cost_is_flat_in_history(store_env: Any, make_store: MakeStore) -> None:
    costs: list[Counter[str]] = []
    emulator_costs: list[Counter[str]] = []
    for history in (10, 1000):
        store = make_store(keep_versions=None)
        scope = f"budget-{history}"
        for i in range(history):
            await store.asave(scope, "agent", AGENT, {"i": i})
        await asyncio.sleep(1.1)  # the newest version gets a created_at second of its own
        await store.asave(scope, "agent", AGENT, {"newest": True})
        counting = await _count_calls(store, scope)
        if store_env.emulator is not None:
            store_env.emulator.reset_counts()
        assert await store.aload(scope, "agent", AGENT) == {"newest": True}
        costs.append(Counter(counting.calls))
        if store_env.emulator is not None:
            emulator_costs.append(Counter(store_env.emulator.requests))
        assert len(await store.aversions(scope, "agent", AGENT)) == history + 1
    assert costs[0] == costs[1] == Counter({"list_keys": 1, "get_item": 1})
    if store_env.emulator is not None:
        assert emulator_costs[0] == emulator_costs[1]
        assert sum(emulator_costs[0].values()) == 2


async def test_latest_under_a_burst_of_saves(make_store: MakeStore) -> None:
    store = make_store(keep_versions=None)
    for i in range(40):  # many versions share one created_at second
        await store.asave("conv", "agent", AGENT, {"i": i})
    assert await store.aload("conv", "agent", AGENT) == {"i": 39}
    other = make_store()  # a fresh object reads the same latest
    assert await other.aload("conv", "agent", AGENT) == {"i": 39}


async def test_keep_versions_drops_old_versions_and_their_blobs(
    store_env: Any, make_store: MakeStore
) -> None:
    spill_dir = store_env.root / "spill"
    store = make_store(keep_versions=3, spill=LocalSpill(spill_dir, fsync=False))
    big = [_big_state(1_200_000) for _ in range(3)]
    saved = [await store.asave("conv", "team", "t", state) for state in big]
    assert _big_files(spill_dir) == 3
    same = _big_state(1_200_000)
    saved.append(await store.asave("conv", "team", "t", same))  # drops big[0]
    saved.append(await store.asave("conv", "team", "t", same))  # drops big[1]; same blob twice
    saved.append(await store.asave("conv", "team", "t", {"small": True}))  # drops big[2]
    assert [v.version for v in await store.aversions("conv", "team", "t")] == saved[-3:]
    assert _big_files(spill_dir) == 1  # the blob both kept versions of `same` name
    assert await store.aload("conv", "team", "t", version=saved[0]) is None
    assert await store.aload("conv", "team", "t", version=saved[3]) == same
    assert await store.aload("conv", "team", "t") == {"small": True}
    saved.append(await store.asave("conv", "team", "t", {"small": 2}))  # drops one `same`
    assert await store.aload("conv", "team", "t", version=saved[4]) == same
    assert _big_files(spill_dir) == 1
    assert await store.aprune("conv", "team", "t", keep=1) == 2
    assert _big_files(spill_dir) == 0
    assert await store.aload("conv", "team", "t") == {"small": 2}


@pytest.mark.parametrize(
    ("state", "fragment"),
    [
        ({"when": b"bytes"}, "bytes at state['when']"),
        ({"n": {1: "x"}}, "non-string key 1 at state['n']"),
        ({"x": [1.0, float("nan")]}, "nan at state['x'][1]"),
        ({"o": object()}, "object at state['o']"),
        (["not", "a", "mapping"], "must be a mapping"),
    ],
)
async def test_non_json_state_is_refused_and_nothing_written(
    store: AutoGenStateStore, state: Any, fragment: str
) -> None:
    with pytest.raises(InvalidStateError) as caught:
        await store.asave("conv", "agent", AGENT, state)
    assert fragment in str(caught.value)
    assert AGENT in str(caught.value) and "Nothing was written" in str(caught.value)
    with pytest.raises(InvalidStateError):
        store.save("conv", "agent", AGENT, state)
    assert await store.aversions("conv", "agent", AGENT) == []


async def test_large_state_spills(store_env: Any, make_store: MakeStore) -> None:
    state = _big_state(3 * 1024 * 1024)
    if store_env.mode == "hosted":
        # no spill store configured in hosted mode: chunk items of the scope's own store
        await make_store().asave("conv", "team", "t", state)
        assert await make_store().aload("conv", "team", "t") == state
        assert await make_store().adelete("conv", "team", "t") == 1
        assert await make_store().aversions("conv", "team", "t") == []
        spill_dir = store_env.root / "spill"
        store = make_store(spill=LocalSpill(spill_dir))
    else:
        spill_dir = store_env.root / "state" / "foundry_checkpoint" / "spill"
        store = make_store()
    await store.asave("conv", "team", "t", state)
    assert _big_files(spill_dir) == 1
    assert await make_store(spill=store._core.spill).aload("conv", "team", "t") == state
    assert await store.adelete("conv", "team", "t") == 1
    assert _big_files(spill_dir) == 0


async def test_users_with_the_same_scope_names_are_isolated(make_store: MakeStore) -> None:
    alice, bob = make_store(user="alice"), make_store(user="bob")
    await alice.asave("conv", "agent", AGENT, {"owner": "alice"})
    assert await bob.aload("conv", "agent", AGENT) is None
    assert await bob.aversions("conv", "agent", AGENT) == []
    assert await bob.adelete("conv", "agent", AGENT) == 0
    await bob.asave("conv", "agent", AGENT, {"owner": "bob"})
    assert await alice.aload("conv", "agent", AGENT) == {"owner": "alice"}
    assert await bob.aload("conv", "agent", AGENT) == {"owner": "bob"}
    assert len(await alice.aversions("conv", "agent", AGENT)) == 1


def test_bad_options_and_names_are_refused(store_env: Any, store: AutoGenStateStore) -> None:
    from foundry_checkpoint.errors import InvalidArgumentError, InvalidIdentifierError

    for bad in (0, -1, True, 2.5):
        with pytest.raises(InvalidArgumentError, match="keep_versions"):
            AutoGenStateStore(keep_versions=bad, **store_env.kwargs())  # type: ignore[arg-type]
    with pytest.raises(InvalidIdentifierError, match="name"):
        store.save("conv", "agent", "", {})
    with pytest.raises(InvalidIdentifierError, match="kind"):
        store.load("conv", "", AGENT)
    with pytest.raises(InvalidIdentifierError, match="scope"):
        store.versions("", "agent", AGENT)
    with pytest.raises(InvalidArgumentError, match="keep"):
        AutoGenStateStore(keep_versions=None, **store_env.kwargs()).prune("c", "agent", AGENT)
    assert store.versions("conv", "agent", AGENT) == []


async def test_one_store_many_requests_keeps_no_per_request_state(
    store_env: Any, make_store: MakeStore
) -> None:
    """Per-request users (call ids) leave nothing behind in the object's write locks."""
    from azure.ai.agentserver.core import (
        FoundryAgentRequestContext,
    )

    store = make_store()  # the agent's own identity; users arrive per request

    async def request(user: str, n: int) -> None:
        context = FoundryAgentRequestContext(call_id=store_env.call_id(user), user_id=user)
        with in_request(context):
            await store.asave("conv", "agent", AGENT, {"n": n, "user": user})
            assert await store.aload("conv", "agent", AGENT) == {"n": n, "user": user}

    for n in range(3):
        await asyncio.gather(*(request(f"user-{i}", n) for i in range(5)))
    assert store._write_locks == {}


@pytest.mark.parametrize("payload", [b"[" * 100_000 + b"]" * 100_000, b"{not json", b"[1, 2]"])
async def test_a_tampered_state_is_a_typed_error(store: AutoGenStateStore, payload: bytes) -> None:
    """A stored state rewritten outside the store (too deep, not JSON, not an object) is refused
    as :class:`CorruptPayloadError`, never a ``RecursionError`` or a wrong type."""
    await store.asave("conv", "agent", AGENT, {"count": 1})
    core = store._core

    async def rewrite() -> None:
        scope = await core.scope("conv")
        for key in await scope.keys():
            if key.key.startswith("m/"):
                continue
            value = await scope.encode(key.key, payload, tags=key.tags)
            await scope.store.set_item(key.key, value, tags=key.tags)

    await core.arun(rewrite())
    with pytest.raises(CorruptPayloadError):
        await store.aload("conv", "agent", AGENT)


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b'{"x": NaN}', "nan at state['x']"),
        (b'{"x": [1, Infinity]}', "inf at state['x'][1]"),
        (b'{"x": {"y": -Infinity}}', "-inf at state['x']['y']"),
        (b'{"x": 1e999}', "inf at state['x']"),
        (b'{"x": "a\\ud800b"}', "lone surrogate at state['x']"),
        (b'{"\\udfff": 1}', "lone surrogate at state (a key)"),
    ],
    ids=["nan", "infinity", "-infinity", "1e999", "surrogate", "surrogate-key"],
)
async def test_what_save_refuses_load_refuses(
    store: AutoGenStateStore, payload: bytes, fragment: str
) -> None:
    """A stored state that ``save`` would have refused is refused on load as tampered, naming
    the agent and the place, on both faces; the same values given to ``save`` are refused."""
    state = json.loads(payload)
    with pytest.raises(InvalidStateError):
        await store.asave("conv", "agent", AGENT, state)
    await store.asave("conv", "agent", AGENT, {"count": 1})
    core = store._core

    async def rewrite() -> None:
        scope = await core.scope("conv")
        for key in await scope.keys():
            if key.key.startswith("m/"):
                continue
            value = await scope.encode(key.key, payload, tags=key.tags)
            await scope.store.set_item(key.key, value, tags=key.tags)

    await core.arun(rewrite())
    with pytest.raises(CorruptPayloadError) as caught:
        await store.aload("conv", "agent", AGENT)
    assert fragment in str(caught.value) and AGENT in str(caught.value)
    assert "Nothing was written" not in str(caught.value)
    with pytest.raises(CorruptPayloadError):
        await asyncio.to_thread(store.load, "conv", "agent", AGENT)
