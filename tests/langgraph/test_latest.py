""" "Latest" from keys and tags: same-second bursts and a request budget flat in history length."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint._core import Scope
from foundry_checkpoint._langgraph._read import latest as latest_of
from tests.langgraph._util import cfg


def _checkpoint(value: int) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=value))
    cp["channel_values"] = {"n": value}
    cp["channel_versions"] = {"n": value + 1}
    return cp


def _scope(saver: FoundryCheckpointer, thread_id: str) -> Scope:
    async def get() -> Scope:
        return await saver._core.scope(thread_id)

    return saver._core.run(get())


def _created_at(saver: FoundryCheckpointer, thread_id: str) -> list[tuple[int, str]]:
    """(created_at, key) of every checkpoint item of the thread, in the store's desc order."""
    scope = _scope(saver, thread_id)
    keys = saver._core.run(scope.keys({"k": "c"}))
    return [(k.created_at, k.key) for k in keys]


def _burst(saver: FoundryCheckpointer, thread_id: str, count: int) -> list[str]:
    """Put a chain of ``count`` checkpoints as fast as possible; returns their ids in order."""
    ids: list[str] = []
    parent: str | None = None
    for i in range(count):
        cp = _checkpoint(i)
        saver.put(cfg(thread_id, parent), cp, {"source": "loop", "step": i}, {"n": i + 1})
        parent = cp["id"]
        ids.append(parent)
    return ids


def test_latest_under_same_second_burst(make_saver: Callable[..., FoundryCheckpointer]) -> None:
    saver = make_saver()
    # Start at the beginning of a second, so the 30 puts share one created_at second; if a
    # slow machine still crosses a boundary, try again on another thread.
    for attempt in range(5):
        time.sleep(1.0 - time.time() % 1.0 + 0.01)
        thread_id = f"burst-{attempt}"
        ids = _burst(saver, thread_id, 30)
        stamps = _created_at(saver, thread_id)
        if len({c for c, _ in stamps}) == 1:
            break
    assert len(stamps) == 30 and len({c for c, _ in stamps}) == 1

    # Compared by checkpoint id over the whole second, whatever the store's tie order ...
    newest = saver._core.run(latest_of(saver._ctx(), _scope(saver, thread_id), ""))
    newest_key = None if newest is None else newest.key
    assert newest_key is not None and newest_key.key.endswith(ids[-1])
    # ... yet get_tuple and list are exact.
    latest = saver.get_tuple(cfg(thread_id))
    assert latest is not None
    assert latest.checkpoint["id"] == ids[-1]
    assert latest.checkpoint["channel_values"] == {"n": 29}
    assert latest.metadata["step"] == 29
    assert [t.checkpoint["id"] for t in saver.list(cfg(thread_id))] == ids[::-1]
    assert [t.checkpoint["id"] for t in saver.list(cfg(thread_id), limit=3)] == ids[:-4:-1]
    saver.prune([thread_id])
    assert [t.checkpoint["id"] for t in saver.list(cfg(thread_id))] == [ids[-1]]


def test_latest_first_key_is_not_trusted(make_saver: Callable[..., FoundryCheckpointer]) -> None:
    # After each put within one second the newest must win, whatever the tie order says.
    saver = make_saver()
    time.sleep(1.0 - time.time() % 1.0 + 0.01)
    parent: str | None = None
    first_key_wrong = 0
    for i in range(12):
        cp = _checkpoint(i)
        saver.put(cfg("ties", parent), cp, {"source": "loop", "step": i}, {"n": i + 1})
        parent = cp["id"]
        got = saver.get_tuple(cfg("ties"))
        assert got is not None and got.checkpoint["id"] == parent
        stamps = _created_at(saver, "ties")
        top = [key for c, key in stamps if c == stamps[0][0]]
        first_key_wrong += not top[0].endswith(parent)
    # A saver that took the first key of the page would have been wrong at least once.
    assert first_key_wrong >= 1


class _Counting:
    """Counts the store calls a scope makes (local mode has no wire to count on)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return call


def test_latest_follows_ids_that_escaping_reorders(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    """Tags escape ``"x y"`` to ``"x~20y"``, which sorts after ``"x-"``; the ids do not."""
    saver = make_saver()
    thread_id = f"escaped-{uuid.uuid4().hex[:6]}"
    for step, cid in enumerate(("x y", "x-")):  # ascending ids, as LangGraph writes them
        cp = empty_checkpoint()
        cp["id"] = cid
        saver.put(cfg(thread_id), cp, {"source": "loop", "step": step}, {})
    for reader in (saver, make_saver()):
        latest = reader.get_tuple(cfg(thread_id))
        assert latest is not None and latest.checkpoint["id"] == "x-"


async def _history(saver: FoundryCheckpointer, thread_id: str, count: int) -> None:
    """``count`` older checkpoints (written concurrently: their order does not matter here)."""
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with sem:
            cp = _checkpoint(i)
            await saver.aput(cfg(thread_id), cp, {"source": "loop", "step": i}, {"n": i + 1})

    await asyncio.gather(*(one(i) for i in range(count)))


def _finding(store_env: Any) -> str:
    """The one call that finds the latest: a listing, or the embedded store's ranking."""
    return "list_keys" if store_env.mode == "hosted" else "greatest"


async def _read_counted(
    store_env: Any, saver: FoundryCheckpointer, thread_id: str
) -> tuple[Any, Counter[str], Counter[str]]:
    """``aget_tuple`` of the latest, with the store calls it made (in process, and on the wire
    in hosted mode: counted by the emulator)."""
    counting, scope = _count_calls(saver, thread_id)
    if store_env.mode == "hosted":
        store_env.emulator.reset_counts()
    try:
        latest = await saver.aget_tuple(cfg(thread_id))
    finally:
        scope.store = counting.inner
    wire = store_env.emulator.requests if store_env.mode == "hosted" else Counter(counting.calls)
    return latest, Counter(counting.calls), Counter(wire)


async def test_request_budget_is_flat_in_history(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    saver = make_saver()
    sizes = (10, 1000)
    threads = {n: f"budget-{n}-{uuid.uuid4().hex[:6]}" for n in sizes}
    quiet = {n: f"quiet-{n}-{uuid.uuid4().hex[:6]}" for n in sizes}
    await asyncio.gather(*(_history(saver, t[n], n) for n in sizes for t in (threads, quiet)))
    await asyncio.sleep(1.1)  # the newest checkpoints get a created_at second of their own
    newest: dict[int, Checkpoint] = {}
    for n in sizes:
        newest[n] = _checkpoint(n)
        config = await saver.aput(cfg(threads[n]), newest[n], {"source": "loop", "step": n}, {})
        await saver.aput_writes(config, [("n", -1)], "task-1")
        await saver.aput(cfg(quiet[n]), _checkpoint(n), {"source": "loop", "step": n}, {})
    cold = make_saver()  # another process: nothing cached
    find = _finding(store_env)
    for n in sizes:
        # The writer itself: one listing (the checkpoint and its writes keys), no read of the
        # checkpoint it wrote, one read of the writes item.
        latest, calls, wire = await _read_counted(store_env, saver, threads[n])
        assert latest is not None and latest.checkpoint["id"] == newest[n]["id"]
        assert latest.pending_writes == [("task-1", "n", -1)]
        assert calls == wire == Counter({find: 1, "get_item": 1})
        # Another process: the checkpoint is read too.
        latest, calls, wire = await _read_counted(store_env, cold, threads[n])
        assert latest is not None and latest.checkpoint["id"] == newest[n]["id"]
        assert latest.pending_writes == [("task-1", "n", -1)]
        assert calls == wire == Counter({find: 1, "get_item": 2})
        # A latest without pending writes, cold: one list and one get.
        latest, calls, wire = await _read_counted(store_env, cold, quiet[n])
        assert latest is not None and latest.pending_writes == []
        assert calls == wire == Counter({find: 1, "get_item": 1})
        # ... and warm (read before): one list, nothing read.
        latest, calls, wire = await _read_counted(store_env, cold, quiet[n])
        assert latest is not None and latest.checkpoint["channel_values"] == {"n": n}
        assert calls == wire == Counter({find: 1})
        assert len(_created_at(saver, threads[n])) == n + 1  # the history is really there


async def test_writes_put_before_their_checkpoint_are_found(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    """LangGraph's async loop may store a task's writes before the checkpoint they belong to.

    The writer marks such a checkpoint, and a reader lists its writes on their own instead of
    trusting the listing of the newest second (where an older writes item would be missing).
    """
    saver = make_saver()
    thread_id = f"early-{uuid.uuid4().hex[:6]}"
    first = _checkpoint(1)
    config = await saver.aput(cfg(thread_id), first, {"source": "loop", "step": 1}, {})
    second = _checkpoint(2)
    early = cfg(thread_id, second["id"])
    await saver.aput_writes(early, [("n", 7)], "task-early")
    await asyncio.sleep(1.1)  # the writes item is a second older than its checkpoint
    await saver.aput(config, second, {"source": "loop", "step": 2}, {})
    late = cfg(thread_id, second["id"])
    await saver.aput_writes(late, [("n", 8)], "task-late")
    for reader in (saver, make_saver()):
        latest = await reader.aget_tuple(cfg(thread_id))
        assert latest is not None and latest.checkpoint["id"] == second["id"]
        assert latest.pending_writes is not None
        assert sorted(latest.pending_writes) == [("task-early", "n", 7), ("task-late", "n", 8)]
    # A checkpoint whose writes all came after it is read from one listing.
    third = _checkpoint(3)
    config = await saver.aput(late, third, {"source": "loop", "step": 3}, {})
    await saver.aput_writes(config, [("n", 9)], "task-3")
    latest, calls, _ = await _read_counted(store_env, make_saver(), thread_id)
    assert latest is not None and latest.pending_writes == [("task-3", "n", 9)]
    assert calls == Counter({_finding(store_env): 1, "get_item": 2})


async def test_concurrent_put_writes_wait_for_the_put(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    """A put_writes issued while its checkpoint's put runs is stored after it."""
    saver = make_saver()
    thread_id = f"race-{uuid.uuid4().hex[:6]}"
    cp = _checkpoint(1)
    put = asyncio.ensure_future(saver.aput(cfg(thread_id), cp, {"source": "loop", "step": 1}, {}))
    await asyncio.sleep(0)
    await saver.aput_writes(cfg(thread_id, cp["id"]), [("n", 5)], "task-1")
    await put
    latest = await make_saver().aget_tuple(cfg(thread_id))
    assert latest is not None and latest.pending_writes == [("task-1", "n", 5)]


async def test_a_head_changed_elsewhere_is_read_again(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    """The cached head is used only while the listing shows the same item (key and etag)."""
    saver, other = make_saver(), make_saver()
    thread_id = f"moved-{uuid.uuid4().hex[:6]}"
    cp = _checkpoint(1)
    config = await saver.aput(cfg(thread_id), cp, {"source": "loop", "step": 1}, {})
    assert (await saver.aget_tuple(cfg(thread_id))) is not None
    nxt = _checkpoint(2)
    await other.aput(config, nxt, {"source": "loop", "step": 2}, {})
    latest = await saver.aget_tuple(cfg(thread_id))
    assert latest is not None and latest.checkpoint["id"] == nxt["id"]
    assert latest.metadata["step"] == 2


def _count_calls(saver: FoundryCheckpointer, thread_id: str) -> tuple[_Counting, Scope]:
    scope = _scope(saver, thread_id)
    counting = _Counting(scope.store)
    scope.store = counting
    return counting, scope


def test_warm_steps_and_filters_read_only_what_they_return(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    from tests.langgraph.test_graphs import _counter

    saver = make_saver()
    graph = _counter().compile(checkpointer=saver)
    graph.invoke({"total": 0, "log": []}, cfg("warm"))
    before = len(list(saver.list(cfg("warm"))))
    counting, scope = _count_calls(saver, "warm")
    try:
        graph.invoke({"total": 0, "log": []}, cfg("warm"))
        calls = dict(counting.calls)
        written = len(list(saver.list(cfg("warm")))) - before
        counting.calls.clear()
        # No read for the whole run: the latest is the checkpoint this process wrote (the
        # listing shows its key and etag), and every step carries unchanged channels from
        # memory instead of reading its parent.
        assert written == 4
        assert calls.get("get_item", 0) == 0
        assert calls["set_item"] == written  # one item per checkpoint
        assert calls["create_item"] == 3  # one writes item per task (input, a, b)

        # A metadata filter on tagged fields reads only the checkpoint it returns (+ its writes).
        found = list(saver.list(cfg("warm"), filter={"source": "loop", "step": 5}))
        assert [t.metadata["step"] for t in found] == [5]
        assert counting.calls["get_item"] == 2 and counting.calls["list_keys"] == 2
    finally:
        scope.store = counting.inner


async def test_a_head_rewritten_by_prune_is_read_again(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    """Prune rewrites a survivor whose parent it deletes: a new etag, so no stale head."""
    saver, other = make_saver(), make_saver()
    thread_id = f"pruned-{uuid.uuid4().hex[:6]}"
    config = await saver.aput(cfg(thread_id), _checkpoint(1), {"source": "loop", "step": 1}, {})
    await saver.aput(config, _checkpoint(2), {"source": "loop", "step": 2}, {})
    before = await saver.aget_tuple(cfg(thread_id))
    assert before is not None and before.parent_config is not None
    await other.aprune([thread_id])
    after = await saver.aget_tuple(cfg(thread_id))
    assert after is not None and after.checkpoint["id"] == before.checkpoint["id"]
    assert after.parent_config is None
