"""History pages: ``alist(limit=10)`` lists flat in history length and stays exact, also after
``copy_thread`` into a thread that already has checkpoints (see docs/concepts/latest.md)."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

import pytest
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from foundry_checkpoint import FoundryCheckpointer
from tests.langgraph._util import cfg
from tests.langgraph.test_latest import _count_calls, _scope


def _checkpoint(value: int) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=value))
    cp["channel_values"] = {"n": value}
    cp["channel_versions"] = {"n": value + 1}
    return cp


async def _write(
    saver: FoundryCheckpointer, thread_id: str, values: range, *, writes: bool = True
) -> list[str]:
    """One checkpoint per value (concurrently), each with one writes item (step = value, task
    ``task-<value>``); returns the ids in the order of ``values``."""
    sem = asyncio.Semaphore(32)
    ids = {i: _checkpoint(i) for i in values}

    async def one(i: int) -> None:
        async with sem:
            cp = ids[i]
            config = await saver.aput(
                cfg(thread_id), cp, {"source": "loop", "step": i}, {"n": i + 1}
            )
            if writes:
                await saver.aput_writes(config, [("n", i)], f"task-{i}")

    await asyncio.gather(*(one(i) for i in values))
    return [ids[i]["id"] for i in values]


async def _listed(
    saver: FoundryCheckpointer, thread_id: str, ns: str | None = "", **kwargs: Any
) -> list[tuple[str, Any, list[Any]]]:
    out: list[tuple[str, Any, list[Any]]] = []
    async for t in saver.alist(cfg(thread_id, ns=ns), **kwargs):
        assert t.pending_writes is not None  # a listed checkpoint carries its writes
        out.append((t.checkpoint["id"], t.metadata["step"], t.pending_writes))
    return out


async def _counted(
    store_env: Any, saver: FoundryCheckpointer, thread_id: str, **kwargs: Any
) -> tuple[list[tuple[str, Any, list[Any]]], Counter[str]]:
    """``alist`` with the store calls it made (hosted: counted by the emulator on the wire)."""
    counting, scope = _count_calls(saver, thread_id)
    if store_env.mode == "hosted":
        store_env.emulator.reset_counts()
    try:
        listed = await _listed(saver, thread_id, **kwargs)
    finally:
        scope.store = counting.inner
    wire = store_env.emulator.requests if store_env.mode == "hosted" else counting.calls
    assert Counter(counting.calls) == Counter(wire)
    return listed, Counter(wire)


async def test_history_page_is_flat_and_exact(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    saver = make_saver()
    sizes = (10, 1000)
    threads = {n: f"pages-{n}-{uuid.uuid4().hex[:6]}" for n in sizes}
    ids: dict[int, list[str]] = {n: [] for n in sizes}
    # The older history, then (in a second of their own) the ten newest.
    for n in sizes:
        ids[n] += await _write(saver, threads[n], range(10, n))
    await asyncio.sleep(1.1)
    for n in sizes:
        for i in range(10):
            ids[n] += await _write(saver, threads[n], range(n + i, n + i + 1))
    cold = make_saver()
    for n in sizes:
        expected = sorted(ids[n], reverse=True)
        listed, calls = await _counted(store_env, cold, threads[n], limit=10)
        assert [cid for cid, _, _ in listed] == expected[:10]
        for _, step, pending in listed:
            assert pending == [(f"task-{step}", "n", step)]
        # One page of checkpoint and writes keys (locally: one ranking call), and the
        # items returned.
        assert calls == Counter({**_page_calls(store_env), "get_item": 20})

        # before= and filter= stay exact (before reaches into the older history).
        listed = await _listed(cold, threads[n], limit=10, before=cfg(threads[n], expected[4]))
        assert [cid for cid, _, _ in listed] == expected[5:15]
        step = listed[-1][1]
        listed = await _listed(cold, threads[n], limit=10, filter={"step": step})
        assert [s for _, s, _ in listed] == [step]
        listed = await _listed(cold, threads[n], limit=3, filter={"source": "loop"})
        assert [cid for cid, _, _ in listed] == expected[:3]
        assert [cid for cid, _, _ in await _listed(cold, threads[n])] == expected


async def test_history_page_without_writes_is_flat(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    """Checkpoints written by ``aput`` alone (no pending writes): the page makes the same
    store calls at 10 and 1,000 checkpoints, as it does when they carry writes."""
    saver = make_saver()
    sizes = (10, 1000)
    threads = {n: f"bare-{n}-{uuid.uuid4().hex[:6]}" for n in sizes}
    ids: dict[int, list[str]] = {n: [] for n in sizes}
    for n in sizes:
        ids[n] += await _write(saver, threads[n], range(10, n), writes=False)
    await asyncio.sleep(1.1)  # the ten newest in a second of their own, as a live thread has
    for n in sizes:
        for i in range(10):
            ids[n] += await _write(saver, threads[n], range(n + i, n + i + 1), writes=False)
    counts: dict[tuple[int, bool], Counter[str]] = {}
    for warm in (False, True):
        reader = saver if warm else make_saver()
        for n in sizes:
            listed, counts[n, warm] = await _counted(store_env, reader, threads[n], limit=10)
            assert [cid for cid, _, _ in listed] == sorted(ids[n], reverse=True)[:10]
            assert all(pending == [] for _, _, pending in listed)
    # One page of keys (locally: one ranking call) and the ten items; nothing listed to look
    # for writes that are not there.
    page = Counter({**_page_calls(store_env), "get_item": 10})
    assert {key: dict(c) for key, c in counts.items()} == {
        (n, warm): dict(page) for n in sizes for warm in (False, True)
    }
    if store_env.mode == "local":
        # Without a namespace in the config, the embedded store ranks across namespaces in
        # the same one call (the service's listing cannot stop early there; see docs).
        for n in sizes:
            listed, calls = await _counted(store_env, saver, threads[n], ns=None, limit=10)
            assert [cid for cid, _, _ in listed] == sorted(ids[n], reverse=True)[:10]
            assert calls == page


async def test_a_page_across_namespaces(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    """A config without a namespace pages every namespace of the thread by checkpoint id, with
    each checkpoint's own writes and filters applied, also where two namespaces share an id."""
    saver = make_saver()
    thread_id = f"spaces-{uuid.uuid4().hex[:6]}"
    expected: list[tuple[str, str, str]] = []  # (id, ns, source)
    for i in range(30):
        ns = "" if i % 3 else f"inner:{i % 2}"
        cp = _checkpoint(i)
        source: Literal["loop", "input"] = "loop" if i % 4 else "input"
        config = await saver.aput(cfg(thread_id, ns=ns), cp, {"source": source, "step": i}, {})
        if i % 2:
            await saver.aput_writes(config, [("n", i)], f"task-{i}")
        expected.append((cp["id"], ns, source))
    # A subgraph checkpoint with the id of the newest one, from another source.
    shared = _checkpoint(29)
    shared["id"] = expected[-1][0]
    await saver.aput(cfg(thread_id, ns="other:1"), shared, {"source": "fork", "step": 99}, {})
    expected.append((shared["id"], "other:1", "fork"))
    order = sorted(expected, key=lambda e: e[0], reverse=True)
    for reader in (saver, make_saver()):
        full = [
            (t.checkpoint["id"], t.config["configurable"]["checkpoint_ns"], t.pending_writes)
            async for t in reader.alist(cfg(thread_id, ns=None))
        ]
        assert sorted((cid, ns) for cid, ns, _ in full) == sorted((e[0], e[1]) for e in order)
        assert [cid for cid, _, _ in full] == [e[0] for e in order]
        page = [
            (t.checkpoint["id"], t.config["configurable"]["checkpoint_ns"], t.pending_writes)
            async for t in reader.alist(cfg(thread_id, ns=None), limit=10)
        ]
        assert [cid for cid, _, _ in page] == [e[0] for e in order[:10]]
        assert {(cid, ns) for cid, ns, _ in page} <= {(cid, ns) for cid, ns, _ in full[:11]}
        for cid, ns, pending in page:
            step = next(i for i, e in enumerate(expected) if e[0] == cid and e[1] == ns)
            want = [(f"task-{step}", "n", step)] if step % 2 and step < 30 else []
            assert pending == want
        for wanted in ("loop", "input", "fork"):
            listed = await _listed(reader, thread_id, ns=None, limit=4, filter={"source": wanted})
            assert [cid for cid, _, _ in listed] == [e[0] for e in order if e[2] == wanted][:4]


async def test_history_page_finds_writes_put_before_their_checkpoint(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    """A page's checkpoint whose writes went out before it (tagged ``ew=1``) lists its own
    writes, also when the page's listing stopped seconds after them."""
    saver = make_saver()
    thread_id = f"early-page-{uuid.uuid4().hex[:6]}"
    (old,) = await _write(saver, thread_id, range(0, 1))
    newest = _checkpoint(1)
    await saver.aput_writes(cfg(thread_id, newest["id"]), [("n", 7)], "task-early")
    await asyncio.sleep(1.1)
    # A second of writes items between the early one and its checkpoint: more than a page.
    for i in range(120):
        await saver.aput_writes(cfg(thread_id, old), [("n", i)], f"filler-{i}")
    await asyncio.sleep(1.1)
    config = await saver.aput(cfg(thread_id, old), newest, {"source": "loop", "step": 1}, {})
    await saver.aput_writes(config, [("n", 8)], "task-late")
    for reader in (saver, make_saver()):
        listed = await _listed(reader, thread_id, limit=1)
        assert [cid for cid, _, _ in listed] == [newest["id"]]
        assert sorted(listed[0][2]) == [("task-early", "n", 7), ("task-late", "n", 8)]


async def test_copy_into_a_thread_with_checkpoints(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    saver = make_saver()
    source, target = (f"{name}-{uuid.uuid4().hex[:6]}" for name in ("source", "target"))
    copied = await _write(saver, source, range(0, 120), writes=False)  # the oldest ids
    older = await _write(saver, target, range(200, 300), writes=False)
    await asyncio.sleep(1.1)
    newer = await _write(saver, target, range(300, 320), writes=False)
    await asyncio.sleep(1.1)
    await saver.acopy_thread(source, target)
    # The copies are the newest items of the target but carry its oldest ids.
    scope = _scope(saver, target)
    keys = await saver._core.arun(scope.keys({"k": "c"}))
    assert keys[0].created_at > max(k.created_at for k in keys if k.key.endswith(newer[0]))
    tagged = {k.key for k in keys if (k.tags or {}).get("oo") == "1"}
    assert tagged == {k.key for k in keys if any(k.key.endswith(c) for c in copied)}

    expected = sorted(copied + older + newer, reverse=True)
    assert expected[:20] == sorted(newer, reverse=True)
    for reader in (saver, make_saver()):
        latest = await reader.aget_tuple(cfg(target))
        assert latest is not None and latest.checkpoint["id"] == max(newer)
        listed, calls = await _counted(store_env, reader, target, limit=10)
        assert [cid for cid, _, _ in listed] == expected[:10]
        # The page of copies goes on to the in-order checkpoints of the page after it, and
        # the writes keys come with them (locally, one ranking call answers by id whatever
        # the store seconds).
        if store_env.mode == "hosted":
            assert calls["list_keys"] == 2
        else:
            assert (calls["greatest"], calls["list_keys"]) == (1, 0)
        listed = await _listed(reader, target, limit=10, before=cfg(target, expected[15]))
        assert [cid for cid, _, _ in listed] == expected[16:26]
        listed = await _listed(reader, target, limit=10, before=cfg(target, older[0]))
        below = [c for c in expected if c < older[0]]
        assert [cid for cid, _, _ in listed] == below[:10]
        listed = await _listed(reader, target, limit=5, filter={"step": 7})
        assert [cid for cid, _, _ in listed] == [copied[7]]
        assert [cid for cid, _, _ in await _listed(reader, target)] == expected

    # A copy into an empty thread is in order: nothing tagged, and pages stop early.
    empty = f"empty-{uuid.uuid4().hex[:6]}"
    await saver.acopy_thread(target, empty)
    keys = await saver._core.arun(_scope(saver, empty).keys({"k": "c"}))
    assert len(keys) == 240 and not any((k.tags or {}).get("oo") for k in keys)
    latest = await saver.aget_tuple(cfg(empty))
    assert latest is not None and latest.checkpoint["id"] == max(newer)

    # prune keeps the same latest.
    await saver.aprune([target])
    assert [cid for cid, _, _ in await _listed(saver, target)] == [max(newer)]


@pytest.mark.slow
async def test_history_page_calls_are_the_same_at_ten_and_ten_thousand(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    if store_env.mode == "hosted":
        pytest.skip("10,000 checkpoints through the emulator take minutes; 1,000 are above")
    saver = make_saver()
    sizes = (10, 10_000)
    threads = {n: f"pages-{n}-{uuid.uuid4().hex[:6]}" for n in sizes}
    ids: dict[int, list[str]] = {n: [] for n in sizes}
    for n in sizes:
        ids[n] += await _write(saver, threads[n], range(10, n), writes=False)
    await asyncio.sleep(1.1)  # the ten newest in a second of their own, as a live thread has
    for n in sizes:
        for i in range(10):
            ids[n] += await _write(saver, threads[n], range(n + i, n + i + 1))
    cold = make_saver()
    counts = {}
    for n in sizes:
        listed, counts[n] = await _counted(store_env, cold, threads[n], limit=10)
        assert [cid for cid, _, _ in listed] == sorted(ids[n], reverse=True)[:10]
    assert counts[10] == counts[10_000] == Counter({**_page_calls(store_env), "get_item": 20})


async def test_a_page_of_a_thread_written_within_one_second(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    """Hundreds of checkpoints in one store second: the page is still the ten largest ids
    with their writes; the embedded store answers it with one ranking call."""
    saver = make_saver()
    thread_id = f"burst-{uuid.uuid4().hex[:6]}"
    ids = await _write(saver, thread_id, range(300))
    expected = sorted(ids, reverse=True)
    listed, calls = await _counted(store_env, make_saver(), thread_id, limit=10)
    assert [cid for cid, _, _ in listed] == expected[:10]
    for _, step, pending in listed:
        assert pending == [(f"task-{step}", "n", step)]
    if store_env.mode == "local":
        assert calls == Counter({"greatest": 1, "get_item": 20})
    listed = await _listed(saver, thread_id, limit=10, before=cfg(thread_id, expected[3]))
    assert [cid for cid, _, _ in listed] == expected[4:14]


def test_a_page_of_ids_that_escaping_reorders(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    """Tags escape ``"x y"`` to ``"x~20y"``, which sorts after ``"x-"``: the page follows the
    ids, not their tags."""
    saver = make_saver()
    thread_id = f"escaped-{uuid.uuid4().hex[:6]}"
    for step, cid in enumerate(("x a", "x b", "x-")):  # ascending ids
        cp = empty_checkpoint()
        cp["id"] = cid
        saver.put(cfg(thread_id), cp, {"source": "loop", "step": step}, {})
    listed = [t.checkpoint["id"] for t in saver.list(cfg(thread_id), limit=2)]
    assert listed == ["x-", "x b"]


def _page_calls(store_env: Any) -> dict[str, int]:
    """The calls that find a history page and its writes keys: one listing of the namespace
    on the service, one ranking call of the embedded store."""
    return {"list_keys": 1} if store_env.mode == "hosted" else {"greatest": 1}
