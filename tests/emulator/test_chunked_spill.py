"""Hosted mode with no spill store configured: large values become chunk items of the thread's
own store, against the emulator (its default, strict identity mode, state in a file).

A 5 MB LangGraph state is written (the store calls of that write counted and asserted), read
back by a fresh process, and deleted with its thread, leaving no item; MAF and AutoGen keep a
large value the same way; a tampered chunk is refused; prune and gc collect chunks no item
references; and two users known only by their call ids, writing the same thread id, neither
see nor delete each other's chunks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, closing
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint
from azure.ai.agentserver.core import (
    FoundryAgentRequestContext,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from foundry_checkpoint import FoundryCheckpointer, LocalSpill, _codec
from foundry_checkpoint._chunks import CHUNK_BYTES, CHUNK_KIND, ChunkSpill, chunk_key
from foundry_checkpoint.emulator import FoundryEmulator
from foundry_checkpoint.errors import CheckpointTooLargeError, CorruptPayloadError
from foundry_checkpoint_autogen import AutoGenStateStore
from foundry_checkpoint_maf import FoundryCheckpointStorage
from tests._request import in_request

pytestmark = pytest.mark.emulator

USER = "alice"
#: Incompressible, five times the item limit.
FIVE_MB = random.Random(26).randbytes(5_000_000)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FoundryEmulator]:
    data = tmp_path_factory.mktemp("chunked") / "emulator.sqlite3"
    with FoundryEmulator(data=data, seed=26) as made:
        assert not made.trusted_callers
        yield made


@pytest.fixture
def options(
    emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> dict[str, Any]:
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    monkeypatch.setenv("FOUNDRY_PROJECT_ENDPOINT", emu.endpoint)
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    for name in ("CONNECTION_STRING", "ACCOUNT_URL"):
        monkeypatch.delenv(f"FOUNDRY_CHECKPOINT_BLOB_{name}", raising=False)
    return {
        "store_prefix": f"ch{uuid.uuid4().hex[:10]}",
        "credential": emu.credential(user=USER),
        "endpoint": emu.endpoint,
        "connection_verify": emu.ca_file,
        "retry_total": 0,
    }


def _rows(emu: FoundryEmulator, prefix: str) -> list[tuple[str, str, str, str, str]]:
    """Every raw item row under ``prefix``: (partition, store, key, value, tags)."""
    assert emu.data is not None
    with closing(sqlite3.connect(f"file:{emu.data}?mode=ro", uri=True)) as db:
        return db.execute(
            "SELECT part, store, key, value, tags FROM items WHERE substr(store, 1, ?) = ?",
            (len(prefix) + 1, f"{prefix}/"),
        ).fetchall()


def _chunk_rows(emu: FoundryEmulator, prefix: str) -> list[tuple[str, str, str, str, str]]:
    return [r for r in _rows(emu, prefix) if r[2].startswith("m/k/")]


def _is_head(row: tuple[str, str, str, str, str]) -> bool:
    return bool(json.loads(row[4] or "{}").get("kind") == CHUNK_KIND)


def _config(thread: str, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _value(saver: FoundryCheckpointer, thread: str) -> Any:
    """The ``v`` channel of the thread's latest checkpoint (which must exist)."""
    latest = saver.get_tuple(_config(thread))
    assert latest is not None
    return latest.checkpoint["channel_values"]["v"]


def _head(saver: FoundryCheckpointer, thread: str) -> str | None:
    latest = saver.get_tuple(_config(thread))
    return None if latest is None else str(latest.config["configurable"]["checkpoint_id"])


def _put(
    saver: FoundryCheckpointer, thread: str, value: bytes, step: int, parent: str | None = None
) -> Any:
    """Write one checkpoint holding ``value`` (after ``parent``; default: the newest)."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"v": value}
    checkpoint["channel_versions"] = {"v": step + 1}
    if parent is None and step:
        parent = _head(saver, thread)
    return saver.put(
        _config(thread, parent), checkpoint, {"source": "loop", "step": step}, {"v": step + 1}
    )


def _request(emu: FoundryEmulator, user: str) -> AbstractContextManager[None]:
    return in_request(FoundryAgentRequestContext(call_id=emu.mint_call(user)))


_RESUME = textwrap.dedent(
    """
    import hashlib, json, sys
    from foundry_checkpoint import FoundryCheckpointer
    from foundry_checkpoint.emulator import EmulatorCredential
    args = json.loads(sys.argv[1])
    saver = FoundryCheckpointer(
        store_prefix=args["prefix"], credential=EmulatorCredential(args["user"]),
        endpoint=args["endpoint"], connection_verify=args["ca"], retry_total=0)
    try:
        found = saver.get_tuple({"configurable": {"thread_id": args["thread"],
                                                  "checkpoint_ns": ""}})
        value = bytes(found.checkpoint["channel_values"]["v"])
        print(json.dumps({"sha": hashlib.sha256(value).hexdigest(), "size": len(value)}))
    finally:
        saver.close()
    """
)


@pytest.mark.multiprocess
def test_five_megabytes_written_resumed_in_a_fresh_process_and_deleted(
    emu: FoundryEmulator, options: dict[str, Any]
) -> None:
    saver = FoundryCheckpointer(**options)
    prefix = options["store_prefix"]
    try:
        # nothing configured: values over the item limit go into the thread's own store
        assert saver.spill_location == "chunk items of each thread's own store"
        # An ordinary small turn first, for the baseline of a write's calls.
        _put(saver, "small", b"tiny", 0)
        parent = _head(saver, "small")
        emu.reset_counts()
        _put(saver, "small", b"tiny too", 1, parent)
        small = sum(emu.requests.values())

        _put(saver, "big", b"tiny", 0)
        parent = _head(saver, "big")
        emu.reset_counts()
        _put(saver, "big", FIVE_MB, 1, parent)
        calls = dict(emu.requests)
        chunks = _chunk_rows(emu, prefix)
        # One channel value of 5,000,005 serialized bytes: seven chunks of at most CHUNK_BYTES.
        assert len(chunks) == 7 == -(-5_000_005 // CHUNK_BYTES)
        assert all(len(json.loads(value)["d"]) <= 980_000 for _, _, _, value, _ in chunks)
        # The write: the ordinary turn's calls, plus the seven chunk puts, plus the thread's
        # spill-namespace item, made once (read, create, read again).
        print(f"store calls: small turn {small}, 5 MB turn {sum(calls.values())}: {calls}")
        assert sum(calls.values()) == small + 7 + 3
        assert calls["put_item"] == 7 + 1  # the chunks, then the checkpoint
        assert calls.get("create_item", 0) == 1  # the namespace item
        # The next large turn: seven new chunks, and no namespace work any more.
        parent = _head(saver, "big")
        emu.reset_counts()
        _put(saver, "big", FIVE_MB + b"!", 2, parent)
        assert len(_chunk_rows(emu, prefix)) == 14
        assert emu.requests["put_item"] == 7 + 1  # no namespace work any more
        assert sum(emu.requests.values()) == small + 7
    finally:
        saver.close()

    args = {
        "prefix": prefix,
        "user": USER,
        "endpoint": emu.endpoint,
        "ca": emu.ca_file,
        "thread": "big",
    }
    env = {
        "FOUNDRY_HOSTING_ENVIRONMENT": "emulator",
        "FOUNDRY_PROJECT_ENDPOINT": emu.endpoint,
        "AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING": "true",
        "PATH": "/usr/bin:/bin",
    }
    emu.reset_counts()
    done = subprocess.run(
        [sys.executable, "-c", _RESUME, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    resumed = json.loads(done.stdout.strip().splitlines()[-1])
    expected = FIVE_MB + b"!"
    assert resumed == {"sha": hashlib.sha256(expected).hexdigest(), "size": len(expected)}
    read = dict(emu.requests)
    print(f"store calls of the fresh process's resume: {sum(read.values())}: {read}")
    # Resuming: the store opened once, one listing for the latest, then the checkpoint item,
    # the thread's spill-namespace item and the seven chunks.
    assert read == {"get_store": 1, "list_keys": 1, "get_item": 1 + 1 + 7}

    saver = FoundryCheckpointer(**options)
    try:
        saver.delete_thread("big")
        assert saver.get_tuple(_config("big")) is None
    finally:
        saver.close()
    big_store = saver._core.name_for("big")
    assert [r for r in _rows(emu, prefix) if r[1] == big_store] == []
    assert _chunk_rows(emu, prefix) == []


def test_a_tampered_chunk_is_refused(emu: FoundryEmulator, options: dict[str, Any]) -> None:
    saver = FoundryCheckpointer(**options)
    try:
        _put(saver, "t", FIVE_MB[:2_000_000], 0)
        [head] = [r for r in _chunk_rows(emu, options["store_prefix"]) if _is_head(r)]
        digest = head[2].split("/")[2]

        async def plant() -> None:
            scope = await saver._core.scope("t")
            item = await scope.store.get_item(chunk_key(digest, 1))
            assert item is not None
            text = item.value["d"]
            flipped = ("B" if text[0] == "A" else "A") + text[1:]
            await scope.store.set_item(chunk_key(digest, 1), {"d": flipped})

        saver._core.run(plant())
        saver.close()
        saver = FoundryCheckpointer(**options)  # nothing cached
        with pytest.raises(CorruptPayloadError, match=digest) as refused:
            saver.get_tuple(_config("t"))
        # What a host may show its client names no state store; the store is kept on the
        # error for logs.
        store = saver._core.name_for("t")
        assert refused.value.store == store
        assert store not in str(refused.value)
    finally:
        saver.close()


def test_the_too_large_error_names_the_thread_not_the_store_or_key(
    emu: FoundryEmulator, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value over the cap of one stored value (1 GiB; lowered here to 100 kB) is refused
    before anything is written; the message a host forwards to its client names no store or
    key, the error keeps both for logs."""
    monkeypatch.setattr(_codec, "MAX_PAYLOAD", 100_000)
    saver = FoundryCheckpointer(**options)
    try:
        _put(saver, "big", b"tiny", 0)
        parent = _head(saver, "big")
        before = len(_rows(emu, options["store_prefix"]))
        with pytest.raises(CheckpointTooLargeError) as refused:
            _put(saver, "big", FIVE_MB[:200_000], 1, parent)
        assert len(_rows(emu, options["store_prefix"])) == before  # nothing was written
        store = saver._core.name_for("big")
        message = str(refused.value)
        assert message.startswith("thread 'big'") and "Nothing was written." in message
        assert store not in message and "c//" not in message
        assert refused.value.store == store
        assert refused.value.key is not None and refused.value.key.startswith("c//")
    finally:
        saver.close()


def test_prune_and_gc_collect_unreferenced_chunks(
    emu: FoundryEmulator, options: dict[str, Any]
) -> None:
    prefix = options["store_prefix"]
    saver = FoundryCheckpointer(**options)
    try:
        shared = FIVE_MB[:1_500_000]
        _put(saver, "p", shared, 0)
        _put(saver, "q", shared, 0)  # the same content in another thread: its own chunks
        _put(saver, "p", FIVE_MB[1_500_000:3_000_000], 1)
        heads: dict[str, set[str]] = {r[1]: set() for r in _chunk_rows(emu, prefix)}
        for row in _chunk_rows(emu, prefix):
            if _is_head(row):
                heads[row[1]].add(row[2])
        assert [len(v) for v in heads.values()] in ([2, 1], [1, 2])
        saver.prune(["p"], strategy="keep_latest")
        report = saver.gc(grace_seconds=0)
        assert len(report.deleted) == 1
        assert report.unattributed == []
        left = {(r[1], r[2]) for r in _chunk_rows(emu, prefix) if _is_head(r)}
        assert len(left) == 2  # p's newest value, and q's
        assert _value(saver, "p") == FIVE_MB[1_500_000:3_000_000]
        assert _value(saver, "q") == shared
    finally:
        saver.close()


def test_two_users_by_call_id_keep_their_own_chunks(
    emu: FoundryEmulator, options: dict[str, Any]
) -> None:
    prefix = options["store_prefix"]
    values = {"ann": FIVE_MB[:1_200_000], "bo": FIVE_MB[1_200_000:2_400_000]}
    saver = FoundryCheckpointer(**options)
    try:
        for user, value in values.items():
            with _request(emu, user):
                _put(saver, "shared", value, 0)
        parts = {r[0] for r in _chunk_rows(emu, prefix)}
        assert parts == {"ann", "bo"}
        ann_rows = sorted(r for r in _rows(emu, prefix) if r[0] == "ann")
        for user, value in values.items():
            with _request(emu, user):
                found = saver.get_tuple(_config("shared"))
                assert found is not None
                assert found.checkpoint["channel_values"]["v"] == value
        with _request(emu, "bo"):
            assert saver.gc(grace_seconds=0).deleted == []
            saver.delete_thread("shared")
            assert saver.get_tuple(_config("shared")) is None
        assert {r[0] for r in _chunk_rows(emu, prefix)} == {"ann"}
        assert sorted(r for r in _rows(emu, prefix) if r[0] == "ann") == ann_rows
        with _request(emu, "ann"):
            found = saver.get_tuple(_config("shared"))
            assert found is not None
            assert found.checkpoint["channel_values"]["v"] == values["ann"]
    finally:
        saver.close()


def test_maf_keeps_a_large_checkpoint_in_chunks(
    emu: FoundryEmulator, options: dict[str, Any]
) -> None:
    prefix = options["store_prefix"]
    text = FIVE_MB[:1_500_000].hex()

    async def scenario() -> None:
        async with FoundryCheckpointStorage(context_id="ctx", **options) as storage:
            checkpoint = WorkflowCheckpoint(
                workflow_name="wf", graph_signature_hash="sig", state={"doc": text}
            )
            await storage.save(checkpoint)
            assert _chunk_rows(emu, prefix)
        async with FoundryCheckpointStorage(context_id="ctx", **options) as storage:
            loaded = await storage.load(checkpoint.checkpoint_id)
            assert loaded.state == {"doc": text}
            assert await storage.delete(checkpoint.checkpoint_id) is True
            assert _chunk_rows(emu, prefix) == []

    asyncio.run(scenario())


def test_autogen_keeps_a_large_state_in_chunks(
    emu: FoundryEmulator, options: dict[str, Any]
) -> None:
    prefix = options["store_prefix"]
    text = FIVE_MB[:1_500_000].hex()
    store = AutoGenStateStore(**options)
    try:
        store.save("s", "agent", "a/default", {"doc": text})
        assert _chunk_rows(emu, prefix)
    finally:
        store.close()
    store = AutoGenStateStore(**options)
    try:
        assert store.load("s", "agent", "a/default") == {"doc": text}
        store.delete("s", "agent", "a/default")
        assert store.load("s", "agent", "a/default") is None
        assert _chunk_rows(emu, prefix) == []
    finally:
        store.close()


def test_refresh_writes_old_chunks_again(emu: FoundryEmulator, options: dict[str, Any]) -> None:
    """What the TTL touch calls: chunks older than the cut are written again, unchanged."""
    prefix = options["store_prefix"]
    saver = FoundryCheckpointer(**options)
    try:
        _put(saver, "r", FIVE_MB[:1_000_000], 0)
        before = {r[2]: r[3] for r in _chunk_rows(emu, prefix)}
        assert len(before) == 2

        async def refresh(cut: float) -> int:
            scope = await saver._core.scope("r")
            ns = await scope.namespace(create=False)
            assert isinstance(scope.spill, ChunkSpill) and ns is not None
            return await scope.spill.refresh(ns, cut)

        assert saver._core.run(refresh(0.0)) == 0  # nothing that old
        emu.reset_counts()
        assert saver._core.run(refresh(time.time() + 60)) == 1
        assert emu.requests["put_item"] == 2  # both chunks, the same content
        assert {r[2]: r[3] for r in _chunk_rows(emu, prefix)} == before
        assert _value(saver, "r") == FIVE_MB[:1_000_000]
    finally:
        saver.close()


def test_chunks_stay_readable_after_a_spill_store_is_configured(
    emu: FoundryEmulator, options: dict[str, Any], tmp_path: Path
) -> None:
    """A deployment that adds a blob store later keeps reading what it wrote as chunks."""
    with FoundryCheckpointer(**options) as saver:
        _put(saver, "t", FIVE_MB, 0)
    assert _chunk_rows(emu, options["store_prefix"])

    with FoundryCheckpointer(**options, spill=LocalSpill(tmp_path / "blobs")) as saver:
        found = saver.get_tuple(_config("t"))
        assert found is not None
        assert bytes(found.checkpoint["channel_values"]["v"]) == FIVE_MB
        _put(saver, "t", FIVE_MB + b"?", 1)  # new large values go to the configured store
        found = saver.get_tuple(_config("t"))
        assert found is not None
        assert bytes(found.checkpoint["channel_values"]["v"]) == FIVE_MB + b"?"
    assert any((tmp_path / "blobs").rglob("*"))
