"""One adapter object per process, many end users arriving per request.

A Foundry-hosted agent builds one ``FoundryCheckpointer`` (or one
``FoundryCheckpointStorageProvider``) and serves every user with it. The hosts tell it whose
request it is through the request context (``azure.ai.agentserver.core.set_request_context``):
a platform call id, which the SDK forwards on every store call and the service (here the
emulator, which minted it) resolves to the user's isolation partition, and the user id.

Every user uses the same thread (context) ids and the same spilled values. Each must read
exactly their own state and list exactly their own threads, and any user's maintenance
(``delete_thread``, ``prune``, ``delete_for_runs``, ``copy_thread``, ``gc``; MAF ``delete``) must
leave every other user's data byte-identical and resumable. Users are served concurrently from
OS threads (sync ``invoke``) and asyncio tasks (async ``ainvoke``).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, TypedDict

import pytest
from agent_framework import WorkflowCheckpoint
from azure.ai.agentserver.core import (
    FoundryAgentRequestContext,
)
from langgraph.graph import END, START, StateGraph

from foundry_checkpoint import AzureBlobSpill, FoundryCheckpointer
from foundry_checkpoint_maf import FoundryCheckpointStorageProvider
from tests._request import agent_config, in_request
from tests.conftest import StoreEnv

#: The same spilled value for every user (over the 256 KiB spill threshold).
BLOB = random.Random(7).randbytes(300_000)
#: A MAF state over the 1 MB item limit even compressed: the checkpoint spills.
DOC = random.Random(8).randbytes(900_000).hex()
THREADS = ("main",)
#: Hosted cases spill to a blob container in Azurite (tests/conftest.py marks them).
HOSTED_MARKS = ("azurite",)
LG_OPS = ("delete_thread", "prune", "delete_for_runs", "copy_thread", "gc")


class State(TypedDict, total=False):
    user: str
    blob: bytes
    n: int
    seen: int


def _load(state: State) -> State:
    return {} if "blob" in state else {"blob": BLOB}


def _count(state: State) -> State:
    return {"n": state.get("n", 0) + 1, "seen": len(state["blob"])}


def _graph(saver: FoundryCheckpointer) -> Any:
    builder = StateGraph(State)
    builder.add_node("load", _load)
    builder.add_node("count", _count)
    builder.add_edge(START, "load")
    builder.add_edge("load", "count")
    builder.add_edge("count", END)
    return builder.compile(checkpointer=saver)


class Users:
    """Mints each request's platform context, the way the hosts set it from the headers."""

    def __init__(self, env: StoreEnv, count: int, *, with_user_id: bool) -> None:
        self.env = env
        self.names = [f"user-{i:02d}" for i in range(count)]
        self.with_user_id = with_user_id

    def context(self, user: str) -> FoundryAgentRequestContext:
        """A new request of ``user``: a fresh call id (and ``x-agent-user-id``)."""
        return FoundryAgentRequestContext(
            call_id=self.env.call_id(user), user_id=user if self.with_user_id else None
        )

    def request(self, user: str) -> AbstractContextManager[None]:
        return in_request(self.context(user))


def _spill(env: StoreEnv, request: pytest.FixtureRequest) -> dict[str, Any]:
    """Hosted mode spills to a blob container shared by every user; local mode to its default."""
    if env.mode != "hosted":
        return {}
    azurite = request.getfixturevalue("azurite")
    return {
        "spill": AzureBlobSpill(
            connection_string=azurite.connection_string,
            container=f"mu-{uuid.uuid4().hex[:12]}",
            retry_total=0,
        )
    }


def _agent(env: StoreEnv, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The adapter's own options: the agent's identity, no ``user_id`` (users come per request)."""
    own = env.kwargs(user="agent") if env.mode == "hosted" else env.kwargs()
    return {**own, **_spill(env, request)}


def _serve(users: list[str], sync_one: Callable[[str], None], async_one: Any) -> None:
    """Serve ``users`` at once: even ones from OS threads, odd ones as asyncio tasks."""
    sync_users, async_users = users[0::2], users[1::2]

    async def tasks() -> None:
        await asyncio.gather(*(async_one(user) for user in async_users))

    with ThreadPoolExecutor(max_workers=len(sync_users) + 1) as pool:
        futures = [pool.submit(sync_one, user) for user in sync_users]
        futures.append(pool.submit(asyncio.run, tasks()))
        for future in futures:
            future.result()


def _config(thread: str, **extra: Any) -> Any:
    return {"configurable": {"thread_id": thread}, **extra}


def _snapshot(saver: FoundryCheckpointer, thread: str) -> list[Any]:
    return [
        (
            t.config,
            t.checkpoint,
            t.metadata,
            t.parent_config,
            [tuple(w) for w in t.pending_writes or []],
        )
        for t in saver.list(_config(thread))
    ]


def _threads(saver: FoundryCheckpointer) -> set[str]:
    return {t.config["configurable"]["thread_id"] for t in saver.list(None)}


@pytest.mark.parametrize("count", [2, pytest.param(20, marks=pytest.mark.slow)])
@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_one_checkpointer_many_users(
    store_env: StoreEnv, request: pytest.FixtureRequest, durability: str, count: int
) -> None:
    _langgraph_users(store_env, request, durability, count, with_user_id=True)


def test_one_checkpointer_many_users_known_only_by_call_id(
    store_env: StoreEnv, request: pytest.FixtureRequest
) -> None:
    """No ``x-agent-user-id``: the call id alone says whose request it is (hosted mode)."""
    if store_env.mode != "hosted":
        pytest.skip(
            "locally a call id alone names no user (docs/concepts/isolation.md): such requests "
            "are all the local user's"
        )
    _langgraph_users(store_env, request, "async", 6, with_user_id=False)


def _langgraph_users(
    env: StoreEnv,
    request: pytest.FixtureRequest,
    durability: str,
    count: int,
    *,
    with_user_id: bool,
) -> None:
    users = Users(env, count, with_user_id=with_user_id)
    saver = FoundryCheckpointer(**_agent(env, request))
    graph = _graph(saver)

    def turn_sync(user: str, thread: str) -> None:
        with users.request(user):
            run = {"metadata": {"run_id": f"{user}-{thread}-{uuid.uuid4().hex[:6]}"}}
            graph.invoke({"user": user}, _config(thread, **run), durability=durability)

    async def turn_async(user: str, thread: str) -> None:
        with users.request(user):
            run = {"metadata": {"run_id": f"{user}-{thread}-{uuid.uuid4().hex[:6]}"}}
            await graph.ainvoke({"user": user}, _config(thread, **run), durability=durability)

    def sync_user(user: str) -> None:
        for thread in ("main", "main", f"own-{user}"):
            turn_sync(user, thread)

    async def async_user(user: str) -> None:
        for thread in ("main", "main", f"own-{user}"):
            await turn_async(user, thread)

    def check_own(user: str, turns: int) -> None:
        with users.request(user):
            state = graph.get_state(_config("main")).values
            assert state == {"user": user, "blob": BLOB, "n": turns, "seen": len(BLOB)}

    try:
        _serve(users.names, sync_user, async_user)
        before: dict[str, list[Any]] = {}
        for user in users.names:
            check_own(user, 2)
            with users.request(user):
                assert _threads(saver) == {"main", f"own-{user}"}
                before[user] = _snapshot(saver, "main")
                assert len(before[user]) >= 2  # at least one checkpoint per turn

        # maintenance by some users, all at once; the others must not notice
        actors = {
            user: LG_OPS if count == 2 else (LG_OPS[i],)
            for i, user in enumerate(users.names[: 1 if count == 2 else len(LG_OPS)])
        }

        def maintain(user: str) -> None:
            for op in actors[user]:
                with users.request(user):
                    if op == "delete_thread":
                        saver.delete_thread("main")
                    elif op == "prune":
                        saver.prune(["main"], strategy="keep_latest")
                    elif op == "delete_for_runs":
                        runs = {t.metadata["run_id"] for t in saver.list(_config("main"))}
                        saver.delete_for_runs(sorted(str(r) for r in runs))
                    elif op == "copy_thread":
                        saver.copy_thread(f"own-{user}", "copy")
                    else:
                        saver.gc(grace_seconds=0)

        with ThreadPoolExecutor(max_workers=len(actors)) as pool:
            for future in [pool.submit(maintain, user) for user in actors]:
                future.result()

        bystanders = [u for u in users.names if u not in actors]
        for user in bystanders:
            with users.request(user):
                assert _snapshot(saver, "main") == before[user], user
                assert _threads(saver) == {"main", f"own-{user}"}
        # and they resume, concurrently again, reading their spilled values back
        _serve(bystanders, lambda u: turn_sync(u, "main"), lambda u: turn_async(u, "main"))
        for user in bystanders:
            check_own(user, 3)

        for user, ops in actors.items():
            with users.request(user):
                if len(ops) > 1 or ops == ("delete_thread",) or ops == ("delete_for_runs",):
                    assert saver.get_tuple(_config("main")) is None
                if ops == ("prune",):
                    assert len(_snapshot(saver, "main")) == 1
                if ops == ("gc",):
                    assert _snapshot(saver, "main") == before[user]
                if "copy_thread" in ops:
                    copied = graph.get_state(_config("copy")).values
                    assert copied["blob"] == BLOB and copied["user"] == user
                    assert "copy" in _threads(saver)
                if ops == ("copy_thread",):
                    assert _threads(saver) == {"main", f"own-{user}", "copy"}
                if "delete_thread" in ops:
                    assert "main" not in _threads(saver)
    finally:
        saver.close()


@pytest.mark.parametrize("count", [2, pytest.param(20, marks=pytest.mark.slow)])
def test_one_provider_many_users(
    store_env: StoreEnv, request: pytest.FixtureRequest, count: int
) -> None:
    users = Users(store_env, count, with_user_id=True)
    provider = FoundryCheckpointStorageProvider(**_agent(store_env, request))
    config = agent_config(hosted=store_env.mode == "hosted")

    def storage(user: str, context_id: str = "conv") -> Any:
        # hosting calls get_store per request with that request's platform context
        return provider.get_store(
            config=config, context_id=context_id, platform_context=users.context(user)
        )

    async def save_history(user: str) -> None:
        previous = None
        for i, state in enumerate(({"doc": DOC, "i": 0}, {"owner": user, "i": 1})):
            cp = WorkflowCheckpoint(
                workflow_name="wf",
                graph_signature_hash="sig",
                previous_checkpoint_id=previous,
                state=dict(state),
                iteration_count=i,
            )
            await storage(user).save(cp)
            previous = cp.checkpoint_id
        await storage(user, f"own-{user}").save(
            WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="sig", state={"u": user})
        )

    async def snapshot(user: str) -> list[dict[str, Any]]:
        return [cp.to_dict() for cp in await storage(user).list_checkpoints(workflow_name="wf")]

    try:
        _serve(users.names, lambda u: asyncio.run(save_history(u)), save_history)

        async def check_all() -> dict[str, list[dict[str, Any]]]:
            out: dict[str, list[dict[str, Any]]] = {}
            for user in users.names:
                history = await snapshot(user)
                assert [h["state"] for h in history] == [
                    {"doc": DOC, "i": 0},
                    {"owner": user, "i": 1},
                ]
                latest = await storage(user).get_latest(workflow_name="wf")
                assert latest is not None and latest.state == {"owner": user, "i": 1}
                unused = storage(user, "nobody-used-this")
                assert await unused.get_latest(workflow_name="wf") is None
                out[user] = history
            return out

        before = asyncio.run(check_all())

        actors = users.names[: max(1, count // 4)]

        async def destroy(user: str) -> None:
            conv = storage(user)
            ids = await conv.list_checkpoint_ids(workflow_name="wf")
            for checkpoint_id in ids:  # the spilled one first: its blob goes with it
                assert await conv.delete(checkpoint_id) is True
            assert await conv.get_latest(workflow_name="wf") is None

        _serve(actors, lambda u: asyncio.run(destroy(u)), destroy)

        async def check_bystanders() -> None:
            for user in users.names:
                if user in actors:
                    assert await snapshot(user) == []
                    continue
                assert await snapshot(user) == before[user], user
                conv = storage(user)
                first = before[user][0]["checkpoint_id"]
                assert (await conv.load(first)).state == {"doc": DOC, "i": 0}  # the blob is there
                resumed = WorkflowCheckpoint(
                    workflow_name="wf",
                    graph_signature_hash="sig",
                    previous_checkpoint_id=before[user][-1]["checkpoint_id"],
                    state={"owner": user, "i": 2},
                )
                await conv.save(resumed)
                latest = await conv.get_latest(workflow_name="wf")
                assert latest is not None and latest.checkpoint_id == resumed.checkpoint_id

        asyncio.run(check_bystanders())
    finally:
        provider.close()
