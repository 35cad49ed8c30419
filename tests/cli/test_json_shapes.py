"""Every command's ``--json`` document has exactly the fields ``docs/cli.md`` documents, and
``--json`` works before and after the command."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from agent_framework import Message
from langgraph.store.sqlite import SqliteStore

from foundry_checkpoint._memory import FoundryStore
from foundry_checkpoint_autogen import AutoGenStateStore
from foundry_checkpoint_maf import FoundryCheckpointStorage, FoundryHistoryProvider
from tests.maf import _workflows as wf

from .conftest import Cli, build, config

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
QUESTION = f"{wf.Question.__module__}:{wf.Question.__qualname__}"
BACKEND = {"kind", "location", "store_prefix", "spill"}


def _split(text: str) -> list[str]:
    """``a, b[c, d], e`` -> ``["a", "b[c, d]", "e"]`` (commas inside brackets kept)."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return [p for p in parts if p]


def documented() -> dict[str, dict[str, set[str] | None]]:
    """The JSON-shapes table of docs/cli.md: command -> field -> its own fields (or None)."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("<!-- json-shapes") :]
    shapes: dict[str, dict[str, set[str] | None]] = {}
    for match in re.finditer(r"^\| `([a-z -]+)` \| (.+) \|$", section, re.MULTILINE):
        fields: dict[str, set[str] | None] = {}
        for part in _split(match.group(2)):
            name, _, inner = part.partition("[")
            fields[name] = set(_split(inner.rstrip("]"))) if inner else None
        shapes[match.group(1)] = fields
    return shapes


def _check(command: str, data: Any, shapes: dict[str, dict[str, set[str] | None]]) -> int:
    """Compare ``data`` with the documented shape; returns how many nested objects it checked."""
    shape = shapes[command]
    assert set(data) == set(shape), (command, sorted(data))
    checked = 0
    if "backend" in shape:
        assert set(data["backend"]) == BACKEND
    for name, inner in shape.items():
        if inner is None:
            continue
        value = data[name]
        for item in value if isinstance(value, list) else [value]:
            assert set(item) == inner, (command, name, sorted(item))
            checked += 1
    return checked


async def _seed_maf(cli: Cli) -> None:
    kwargs = cli.env.kwargs()
    async with FoundryCheckpointStorage("conv-a", **kwargs) as storage:
        await wf.pipeline(storage).run("one")
    allowed = [wf.Question]
    async with FoundryCheckpointStorage("conv-b", **kwargs, allowed_checkpoint_types=allowed) as s:
        await wf.approval(s).run("report")
    async with FoundryHistoryProvider(**kwargs) as history:
        await history.save_messages("chat", [Message("user", ["hi"]), Message("assistant", ["ho"])])


def test_every_command_matches_its_documented_shape(cli: Cli, tmp_path: Path) -> None:
    shapes = documented()
    assert len(shapes) == 26
    with cli.saver() as saver:
        build(saver).invoke({"steps": []}, config("t1"))
        build(saver, ask=True).invoke({"steps": []}, config("t2"))
    asyncio.run(_seed_maf(cli))
    with AutoGenStateStore(**cli.env.kwargs(), keep_versions=None) as store:
        for n in range(3):
            store.save("demo", "agent", "counter/ann", {"count": n})
    with FoundryStore(**cli.env.kwargs()) as memory:
        memory.put(("users", "ann"), "prefs", {"theme": "dark"})
    with SqliteStore.from_conn_string(str(tmp_path / "memory.db")) as old:
        old.setup()
        old.put(("docs",), "d1", {"text": "hello"})

    runs: list[tuple[str, list[str]]] = [
        ("threads", ["threads"]),
        ("history", ["history", "t1"]),
        ("show", ["show", "t2"]),
        ("gc", ["gc", "--dry-run"]),
        ("copy", ["copy", "--from", "foundry", "--to", f"sqlite:{tmp_path / 'x.db'}"]),
        ("prune", ["prune", "t1"]),
        ("delete", ["delete", "t1"]),
        ("maf contexts", ["maf", "contexts"]),
        ("maf checkpoints", ["maf", "checkpoints", "conv-a"]),
        ("maf show", ["maf", "show", "conv-b", "--allow-type", QUESTION]),
        ("maf gc", ["maf", "gc", "--dry-run"]),
        ("maf prune", ["maf", "prune", "conv-a"]),
        ("maf delete", ["maf", "delete", "conv-b"]),
        ("maf sessions", ["maf", "sessions"]),
        ("maf history", ["maf", "history", "chat"]),
        ("autogen scopes", ["autogen", "scopes"]),
        ("autogen states", ["autogen", "states", "demo"]),
        ("autogen versions", ["autogen", "versions", "demo", "agent", "counter/ann"]),
        ("autogen show", ["autogen", "show", "demo", "agent", "counter/ann"]),
        ("autogen prune", ["autogen", "prune", "demo", "agent", "counter/ann"]),
        ("autogen delete", ["autogen", "delete", "demo", "agent", "counter/ann"]),
        ("memory namespaces", ["memory", "namespaces"]),
        ("memory items", ["memory", "items", "users"]),
        ("memory get", ["memory", "get", "users/ann", "prefs"]),
        ("memory delete", ["memory", "delete", "users/ann", "prefs"]),
        (
            "copy --store",
            [
                "copy",
                "--store",
                "--from",
                f"sqlite:{tmp_path / 'memory.db'}",
                "--to",
                "foundry-store",
            ],
        ),
    ]
    assert {name for name, _ in runs} == set(shapes)
    checked = 0
    for name, args in runs:
        result = cli(*args, "--json")  # after the command; before it in cli.json
        assert result.exit_code == 0, (name, result.stderr)
        checked += _check(name, json.loads(result.stdout), shapes)
    assert checked >= 15  # the nested shapes were seen, not just empty lists


def test_json_before_and_after_give_the_same_document(cli: Cli) -> None:
    with cli.saver() as saver:
        build(saver, ask=True).invoke({"steps": []}, config("t2"))
    for args in (["threads"], ["history", "t2"], ["show", "t2"], ["gc", "--dry-run"]):
        before = cli.json(*args)
        after = cli(*args, "--json")
        assert after.exit_code == 0, after.stderr
        assert json.loads(after.stdout) == before
