"""delete_thread, delete_for_runs, prune and copy_thread: items, writes and spilled blobs."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from foundry_checkpoint import AzureBlobSpill, FoundryCheckpointer, InvalidArgumentError, LocalSpill
from foundry_checkpoint._core import DEFAULT_GC_GRACE_SECONDS
from tests.langgraph._util import cfg

#: Hosted cases spill to Azurite (``spill_saver``; tests/conftest.py marks them).
HOSTED_MARKS = ("azurite",)
VALUE = 300 * 1024  # above the 256 KiB per-channel spill threshold, below the item limit


@pytest.fixture
def spill_saver(
    store_env: Any, request: pytest.FixtureRequest, make_saver: Callable[..., FoundryCheckpointer]
) -> Callable[..., FoundryCheckpointer]:
    """Savers with a spill store: LocalSpill (the default) locally, Azurite when hosted."""
    container = f"lg-{uuid.uuid4().hex[:12]}"

    def factory(**extra: Any) -> FoundryCheckpointer:
        if store_env.mode == "hosted":
            azurite = request.getfixturevalue("azurite")
            extra.setdefault(
                "spill",
                AzureBlobSpill(
                    connection_string=azurite.connection_string, container=container, retry_total=0
                ),
            )
        return make_saver(**extra)

    return factory


def _chain(
    saver: FoundryCheckpointer,
    thread_id: str,
    bigs: list[bytes | None],
    run_ids: list[str] | None = None,
) -> list[str]:
    """Checkpoints whose channel ``big`` takes each value in ``bigs`` (None: unchanged)."""
    ids: list[str] = []
    parent: str | None = None
    version = 0
    for i, big in enumerate(bigs):
        cp = empty_checkpoint()
        new: dict[str, Any] = {"step": i + 1}
        if big is not None:
            version += 1
            new["big"] = version
        cp["channel_versions"] = {"step": i + 1, "big": version}
        cp["channel_values"] = {"step": i, "big": big if big is not None else b"(carried)"}
        md: dict[str, Any] = {"source": "loop", "step": i}
        if run_ids:
            md["run_id"] = run_ids[i]
        saver.put(cfg(thread_id, parent), cp, md, new)  # type: ignore[arg-type]
        parent = cp["id"]
        ids.append(parent)
    return ids


def _chain_from(saver: FoundryCheckpointer, thread_id: str, parent: str) -> str:
    """One more checkpoint on ``parent`` that changes only ``step`` (``big`` carried)."""
    cp = empty_checkpoint()
    cp["channel_versions"] = {"step": 99, "big": 3}
    cp["channel_values"] = {"step": 98}
    saver.put(cfg(thread_id, parent), cp, {"source": "loop", "step": 98}, {"step": 99})
    return cp["id"]


def _blobs(saver: FoundryCheckpointer, thread_id: str) -> int:
    async def count() -> int:
        scope = await saver._core.scope(thread_id)
        ns = await scope.namespace(create=False)
        spill = saver._core.spill
        assert spill is not None
        return 0 if ns is None else len(await spill.list(ns))

    return saver._core.run(count())


def _big(saver: FoundryCheckpointer, thread_id: str, checkpoint_id: str | None = None) -> Any:
    got = saver.get_tuple(cfg(thread_id, checkpoint_id))
    assert got is not None
    return got.checkpoint["channel_values"]["big"]


def test_prune_and_delete_remove_only_unreferenced_blobs(
    spill_saver: Callable[..., FoundryCheckpointer],
) -> None:
    saver = spill_saver()
    a, b, c = (os.urandom(VALUE) for _ in range(3))
    _chain(saver, "gc", [a, b, c, None])
    _chain(saver, "other", [c])  # same content, another thread: a namespace of its own
    assert _blobs(saver, "gc") == 3
    saver.prune(["gc"], strategy="keep_latest")
    assert len(list(saver.list(cfg("gc")))) == 1
    assert _blobs(saver, "gc") == 3  # written within the gc grace: left to gc
    assert len(saver.gc(grace_seconds=0).deleted) == 2
    assert _blobs(saver, "gc") == 1  # c: still referenced by the kept (carried) checkpoint
    assert _big(saver, "gc") == c
    assert _big(spill_saver(), "gc") == c  # a new instance reads it too
    saver.delete_thread("gc")
    assert _blobs(saver, "gc") == 0
    assert saver.get_tuple(cfg("gc")) is None
    assert _blobs(saver, "other") == 1 and _big(saver, "other") == c


def test_delete_for_runs_keeps_blobs_still_referenced(
    spill_saver: Callable[..., FoundryCheckpointer],
) -> None:
    saver = spill_saver()
    a, b = os.urandom(VALUE), os.urandom(VALUE)
    ids = _chain(saver, "runs", [a, b, None, a], ["r1", "r2", "r3", "r4"])
    assert _blobs(saver, "runs") == 2
    saver.delete_for_runs(["r2"])
    assert _blobs(saver, "runs") == 2  # b is still referenced by r3's (carried) checkpoint
    saver.delete_for_runs(["r3"])
    assert _blobs(saver, "runs") == 2  # nothing references b any more, but it is recent
    assert len(saver.gc(grace_seconds=0).deleted) == 1
    assert _blobs(saver, "runs") == 1
    assert [t.checkpoint["id"] for t in saver.list(cfg("runs"))] == [ids[3], ids[0]]
    assert _big(saver, "runs", ids[0]) == a and _big(saver, "runs") == a
    # The thread goes on: a put after the deletions carries from its (re-read) parent.
    more = _chain_from(saver, "runs", ids[3])
    assert _big(saver, "runs", more) == a


def test_delete_for_runs_spans_threads_not_users(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    alice = make_saver()
    bob = make_saver(user="bob")
    for saver in (alice, bob):
        for thread_id in ("t1", "t2"):
            _chain(saver, thread_id, [b"x", b"y"], ["shared-run", "other-run"])
    alice.delete_for_runs(["shared-run"])
    for thread_id in ("t1", "t2"):
        runs = [t.metadata.get("run_id") for t in alice.list(cfg(thread_id))]
        assert runs == ["other-run"]
        # Bob's checkpoints under the same thread ids and run id are untouched.
        runs = [t.metadata.get("run_id") for t in bob.list(cfg(thread_id))]
        assert runs == ["other-run", "shared-run"]
    # list(None) spans this user's threads only.
    assert {t.config["configurable"]["thread_id"] for t in alice.list(None)} == {"t1", "t2"}
    assert len(list(bob.list(None))) == 4


def test_copy_thread_copies_blobs_to_the_target(
    spill_saver: Callable[..., FoundryCheckpointer],
) -> None:
    saver = spill_saver()
    a, b = os.urandom(VALUE), os.urandom(VALUE)
    ids = _chain(saver, "src", [a, b, None])
    saver.put_writes(cfg("src", ids[-1]), [("big", b"pending")], "task-1", "0:x")
    saver.copy_thread("src", "dst")
    saver.delete_thread("src")  # the copy must not depend on the source's blobs
    fresh = spill_saver()
    assert [t.checkpoint["id"] for t in fresh.list(cfg("dst"))] == ids[::-1]
    latest = fresh.get_tuple(cfg("dst"))
    assert latest is not None and latest.checkpoint["channel_values"]["big"] == b
    assert latest.pending_writes == [("task-1", "big", b"pending")]
    assert _big(fresh, "dst", ids[0]) == a
    assert _blobs(fresh, "dst") == 2


def test_each_checkpoint_is_self_contained(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    saver = make_saver()
    ids = _chain(saver, "self", [b"first", None, b"third", None])
    # A new instance (no memory of the thread) carries unchanged channels by reading the parent.
    again = make_saver()
    cp = empty_checkpoint()
    cp["channel_versions"] = {"step": 5, "big": 2}
    cp["channel_values"] = {"step": 4}
    again.put(cfg("self", ids[-1]), cp, {"source": "loop", "step": 4}, {"step": 5})

    # Remove every older item, as an item TTL eventually would: the newest still resumes.
    async def drop_older() -> None:
        scope = await saver._core.scope("self")
        for key in await scope.keys({"k": "c"}):
            if not key.key.endswith(cp["id"]):
                await scope.store.delete_item(key.key)

    saver._core.run(drop_older())
    got = make_saver().get_tuple(cfg("self"))
    assert got is not None and got.checkpoint["id"] == cp["id"]
    assert got.checkpoint["channel_values"] == {"step": 4, "big": b"third"}


def test_prune_rejects_unknown_strategy(make_saver: Callable[..., FoundryCheckpointer]) -> None:
    with pytest.raises(ValueError, match="strategy"):
        make_saver().prune(["t"], strategy="keep_oldest")


@pytest.mark.parametrize("options", [{"strategy": "keep_oldest"}, {"keep": 0}, {"keep": True}])
def test_prune_bad_arguments_are_invalid_argument_errors(
    make_saver: Callable[..., FoundryCheckpointer], options: dict[str, Any]
) -> None:
    with pytest.raises(InvalidArgumentError):
        make_saver().prune(["t"], **options)


def test_prune_keeps_the_newest_n_per_namespace(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    saver = make_saver()
    ids = _chain(saver, "keep-n", [None] * 6)
    saver.prune(["keep-n"], keep=4)
    assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("keep-n"))] == ids[
        :-5:-1
    ]
    for bad in (0, -1, True, "2"):
        with pytest.raises(ValueError, match="keep"):
            saver.prune(["keep-n"], keep=bad)  # type: ignore[arg-type]
    assert len(list(saver.list(cfg("keep-n")))) == 4


def _age_blobs(root: Path, digests: set[str], seconds: float) -> None:
    """Move the modification time of ``LocalSpill`` blobs ``seconds`` into the past."""
    for path in root.rglob("*"):
        if path.is_file() and path.name in digests:
            st = path.stat()
            os.utime(path, (st.st_atime - seconds, st.st_mtime - seconds))


def test_prune_deletes_only_unreferenced_blobs_older_than_the_gc_grace(
    make_saver: Callable[..., FoundryCheckpointer], store_env: Any
) -> None:
    """A writer stores its blob, then its item: a blob modified within the gc grace may belong
    to an item not written yet, so prune leaves it to gc; an older one nothing references goes.
    """
    saver = make_saver(spill=LocalSpill(store_env.root / "sp"))
    a, b = os.urandom(VALUE), os.urandom(VALUE)
    _chain(saver, "race", [a, b])
    in_flight = os.urandom(VALUE)
    digest = {x: hashlib.sha256(x).hexdigest() for x in (a, b, in_flight)}

    async def upload() -> None:  # a writer that stored its blob and has not written its item
        ns = await (await saver._core.scope("race")).namespace(create=False)
        assert ns is not None and saver._core.spill is not None
        await saver._core.spill.put(ns, in_flight)

    saver._core.run(upload())
    _age_blobs(store_env.root / "sp", {digest[a], digest[b]}, DEFAULT_GC_GRACE_SECONDS + 60)
    saver.prune(["race"], keep=1)

    async def left() -> set[str]:
        ns = await (await saver._core.scope("race")).namespace(create=False)
        assert ns is not None and saver._core.spill is not None
        return {blob.digest for blob in await saver._core.spill.list(ns)}

    assert saver._core.run(left()) == {digest[b], digest[in_flight]}
    assert _big(saver, "race") == b
