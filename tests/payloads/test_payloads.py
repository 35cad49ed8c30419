"""Big task inputs by reference (``PayloadStore``), local and hosted.

A 15 MiB input (over ``InputTooLarge``'s 10 MiB cap, which the test shows first) goes through
the platform's real task runtime (``@task`` run by the SDK's ``TaskManager``: its local file
provider, or its ``HostedTaskProvider`` against the emulator's task API) as a reference: the
task record holds a few hundred bytes and no attachment, and the handler reads back identical
bytes. Bad, tampered and foreign references raise typed errors; expired payloads leave nothing
behind.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from azure.ai.agentserver.core import FoundryAgentRequestContext
from azure.ai.agentserver.core._config import AgentConfig
from azure.ai.agentserver.core.tasks import InputTooLarge, TaskContext, TaskFailed, task
from azure.ai.agentserver.core.tasks._manager import TaskManager, set_task_manager
from azure.core.pipeline.transport import AioHttpTransport

from foundry_checkpoint import (
    CorruptPayloadError,
    InvalidArgumentError,
    LocalSpill,
    PayloadNotFoundError,
    PayloadStore,
)
from foundry_checkpoint._chunks import CHUNK_BYTES
from foundry_checkpoint._store._naming import item_key
from tests._request import in_request

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


def _store(env: Any, **extra: Any) -> PayloadStore:
    """The agent's store: in hosted mode its token is the agent's own identity, so a request's
    partition comes from the request's call id alone."""
    kwargs = env.kwargs(**{"user": "summarizer-agent", **extra})
    kwargs.pop("user_id", None)  # users come from the request context here
    return PayloadStore(**kwargs)


def _request(env: Any, user: str) -> FoundryAgentRequestContext:
    """The request context a host sets for ``user``: in hosted mode a call id the emulator
    resolves to ``user`` (the service partitions by it), locally the user id."""
    if env.mode == "hosted":
        return FoundryAgentRequestContext(call_id=env.call_id(user), user_id=user)
    return FoundryAgentRequestContext(user_id=user)


@contextmanager
def _as(env: Any, user: str | None) -> Iterator[None]:
    if user is None:
        yield
        return
    with in_request(_request(env, user)):
        yield


def _provider(env: Any) -> Any:
    if env.mode == "local":
        return None  # the SDK's own choice: its file provider under AGENTSERVER_STATE_ROOT
    from azure.ai.agentserver.core.tasks._client import HostedTaskProvider

    emu = env.emulator
    return HostedTaskProvider(
        emu.endpoint,
        emu.credential(user="summarizer-agent"),
        transport=AioHttpTransport(connection_verify=emu.ca_file),
    )


async def test_a_15_mib_input_runs_through_the_task_runtime_by_reference(
    store_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FOUNDRY_AGENT_NAME", "summarizer")
    monkeypatch.setenv("FOUNDRY_AGENT_SESSION_ID", "session-1")
    manager = TaskManager(AgentConfig.from_env(), provider=_provider(store_env))
    assert type(manager.provider).__name__ == (
        "HostedTaskProvider" if store_env.mode == "hosted" else "LocalFileTaskProvider"
    )
    set_task_manager(manager)
    await manager.startup()
    payloads = _store(store_env)
    records: list[dict[str, Any]] = []

    @task(name="summarize-document")
    async def summarize(ctx: TaskContext[dict[str, Any]]) -> dict[str, Any]:
        stored = await manager.provider.get(ctx.task_id)  # what the runtime persisted
        assert stored is not None
        records.append({"payload": stored.payload, "attachments": stored.attachments})
        ref = ctx.input["document"]
        document = await payloads.aget(ref) if PayloadStore.is_ref(ref) else ref.encode()
        return {"sha256": hashlib.sha256(document).hexdigest(), "size": len(document)}

    document = os.urandom(15 * MiB)
    try:
        # the platform's cap: 15 MiB inline is refused before anything is sent
        with pytest.raises(InputTooLarge):
            await summarize.run(input={"document": document.hex()[: 15 * MiB]})

        # hosted: the request that starts the task has a call id, which the runtime carries
        # into the handler; locally the partition is the same without a request (user_id=)
        user = "alice" if store_env.mode == "hosted" else None
        calls = store_env.emulator.requests if store_env.mode == "hosted" else None
        before = sum(calls.values()) if calls is not None else 0
        with _as(store_env, user):
            ref = await payloads.aput(document)
            put_calls = (
                sum(store_env.emulator.requests.values()) - before if calls is not None else 0
            )
            task_input = {"document": ref}
            size = len(json.dumps(task_input))
            assert size < 300, size  # the input stays small: inline, no attachment
            print(f"task input by reference: {size} bytes ({store_env.mode})")
            before = sum(store_env.emulator.requests.values()) if calls is not None else 0
            result = await summarize.run(input=task_input)
            run_calls = (
                sum(store_env.emulator.requests.values()) - before if calls is not None else 0
            )
    finally:
        await manager.shutdown()
        set_task_manager(None)
    assert result == {"sha256": hashlib.sha256(document).hexdigest(), "size": 15 * MiB}
    [record] = records
    assert len(json.dumps(record["payload"])) < 2_000, record["payload"]
    assert record["payload"]["input"] == task_input and not record["attachments"]
    if store_env.mode == "hosted":
        assert store_env.emulator.platform_requests["create_task"] >= 1
        # chunks of the payload store: nothing else
        assert payloads.spill_location == "chunk items of the payload store itself"
        chunks = -(-(15 * MiB + 16) // CHUNK_BYTES)  # the payload and its 16-byte salt
        print(f"store calls: put {put_calls}, get {run_calls} ({chunks} chunks)")
        assert chunks <= put_calls <= chunks + 4  # the store opened, every chunk, the item
        assert chunks <= run_calls <= chunks + 2  # the item, every chunk (the store is known)

    with _as(store_env, user):
        assert await payloads.adelete(ref) is True
        with pytest.raises(PayloadNotFoundError):
            await payloads.aget(ref)
        assert await payloads.adelete(ref) is False
    await payloads.aclose()


async def test_a_handler_entered_outside_the_request_reads_with_the_inputs_call_id(
    store_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovered task is re-entered at start-up, outside any request: the runtime restores
    the request's identity from the input's ``call_id``, so the handler reads the payload from
    the partition it was put in. Without it, the handler runs as the agent itself."""
    if store_env.mode == "local":
        pytest.skip("locally a call id names no partition")
    monkeypatch.setenv("FOUNDRY_AGENT_NAME", "summarizer")
    monkeypatch.setenv("FOUNDRY_AGENT_SESSION_ID", "session-2")
    manager = TaskManager(AgentConfig.from_env(), provider=_provider(store_env))
    set_task_manager(manager)
    await manager.startup()
    payloads = _store(store_env)

    @task(name="read-document")
    async def read(ctx: TaskContext[dict[str, Any]]) -> int:
        return len(await payloads.aget(ctx.input["document"]))

    try:
        request = _request(store_env, "alice")
        with in_request(request):
            ref = await payloads.aput(b"x" * (3 * MiB))
        # as at recovery: no request context, the input names the request's call id
        assert await read.run(input={"document": ref, "call_id": request.call_id}) == 3 * MiB
        with pytest.raises(TaskFailed) as failed:
            await read.run(input={"document": ref})
        assert "PayloadNotFoundError" in str(failed.value) + repr(failed.value.error)
    finally:
        await manager.shutdown()
        set_task_manager(None)
        await payloads.aclose()


def test_bad_and_tampered_references_raise_typed_errors(store_env: Any) -> None:
    with _store(store_env) as payloads:
        small = payloads.put(b"inline payload")
        big_data = os.urandom(2 * MiB)
        big = payloads.put(big_data)
        assert payloads.get(small) == b"inline payload" and payloads.get(big) == big_data

        for bad in (None, "ref", {"id": small["id"]}, {**small, "id": "../../etc"},
                    {**small, "size": -1}, {**small, "payload_ref": 2}):  # fmt: skip
            with pytest.raises(InvalidArgumentError):
                payloads.get(bad)  # type: ignore[arg-type]
        with pytest.raises(PayloadNotFoundError):
            payloads.get({**small, "id": "0" * 32})
        with pytest.raises(CorruptPayloadError, match="reference"):
            payloads.get({**small, "sha256": "0" * 64})
        with pytest.raises(CorruptPayloadError, match="reference"):
            payloads.get({**small, "size": small["size"] + 1})

        core = payloads._core

        async def tamper() -> None:
            scope = await core.scope(None)
            key = item_key("p", small["id"])
            item = await scope.store.get_item(key)
            assert item is not None
            value = dict(item.value)
            value["d"] = value["d"][:-4] + ("AAAA" if value["d"][-4:] != "AAAA" else "BBBB")
            await scope.store.set_item(key, value, tags=item.tags)
            # the big payload loses its stored bytes (blob or chunks)
            big_item = await scope.store.get_item(item_key("p", big["id"]))
            assert big_item is not None and "s" in big_item.value
            assert scope.spill is not None
            gone = await scope.spill.delete(big_item.value["ns"], [big_item.value["s"]])
            assert gone == 1

        core.run(tamper())
        with pytest.raises(CorruptPayloadError):
            payloads.get(small)
        with pytest.raises(PayloadNotFoundError, match="lost its stored bytes") as lost:
            payloads.get(big)
        # where, for logs only: the message names the payload, not the store or the key
        assert (lost.value.store, lost.value.key) == (core.name_for(None), f"p/{big['id']}")
        assert core.name_for(None) not in str(lost.value) and "p/" not in str(lost.value)


def test_one_user_cannot_read_or_delete_anothers_payload(store_env: Any) -> None:
    with _store(store_env) as payloads:
        with _as(store_env, "alice"):
            ref = payloads.put(b"alice's contract")
        with _as(store_env, "bob"):
            with pytest.raises(PayloadNotFoundError):
                payloads.get(ref)
            assert payloads.delete(ref) is False
        with _as(store_env, "alice"):
            assert payloads.get(ref) == b"alice's contract"


@pytest.mark.parametrize("spill", ["default", "folder"])
def test_expired_payloads_leave_nothing_behind(store_env: Any, spill: str, tmp_path: Path) -> None:
    extra = {"spill": LocalSpill(tmp_path / "payload-blobs")} if spill == "folder" else {}
    with _store(store_env, item_ttl_seconds=2, **extra) as payloads:
        core = payloads._core

        async def keys() -> list[str]:
            scope = await core.scope(None)
            page = await scope.store.list_keys(limit=100)
            return [k.key for k in page.keys]

        async def blob_of(pid: str) -> str:
            scope = await core.scope(None)
            item = await scope.store.get_item(item_key("p", pid))
            assert item is not None
            return str(item.value["s"])

        old = payloads.put(os.urandom(2 * MiB))
        old_blob = core.run(blob_of(old["id"]))
        chunked = (payloads.spill_location or "").startswith("chunk items")  # no spill store
        if chunked:
            assert len([k for k in core.run(keys()) if k.startswith(f"m/k/{old_blob}/")]) == 3
        time.sleep(3.2)
        fresh = payloads.put(os.urandom(2 * MiB))
        assert len(payloads.get(fresh)) == 2 * MiB
        with pytest.raises(PayloadNotFoundError):
            payloads.get(old)
        if chunked:
            # the chunks were items of the payload store and expired with the payload
            assert payloads.gc(grace_seconds=0) == 0
            left = core.run(keys())
            assert item_key("p", old["id"]) not in left
            assert not [k for k in left if k.startswith(f"m/k/{old_blob}/")], left
        else:
            spill_store = core.spill
            assert spill_store is not None
            before = asyncio.run(spill_store.namespaces())
            assert payloads.gc(grace_seconds=0) == 1  # the expired payload's blob
            after = asyncio.run(spill_store.namespaces())
            assert len(before) == 2 and len(after) == 1  # the fresh payload's stays
            assert payloads.gc(grace_seconds=0) == 0


@pytest.mark.multiprocess  # a task process killed, and the one that recovers it
def test_a_killed_task_recovers_and_reads_its_big_input_again(
    store_env: Any, tmp_path: Path
) -> None:
    """The task's process is killed after the handler read its 15 MiB input; a new process of
    the same agent recovers the task at start-up and the handler reads the same bytes again,
    outside any request (hosted: the input's call id names the user's partition)."""
    out = tmp_path / "runs.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.update(FOUNDRY_AGENT_NAME="summarizer", FOUNDRY_AGENT_SESSION_ID=f"crash-{tmp_path.name}")
    call: list[str] = []
    if store_env.mode == "hosted":
        env["EMULATOR_CA_FILE"] = store_env.emulator.ca_file
        call = [store_env.call_id("alice")]

    def run(mode: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tests.payloads._crash_task", mode, str(out), *extra],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    first = run("first", *call)
    assert first.returncode == 9, first.stderr[-3000:]
    second = run("recover")
    assert second.returncode == 0, second.stderr[-3000:]
    start, killed, recovered = (json.loads(line) for line in out.read_text().splitlines())
    assert start["input_bytes"] < 300, start
    assert (killed["mode"], recovered["mode"]) == ("first", "recover")
    assert "recovered" in recovered["entry"] and "recovered" not in killed["entry"]
    assert killed["size"] == recovered["size"] == 15 * MiB
    assert killed["sha256"] == recovered["sha256"] == start["sha256"]
