"""``copy --from foundry-lc``: threads written by langchain-azure-ai's ``FoundryCheckpointSaver``
move to ``FoundryCheckpointer`` and resume there, interrupts included (local and hosted).

The threads are written by that saver in a process of its own, as the old deployment would have
(hosted: against the emulator as user ``alice``, trusting its certificate with
``SSL_CERT_FILE``; local: the SDK's own local files), then copied by the CLI as the same user.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from azure.ai.agentserver.core import FoundryAgentRequestContext
from langgraph.types import Command

from foundry_checkpoint import (
    FoundryCheckpointer,
    LangchainAzureSource,
    MigratingCheckpointer,
    acopy_thread,
)
from tests._request import in_request

from .conftest import Cli, build, config

ROOT = Path(__file__).resolve().parents[2]


def _old_prefix(env: Any) -> str:
    """The old app's store_name_prefix: one per test (the session emulator is shared)."""
    return f"old-app/{env.prefix}"


def _write_with_langchain_azure_saver(
    env: Any, user: str = "alice", call_id: str | None = None
) -> dict[str, list[str]]:
    child = {**os.environ, "PYTHONPATH": str(ROOT)}
    if env.mode == "hosted":
        child["SSL_CERT_FILE"] = env.emulator.ca_file
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.cli._lc_writer",
            user,
            _old_prefix(env),
            *([call_id] if call_id else []),
        ],
        cwd=ROOT,
        env=child,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    written: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return written


def _ids(saver: FoundryCheckpointer, thread: str) -> list[str]:
    return [c.config["configurable"]["checkpoint_id"] for c in saver.list(config(thread))]


@pytest.mark.multiprocess  # the old app writes in a process of its own
def test_a_thread_of_langchain_azure_ais_saver_is_copied_and_resumes(cli: Cli) -> None:
    written = _write_with_langchain_azure_saver(cli.env)
    assert len(written["lc-asked"]) >= 3 and len(written["lc-done"]) >= 6, written

    args = ["copy", "--from", f"foundry-lc:{_old_prefix(cli.env)}", "--to", "foundry"]
    threads = ["--thread", "lc-asked", "--thread", "lc-done"]
    first = cli.json(*args, *threads)
    total = len(written["lc-asked"]) + len(written["lc-done"])
    assert first["threads"] == ["lc-asked", "lc-done"] and first["checkpoints"] == total
    assert first["writes"] >= 1  # the interrupt's pending write, at least

    with cli.saver() as saver:
        # same ids, same order
        assert {t: _ids(saver, t) for t in written} == written
        graph = build(saver, ask=True)
        state = graph.get_state(config("lc-asked"))
        assert state.next == ("ask",) and state.values["steps"] == ["a", "b"]
        assert [i.value for t in state.tasks for i in t.interrupts] == ["go on?"]
        resumed = graph.invoke(Command(resume="yes"), config("lc-asked"))
        assert resumed["steps"] == ["a", "b", "answer:yes"]
        assert build(saver).get_state(config("lc-done")).values["steps"] == [
            "a", "b", "again", "a", "b",
        ]  # fmt: skip

    # run again (a redeploy that copies before it starts): nothing doubles, the resumed run stays
    again = cli.json(*args, *threads)
    assert again["checkpoints"] == total
    with cli.saver() as saver:
        ids = _ids(saver, "lc-asked")
        assert ids[1:] == written["lc-asked"] and len(ids) == len(written["lc-asked"]) + 1
        assert build(saver, ask=True).get_state(config("lc-asked")).values["steps"][-1] == (
            "answer:yes"
        )

    if cli.env.mode == "hosted":
        # another user's partition holds none of alice's threads (the SDK's local files, where
        # that saver keeps them locally, have no partitions)
        other = cli("--json", *args, "--thread", "lc-asked", user="bob")
        assert other.exit_code != 0 and "lc-asked" in other.output + other.stderr


def test_foundry_lc_is_a_named_source_only(cli: Cli) -> None:
    no_threads = cli("copy", "--from", "foundry-lc", "--to", "foundry")
    assert no_threads.exit_code == 2 and "--thread" in no_threads.output + no_threads.stderr
    as_target = cli("copy", "--from", "foundry", "--to", "foundry-lc", "--thread", "t")
    assert as_target.exit_code == 2 and "source only" in as_target.output + as_target.stderr
    missing = cli("copy", "--from", "foundry-lc", "--to", "foundry", "--thread", "never")
    assert missing.exit_code == 1 and "never" in missing.output + missing.stderr


@pytest.mark.multiprocess  # the old app writes in a process of its own
async def test_each_users_threads_move_inside_their_own_requests(store_env: Any) -> None:
    """Hosted end users' threads live in their partitions, which only their requests reach:
    the app copies a thread in the user's request, before the graph runs."""

    def request(user: str) -> FoundryAgentRequestContext:
        if store_env.mode == "hosted":
            return FoundryAgentRequestContext(call_id=store_env.call_id(user), user_id=user)
        return FoundryAgentRequestContext(user_id=user)

    # the old deployment: alice's request ran the graph with langchain-azure-ai's saver
    call = store_env.call_id("alice") if store_env.mode == "hosted" else None
    written = _write_with_langchain_azure_saver(store_env, user="agent", call_id=call)

    legacy = LangchainAzureSource(_old_prefix(store_env), **store_env.kwargs(user="agent"))
    checkpointer = FoundryCheckpointer(**store_env.kwargs(user="agent"))
    try:
        with in_request(request("alice")):
            copied = await acopy_thread(legacy, checkpointer, "lc-asked")
            assert copied == len(written["lc-asked"])
            graph = build(checkpointer, ask=True)
            state = await graph.aget_state(config("lc-asked"))
            assert state.next == ("ask",)
            done = await graph.ainvoke(Command(resume="yes"), config("lc-asked"))
            assert done["steps"] == ["a", "b", "answer:yes"]
            # the next request: already there, nothing read from the old stores
            assert await acopy_thread(legacy, checkpointer, "lc-asked") == 0
        with in_request(request("bob")):
            assert await checkpointer.aget_tuple(config("lc-asked")) is None
            if store_env.mode == "hosted":  # the SDK's local files have no partitions
                assert await acopy_thread(legacy, checkpointer, "lc-asked") == 0
    finally:
        legacy.close()
        await checkpointer.aclose()


@pytest.mark.multiprocess  # the old app writes in a process of its own
async def test_a_migrating_checkpointer_moves_each_thread_when_the_graph_reads_it(
    store_env: Any,
) -> None:
    """For hosts that run the graph themselves: no call before the graph, the saver moves a
    thread in the user's request the first time the graph finds nothing."""
    if store_env.mode == "hosted":
        alice = FoundryAgentRequestContext(call_id=store_env.call_id("alice"), user_id="alice")
        call = alice.call_id
    else:
        alice, call = FoundryAgentRequestContext(user_id="alice"), None
    written = _write_with_langchain_azure_saver(store_env, user="agent", call_id=call)

    legacy = LangchainAzureSource(_old_prefix(store_env), **store_env.kwargs(user="agent"))
    saver = MigratingCheckpointer(legacy=legacy, **store_env.kwargs(user="agent"))
    try:
        with in_request(alice):
            # async: the interrupted thread resumes where the old saver left it
            done = await build(saver, ask=True).ainvoke(Command(resume="yes"), config("lc-asked"))
            assert done["steps"] == ["a", "b", "answer:yes"]
            history = [c.config["configurable"]["checkpoint_id"] async for c in saver.alist(
                config("lc-asked"))]  # fmt: skip
            assert history[-len(written["lc-asked"]) :] == written["lc-asked"]
            # a new thread runs as usual (nothing to move), for one more request: the look-up
            fresh = await build(saver).ainvoke({"steps": []}, config("brand-new"))
            assert fresh["steps"] == ["a", "b"]
            if store_env.mode == "hosted":
                plain = FoundryCheckpointer(**store_env.kwargs(user="agent"))
                try:
                    await build(plain).ainvoke({"steps": []}, config("warm-up"))
                    costs = []
                    for each, thread in ((plain, "new-plain"), (saver, "new-migrating")):
                        before = sum(store_env.emulator.requests.values())
                        await build(each).ainvoke({"steps": []}, config(thread))
                        costs.append(sum(store_env.emulator.requests.values()) - before)
                    print(f"store calls of a new thread's run: {costs[0]}, migrating {costs[1]}")
                    assert costs[1] == costs[0] + 1, costs
                finally:
                    await plain.aclose()
        with in_request(alice):  # sync faces, a later request
            state = build(saver).get_state(config("lc-done"))
            assert state.values["steps"] == ["a", "b", "again", "a", "b"]
    finally:
        await saver.aclose()


def test_a_tampered_old_store_runs_no_code_and_says_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old stores are decoded strictly: a value naming a function is refused, and bad
    base64 is a CorruptPayloadError; nothing runs and nothing is written."""
    import asyncio
    import base64

    import ormsgpack
    from azure.ai.agentserver.core.storage import FoundryStateStore, JSONValue
    from langchain_core.runnables import RunnableConfig

    from foundry_checkpoint import CorruptPayloadError, UnsafeValueError, copy_thread
    from foundry_checkpoint.migrate import lc_store_name

    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    evil = ormsgpack.packb(ormsgpack.Ext(1, ormsgpack.packb(["os", "system", ["touch pwned"]])))

    async def write() -> None:
        store = await FoundryStateStore.get_or_create(
            lc_store_name("old", "t-evil"), user_isolation=True, item_ttl_seconds=-1
        )
        async with store:
            for checkpoint_id, data in (("1", base64.b64encode(evil).decode()), ("2", "%%%")):
                value: dict[str, JSONValue] = {
                    "checkpoint_id": checkpoint_id,
                    "checkpoint_ns": "",
                    "checkpoint": {"type": "msgpack", "data": data},
                    "metadata": {"type": "msgpack", "data": base64.b64encode(b"\x80").decode()},
                    "parent_checkpoint_id": "",
                }
                tags = {"kind": "checkpoint", "ns": ""}
                await store.set_item(f"/{checkpoint_id}", value, tags=tags)

    asyncio.run(write())
    with LangchainAzureSource("old") as legacy, FoundryCheckpointer() as new:
        one: RunnableConfig = {
            "configurable": {"thread_id": "t-evil", "checkpoint_ns": "", "checkpoint_id": "1"}
        }
        with pytest.raises(UnsafeValueError, match=r"os\.system") as unsafe:
            legacy.get_tuple(one)
        assert (unsafe.value.store, unsafe.value.key) == (lc_store_name("old", "t-evil"), "/1")
        two: RunnableConfig = {"configurable": {**one["configurable"], "checkpoint_id": "2"}}
        with pytest.raises(CorruptPayloadError, match="base64"):
            legacy.get_tuple(two)
        with pytest.raises(CorruptPayloadError):
            copy_thread(legacy, new, "t-evil")
        assert new.get_tuple(config("t-evil")) is None  # nothing was written
    assert not Path("pwned").exists()  # the command the value names never ran
