"""``foundry-checkpoint maf sessions`` and ``maf history``: an agent's sessions and chat history
(``FoundryHistoryProvider``) from the shell, in local mode and against the emulator
(``store_env``): what the provider stores, paged, read without writing, stored text escaped."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Sequence
from typing import Any

import pytest
from agent_framework import Content, Message
from typer.testing import CliRunner

from foundry_checkpoint.cli import app
from foundry_checkpoint_maf import FoundryHistoryProvider
from tests.security.test_cli_output import CLEAR, LINK, MARKUP, TITLE, _flat, _on_a_terminal

from .conftest import Cli


def _provider(cli: Cli, user: str = "alice", **options: Any) -> FoundryHistoryProvider:
    return FoundryHistoryProvider(**cli.env.kwargs(user=user, **options))


def _turns() -> dict[str | None, list[Message]]:
    call = Content.from_function_call("call-1", "lookup", arguments={"city": "Oslo"})
    return {
        "chat-a": [
            Message("user", ["weather in Oslo?"], message_id="u1"),
            Message("assistant", [call], author_name="planner"),
            Message("tool", [Content.from_function_result("call-1", result={"temp": 21})]),
            Message("assistant", ["21 degrees"], message_id="a2"),
            Message("user", ["thanks"]),
        ],
        "chat-b": [Message("user", ["hello"]), Message("assistant", ["hi there"])],
        None: [Message("user", ["the default session"])],
    }


async def _seed(cli: Cli, turns: dict[str | None, list[Message]], user: str = "alice") -> None:
    async with _provider(cli, user) as history:
        for session, messages in turns.items():
            await history.save_messages(session, messages)


async def _keep_sessions(cli: Cli, ids: Sequence[str], user: str = "alice") -> None:
    """Agent sessions in a ``FoundrySessionStore`` (its default prefix locally, the test's in
    hosted mode: one ``--prefix`` names both there)."""
    from agent_framework import AgentSession

    from foundry_checkpoint_maf import FoundrySessionStore

    async with FoundrySessionStore(**cli.env.kwargs(user=user)) as store:
        for session_id in ids:
            session = AgentSession(session_id=session_id)
            session.state["topic"] = os.urandom(300).hex()  # not compressible below 300 B
            await store.set(session_id, session)


async def _read(cli: Cli, session: str | None, user: str = "alice") -> list[Message]:
    async with _provider(cli, user) as history:
        return await history.get_messages(session)


def _one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


def _prefix(cli: Cli) -> str:
    return cli.env.prefix if cli.env.mode == "hosted" else "maf-history"


def test_sessions_and_history_show_what_the_provider_keeps(cli: Cli) -> None:
    turns = _turns()
    asyncio.run(_seed(cli, turns))
    asyncio.run(_seed(cli, {"chat-a": [Message("user", ["bob's own words"])]}, user="bob"))

    asyncio.run(_keep_sessions(cli, ["chat-a", "state-only"]))

    listed = cli.json("maf", "sessions")
    assert listed["backend"]["store_prefix"] == _prefix(cli)
    rows = {r["session_id"]: r for r in listed["sessions"]}
    assert list(rows) == [None, "chat-a", "chat-b", "state-only"]  # sorted, the default first
    for session, messages in turns.items():
        row = rows[session]
        assert row["message_count"] == len(messages)
        assert (row["first_seq"], row["next_seq"]) == (0, len(messages))
        assert row["history_updated_at"].endswith("+00:00")
    assert rows["chat-a"]["state_size"] > 300 and rows["chat-a"]["state_spilled"] is False
    assert rows["chat-a"]["updated_at"] == max(
        rows["chat-a"]["history_updated_at"], rows["chat-a"]["state_updated_at"]
    )
    assert rows["chat-b"]["state_size"] is None and rows["chat-b"]["state_updated_at"] is None
    only = rows["state-only"]  # a session whose conversation lives in its state, say
    assert only["message_count"] is None and only["history_updated_at"] is None
    assert only["state_size"] > 300 and only["updated_at"] == only["state_updated_at"]

    data = cli.json("maf", "history", "chat-a")
    assert data["session_id"] == "chat-a" and data["message_count"] == 5
    stored = asyncio.run(_read(cli, "chat-a"))
    assert [m["message"] for m in data["messages"]] == [m.to_dict() for m in stored]
    assert [m["seq"] for m in data["messages"]] == [0, 1, 2, 3, 4]
    assert [m["role"] for m in data["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    call, result = data["messages"][1], data["messages"][2]
    assert call["author_name"] == "planner"
    assert call["contents"] == ['call lookup({"city": "Oslo"})']
    assert result["contents"][0].startswith("result of call-1: ")
    assert data["messages"][0]["message_id"] == "u1"
    assert data["messages"][3]["text"] == "21 degrees"
    assert all(
        m["size"] > 0 and m["spilled"] is False and m["error"] is None for m in data["messages"]
    )

    # the last N, and pages of it
    last = cli.json("maf", "history", "chat-a", "--last", "2")
    assert [m["text"] for m in last["messages"]] == ["21 degrees", "thanks"]
    page = cli.json("maf", "history", "chat-a", "--limit", "2", "--offset", "2")
    assert [m["seq"] for m in page["messages"]] == [2, 3] and page["offset"] == 2
    tail = cli.json("maf", "history", "chat-a", "--last", "3", "--offset", "2")
    assert [m["seq"] for m in tail["messages"]] == [4]
    assert cli.json("maf", "history", "")["messages"][0]["text"] == "the default session"

    human = cli("maf", "history", "chat-a", "--limit", "2")
    assert human.exit_code == 0, human.stderr
    assert "session 'chat-a': 5 message(s) kept (sequence numbers 0..4)" in human.stdout
    assert 'call lookup({"city": "Oslo"})' in human.stdout
    assert "seq 0..1: 2 of 5; more with --offset 2" in human.stdout
    sessions = cli("maf", "sessions", "--limit", "2")
    assert sessions.exit_code == 0, sessions.stderr
    assert "(default: '')" in sessions.stdout and "chat-a" in sessions.stdout
    assert "2 session(s); more with --offset 2" in sessions.stdout
    rest = cli.json("maf", "sessions", "--offset", "2")["sessions"]
    assert [r["session_id"] for r in rest] == ["chat-b", "state-only"]
    elsewhere = cli.json("maf", "sessions", "--sessions-prefix", "no-such-prefix")["sessions"]
    assert [r["session_id"] for r in elsewhere] == [None, "chat-a", "chat-b"]
    assert all(r["state_size"] is None for r in elsewhere)

    # each user sees their own
    bob = cli.json("maf", "sessions", user="bob")["sessions"]
    assert [(r["session_id"], r["message_count"], r["state_size"]) for r in bob] == [
        ("chat-a", 1, None)
    ]
    bobs = cli.json("maf", "history", "chat-a", user="bob")["messages"]
    assert [m["text"] for m in bobs] == ["bob's own words"]
    assert cli.json("maf", "sessions", user="carol")["sessions"] == []


def test_unknown_session_and_bad_usage(cli: Cli) -> None:
    asyncio.run(_seed(cli, {"chat-a": [Message("user", ["x"])]}))
    missing = cli("maf", "history", "nope")
    assert missing.exit_code == 1 and missing.stdout == ""
    line = _one_error_line(missing.stderr)
    assert "session 'nope' has no history under prefix" in line and _prefix(cli) in line
    for args in (["--limit", "0"], ["--last", "0"], ["--offset", "-1"]):
        bad = cli("maf", "history", "chat-a", *args)
        assert bad.exit_code == 2, (args, bad.stdout)
        _one_error_line(bad.stderr)
    assert cli("maf", "sessions", "--limit", "0").exit_code == 2


def _engine_rows(cli: Cli) -> list[tuple[Any, ...]]:
    """Every store and item row of the embedded engine, with its etag and times."""
    path = cli.env.root / "state" / "foundry_checkpoint" / "state.sqlite3"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        stores = db.execute("SELECT name, updated_at FROM stores ORDER BY name").fetchall()
        items = db.execute(
            "SELECT store, part, key, etag, updated_at, expires_at FROM items "
            "ORDER BY store, part, key"
        ).fetchall()
    return [*stores, *items]


def test_reading_writes_nothing_and_renews_no_ttl(cli: Cli) -> None:
    """Both commands only read: in hosted mode the emulator sees no write of any kind; in local
    mode no row of the embedded store changes (etag, update time, expiry)."""
    asyncio.run(_seed(cli, _turns()))
    asyncio.run(_keep_sessions(cli, ["chat-a", "state-only"]))
    commands = (
        ["maf", "sessions"],
        ["maf", "history", "chat-a"],
        ["maf", "history", "chat-a", "--last", "1"],
        ["maf", "history", ""],
        ["maf", "history", "never-written"],
    )
    if cli.env.mode == "hosted":
        cli.env.emulator.reset_counts()
    else:
        before = _engine_rows(cli)
    for args in commands:
        result = cli(*args, "--json")
        assert result.exit_code in (0, 1), (args, result.stderr)
    if cli.env.mode == "hosted":
        calls = cli.env.emulator.requests
        assert calls["get_item"] > 0
        assert set(+calls) <= {"get_store", "list_stores", "list_keys", "get_item"}, calls
    else:
        assert _engine_rows(cli) == before


async def _spill_and_damage(cli: Cli) -> None:
    big = Content.from_data(os.urandom(1_200_000), "application/octet-stream", name="dump.bin")
    async with _provider(cli) as history:
        await history.save_messages(
            "mixed",
            [Message("user", ["ok before"]), Message("tool", [big]), Message("user", ["after"])],
        )
        core = history._core  # damage message 2 as someone outside the provider could
        scope = await core.arun(core.scope("mixed"))
        key = "msg/000000000002"
        value = await core.arun(scope.encode(key, b"\x80 not json", tags={}))
        await core.arun(scope.store.set_item(key, value))


async def _damage_head(cli: Cli, session: str) -> None:
    async with _provider(cli) as history:
        core = history._core
        scope = await core.arun(core.scope(session))
        await core.arun(scope.store.set_item("head", {"first": 5, "next": 2}))


def test_a_damaged_session_does_not_hide_the_others(cli: Cli) -> None:
    asyncio.run(_seed(cli, {"ok": [Message("user", ["x"])], "bad": [Message("user", ["y"])]}))
    asyncio.run(_damage_head(cli, "bad"))
    rows = {r["session_id"]: r for r in cli.json("maf", "sessions")["sessions"]}
    assert rows["ok"]["message_count"] == 1 and rows["ok"]["error"] is None
    assert (
        rows["bad"]["message_count"] is None and "not a range of messages" in rows["bad"]["error"]
    )
    human = cli("maf", "sessions")
    assert human.exit_code == 0 and "cannot be read: " in human.stdout
    refused = cli("maf", "history", "bad")  # the session itself cannot be shown: one error line
    assert refused.exit_code == 1 and "delete_session()" in _one_error_line(refused.stderr)


def test_spilled_and_damaged_messages_are_shown_not_fatal(cli: Cli) -> None:
    asyncio.run(_spill_and_damage(cli))
    data = cli.json("maf", "history", "mixed")
    first, spilled, damaged = data["messages"]
    assert first["text"] == "ok before" and first["spilled"] is False
    assert spilled["spilled"] is True and spilled["error"] is None
    assert spilled["contents"] == ["data application/octet-stream dump.bin"]
    assert spilled["size"] < 10_000  # the item holds the reference, the bytes are elsewhere
    assert damaged["error"] and damaged["message"] is None and damaged["role"] is None
    human = cli("maf", "history", "mixed")
    assert human.exit_code == 0, human.stderr
    assert "(spilled)" in human.stdout and "cannot be read: " in human.stdout


SESSION = f"s{CLEAR}{TITLE}"


async def _plant(env: Any) -> None:
    async with FoundryHistoryProvider(**env.kwargs()) as history:
        text = f"hello{LINK}{MARKUP}"
        await history.save_messages(
            SESSION, [Message("user", [text], author_name=f"ann{TITLE}{MARKUP}")]
        )


@pytest.mark.skipif(os.name != "posix", reason="pseudo-terminals are POSIX")
@pytest.mark.parametrize("command", [["maf", "sessions"], ["maf", "history", SESSION]])
def test_stored_text_never_drives_the_terminal(store_env: Any, command: Sequence[str]) -> None:
    asyncio.run(_plant(store_env))
    options = Cli(store_env, CliRunner()).options()
    out = _on_a_terminal([*options, *command]).decode("utf-8", "replace")
    assert "\x1b]" not in out and CLEAR not in out and "\x07" not in out
    flat = _flat(out)
    assert "\\x1b[2J\\x1b]0;owned\\x07" in flat  # the session id, visibly escaped
    if command[1] == "history":
        assert "\\x1b]8;;https://evil.example/" in flat  # the message text
        assert MARKUP in flat  # markup shown as text
    assert "\x1b[" in out  # styled: it really rendered for a terminal
    document = json.loads(CliRunner().invoke(app, [*options, "--json", *command]).stdout)
    rows = document.get("sessions")
    assert (document["session_id"] if rows is None else rows[0]["session_id"]) == SESSION
