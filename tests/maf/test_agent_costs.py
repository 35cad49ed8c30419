"""The store calls docs/maf-agents.md states for the history provider and the session store.

The page's cost tables are measured numbers; these tests hold them: item calls (both modes,
counted at the session's store) and, in hosted mode, the HTTP requests the emulator routes,
including what a new object's first calls add. The flat append and read-last costs at 10 and
2,000 messages are in test_history_provider.py, one call per session operation in
test_session_store.py.
"""

from __future__ import annotations

import base64
import random
import warnings
from collections import Counter
from collections.abc import Awaitable, Sequence
from typing import Any

import pytest
from agent_framework import Agent, AgentSession, BaseChatClient, ChatResponse, Content, Message

from foundry_checkpoint_maf import FoundryHistoryProvider
from tests._counting_store import CountingStore

from .conftest import MakeHistory, numbered

with warnings.catch_warnings():  # MAF's SessionStore is experimental: it warns when subclassed
    warnings.simplefilter("ignore")
    from foundry_checkpoint_maf import FoundrySessionStore

pytestmark = pytest.mark.filterwarnings(
    "ignore::agent_framework._feature_stage.ExperimentalWarning"
)


async def _counting(history: FoundryHistoryProvider, session: str) -> CountingStore:
    core = history._core
    scope = await core.arun(core.scope(session))
    counting = CountingStore(scope.store)
    scope.store = counting
    return counting


async def _requests(store_env: Any, call: Awaitable[Any]) -> Counter[str]:
    """The HTTP requests ``call`` sent, by route (hosted mode; empty locally)."""
    if store_env.emulator is None:
        await call
        return Counter()
    store_env.emulator.reset_counts()
    await call
    return Counter({k: v for k, v in store_env.emulator.requests.items() if v})


async def test_a_replayed_turn_costs_reads_only(store_env: Any, make_history: MakeHistory) -> None:
    history = make_history()
    await history.save_messages("replay", numbered(0, 10))
    counting = await _counting(history, "replay")
    sent = await _requests(store_env, history.save_messages("replay", numbered(9, 1)))
    assert counting.calls == Counter({"get_item": 2})  # the head and the one tail message
    counting.calls.clear()
    await history.save_messages("replay", numbered(7, 3))
    assert counting.calls == Counter({"get_item": 4})  # 1 + k, nothing written
    if store_env.emulator is not None:
        assert sent == Counter({"get_item": 2})
    assert len(await history.get_messages("replay")) == 10


async def test_an_append_into_a_full_window_reads_and_deletes_what_falls_out(
    store_env: Any, make_history: MakeHistory
) -> None:
    history = make_history(max_messages=10)
    await history.save_messages("window", numbered(0, 5))
    await history.save_messages("window", numbered(5, 5))
    counting = await _counting(history, "window")
    sent = await _requests(store_env, history.save_messages("window", numbered(10, 2)))
    # 2 + 2k, and a read and a delete per message pushed out
    assert counting.calls == Counter({"get_item": 5, "set_item": 3, "delete_item": 2})
    if store_env.emulator is not None:
        assert sent == Counter({"get_item": 5, "put_item": 3, "delete_item": 2})
    assert [m.text for m in await history.get_messages("window")] == [
        f"m-{i}" for i in range(2, 12)
    ]


@pytest.mark.parametrize("length", [10, 250])
async def test_delete_session_costs_one_delete_per_item(
    store_env: Any, make_history: MakeHistory, length: int
) -> None:
    history = make_history()
    await history.save_messages("gone", numbered(0, length))
    counting = await _counting(history, "gone")
    sent = await _requests(store_env, history.delete_session("gone"))
    sealed = length // 50  # written in one call: the append sealed every page of 50
    items = length + sealed + 2  # the messages, the pages, the head and the spill namespace
    pages = (items + 99) // 100
    # the head, the spill namespace; a listing per 100 items; every item
    assert counting.calls == Counter({"get_item": 2, "list_keys": pages, "delete_item": items})
    if store_env.emulator is not None:  # and the session's entry in the user's index
        assert sent == Counter({"get_item": 2, "list_keys": pages, "delete_item": items + 1})
    assert await history.get_messages("gone") == []


@pytest.mark.parametrize("store_mode", ["hosted"])  # store routes: the embedded store has none
@pytest.mark.parametrize("length", [10, 300])
async def test_what_a_new_object_and_a_new_session_add(
    store_env: Any, make_history: MakeHistory, length: int
) -> None:
    writer = make_history()
    await writer.save_messages("long", numbered(0, length))
    assert await _requests(store_env, writer.get_messages("never-written")) == Counter(
        {"get_store": 1}  # not found, nothing created
    )
    new_session = await _requests(store_env, writer.save_messages("fresh", numbered(0, 2)))
    assert new_session == Counter(  # one GET finds no store, one create makes it
        {"get_store": 1, "create_store": 1, "get_item": 2, "create_item": 1, "put_item": 3}
    )
    assert sum(new_session.values()) == 8
    assert await _requests(store_env, writer.save_messages("fresh", numbered(2, 2))) == Counter(
        {"get_item": 3, "put_item": 3}
    )
    fresh = make_history()  # a new process
    read = await _requests(store_env, fresh.get_messages("long", last=20))
    assert read == Counter({"get_store": 1, "get_item": 1 + min(20, length)})
    append = await _requests(store_env, fresh.save_messages("long", numbered(length, 2)))
    assert append == Counter({"get_store": 1, "get_item": 4, "put_item": 4})  # the index's GET
    assert await _requests(store_env, fresh.save_messages("long", numbered(length + 2, 2))) == (
        Counter({"get_item": 3, "put_item": 3})
    )


@pytest.mark.parametrize("store_mode", ["hosted"])
async def test_a_session_stores_first_set_and_then_one_request(store_env: Any) -> None:
    async with FoundrySessionStore(**store_env.kwargs()) as sessions:
        session = AgentSession(session_id="c1")
        session.state["topic"] = "billing"
        assert await _requests(store_env, sessions.get("c1")) == Counter({"get_store": 1})
        first = await _requests(store_env, sessions.set("c1", session))
        assert sum(first.values()) == 6, first  # the get's 404 spares the create's GET
        assert first["create_item"] == 1
        steps: list[tuple[Awaitable[Any], Counter[str]]] = [
            (sessions.get("c1"), Counter({"get_item": 1})),
            (sessions.set("c1", session), Counter({"put_item": 1})),
            (sessions.list_sessions(), Counter({"list_keys": 1})),
            (sessions.delete("c1"), Counter({"delete_item": 1})),
        ]
        for call, expected in steps:
            assert await _requests(store_env, call) == expected


async def test_one_message_and_the_whole_history(store_env: Any, make_history: MakeHistory) -> None:
    history = make_history()
    await history.save_messages("whole", numbered(0, 149))
    counting = await _counting(history, "whole")
    sent = await _requests(store_env, history.save_messages("whole", numbered(149, 1)))
    assert counting.calls == Counter({"get_item": 2, "set_item": 2})  # 2 + 2k, k = 1
    counting.calls.clear()
    # the 149 were one append: it sealed pages 0 and 1 (messages 0-99); the append of message
    # 149 completed page 2 without holding it, so the first whole read takes that page's 50
    # messages from their items and seals it: the head, 3 page reads, 50 messages, 1 page write
    read = await _requests(store_env, history.get_messages("whole"))
    assert counting.calls == Counter({"get_item": 54, "set_item": 1})
    counting.calls.clear()
    again = await _requests(store_env, history.get_messages("whole"))
    assert counting.calls == Counter({"get_item": 4})  # the head and 3 pages
    if store_env.emulator is not None:
        assert sent == Counter({"get_item": 2, "put_item": 2})
        assert read == Counter({"get_item": 54, "put_item": 1})
        assert again == Counter({"get_item": 4})


def _big_text() -> str:
    # incompressible, over the 1 MB item limit once in JSON (compression cannot keep it inline)
    return base64.b64encode(random.Random(7).randbytes(900_000)).decode()


@pytest.mark.parametrize("store_mode", ["hosted"])  # chunk items: hosted mode without blob store
async def test_a_message_and_a_session_over_the_item_limit(
    store_env: Any, make_history: MakeHistory
) -> None:
    big = _big_text()
    tool = Message("tool", [Content.from_function_result("c1", result=big)], message_id="t")
    history = make_history()
    await history.save_messages("warm", numbered(0, 1))  # the user's index is open now
    append = await _requests(store_env, history.save_messages("big", [tool]))
    assert sum(append.values()) == 12, append  # a new session's store, the chunks, the message
    fresh = make_history()
    back: list[Message] = []

    async def _read() -> None:
        back.extend(await fresh.get_messages("big"))

    read = await _requests(store_env, _read())
    assert read == Counter({"get_store": 1, "get_item": 6})
    assert [m.to_dict() for m in back] == [tool.to_dict()]
    async with FoundrySessionStore(**store_env.kwargs()) as sessions:
        await sessions.set("small", AgentSession(session_id="small"))  # the store exists now
        session = AgentSession(session_id="big")
        session.state["blob"] = big
        stored = await _requests(store_env, sessions.set("big", session))
        assert sum(stored.values()) == 6, stored
        got: list[AgentSession | None] = []

        async def _get() -> None:
            got.append(await sessions.get("big"))

        assert await _requests(store_env, _get()) == Counter({"get_item": 3})
        assert got[0] is not None and got[0].state == {"blob": big}


class _Quiet(BaseChatClient):
    """A chat client that answers at once and remembers how many messages it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    async def _answer(self, messages: Sequence[Message]) -> ChatResponse:
        self.seen = len(messages)
        return ChatResponse(messages=[Message("assistant", ["ok"])])

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> Any:
        return self._answer(messages)


class _LastTwenty(FoundryHistoryProvider):
    """The docs' pattern: the agent loads the last 20 messages, the store keeps every one."""

    async def get_messages(
        self,
        session_id: str | None,
        *,
        state: dict[str, Any] | None = None,
        last: int | None = None,
        **kwargs: Any,
    ) -> list[Message]:
        return await super().get_messages(
            session_id, state=state, last=20 if last is None else last, **kwargs
        )


@pytest.mark.parametrize("load", ["whole", "last20"])
@pytest.mark.parametrize("length", [10, 300])
async def test_an_agent_turn_loads_what_the_provider_gives_it(
    store_env: Any, length: int, load: str
) -> None:
    cls = FoundryHistoryProvider if load == "whole" else _LastTwenty
    async with cls(**store_env.kwargs()) as history:
        await history.save_messages("agent", numbered(0, length))
        client = _Quiet()
        agent = Agent(client=client, context_providers=[history])
        session = agent.create_session(session_id="agent")
        counting = await _counting(history, "agent")
        sent = await _requests(store_env, agent.run("question", session=session))
        loaded = length if load == "whole" else min(20, length)
        assert client.seen == loaded + 1  # the history loaded and the input
        # the load: the head and each message read, a sealed page of 50 (the one append that
        # wrote the history sealed them) one read; the append of the input and the reply: 2 + 2k
        reads = length // 50 + length % 50 if load == "whole" else loaded
        assert counting.calls == Counter({"get_item": 1 + reads + 3, "set_item": 3})
        if store_env.emulator is not None:
            assert sent == Counter({"get_item": 1 + reads + 3, "put_item": 3})
    async with FoundryHistoryProvider(**store_env.kwargs()) as plain:  # the store kept all
        assert len(await plain.get_messages("agent")) == length + 2


@pytest.mark.parametrize("store_mode", ["hosted"])
async def test_what_the_page_says_of_foundry_agent_session_store(store_env: Any) -> None:
    """agent-framework-foundry-hosting's store, as the page compares it: 2 requests per call (a
    new client's store look-up, then the item call), a read that creates the store, and no size
    handling. It takes client settings from the environment only; the subclass passes the
    emulator's, every call is otherwise its own."""
    from agent_framework_foundry_hosting import FoundryAgentSessionStore
    from azure.ai.agentserver.core import FoundryAgentRequestContext
    from azure.ai.agentserver.core.storage import (
        FoundryStateStore,
        FoundryStorageBadRequestError,
    )

    client = store_env.kwargs()

    class _OnTheEmulator(FoundryAgentSessionStore):
        async def _get_store(self) -> FoundryStateStore:
            return await FoundryStateStore.get_or_create(
                f"{store_env.prefix}-agent-sessions",
                client["credential"],
                client["endpoint"],
                user_isolation=True,
                connection_verify=client["connection_verify"],
            )

    theirs = _OnTheEmulator(FoundryAgentRequestContext())
    session = AgentSession(session_id="c1")
    session.state["topic"] = "billing"
    steps: list[tuple[Awaitable[Any], Counter[str]]] = [
        (theirs.get("c1"), Counter({"get_store": 1, "create_store": 1, "get_item": 1})),
        (theirs.set("c1", session), Counter({"get_store": 1, "create_item": 1})),
        (theirs.get("c1"), Counter({"get_store": 1, "get_item": 1})),
        (theirs.set("c1", session), Counter({"get_store": 1, "put_item": 1})),
        (theirs.delete("c1"), Counter({"get_store": 1, "delete_item": 1})),
    ]
    for call, expected in steps:
        assert await _requests(store_env, call) == expected
    big = AgentSession(session_id="big")
    big.state["blob"] = _big_text()
    with pytest.raises(FoundryStorageBadRequestError, match="limit is 1000000 bytes"):
        await theirs.set("big", big)


async def test_an_agent_built_conversation_costs_a_saw_tooth_bounded_by_its_pages(
    store_env: Any,
) -> None:
    """Two messages a turn: no append holds a whole page, so each load reads the messages after
    the last sealed page one by one and seals a page once it is complete (the page's 50 reads
    and one write): the turn's calls climb for 25 turns and fall back, never past the head, the
    sealed pages, one page's 50 messages and the append."""
    async with FoundryHistoryProvider(**store_env.kwargs()) as history:
        agent = Agent(client=_Quiet(), context_providers=[history])
        session = agent.create_session(session_id="built")
        counting = await _counting(history, "built")
        per_turn: list[int] = []
        for turn in range(120):
            counting.calls.clear()
            await agent.run(f"question {turn}", session=session)
            per_turn.append(sum(counting.calls.values()))
            stored = 2 * turn  # before this turn
            sealed = max(0, stored - 50) // 50  # pages sealed by earlier loads
            # head, sealed pages, a probe of the next page, at most one page of messages and
            # its seal, the append (2 + 2k)
            assert per_turn[-1] <= 1 + sealed + 1 + 50 + 1 + 6, (turn, per_turn[-1])
        assert min(per_turn[1:]) == 9  # turn 1: the head, 2 messages, the append
        falls = [i for i in range(1, len(per_turn)) if per_turn[i] < per_turn[i - 1] - 20]
        assert falls == [26, 51, 76, 101], per_turn  # a page sealed every 25 turns
    async with FoundryHistoryProvider(**store_env.kwargs()) as plain:
        assert len(await plain.get_messages("built")) == 240
