"""``FoundryHistoryProvider``'s sealed pages: a whole-history read costs about n/50 calls.

MAF's ``before_run`` loads the whole history before every agent turn. A complete run of 50
messages is also kept as one page item, written by the append that completes it when that
append holds all 50 (its own messages and the tail it read), or else by the first whole read
that read them singly; readers prefer a page and fall back to the messages' own items. Every
test runs in local and hosted mode (``store_env``).
"""

from __future__ import annotations

import base64
import random
from collections import Counter
from typing import Any

from agent_framework import InMemoryHistoryProvider, Message

from foundry_checkpoint.adapter import spilled_digest
from foundry_checkpoint_maf import FoundryHistoryProvider
from tests._counting_store import CountingStore

from .conftest import MakeHistory, numbered

P = 50  # messages per page


def _texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


async def _counting(history: FoundryHistoryProvider, session: str) -> CountingStore:
    core = history._core
    scope = await core.arun(core.scope(session))
    counting = CountingStore(scope.store)
    scope.store = counting
    return counting


async def _pages(history: FoundryHistoryProvider, session: str) -> list[str]:
    core = history._core
    scope = await core.arun(core.scope(session))
    return sorted(k.key for k in await core.arun(scope.keys({"kind": "maf.page"})))


async def test_a_whole_read_at_2000_messages_costs_pages(make_history: MakeHistory) -> None:
    history = make_history()
    await history.delete_session("long")
    await history.save_messages("long", numbered(0, 1900))  # one append: it seals 38 pages
    assert len(await _pages(history, "long")) == 1900 // P
    counting = await _counting(history, "long")
    # then agent turns: load the whole history, append the input and the reply
    for n in range(1900, 2000, 2):
        counting.calls.clear()
        loaded = await history.get_messages("long")
        assert len(loaded) == n
        assert sum(counting.calls.values()) <= n / P + P + 2, (n, counting.calls)
        counting.calls.clear()
        await history.save_messages("long", numbered(n, 2))
        assert counting.calls == Counter({"get_item": 3, "set_item": 3})  # no page written
    counting.calls.clear()
    loaded = await history.get_messages("long")
    assert _texts(loaded) == [f"m-{i}" for i in range(2000)]
    # the read sealed page 39 (its messages read singly), the next read is pages only
    assert counting.calls == Counter({"get_item": 1 + 40 + P, "set_item": 1})
    assert sum(counting.calls.values()) <= 2000 / P + P + 2
    counting.calls.clear()
    assert len(await history.get_messages("long")) == 2000
    assert counting.calls == Counter({"get_item": 1 + 2000 // P})
    # windowed reads stay one read per message
    counting.calls.clear()
    assert len(await history.get_messages("long", last=20)) == 20
    assert counting.calls == Counter({"get_item": 21})


async def test_an_append_writes_at_most_one_page_per_50_messages(
    make_history: MakeHistory,
) -> None:
    history = make_history()
    await history.delete_session("appends")
    await history.save_messages("appends", numbered(0, 30))  # no page complete
    assert await _pages(history, "appends") == []
    counting = await _counting(history, "appends")
    # it completes pages 0 to 2 and holds them: its own 130 and the 30 of its tail read
    await history.save_messages("appends", numbered(30, 130))
    assert counting.calls == Counter({"get_item": 1 + 30, "set_item": 1 + 130 + 3})
    assert await _pages(history, "appends") == [f"page/00000000000{p}" for p in range(3)]
    counting.calls.clear()
    # 20 messages: it completes page 3 and holds it (its 20 and the 20 of its tail read)
    await history.save_messages("appends", numbered(160, 20) + numbered(180, 20))
    assert counting.calls == Counter({"get_item": 1 + 40, "set_item": 1 + 40 + 1})
    assert _texts(await history.get_messages("appends")) == [f"m-{i}" for i in range(200)]


async def test_the_previous_layout_reads_back_and_gains_pages(make_history: MakeHistory) -> None:
    """A history stored before pages existed (messages only) reads the same, and its first
    whole read seals its complete pages."""
    history = make_history()
    await history.delete_session("older")
    await history.save_messages("older", numbered(0, 120))
    core = history._core
    scope = await core.arun(core.scope("older"))
    for key in await _pages(history, "older"):
        await core.arun(scope.store.delete_item(key))  # as the previous release stored it
    counting = await _counting(history, "older")
    assert _texts(await history.get_messages("older")) == [f"m-{i}" for i in range(120)]
    assert counting.calls == Counter({"get_item": 1 + 2 + 120, "set_item": 2})
    counting.calls.clear()
    assert _texts(await history.get_messages("older")) == [f"m-{i}" for i in range(120)]
    assert counting.calls == Counter({"get_item": 1 + 2 + 20})


async def test_branches_read_their_own_messages_from_shared_pages(
    make_history: MakeHistory,
) -> None:
    ours = make_history()
    memory = InMemoryHistoryProvider()
    await ours.delete_session("forked-pages")
    base: dict[str, Any] = {}
    base_memory: dict[str, Any] = {}
    await ours.save_messages("forked-pages", numbered(0, 100), state=base)
    await memory.save_messages("forked-pages", numbered(0, 100), state=base_memory)
    states = [(dict(base), {"messages": list(base_memory["messages"])}) for _ in range(2)]
    for turn in range(3):
        for b, (state, state_memory) in enumerate(states):
            said = [Message("user", [f"b{b}-{turn}-{i}"]) for i in range(30)]  # 30 per turn
            await ours.save_messages("forked-pages", said, state=state)
            await memory.save_messages("forked-pages", said, state=state_memory)
    for state, state_memory in states:
        got = await ours.get_messages("forked-pages", state=state)
        expected = await memory.get_messages("forked-pages", state=state_memory)
        assert [m.to_dict() for m in got] == [m.to_dict() for m in expected]
        assert len(got) == 190


async def test_retention_deletes_the_pages_out_of_the_window(make_history: MakeHistory) -> None:
    history = make_history(max_messages=60)
    await history.delete_session("window")
    for start in range(0, 200, 20):
        await history.save_messages("window", numbered(start, 20))
        assert _texts(await history.get_messages("window")) == [
            f"m-{i}" for i in range(max(0, start + 20 - 60), start + 20)
        ]
    # messages 140-199 are kept: pages 2 (100-149) and 3 (150-199) overlap the window
    assert await _pages(history, "window") == ["page/000000000002", "page/000000000003"]


async def test_a_spilled_message_stays_a_reference_in_its_page(make_history: MakeHistory) -> None:
    history = make_history()
    await history.delete_session("big-page")
    # incompressible, over the 1 MB item limit once in JSON: it spills
    big = Message("tool", [base64.b64encode(random.Random(7).randbytes(900_000)).decode()])
    messages = [*numbered(0, 10), big, *numbered(11, 39)]
    await history.save_messages("big-page", messages)
    core = history._core
    scope = await core.arun(core.scope("big-page"))
    single = await core.arun(scope.store.get_item("msg/000000000010"))
    assert single is not None and spilled_digest(single.value) is not None
    assert await _pages(history, "big-page") == ["page/000000000000"]
    # the page holds the big message's spill reference: a reader (a new object, as in another
    # process) gets it through the page, without the message's own item
    await core.arun(scope.store.delete_item("msg/000000000010"))
    reader = make_history()
    back = await reader.get_messages("big-page")
    assert [m.to_dict() for m in back] == [m.to_dict() for m in messages]
