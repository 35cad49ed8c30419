"""``foundry-checkpoint maf ...``: MAF contexts seen, pruned and deleted from the shell, in local
mode and against the emulator (``store_env``), seeded by real MAF workflows."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint_maf import FoundryCheckpointStorage
from tests.maf import _workflows as wf

from .conftest import Cli

QUESTION = f"{wf.Question.__module__}:{wf.Question.__qualname__}"


def _one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert lines[0].startswith("error: "), text
    return lines[0]


def _storage(cli: Cli, context: str | None, **options: Any) -> FoundryCheckpointStorage:
    return FoundryCheckpointStorage(context, **cli.env.kwargs(**options))


async def _seed(cli: Cli) -> None:
    async with _storage(cli, "conv-a") as storage:
        await wf.pipeline(storage).run("one")
        await wf.pipeline(storage).run("two")
    async with _storage(cli, "conv-b", allowed_checkpoint_types=[wf.Question]) as storage:
        await wf.approval(storage).run("report")


async def _loaded(cli: Cli, context: str, workflow: str) -> list[Any]:
    """Every checkpoint of ``workflow``, read and decoded through MAF's own protocol."""
    async with _storage(cli, context, allowed_checkpoint_types=[wf.Question]) as storage:
        return await storage.list_checkpoints(workflow_name=workflow)


@pytest.fixture
def seeded(cli: Cli) -> dict[str, list[Any]]:
    asyncio.run(_seed(cli))
    return {
        "conv-a": asyncio.run(_loaded(cli, "conv-a", wf.PIPELINE)),
        "conv-b": asyncio.run(_loaded(cli, "conv-b", wf.APPROVAL)),
    }


def test_contexts_and_checkpoints_match_the_store(cli: Cli, seeded: dict[str, list[Any]]) -> None:
    data = cli.json("maf", "contexts")
    assert data["backend"]["store_prefix"] == (
        cli.env.prefix if cli.env.mode == "hosted" else "maf"
    )
    rows = {r["context_id"]: r for r in data["contexts"]}
    assert set(rows) == {"conv-a", "conv-b"}
    for context, loaded in seeded.items():
        assert rows[context]["checkpoints"] == len(loaded)
        assert rows[context]["latest"]["checkpoint_id"] == loaded[-1].checkpoint_id
    assert rows["conv-a"]["workflows"] == [wf.PIPELINE]

    listed = cli.json("maf", "checkpoints", "conv-a")
    expected = [
        (c.checkpoint_id, c.workflow_name, c.previous_checkpoint_id) for c in seeded["conv-a"]
    ]
    got = [
        (r["checkpoint_id"], r["workflow_name"], r["previous_checkpoint_id"])
        for r in listed["checkpoints"]
    ]
    assert got == expected  # oldest first, with the lineage MAF wrote
    assert [r["latest"] for r in listed["checkpoints"]] == [False] * (len(got) - 1) + [True]

    human = cli("maf", "checkpoints", "conv-a")
    assert human.exit_code == 0, human.stderr
    assert f"workflow {wf.PIPELINE}" in human.stdout
    assert f"{seeded['conv-a'][-1].checkpoint_id} (latest)" in human.stdout
    assert f"{len(expected)} checkpoint(s) in context 'conv-a'" in human.stdout

    # another user sees none of it
    assert cli.json("maf", "contexts", user="bob")["contexts"] == []


def test_listing_does_not_decode(cli: Cli, seeded: dict[str, list[Any]]) -> None:
    """A checkpoint holding a type the reader does not allow is skipped by MAF's listing (which
    decodes) but still listed and counted by the CLI (which reads keys only)."""

    async def ids() -> list[str]:
        async with _storage(cli, "conv-b") as storage:
            return await storage.list_checkpoint_ids(workflow_name=wf.APPROVAL)

    decodable = asyncio.run(ids())
    listed = cli.json("maf", "checkpoints", "conv-b")["checkpoints"]
    assert len(listed) == len(seeded["conv-b"]) > len(decodable)


def test_show_state_events_and_size(cli: Cli, seeded: dict[str, list[Any]]) -> None:
    refused = cli("maf", "show", "conv-b")
    assert refused.exit_code == 1 and refused.stdout == ""
    assert "is not an allowed checkpoint type" in _one_error_line(refused.stderr)
    assert "--allow-type" in refused.stderr

    data = cli.json("maf", "show", "conv-b", "--allow-type", QUESTION)
    latest = seeded["conv-b"][-1]
    assert data["checkpoint_id"] == latest.checkpoint_id
    assert data["workflow_name"] == wf.APPROVAL
    assert data["spilled"] is False and data["size"] > 0
    [event] = data["pending_request_info_events"]
    assert event["data_type"] == "Question"
    assert event["request_id"] in latest.pending_request_info_events

    first = seeded["conv-a"][0]
    named = cli.json("maf", "show", "conv-a", first.checkpoint_id)
    assert named["checkpoint_id"] == first.checkpoint_id
    assert named["previous_checkpoint_id"] is None
    assert named["pending_request_info_events"] == []

    human = cli("maf", "show", "conv-a")
    assert human.exit_code == 0, human.stderr
    assert seeded["conv-a"][-1].checkpoint_id in human.stdout
    assert "bytes stored (inline)" in human.stdout

    missing = cli("maf", "show", "conv-a", "no-such-checkpoint")
    assert missing.exit_code == 1 and "no-such-checkpoint" in _one_error_line(missing.stderr)
    unknown = cli("maf", "show", "nope")
    assert unknown.exit_code == 1 and "'nope'" in _one_error_line(unknown.stderr)


def test_prune_delete_and_gc(cli: Cli, seeded: dict[str, list[Any]]) -> None:
    count = len(seeded["conv-a"])
    assert count > 2
    data = cli.json("maf", "prune", "conv-a", "--keep", "2")
    assert data == {
        "backend": data["backend"],
        "context_id": "conv-a",
        "before": count,
        "after": 2,
        "deleted": count - 2,
    }
    kept = [c.checkpoint_id for c in asyncio.run(_loaded(cli, "conv-a", wf.PIPELINE))]
    assert kept == [c.checkpoint_id for c in seeded["conv-a"][-2:]]

    one = cli.json("maf", "delete", "conv-a", kept[0], "--yes")
    assert one["deleted"] == 1 and one["checkpoint_id"] == kept[0]

    refused = cli("maf", "delete", "conv-b", input="n\n")
    assert refused.exit_code == 1 and "aborted" in _one_error_line(refused.stderr)
    done = cli("maf", "delete", "conv-b", "--yes")
    assert done.exit_code == 0, done.stderr
    assert "deleted context 'conv-b'" in done.stdout
    assert [r["context_id"] for r in cli.json("maf", "contexts")["contexts"]] == ["conv-a"]
    again = cli("maf", "delete", "conv-b", "--yes")
    assert again.exit_code == 1 and "conv-b" in _one_error_line(again.stderr)

    bad = cli("maf", "prune", "conv-a", "--keep", "0")
    assert bad.exit_code == 2 and "--keep" in _one_error_line(bad.stderr)

    report = cli.json("maf", "gc", "--dry-run")
    assert report["dry_run"] is True and report["deleted"] == []


def test_json_before_or_after_the_command(cli: Cli, seeded: dict[str, list[Any]]) -> None:
    for args in (
        ["maf", "contexts"],
        ["maf", "checkpoints", "conv-a"],
        ["maf", "show", "conv-a"],
        ["maf", "gc", "--dry-run"],
    ):
        before = cli("--json", *args)
        after = cli(*args, "--json")
        group = cli("maf", "--json", *args[1:])
        assert before.exit_code == after.exit_code == group.exit_code == 0, args
        assert json.loads(before.stdout) == json.loads(after.stdout) == json.loads(group.stdout)


def test_the_default_context_is_named_by_an_empty_id(cli: Cli) -> None:
    """A storage made without ``context_id`` writes to the prefix's default store; ``''`` names
    it on the command line (a context id is never empty)."""

    async def seed() -> list[Any]:
        async with _storage(cli, None) as storage:
            await wf.pipeline(storage).run("one")
            return await storage.list_checkpoints(workflow_name=wf.PIPELINE)

    loaded = asyncio.run(seed())
    assert len(loaded) > 1
    assert [r["context_id"] for r in cli.json("maf", "contexts")["contexts"]] == [None]
    assert "(default: '')" in cli("maf", "contexts").stdout

    listed = cli.json("maf", "checkpoints", "")
    assert listed["context_id"] is None
    assert [r["checkpoint_id"] for r in listed["checkpoints"]] == [c.checkpoint_id for c in loaded]
    human = cli("maf", "checkpoints", "")
    assert f"{len(loaded)} checkpoint(s) in the default context" in human.stdout
    shown = cli.json("maf", "show", "")
    assert (shown["context_id"], shown["checkpoint_id"]) == (None, loaded[-1].checkpoint_id)
    assert cli.json("maf", "prune", "")["after"] == 1

    done = cli("maf", "delete", "", "--yes")
    assert done.exit_code == 0, done.stderr
    assert "deleted the default context" in done.stdout
    assert cli.json("maf", "contexts")["contexts"] == []
    gone = cli("maf", "checkpoints", "")
    assert gone.exit_code == 1
    assert "the default context has no checkpoints" in _one_error_line(gone.stderr)


def test_a_process_that_never_ran_a_workflow_shows_its_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shell is such a process: a checkpoint's framework classes (a ``WorkflowMessage``
    among them) resolve there as in the process that wrote it, with nothing to allow."""
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))

    async def seed() -> str:
        async with FoundryCheckpointStorage("conv-a") as storage:
            await wf.pipeline(storage).run("one")
            return (await storage.list_checkpoints(workflow_name=wf.PIPELINE))[0].checkpoint_id

    first = asyncio.run(seed())
    shell = [sys.executable, "-m", "foundry_checkpoint.cli", "--json", "maf", "show", "conv-a"]
    shown = subprocess.run([*shell, first], capture_output=True, text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["checkpoint_id"] == first
