"""``FoundryHistoryProvider`` keeps a forked session's branches apart, as MAF's
``InMemoryHistoryProvider`` does.

A host that saves the ``AgentSession`` of every response and continues one response twice
(``previous_response_id``: a regenerated reply) loads two copies of one session snapshot, with
one session id. ``InMemoryHistoryProvider`` keeps the messages inside each copy's state, so each
branch sees only its own; ours records in that state which sequence numbers make up the branch.
Every test runs in local and hosted mode (``store_env``).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from agent_framework import (
    Agent,
    AgentSession,
    BaseChatClient,
    ChatResponse,
    InMemoryHistoryProvider,
    Message,
)

from foundry_checkpoint.errors import CorruptPayloadError
from foundry_checkpoint_maf import FoundryHistoryProvider
from tests._counting_store import CountingStore

from .conftest import MakeHistory

State = dict[str, Any]


def _turn(tag: str) -> list[Message]:
    return [
        Message("user", [f"{tag}?"], message_id=f"{tag}-q"),
        Message("assistant", [f"{tag}!"], message_id=f"{tag}-a"),
    ]


def _texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


def _saved(state: State) -> State:
    """The state as a session store keeps it: JSON and back (``AgentSession.to_dict``)."""
    loaded: State = json.loads(json.dumps(state))
    return loaded


async def _counting(history: FoundryHistoryProvider, session: str) -> CountingStore:
    core = history._core
    scope = await core.arun(core.scope(session))
    counting = CountingStore(scope.store)
    scope.store = counting
    return counting


async def test_two_branches_from_one_snapshot_read_as_in_memory(
    make_history: MakeHistory,
) -> None:
    ours = make_history()
    memory = InMemoryHistoryProvider()
    await ours.delete_session("fork")
    base: dict[str, State] = {"ours": {}, "memory": {}}
    for tag in ("t0", "t1"):
        await ours.save_messages("fork", _turn(tag), state=base["ours"])
        await memory.save_messages("fork", _turn(tag), state=base["memory"])
    assert base["ours"] == {"branch": [[0, 4]]}
    branches = {
        name: {"ours": _saved(base["ours"]), "memory": copy.deepcopy(base["memory"])}
        for name in ("a", "b")
    }
    # the branches take turns, and a replay of the whole transcript is not stored twice
    script: list[tuple[str, str | None]] = [
        ("a", "a1"), ("b", "b1"), ("b", "b2"), ("a", "a2"), ("a", None), ("b", "b3"),
    ]  # fmt: skip
    for branch, said in script:
        states = branches[branch]
        if said is None:
            transcript = await memory.get_messages("fork", state=states["memory"])
            calls = [transcript]
        else:
            calls = [_turn(said)]
        for call in calls:
            await ours.save_messages("fork", call, state=states["ours"])
            await memory.save_messages("fork", call, state=states["memory"])
        states["ours"] = _saved(states["ours"])  # saved and loaded between turns
        for each in branches.values():
            kept = await memory.get_messages("fork", state=each["memory"])
            expected = [m.to_dict() for m in kept]
            got = await ours.get_messages("fork", state=each["ours"])
            assert [m.to_dict() for m in got] == expected
            for last in (1, 3, 5, 100):
                window = await ours.get_messages("fork", state=each["ours"], last=last)
                assert [m.to_dict() for m in window] == expected[-last:]
    assert _texts(await ours.get_messages("fork", state=branches["a"]["ours"])) == [
        "t0?", "t0!", "t1?", "t1!", "a1?", "a1!", "a2?", "a2!"
    ]  # fmt: skip
    assert branches["b"]["ours"]["branch"] == [[0, 4], [6, 10], [12, 14]]
    # the session's own snapshot still reads the turns before the fork; the store holds all
    assert len(await ours.get_messages("fork", state=_saved(base["ours"]))) == 4
    assert len(await ours.get_messages("fork")) == 14


async def test_an_agent_session_restored_twice_keeps_its_branches(
    make_history: MakeHistory,
) -> None:
    client = UserEcho()
    history = make_history()
    await history.delete_session("agent-fork")
    agent = Agent(client=client, context_providers=[history])
    session = agent.create_session(session_id="agent-fork")
    await agent.run("first", session=session)
    snapshot = session.to_dict()
    left, right = AgentSession.from_dict(snapshot), AgentSession.from_dict(snapshot)
    await agent.run("left", session=left)
    assert client.seen == ["first", "left"]
    await agent.run("right", session=right)
    assert client.seen == ["first", "right"]
    await agent.run("left again", session=AgentSession.from_dict(left.to_dict()))
    assert client.seen == ["first", "left", "left again"]


class UserEcho(BaseChatClient):
    """A chat client that records the user messages it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    async def _answer(self, messages: Sequence[Message]) -> ChatResponse:
        self.seen = [m.text for m in messages if m.role == "user"]
        return ChatResponse(messages=[Message("assistant", [f"{len(self.seen)} seen"])])

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> Any:
        return self._answer(messages)


async def test_max_messages_keeps_every_branch_window(make_history: MakeHistory) -> None:
    """Unforked, retention deletes what falls out of the window (as before); once a branch is
    forked off, each branch reads its last ``max_messages`` and nothing more is deleted."""
    history = make_history(max_messages=4)
    await history.delete_session("kept")
    base: State = {}
    for tag in ("t0", "t1", "t2"):
        await history.save_messages("kept", _turn(tag), state=base)
    assert base == {"branch": [[2, 6]]}
    assert _texts(await history.get_messages("kept")) == ["t1?", "t1!", "t2?", "t2!"]
    left, right = _saved(base), _saved(base)
    await history.save_messages("kept", _turn("a1"), state=left)  # linear: t1 is deleted
    await history.save_messages("kept", _turn("b1"), state=right)  # a fork: t2 stays for b
    await history.save_messages("kept", _turn("a2"), state=left)
    await history.save_messages("kept", _turn("b2"), state=right)
    assert _texts(await history.get_messages("kept", state=left)) == ["a1?", "a1!", "a2?", "a2!"]
    assert _texts(await history.get_messages("kept", state=right)) == [
        "b1?", "b1!", "b2?", "b2!"
    ]  # fmt: skip
    assert _texts(await history.get_messages("kept", state=right, last=1)) == ["b2!"]
    core = history._core
    scope = await core.arun(core.scope("kept"))
    kept = await core.arun(scope.keys({"kind": "maf.message"}))
    assert len(kept) == 10  # t2 and all four branch turns: nothing deleted since the fork
    assert left == {"branch": [[6, 8], [10, 12]]} and right == {"branch": [[8, 10], [12, 14]]}


async def test_a_state_without_the_record_reads_the_whole_store(
    make_history: MakeHistory,
) -> None:
    history = make_history()
    await history.delete_session("older")
    await history.save_messages("older", _turn("t0"))  # no state: as before
    state: State = {}  # a session saved before branches were recorded
    assert _texts(await history.get_messages("older", state=state)) == ["t0?", "t0!"]
    await history.save_messages("older", _turn("t1"), state=state)
    assert state == {"branch": [[0, 4]]}  # from now on the session records its branch
    assert len(await history.get_messages("older", state=state)) == 4
    # a record left by a session that was deleted since: the whole (new) history
    await history.delete_session("older")
    await history.save_messages("older", _turn("n0"))
    assert _texts(await history.get_messages("older", state=state)) == ["n0?", "n0!"]
    with pytest.raises(CorruptPayloadError, match="branch"):
        await history.get_messages("older", state={"branch": [[4, 2]]})


async def test_an_unforked_session_costs_what_it_did(make_history: MakeHistory) -> None:
    history = make_history()
    await history.delete_session("flat")
    state: State = {}
    await history.save_messages("flat", _turn("t0"), state=state)
    counting = await _counting(history, "flat")
    await history.save_messages("flat", _turn("t1"), state=state)
    assert counting.calls == Counter({"get_item": 3, "set_item": 3})  # 2 + 2k, as without
    counting.calls.clear()
    assert len(await history.get_messages("flat", state=state, last=3)) == 3
    assert counting.calls == Counter({"get_item": 4})
    counting.calls.clear()
    forked = {"branch": [[0, 2]]}
    await history.save_messages("flat", _turn("f1"), state=forked)  # a fork: the same calls
    assert counting.calls == Counter({"get_item": 3, "set_item": 3})
    assert forked == {"branch": [[0, 2], [4, 6]]}
