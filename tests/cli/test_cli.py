"""``foundry-checkpoint`` commands, in local mode and against the emulator (``store_env``)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

import pytest
from azure.ai.agentserver.core.storage import FoundryStateStore
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint.cli import app
from tests.langgraph._delta import chat_graph, human, reference, texts

from .conftest import Cli, build, config


def _one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert lines[0].startswith("error: "), text
    return lines[0]


def test_threads_lists_each_thread_with_its_latest(cli: Cli, seeded: dict[str, list[str]]) -> None:
    data = cli.json("threads")
    kind = "hosted" if cli.env.mode == "hosted" else "local-sqlite"
    assert data["backend"]["kind"] == kind
    latest = {row["thread_id"]: row["checkpoint_id"] for row in data["threads"]}
    assert latest == {"t1": seeded["t1"][0], "t2": seeded["t2"][0]}

    human = cli("threads")
    assert human.exit_code == 0, human.stderr
    first = human.stdout.splitlines()[0]
    assert first.startswith(f"backend {kind} · data ")
    where = cli.env.emulator.endpoint if cli.env.mode == "hosted" else "state.sqlite3"
    assert where in first
    assert seeded["t1"][0] in human.stdout and seeded["t2"][0] in human.stdout
    assert "2 thread(s)" in human.stdout


def test_history_is_newest_first_with_writes(cli: Cli, seeded: dict[str, list[str]]) -> None:
    data = cli.json("history", "t1")
    rows = data["checkpoints"]
    assert [r["checkpoint_id"] for r in rows] == seeded["t1"]
    assert [r["parent_checkpoint_id"] for r in rows[:-1]] == seeded["t1"][1:]
    assert rows[-1]["parent_checkpoint_id"] is None
    assert rows[0]["source"] == "loop" and rows[-1]["source"] == "input"

    limited = cli.json("history", "t1", "--limit", "2", "--ns", "")
    assert [r["checkpoint_id"] for r in limited["checkpoints"]] == seeded["t1"][:2]

    human = cli("history", "t2")
    assert human.exit_code == 0, human.stderr
    assert f"{len(seeded['t2'])} checkpoint(s) in thread 't2'" in human.stdout
    for checkpoint_id in seeded["t2"]:
        assert checkpoint_id in human.stdout


def test_show_latest_and_named_checkpoint(cli: Cli, seeded: dict[str, list[str]]) -> None:
    latest = cli.json("show", "t1")
    assert latest["checkpoint_id"] == seeded["t1"][0]
    assert latest["values"]["steps"] == ["a", "b", "again", "a", "b"]

    oldest_id = seeded["t1"][-1]
    result = cli("show", "t1", oldest_id, "--json")  # the command's own --json flag
    assert result.exit_code == 0, result.stderr
    oldest = json.loads(result.stdout)
    assert oldest["checkpoint_id"] == oldest_id and oldest["metadata"]["source"] == "input"
    assert oldest["values"] == {"__start__": {"steps": []}}
    assert {w["channel"] for w in oldest["pending_writes"]} >= {"steps"}

    waiting = cli.json("show", "t2")
    assert any(w["channel"] == "__interrupt__" for w in waiting["pending_writes"])

    human = cli("show", "t1")
    assert human.exit_code == 0, human.stderr
    assert f"checkpoint_id         {seeded['t1'][0]}" in human.stdout
    assert "['a', 'b', 'again', 'a', 'b']" in human.stdout


def test_unknown_thread_or_checkpoint_exits_1(cli: Cli, seeded: dict[str, list[str]]) -> None:
    for args in (("show", "nope"), ("history", "nope"), ("show", "t1", "no-such-id")):
        result = cli(*args)
        assert result.exit_code == 1
        assert result.stdout == ""
        assert "nope" in _one_error_line(result.stderr) or "no-such-id" in result.stderr


def test_another_user_sees_none_of_it(cli: Cli, seeded: dict[str, list[str]]) -> None:
    assert cli.json("threads", user="bob")["threads"] == []
    result = cli("show", "t1", user="bob")
    assert result.exit_code == 1


def test_delete_removes_the_thread(cli: Cli, seeded: dict[str, list[str]]) -> None:
    refused = cli("delete", "t1", input="n\n")
    assert refused.exit_code == 1 and "aborted" in refused.stderr
    assert cli("history", "t1").exit_code == 0

    done = cli("delete", "t1", "--yes")
    assert done.exit_code == 0, done.stderr
    assert "deleted thread 't1'" in done.stdout
    assert cli("history", "t1").exit_code == 1
    assert [t["thread_id"] for t in cli.json("threads")["threads"]] == ["t2"]
    assert cli("delete", "t1", "--yes").exit_code == 1  # nothing left to delete


def test_prune_keeps_the_newest(cli: Cli, seeded: dict[str, list[str]]) -> None:
    data = cli.json("prune", "t1", "--keep", "1")
    assert data == {
        "backend": data["backend"],
        "thread_id": "t1",
        "before": len(seeded["t1"]),
        "after": 1,
        "deleted": len(seeded["t1"]) - 1,
    }
    assert [r["checkpoint_id"] for r in cli.json("history", "t1")["checkpoints"]] == [
        seeded["t1"][0]
    ]
    assert cli.json("show", "t1")["values"]["steps"] == ["a", "b", "again", "a", "b"]

    assert len(seeded["t2"]) > 3
    data = cli.json("prune", "t2", "--keep", "3")
    assert (data["after"], data["deleted"]) == (3, len(seeded["t2"]) - 3)
    kept = [r["checkpoint_id"] for r in cli.json("history", "t2")["checkpoints"]]
    assert kept == seeded["t2"][:3]  # the three newest, newest first

    refused = cli("prune", "t2", "--keep", "0")
    assert refused.exit_code == 2
    assert "--keep" in _one_error_line(refused.stderr)
    assert len(cli.json("history", "t2")["checkpoints"]) == 3


def test_prune_keeps_a_delta_channel_conversation(cli: Cli) -> None:
    """Through the command line as through the saver: the kept checkpoint carries the history
    its DeltaChannel is rebuilt from, and has no parent."""
    with cli.saver() as saver:
        graph = chat_graph(saver)
        for turn in range(3):
            graph.invoke(human(turn), config("delta"))
        before = texts(graph.get_state(config("delta")).values["messages"])
    data = cli.json("prune", "delta")
    assert data["after"] == 1 and data["deleted"] > 5
    [kept] = cli.json("history", "delta")["checkpoints"]
    assert kept["parent_checkpoint_id"] is None
    with cli.saver() as saver:
        graph = chat_graph(saver)
        assert texts(graph.get_state(config("delta")).values["messages"]) == before
        out = graph.invoke(human(3), config("delta"))
        assert texts(out["messages"]) == reference(4)


def _sqlite_threads(path: Path) -> None:
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        build(saver).invoke({"steps": []}, config("done"))
        build(saver, ask=True).invoke({"steps": []}, config("waiting"))
    finally:
        conn.close()


def _ids_and_writes(saver: Any, thread: str) -> list[tuple[str, Any, list[tuple[str, str]]]]:
    return [
        (
            c.config["configurable"]["checkpoint_id"],
            (c.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            sorted((w[0], w[1]) for w in c.pending_writes or []),
        )
        for c in saver.list(config(thread))
    ]


def test_copy_from_sqlite_keeps_ids_writes_and_resumes(cli: Cli, tmp_path: Path) -> None:
    source = tmp_path / "old.db"
    _sqlite_threads(source)
    result = cli("copy", "--from", f"sqlite:{source}", "--to", "foundry")
    assert result.exit_code == 0, result.stderr
    assert "of 2 thread(s) from sqlite:" in result.stdout

    conn = sqlite3.connect(source, check_same_thread=False)
    try:
        old = SqliteSaver(conn)
        expected = {t: _ids_and_writes(old, t) for t in ("done", "waiting")}
    finally:
        conn.close()
    with cli.saver() as saver:
        assert {t: _ids_and_writes(saver, t) for t in ("done", "waiting")} == expected
        # the interrupted thread resumes in the new store
        finished = build(saver, ask=True).invoke(Command(resume="yes"), config("waiting"))
        assert finished["steps"] == ["a", "b", "answer:yes"]


def test_copy_to_sqlite_round_trip_with_json(
    cli: Cli, seeded: dict[str, list[str]], tmp_path: Path
) -> None:
    target = tmp_path / "export.db"
    data = cli.json("copy", "--from", "foundry", "--to", f"sqlite:{target}", "--thread", "t2")
    assert data["threads"] == ["t2"] and data["checkpoints"] == len(seeded["t2"])
    assert data["writes"] >= 1
    conn = sqlite3.connect(target, check_same_thread=False)
    try:
        exported = SqliteSaver(conn)
        with cli.saver() as saver:
            assert _ids_and_writes(exported, "t2") == _ids_and_writes(saver, "t2")
        assert list(exported.list(config("t1"))) == []
    finally:
        conn.close()


def test_copy_errors(cli: Cli, tmp_path: Path) -> None:
    bad = cli("copy", "--from", "mysql:x", "--to", "foundry")
    assert bad.exit_code == 2 and "unknown saver URI" in _one_error_line(bad.stderr)
    same = cli("copy", "--from", "foundry", "--to", "foundry")
    assert same.exit_code == 2 and "same saver" in _one_error_line(same.stderr)
    missing = cli("copy", "--from", f"sqlite:{tmp_path / 'none.db'}", "--to", "foundry")
    assert missing.exit_code == 1 and "does not exist" in _one_error_line(missing.stderr)
    assert not (tmp_path / "none.db").exists()


def test_typed_error_is_one_line_exit_1(cli: Cli) -> None:
    result = cli.runner.invoke(app, ["--prefix", "bad prefix!", "threads"])
    assert result.exit_code == 1
    assert "store_prefix 'bad prefix!'" in _one_error_line(result.stderr)


def test_usage_errors_exit_2(cli: Cli) -> None:
    for args in (["no-such-command"], ["history"], ["--local-backend", "x", "threads"]):
        result = cli.runner.invoke(app, args)
        assert result.exit_code == 2, args
        _one_error_line(result.stderr)


async def test_isolation_refused_store_is_a_typed_error(store_env: Any, cli: Cli) -> None:
    if store_env.mode == "hosted":
        emu = store_env.emulator
        store: Any = await FoundryStateStore.get_or_create(
            f"{store_env.prefix}/index",
            emu.credential(user="alice"),
            emu.endpoint,
            user_isolation=False,
            connection_verify=emu.ca_file,
        )
    else:  # a store some other tool made without isolation, in the embedded database
        from foundry_checkpoint._store._embedded import EngineStore, default_engine

        store = await EngineStore.get_or_create(
            default_engine(),
            "langgraph/index",
            user_isolation=False,
            item_ttl_seconds=-1,
            user="local",
        )
    await store.aclose()
    result = cli("threads")
    assert result.exit_code == 1
    assert "exists without user_isolation" in _one_error_line(result.stderr)


def test_saver_repr_matches_cli_backend(cli: Cli, seeded: dict[str, list[str]]) -> None:
    backend = cli.json("threads")["backend"]
    with cli.saver() as saver:
        assert f"location={backend['location']!r}" in repr(saver)
        assert isinstance(saver, FoundryCheckpointer)


def test_emulator_command_serves_the_cli(tmp_path: Path) -> None:
    """``foundry-checkpoint emulator`` in one process, the CLI in hosted mode in another."""
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        "AGENTSERVER_STATE_ROOT": str(tmp_path / "state"),
    }
    env.pop("FOUNDRY_HOSTING_ENVIRONMENT", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "foundry_checkpoint.cli", "emulator", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        endpoint = server.stdout.readline().strip().removeprefix("endpoint: ")
        ca_file = server.stdout.readline().strip().removeprefix("ca_file: ")
        assert endpoint.startswith("https://127.0.0.1:") and Path(ca_file).is_file()
        hosted = {**env, "FOUNDRY_HOSTING_ENVIRONMENT": "1", "FOUNDRY_PROJECT_ENDPOINT": endpoint}
        cli = [sys.executable, "-m", "foundry_checkpoint.cli", "--ca-file", ca_file]
        listed = subprocess.run(
            [*cli, "--emulator-user", "carol", "--json", "threads"],
            capture_output=True, text=True, env=hosted, check=False,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        data = json.loads(listed.stdout)
        assert data["backend"]["kind"] == "hosted" and data["backend"]["location"] == endpoint
        assert data["threads"] == []
    finally:
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=60) == 0


class Big(TypedDict, total=False):
    blob: bytes
    n: int


def test_gc_deletes_only_old_orphans(cli: Cli, store_env: Any) -> None:
    if store_env.mode == "hosted":  # no spill store configured in hosted mode: nothing to collect
        data = cli.json("gc")
        assert data["backend"]["spill"] == "chunk items of each thread's own store"
        assert data["deleted"] == []
        return
    builder = StateGraph(Big)
    builder.add_node("load", lambda s: {"blob": random.Random(1).randbytes(400_000)})
    builder.add_node("count", lambda s: {"n": len(s["blob"])})
    builder.add_edge(START, "load")
    builder.add_edge("load", "count")
    builder.add_edge("count", END)
    with cli.saver() as saver:
        builder.compile(checkpointer=saver).invoke({}, config("big"))
    spill = Path(store_env.root) / "state" / "foundry_checkpoint" / "spill"
    live = sorted(p for p in spill.rglob("*") if p.is_file())
    assert live
    orphan_data = b"left behind by an expired checkpoint"
    orphan = live[0].parent / hashlib.sha256(orphan_data).hexdigest()
    orphan.write_bytes(orphan_data)
    recent_data = b"uploaded a moment ago by a write in flight"
    recent = live[0].parent / hashlib.sha256(recent_data).hexdigest()
    recent.write_bytes(recent_data)
    old = time.time() - 3 * 24 * 3600
    for path in [*live, orphan]:
        os.utime(path, (old, old))

    dry = cli.json("gc", "--dry-run")
    assert [d["digest"] for d in dry["deleted"]] == [orphan.name]
    assert dry["dry_run"] is True and dry["kept_recent"] == 1 and orphan.exists()

    human = cli("gc")
    assert human.exit_code == 0, human.stderr
    assert "deleted 1 orphaned blob(s) in 1 thread(s)" in human.stdout
    assert not orphan.exists() and recent.exists() and all(p.exists() for p in live)
    assert cli.json("show", "big")["values"]["n"] == 400_000


def test_hosted_user_id_needs_trusted_delegation(
    cli: Cli, seeded: dict[str, list[str]], request: pytest.FixtureRequest
) -> None:
    if cli.env.mode != "hosted":
        pytest.skip("--user-id is the local partition in local mode, always honoured")
    refused = cli("--user-id", "bob", "threads")
    assert refused.exit_code == 1
    assert "trusted_delegation" in _one_error_line(refused.stderr)

    caller = request.getfixturevalue("trusted_caller")
    delegated = cli("--json", "--user-id", "bob", "--trusted-delegation", "threads", user=caller)
    assert delegated.exit_code == 0, delegated.stderr
    assert json.loads(delegated.stdout)["threads"] == []  # bob's partition, not alice's
    assert [t["thread_id"] for t in cli.json("threads")["threads"]] == ["t1", "t2"]
