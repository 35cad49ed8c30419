"""``FoundrySessionStore``: MAF agent sessions on the state store, in local and hosted mode."""

from __future__ import annotations

import asyncio
import base64
import os
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_framework import (
    Agent,
    AgentSession,
    BaseChatClient,
    ChatResponse,
    Content,
    FileSessionStore,
    Message,
)
from azure.ai.agentserver.core import FoundryAgentRequestContext

from foundry_checkpoint.adapter import spilled_digest
from foundry_checkpoint.errors import ConcurrentWriteError, CorruptPayloadError, NonJsonValueError
from tests._counting_store import CountingStore
from tests._request import in_request

with warnings.catch_warnings():  # MAF's SessionStore is experimental: it warns when subclassed
    warnings.simplefilter("ignore")
    from foundry_checkpoint_maf import FoundrySessionStore
    from foundry_checkpoint_maf._sessions import CONFLICT_MESSAGE

pytestmark = pytest.mark.filterwarnings(
    "ignore::agent_framework._feature_stage.ExperimentalWarning"
)

MakeStore = Callable[..., FoundrySessionStore]


@pytest.fixture
async def make_store(store_env: Any) -> AsyncIterator[MakeStore]:
    made: list[FoundrySessionStore] = []

    def _make(*, user: str = "alice", **options: Any) -> FoundrySessionStore:
        store = FoundrySessionStore(**store_env.kwargs(user=user, **options))
        made.append(store)
        return store

    yield _make
    for store in made:
        await store.aclose()


def _messages() -> list[Message]:
    return [
        Message(role="system", contents=["be brief"]),
        Message(role="user", contents=["hi ünïcødé ✓"], author_name="ann", message_id="m1"),
        Message(
            role="assistant",
            contents=[
                Content.from_text("calling"),
                Content.from_function_call(call_id="c1", name="lookup", arguments={"q": 1}),
            ],
            additional_properties={"trace": {"id": 7}},
        ),
        Message(
            role="tool", contents=[Content.from_function_result(call_id="c1", result={"ok": True})]
        ),
        Message(
            role="user",
            contents=[Content.from_uri("https://example.com/a.png", media_type="image/png")],
        ),
    ]


def _sessions() -> list[AgentSession]:
    plain = AgentSession(session_id="plain")
    full = AgentSession(session_id="full", service_session_id="resp_123")
    full.state = {
        "messages": _messages(),
        "nested": {"a": [1, 2.5, None, True, "x"], "b": {"c": []}},
        "tuple": (1, 2),
        "count": 3,
        "": "empty key",
    }
    structured = AgentSession(session_id="id with / and ~", service_session_id="conv-9")
    structured.state = {"memory": {"facts": ["likes tea"]}}
    return [plain, full, structured]


def _shape(value: Any) -> Any:
    """``value`` with the type of every leaf, so a Message restored as a dict shows."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [type(value).__name__, *(_shape(v) for v in value)]
    if isinstance(value, Message):
        return ("Message", value.to_dict())
    return (type(value).__name__, value)


def _view(session: AgentSession | None) -> Any:
    assert session is not None
    return (session.session_id, session.service_session_id, _shape(session.state))


async def _counting(store: FoundrySessionStore) -> CountingStore:
    core = store._core
    scope = await core.arun(core.scope(None))
    counting = CountingStore(scope.store)
    scope.store = counting
    return counting


# -- the differential against FileSessionStore -----------------------------------------------
async def test_same_sessions_back_as_file_session_store(
    make_store: MakeStore, tmp_path: Path
) -> None:
    ours, theirs = make_store(), FileSessionStore(tmp_path / "files")
    for session in _sessions():
        await ours.set(session.session_id, session)
        await theirs.set(session.session_id, session)
    for session in _sessions():
        mine, file = await ours.get(session.session_id), await theirs.get(session.session_id)
        assert _view(mine) == _view(file)
        assert mine is not None and mine.to_dict() == session.to_dict()
        assert isinstance(
            mine.state.get("messages", [Message(role="user", contents=[])])[0], Message
        )
    assert await ours.get("absent") is None and await theirs.get("absent") is None
    await ours.delete("full")
    await theirs.delete("full")
    await ours.delete("full")  # deleting what is gone is fine, as for FileSessionStore
    assert await ours.get("full") is None and await theirs.get("full") is None
    # Ids longer than a key (FileSessionStore refuses over 128 characters): hashed keys.
    long_id = AgentSession(session_id="L" * 400)
    long_id.state = {"k": "v"}
    await ours.set(long_id.session_id, long_id)
    assert _view(await ours.get(long_id.session_id)) == _view(long_id)
    assert sorted(await ours.list_sessions()) == sorted(
        [long_id.session_id, *(s.session_id for s in _sessions() if s.session_id != "full")]
    )
    # The same refusals: an empty id, a value JSON cannot hold, not an AgentSession.
    for store in (ours, theirs):
        with pytest.raises(ValueError):
            await store.get("")
        bad = AgentSession(session_id="bad")
        bad.state = {"when": object()}
        with pytest.raises(TypeError), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            await store.set("bad", bad)
        with pytest.raises(TypeError):
            await store.set("bad", {"session_id": "bad"})  # type: ignore[arg-type]
    with pytest.raises(NonJsonValueError), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        await ours.set("bad", bad)
    assert await ours.get("bad") is None


async def test_a_copy_each_time(make_store: MakeStore) -> None:
    store = make_store()
    session = AgentSession(session_id="copy")
    session.state["items"] = [1]
    await store.set("copy", session)
    session.state["items"].append(2)  # later changes do not reach the store
    first = await store.get("copy")
    assert first is not None and first.state == {"items": [1]}
    first.state["items"].append(3)
    second = await store.get("copy")
    assert second is not None and second.state == {"items": [1]}


# -- store calls ----------------------------------------------------------------------------
async def test_one_store_call_per_get_set_delete(store_env: Any, make_store: MakeStore) -> None:
    store = make_store()
    session = AgentSession(session_id="counted")
    session.state["messages"] = _messages()
    await store.set("counted", session)  # the store exists and was touched
    counting = await _counting(store)
    costs = []
    steps: tuple[Callable[[], Awaitable[object]], ...] = (
        lambda: store.get("counted"),
        lambda: store.set("counted", session),
        lambda: store.get("counted"),
        lambda: store.delete("counted"),
        lambda: store.get("counted"),
        lambda: store.set("counted", session),
    )
    for step in steps:
        counting.calls.clear()
        if store_env.emulator is not None:
            store_env.emulator.reset_counts()
        await step()
        costs.append(dict(counting.calls))
        if store_env.emulator is not None:
            assert sum(store_env.emulator.requests.values()) == 1, store_env.emulator.requests
    assert costs == [
        {"get_item": 1},
        {"set_item": 1},  # compare-and-set on the ETag of the get
        {"get_item": 1},
        {"delete_item": 1},
        {"get_item": 1},
        {"create_item": 1},  # seen absent: a create
    ]


# -- concurrent writers ---------------------------------------------------------------------
async def test_two_writers_racing_one_wins(make_store: MakeStore) -> None:
    first, second, reader = make_store(), make_store(), make_store()  # replicas
    start = AgentSession(session_id="race")
    start.state["turns"] = 0
    await first.set("race", start)
    for rounds in range(5):
        a, b = await first.get("race"), await second.get("race")
        assert a is not None and b is not None
        a.state["turns"] += 1
        a.state["by"] = "first"
        b.state["turns"] += 1
        b.state["by"] = "second"
        results = await asyncio.gather(
            first.set("race", a), second.set("race", b), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        assert len(errors) == 1, results
        error = errors[0]
        assert isinstance(error, ConcurrentWriteError) and isinstance(error, RuntimeError)
        assert str(error) == CONFLICT_MESSAGE  # what Foundry hosting shows its client
        winner = "first" if results[0] is None else "second"
        stored = await reader.get("race")  # a reader apart (a get refreshes the ETag seen)
        assert stored is not None and stored.state == {"turns": rounds + 1, "by": winner}
        loser = second if winner == "first" else first
        with pytest.raises(ConcurrentWriteError):  # no retry without a reload
            await loser.set("race", a if loser is first else b)
    # Two creates of one new session: one wins, the other learns it exists.
    assert await first.get("new") is None and await second.get("new") is None
    one, two = AgentSession(session_id="new"), AgentSession(session_id="new")
    one.state["who"], two.state["who"] = 1, 2
    results = await asyncio.gather(
        first.set("new", one), second.set("new", two), return_exceptions=True
    )
    assert sum(isinstance(r, ConcurrentWriteError) for r in results) == 1
    stored = await second.get("new")
    assert stored is not None and stored.state["who"] == (1 if results[0] is None else 2)


async def test_etags_are_per_request(store_env: Any, make_store: MakeStore) -> None:
    """One object serving two requests of one user: each request's get guards its own set."""
    store = make_store()
    one = FoundryAgentRequestContext(call_id=store_env.call_id("alice"), user_id="alice")
    two = FoundryAgentRequestContext(call_id=store_env.call_id("alice"), user_id="alice")
    await store.for_request(one).set("shared", AgentSession(session_id="shared"))
    a, b = await store.for_request(one).get("shared"), None
    with in_request(two):
        b = await store.get("shared")
    assert a is not None and b is not None
    a.state["by"], b.state["by"] = "one", "two"
    await store.for_request(one).set("shared", a)
    with in_request(two), pytest.raises(ConcurrentWriteError):
        await store.set("shared", b)
    stored = await store.for_request(two).get("shared")
    assert stored is not None and stored.state == {"by": "one"}


# -- users -------------------------------------------------------------------------------------
async def test_twenty_users_same_session_ids(store_env: Any, make_store: MakeStore) -> None:
    store = make_store()
    users = [f"user-{i:02d}" for i in range(20)]

    def request(user: str) -> FoundryAgentRequestContext:
        return FoundryAgentRequestContext(call_id=store_env.call_id(user), user_id=user)

    async def write(user: str) -> None:
        view = store.for_request(request(user))
        for sid in ("chat", "other"):
            session = AgentSession(session_id=sid)
            session.state = {"owner": user, "messages": [Message(role="user", contents=[user])]}
            await view.set(sid, session)

    await asyncio.gather(*(write(u) for u in users))
    snapshots = {}
    for user in users:
        view = store.for_request(request(user))
        got = await view.get("chat")
        assert got is not None and got.state["owner"] == user
        assert got.state["messages"][0].text == user
        assert sorted(await view.list_sessions()) == ["chat", "other"]
        snapshots[user] = got.to_dict()
    await store.for_request(request(users[0])).delete("chat")
    assert await store.for_request(request(users[0])).get("chat") is None
    for user in users[1:]:
        got = await store.for_request(request(user)).get("chat")
        assert got is not None and got.to_dict() == snapshots[user]
    with in_request(request(users[5])):  # the ambient request context is honoured too
        got = await store.get("chat")
    assert got is not None and got.state["owner"] == users[5]


# -- size -------------------------------------------------------------------------------------
async def test_session_over_one_megabyte_round_trips(make_store: MakeStore) -> None:
    store = make_store()
    blob = base64.b64encode(os.urandom(1_200_000)).decode("ascii")  # incompressible enough
    big = AgentSession(session_id="big")
    big.state = {
        "messages": [
            Message(role="user", contents=["read this"]),
            Message(role="tool", contents=[Content.from_function_result(call_id="c", result=blob)]),
        ],
        "attachment": blob,
    }
    await store.set("big", big)
    core = store._core
    scope = await core.arun(core.scope(None))
    item = await core.arun(scope.store.get_item("s/big"))
    assert item is not None and spilled_digest(item.value) is not None  # it spilled
    again = await make_store().get("big")  # another object, nothing cached
    assert again is not None and again.to_dict() == big.to_dict()
    again.state["attachment"] = "small now"
    await store.set("big", again)  # unconditional: this object never read it
    assert (await store.get("big")).state["attachment"] == "small now"  # type: ignore[union-attr]
    report = await store.gc(grace_seconds=0)
    assert len(report.deleted) >= 1  # the old blob no session references
    assert (await store.get("big")) is not None


async def test_damaged_session_is_a_typed_error(make_store: MakeStore) -> None:
    store = make_store()
    await store.set("d", AgentSession(session_id="d"))
    core = store._core
    scope = await core.arun(core.scope(None))
    value = await core.arun(
        scope.encode(key="s/d", payload=b'{"format":"maf.session/1","session":[]}')
    )
    await core.arun(scope.store.set_item("s/d", value, tags={"kind": "maf.session"}))
    with pytest.raises(CorruptPayloadError, match="'d' cannot be restored"):
        await store.get("d")


# -- an agent --------------------------------------------------------------------------------
class _EchoClient(BaseChatClient):
    """Answers with how many messages it was sent and the last user text."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    async def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> ChatResponse:
        self.seen.append(len(messages))
        last = next(m.text for m in reversed(messages) if m.role == "user")
        return ChatResponse(
            messages=[Message(role="assistant", contents=[f"{len(messages)}:{last}"])]
        )


async def test_agent_session_survives_a_new_store(make_store: MakeStore) -> None:
    client = _EchoClient()
    agent = Agent(client, name="echo")
    session = agent.create_session(session_id="conv-1")
    first = await agent.run("hello", session=session)
    assert first.text == "1:hello"
    store = make_store()
    await store.set(session.session_id, session)
    await store.aclose()

    replaced = make_store()  # a restart: a new object, a new agent
    restored = await replaced.get("conv-1")
    assert restored is not None and restored.to_dict() == session.to_dict()
    again = Agent(client, name="echo")
    second = await again.run("and again", session=restored)
    assert second.text == "3:and again"  # the earlier turn came back with the session
    await replaced.set("conv-1", restored)
    latest = await make_store().get("conv-1")
    assert latest is not None
    assert [m.text for m in latest.state["in_memory"]["messages"]] == [
        "hello",
        "1:hello",
        "and again",
        "3:and again",
    ]
