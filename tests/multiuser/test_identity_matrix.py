"""Identity follows the service: one adapter object, users known by their call ids.

One hosted LangGraph saver, one MAF hosting provider and one AutoGen store each serve two end
users (and the agent's own work outside any request) against an emulator in its default,
strict identity mode: it ignores ``x-ms-user-id`` from every caller, as the service ignores it
from untrusted ones, and resolves each request's partition from the call id it minted for that
user. The matrix: {no ``user_id=``, ``user_id="frontdoor"`` with ``trusted_delegation=True``} x
{the request context names the user, or carries only the call id}.

Every user writes the same thread (context, scope) id with a value over the item limit, which
spills into one spill directory that all users share. Then each in turn prunes, collects
garbage and deletes; after every step the raw rows of every other partition (read from the
emulator's SQLite file) and every other user's spilled files are byte-identical, and every
index lists only its owner's threads. Without the per-request identity, the ``user_id=`` case
shared one spill namespace across users (one user's delete removed another's blob) and left
the second user's index empty.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint
from azure.ai.agentserver.core import (
    FoundryAgentRequestContext,
)
from langgraph.checkpoint.base import empty_checkpoint

from foundry_checkpoint import FoundryCheckpointer, LocalSpill
from foundry_checkpoint.emulator import FoundryEmulator
from foundry_checkpoint_autogen import AutoGenStateStore
from foundry_checkpoint_maf import FoundryCheckpointStorageProvider
from tests._request import agent_config, in_request

pytestmark = pytest.mark.emulator

USERS = ("alice", "bob")
#: The agent's own work, outside any request (start-up code, a script): a third partition.
OUTSIDE = "outside"
AGENT = "agent"  # the token user of the agent's own identity
SHARED = "shared"
#: Incompressible and over the 1 MB item limit: every adapter spills it.
BIG = random.Random(25).randbytes(1_100_000)
BIG_TEXT = random.Random(26).randbytes(900_000).hex()
_META_KEY = "m/spill"

Rows = dict[str, frozenset[tuple[Any, ...]]]


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FoundryEmulator]:
    """An emulator of its own, in the default identity mode, keeping its state in a file."""
    data = tmp_path_factory.mktemp("identity-matrix") / "emulator.sqlite3"
    with FoundryEmulator(data=data, seed=25) as emu:
        assert not emu.trusted_callers  # strict: x-ms-user-id is ignored from everyone
        yield emu


@dataclass
class World:
    """The emulator, the options every adapter gets, and the users' requests."""

    emu: FoundryEmulator
    spill_dir: Path
    prefix: str
    delegated: bool
    context_user: bool
    options: dict[str, Any] = field(default_factory=dict)

    def context(self, user: str) -> FoundryAgentRequestContext:
        """A new request of ``user`` (a fresh call id), or no request for :data:`OUTSIDE`."""
        if user == OUTSIDE:
            return FoundryAgentRequestContext()
        return FoundryAgentRequestContext(
            call_id=self.emu.mint_call(user), user_id=user if self.context_user else None
        )

    def request(self, user: str) -> AbstractContextManager[None]:
        return in_request(self.context(user))

    def partition(self, user: str) -> str:
        """The emulator partition ``user``'s data lands in (strict mode: the token's user)."""
        return AGENT if user == OUTSIDE else user

    def rows(self) -> Rows:
        """Every raw item row under this prefix, by partition."""
        assert self.emu.data is not None
        with closing(sqlite3.connect(f"file:{self.emu.data}?mode=ro", uri=True)) as db:
            found = db.execute(
                "SELECT part, store, key, id, value, tags, etag, created_at, updated_at, "
                "expires_at FROM items WHERE substr(store, 1, ?) = ?",
                (len(self.prefix) + 1, f"{self.prefix}/"),
            ).fetchall()
        out: dict[str, set[tuple[Any, ...]]] = {}
        for row in found:
            out.setdefault(row[0], set()).add(tuple(row[1:]))
        return {part: frozenset(items) for part, items in out.items()}

    def blobs(self, rows: Rows, user: str) -> dict[str, str]:
        """``user``'s spilled files (by their spill namespaces) -> sha256 of their bytes."""
        namespaces = set()
        for row in rows.get(self.partition(user), frozenset()):
            if row[1] == _META_KEY:
                namespaces.add(json.loads(row[3])["ns"])
        out = {}
        for namespace in namespaces:
            folder = self.spill_dir / namespace
            for path in folder.rglob("*") if folder.exists() else ():
                if path.is_file():
                    rel = str(path.relative_to(self.spill_dir))
                    out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        return out


@pytest.fixture(params=["no-user_id", "delegated"])
def delegation(request: pytest.FixtureRequest) -> bool:
    return str(request.param) == "delegated"


@pytest.fixture(params=["context-user", "call-id-only"])
def context_user(request: pytest.FixtureRequest) -> bool:
    return str(request.param) == "context-user"


@pytest.fixture
def world(
    strict: FoundryEmulator,
    delegation: bool,
    context_user: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> World:
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    monkeypatch.setenv("FOUNDRY_PROJECT_ENDPOINT", strict.endpoint)
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    for name in (
        "FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING",
        "FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    spill_dir = tmp_path / "spill"
    made = World(strict, spill_dir, f"im{uuid.uuid4().hex[:10]}", delegation, context_user)
    made.options = {
        "store_prefix": made.prefix,
        "credential": strict.credential(user=AGENT),
        "endpoint": strict.endpoint,
        "connection_verify": strict.ca_file,
        "spill": LocalSpill(spill_dir, fsync=False),
        "retry_total": 0,
    }
    if delegation:
        made.options.update(user_id="frontdoor", trusted_delegation=True)
    return made


def _check_maintenance(
    world: World,
    own_threads: Callable[[str], set[str]],
    expected: Callable[[str], set[str]],
    steps: list[Callable[[], object]],
    actor: str,
) -> None:
    """Run ``actor``'s steps; after each, everyone else's rows and blobs are unchanged."""
    before = world.rows()
    others = [u for u in (*USERS, OUTSIDE) if u != actor]
    kept = {u: before.get(world.partition(u)) for u in others}
    blobs = {u: world.blobs(before, u) for u in others}
    for step in steps:
        with world.request(actor):
            step()
        after = world.rows()
        for user in others:
            assert after.get(world.partition(user)) == kept[user], (actor, user)
            assert world.blobs(after, user) == blobs[user], (actor, user)
            with world.request(user):
                assert own_threads(user) == expected(user), (actor, user)


def _spilled_for_everyone(world: World) -> None:
    rows = world.rows()
    assert set(rows) == {world.partition(u) for u in (*USERS, OUTSIDE)}
    for user in (*USERS, OUTSIDE):
        assert world.blobs(rows, user), f"{user} has no spilled value"


# -- LangGraph: one hosted FoundryCheckpointer ----------------------------------------------


def _lg_config(thread: str, checkpoint_id: str | None = None) -> Any:
    configurable = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _lg_write(saver: FoundryCheckpointer, thread: str, user: str) -> None:
    parent = None
    for step, value in enumerate((BIG + user.encode(), user.encode())):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"v": value}
        checkpoint["channel_versions"] = {"v": step + 1}
        config = saver.put(
            _lg_config(thread, parent),
            checkpoint,
            {"source": "loop", "step": step, "run_id": f"{user}-{step}"},
            {"v": step + 1},
        )
        saver.put_writes(config, [("v", value[:8])], task_id=f"task-{step}")
        parent = checkpoint["id"]


def test_langgraph_saver(world: World) -> None:
    saver = FoundryCheckpointer(**world.options)
    owned = {u: {SHARED, f"own-{u}"} for u in (*USERS, OUTSIDE)}

    def threads(user: str) -> set[str]:
        listed = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
        assert set(saver.list_threads()) == listed  # the index, read directly
        return listed

    def latest(user: str) -> bytes:
        found = saver.get_tuple(_lg_config(SHARED))
        assert found is not None
        return bytes(found.checkpoint["channel_values"]["v"])

    try:
        for user in (*USERS, OUTSIDE):
            with world.request(user):
                _lg_write(saver, SHARED, user)
                _lg_write(saver, f"own-{user}", user)
        _spilled_for_everyone(world)
        for user in (*USERS, OUTSIDE):
            with world.request(user):
                assert threads(user) == owned[user]
                assert latest(user) == user.encode()
                history = list(saver.list(_lg_config(SHARED)))
                assert [bytes(t.checkpoint["channel_values"]["v"]) for t in history] == [
                    user.encode(),
                    BIG + user.encode(),
                ]
        for actor in (*USERS, OUTSIDE):

            def delete(actor: str = actor) -> None:
                saver.delete_thread(SHARED)
                owned[actor].discard(SHARED)

            _check_maintenance(
                world,
                threads,
                lambda u: owned[u],
                [
                    lambda: saver.prune([SHARED], strategy="keep_latest"),
                    lambda: saver.gc(grace_seconds=0),
                    delete,
                ],
                actor,
            )
            with world.request(actor):
                assert saver.get_tuple(_lg_config(SHARED)) is None
                assert threads(actor) == {f"own-{actor}"}
    finally:
        saver.close()


# -- Microsoft Agent Framework: one hosting provider --------------------------------------------


def test_maf_hosting_provider(world: World) -> None:
    provider = FoundryCheckpointStorageProvider(**world.options)
    config = agent_config(hosted=True)
    owned = {u: {SHARED, f"own-{u}"} for u in (*USERS, OUTSIDE)}

    def storage(user: str, context_id: str = SHARED) -> Any:
        # hosting asks for a store per request, with that request's platform context
        return provider.get_store(
            config=config, context_id=context_id, platform_context=world.context(user)
        )

    def run(coro: Any) -> Any:
        return asyncio.run(coro)

    def contexts(user: str) -> set[str]:
        return {c for c in run(storage(user).list_contexts()) if c is not None}

    async def write(user: str) -> None:
        previous = None
        for i, state in enumerate(({"doc": BIG_TEXT, "u": user}, {"u": user})):
            checkpoint = WorkflowCheckpoint(
                workflow_name="wf",
                graph_signature_hash="sig",
                previous_checkpoint_id=previous,
                state=state,
                iteration_count=i,
            )
            await storage(user).save(checkpoint)
            previous = checkpoint.checkpoint_id
        await storage(user, f"own-{user}").save(
            WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="sig", state={"u": user})
        )

    async def delete_all(user: str) -> None:
        conv = storage(user)
        for checkpoint_id in await conv.list_checkpoint_ids(workflow_name="wf"):
            assert await conv.delete(checkpoint_id) is True
        await conv.delete_context()

    try:
        for user in (*USERS, OUTSIDE):
            run(write(user))
        _spilled_for_everyone(world)
        for user in (*USERS, OUTSIDE):
            assert contexts(user) == owned[user]
            history = run(storage(user).list_checkpoints(workflow_name="wf"))
            assert [cp.state for cp in history] == [{"doc": BIG_TEXT, "u": user}, {"u": user}]
        for actor in (*USERS, OUTSIDE):

            def prune(actor: str = actor) -> None:
                run(storage(actor).prune(keep=1))

            def gc(actor: str = actor) -> None:
                run(storage(actor).gc(grace_seconds=0))

            def delete(actor: str = actor) -> None:
                run(delete_all(actor))
                owned[actor].discard(SHARED)

            _check_maintenance(
                world,
                contexts,
                lambda u: owned[u],
                [prune, gc, delete],
                actor,
            )
            assert run(storage(actor).get_latest(workflow_name="wf")) is None
            assert contexts(actor) == {f"own-{actor}"}
        for user in (*USERS, OUTSIDE):  # and everyone's own context still reads back
            own = run(storage(user, f"own-{user}").get_latest(workflow_name="wf"))
            assert own is not None and own.state == {"u": user}
    finally:
        provider.close()


# -- AutoGen: one AutoGenStateStore -------------------------------------------------------------


def test_autogen_store(world: World) -> None:
    store = AutoGenStateStore(**world.options, keep_versions=None)
    owned = {u: {SHARED, f"own-{u}"} for u in (*USERS, OUTSIDE)}
    agent = "counter/default"

    def scopes(user: str) -> set[str]:
        return {s for s in store.list_scopes() if s is not None}

    try:
        for user in (*USERS, OUTSIDE):
            with world.request(user):
                store.save(SHARED, "agent", agent, {"doc": BIG_TEXT, "u": user})
                store.save(SHARED, "agent", agent, {"u": user, "n": 2})
                store.save(f"own-{user}", "agent", agent, {"u": user})
        _spilled_for_everyone(world)
        for user in (*USERS, OUTSIDE):
            with world.request(user):
                assert scopes(user) == owned[user]
                assert store.load(SHARED, "agent", agent) == {"u": user, "n": 2}
                [first, _] = store.versions(SHARED, "agent", agent)
                old = store.load(SHARED, "agent", agent, version=first.version)
                assert old == {"doc": BIG_TEXT, "u": user}
                assert [(s.name, s.versions) for s in store.list_states(SHARED)] == [(agent, 2)]
        for actor in (*USERS, OUTSIDE):
            _check_maintenance(
                world,
                scopes,
                lambda u: owned[u],
                [
                    lambda: store.prune(SHARED, "agent", agent, keep=1),
                    lambda: store.delete(SHARED, "agent", agent),
                ],
                actor,
            )
            with world.request(actor):
                assert store.load(SHARED, "agent", agent) is None
                assert store.load(f"own-{actor}", "agent", agent) == {"u": actor}
    finally:
        store.close()
