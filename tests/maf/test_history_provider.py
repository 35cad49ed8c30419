"""``FoundryHistoryProvider``: store-call budgets, concurrent appends, isolation, size, agents.

Every test runs in local and hosted mode (``store_env``) unless it says otherwise.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    InMemoryHistoryProvider,
    Message,
)
from azure.ai.agentserver.core import FoundryAgentRequestContext

from foundry_checkpoint.adapter import spilled_digest
from foundry_checkpoint.errors import (
    CorruptPayloadError,
    InvalidArgumentError,
    InvalidIdentifierError,
)
from foundry_checkpoint_maf import FoundryHistoryProvider
from tests._counting_store import CountingStore
from tests._request import in_request

from .conftest import MakeHistory, numbered

ROOT = Path(__file__).resolve().parents[2]


def _texts(messages: Sequence[Message]) -> list[str]:
    return [m.text for m in messages]


async def _fill(history: FoundryHistoryProvider, session: str, count: int) -> None:
    for start in range(0, count, 250):
        await history.save_messages(session, numbered(start, min(250, count - start)))


async def _counting(history: FoundryHistoryProvider, session: str) -> CountingStore:
    core = history._core
    scope = await core.arun(core.scope(session))
    counting = CountingStore(scope.store)
    scope.store = counting
    return counting


# -- store-call budgets ----------------------------------------------------------------------
async def test_append_and_read_last_cost_flat_in_history(
    store_env: Any, make_history: MakeHistory
) -> None:
    history = make_history()
    appends: list[Counter[str]] = []
    reads: list[Counter[str]] = []
    emulator_appends: list[Counter[str]] = []
    for length in (10, 40, 2000):
        session = f"budget-{length}"
        await _fill(history, session, length)
        counting = await _counting(history, session)
        if store_env.emulator is not None:
            store_env.emulator.reset_counts()
        turn = [
            Message("user", ["question"], message_id="q"),
            Message("assistant", ["answer"], message_id="a"),
        ]
        await history.save_messages(session, turn)
        appends.append(counting.calls.copy())
        if store_env.emulator is not None:
            emulator_appends.append(store_env.emulator.requests)
        counting.calls.clear()
        last = await history.get_messages(session, last=20)
        everything = [f"m-{i}" for i in range(length)] + ["question", "answer"]
        assert _texts(last) == everything[-20:]
        reads.append(counting.calls.copy())
    # head + the tail the new messages are compared with; the head (compare-and-set) + 2 items
    assert appends[0] == appends[1] == appends[2] == Counter({"get_item": 3, "set_item": 3})
    # the head + one read per message returned: all 12 of the shortest, 20 of the others
    assert reads[0] == Counter({"get_item": 13})
    assert reads[1] == reads[2] == Counter({"get_item": 21})
    if store_env.emulator is not None:
        assert emulator_appends[0] == emulator_appends[1] == emulator_appends[2]


# -- concurrent appends ----------------------------------------------------------------------
def _check_one_order(stored: list[str], sent: dict[str, list[str]]) -> None:
    assert len(stored) == len(set(stored)), "a message was stored twice"
    assert sorted(stored) == sorted(t for texts in sent.values() for t in texts), "lost"
    for writer, texts in sent.items():
        assert [t for t in stored if t.startswith(f"{writer}-")] == texts, "order"


async def test_two_cores_appending_concurrently_lose_nothing(make_history: MakeHistory) -> None:
    writers = {"a": make_history(), "b": make_history()}
    sent: dict[str, list[str]] = {name: [] for name in writers}

    async def _append(name: str, history: FoundryHistoryProvider) -> None:
        for i in range(25):
            text = f"{name}-{i}"
            await history.save_messages("race", [Message("user", [text], message_id=text)])
            sent[name].append(text)

    await asyncio.gather(*(_append(n, h) for n, h in writers.items()))
    stored = [_texts(await h.get_messages("race")) for h in writers.values()]
    assert stored[0] == stored[1]
    _check_one_order(stored[0], sent)


#: How long each of the two processes appends (``MAF_HISTORY_RACE_SECONDS`` overrides it).
RACE_SECONDS = float(os.environ.get("MAF_HISTORY_RACE_SECONDS", "30"))


@pytest.mark.slow
@pytest.mark.multiprocess
async def test_two_processes_appending_lose_nothing(
    store_env: Any, make_history: MakeHistory
) -> None:
    # both modes: local processes share the embedded store, hosted ones the emulator
    hosted = None
    if store_env.mode == "hosted":
        emu = store_env.emulator
        hosted = json.dumps(
            {
                "endpoint": emu.endpoint,
                "ca_file": emu.ca_file,
                "store_prefix": store_env.prefix,
                "user": "alice",
            }
        )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    code = "from tests.maf._history_worker import main; main()"
    args = [f"{RACE_SECONDS:g}", *([hosted] if hosted else [])]
    procs = {
        name: await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            name,
            "procs",
            *args,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name in ("p", "q")
    }
    counts = {}
    for name, proc in procs.items():
        out, err = await asyncio.wait_for(proc.communicate(), timeout=RACE_SECONDS + 120)
        assert proc.returncode == 0, err.decode()[-4000:]
        counts[name] = int(out.decode().strip().splitlines()[-1])
    assert min(counts.values()) > 5, counts
    sent = {name: [f"{name}-{i}" for i in range(n)] for name, n in counts.items()}
    history = make_history()
    stored = _texts(await history.get_messages("procs"))
    _check_one_order(stored, sent)
    # one order with no holes: the head's range is exactly the messages stored
    core = history._core
    scope = await core.arun(core.scope("procs"))
    head = await core.arun(scope.store.get_item("head"))
    assert head is not None and head.value == {"first": 0, "next": len(stored)}
    switches = sum(a[0] != b[0] for a, b in itertools.pairwise(stored))
    assert switches > 0, "the two processes never interleaved"
    print(
        f"\ntwo processes, {RACE_SECONDS:g} s, {store_env.mode}: appended {counts}, "
        f"stored {len(stored)}, writer switches in the order {switches}"
    )


# -- per-request identity ----------------------------------------------------------------------
async def test_twenty_users_by_call_id_see_only_their_own(
    store_env: Any, make_history: MakeHistory
) -> None:
    history = make_history(user="agent") if store_env.mode == "hosted" else make_history()
    users = [f"user-{i:02d}" for i in range(20)]

    def request(user: str) -> Any:
        # hosted: the call id alone (the service resolves the user); local: no service to ask
        local = store_env.mode == "local"
        return in_request(
            FoundryAgentRequestContext(
                call_id=store_env.call_id(user), user_id=user if local else None
            )
        )

    async def _save(user: str) -> None:
        with request(user):
            await history.save_messages(
                "shared", [Message("user", [f"secret of {user}"], message_id=user)]
            )
            await history.save_messages("shared", [Message("assistant", [f"to {user}"])])

    async def _read(user: str) -> list[dict[str, Any]]:
        with request(user):
            return [m.to_dict() for m in await history.get_messages("shared")]

    await asyncio.gather(*(_save(u) for u in users))
    before = {u: await _read(u) for u in users}
    for user in users:
        assert [m["contents"][0]["text"] for m in before[user]] == [
            f"secret of {user}",
            f"to {user}",
        ]
    with request(users[0]):
        assert await history.delete_session("shared") == 2
    assert await _read(users[0]) == []
    for user in users[1:]:
        assert json.dumps(await _read(user)) == json.dumps(before[user])


# -- size, retention, deletion, errors ---------------------------------------------------------
async def test_message_over_the_item_limit_round_trips(make_history: MakeHistory) -> None:
    history = make_history()
    # incompressible text over 1 MB (compression would otherwise keep it inline)
    big = base64.b64encode(random.Random(7).randbytes(900_000)).decode() + "ünï ✓"
    messages = [
        Message("user", ["run the tool"], message_id="u"),
        Message("tool", [Content.from_function_result("c1", result=big)], message_id="t"),
        Message("assistant", ["done"], message_id="a"),
    ]
    await history.save_messages("big", messages)
    fresh = make_history()
    back = await fresh.get_messages("big")
    assert [m.to_dict() for m in back] == [m.to_dict() for m in messages]
    core = fresh._core
    scope = await core.arun(core.scope("big"))
    items = await core.arun(scope.keys({"kind": "maf.message"}))
    spilled = [
        spilled_digest((await core.arun(scope.store.get_item(k.key))).value)  # type: ignore[union-attr]
        for k in items
    ]
    assert sum(d is not None for d in spilled) == 1


async def test_max_messages_keeps_the_last_n(make_history: MakeHistory) -> None:
    history = make_history(max_messages=5)
    for start in range(0, 12, 3):
        await history.save_messages("window", numbered(start, 3))
    assert _texts(await history.get_messages("window")) == [f"m-{i}" for i in range(7, 12)]
    core = history._core
    scope = await core.arun(core.scope("window"))
    assert len(await core.arun(scope.keys({"kind": "maf.message"}))) == 5
    assert await history.delete_session("window") == 5
    assert await history.get_messages("window") == []
    assert await history.delete_session("window") == 0
    # a turn longer than the window: only its last messages are written
    await history.save_messages("window", numbered(0, 8, prefix="long"))
    assert _texts(await history.get_messages("window")) == [f"long-{i}" for i in range(3, 8)]
    assert len(await core.arun(scope.keys({"kind": "maf.message"}))) == 5


async def test_typed_errors(make_history: MakeHistory) -> None:
    with pytest.raises(InvalidArgumentError, match="max_messages"):
        FoundryHistoryProvider(max_messages=0)
    history = make_history()
    with pytest.raises(InvalidIdentifierError):
        await history.get_messages("")
    with pytest.raises(InvalidArgumentError, match="last"):
        await history.get_messages("s", last=-1)
    await history.save_messages("broken", [Message("user", ["fine"], message_id="f")])
    core = history._core
    scope = await core.arun(core.scope("broken"))
    (key,) = await core.arun(scope.keys({"kind": "maf.message"}))
    await core.arun(scope.store.set_item(key.key, {"v": "not a payload"}, tags=key.tags))
    with pytest.raises(CorruptPayloadError, match="delete_session"):
        await history.get_messages("broken")
    assert await history.delete_session("broken") == 1
    await history.save_messages("broken", [Message("user", ["again"], message_id="g")])
    await core.arun(scope.store.set_item("head", {"first": 5, "next": 1}))
    with pytest.raises(CorruptPayloadError, match="head"):
        await history.get_messages("broken")
    assert await history.delete_session("broken") == 0  # a damaged head: deleted all the same
    assert await history.get_messages("broken") == []


async def test_lifecycle_close_reopen_and_with(store_env: Any) -> None:
    history = FoundryHistoryProvider(**store_env.kwargs())
    await history.save_messages("life", [Message("user", ["one"], message_id="1")])
    history.close()
    history.close()
    assert _texts(await history.get_messages("life")) == ["one"]  # reopens on use
    await history.aclose()
    with FoundryHistoryProvider(**store_env.kwargs()) as again:
        assert again.kind == ("hosted" if store_env.mode == "hosted" else "local-sqlite")
        assert again.store_prefix == store_env.kwargs().get("store_prefix", "maf-history")


# -- an agent ------------------------------------------------------------------------------------
class EchoClient(BaseChatClient):
    """A chat client that answers with how many messages it was sent, and records them."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[str]] = []

    async def _answer(self, messages: Sequence[Message]) -> ChatResponse:
        self.seen.append([m.text for m in messages])
        return ChatResponse(messages=[Message("assistant", [f"reply {len(messages)}"])])

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> Any:
        return self._answer(messages)


async def test_agent_keeps_its_conversation_across_provider_objects(
    make_history: MakeHistory,
) -> None:
    expected: list[list[str]] = []
    for provider in (make_history(), InMemoryHistoryProvider()):
        client = EchoClient()
        agent = Agent(client=client, context_providers=[provider])
        session = agent.create_session(session_id="agent-chat")
        await agent.run("hello", session=session)
        if isinstance(provider, FoundryHistoryProvider):
            await provider.aclose()
            provider = make_history()  # a new process would build a new one
            agent = Agent(client=client, context_providers=[provider])
            session = agent.create_session(session_id="agent-chat")
        await agent.run("again", session=session)
        expected.append(client.seen[-1])
    assert expected[0] == expected[1] == ["hello", "reply 1", "again"]
