"""Every sample script runs (as a user would: a subprocess) and prints what it promises."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint.emulator import FoundryEmulator

from .conftest import SAMPLES


def run(name: str, env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(SAMPLES / name)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line.strip() for line in done.stdout.splitlines()]


def test_every_script_is_tested() -> None:
    tested = {
        "quickstart.py",
        "langgraph_human_in_the_loop.py",
        "langgraph_large_state.py",
        "langgraph_memory.py",
        "maf_workflow_resume.py",
        "maf_human_in_the_loop.py",
        "hosted_offline.py",
        "hosted_agents_offline.py",
        "autogen_grpc_failover.py",
    }
    assert {p.name for p in SAMPLES.glob("*.py")} == tested


def test_every_script_has_a_header_docstring() -> None:
    for path in SAMPLES.glob("*.py"):
        head = path.read_text(encoding="utf-8").lstrip()
        assert head.startswith('"""'), path.name
        assert "shows" in head.split('"""')[1], path.name


def test_quickstart(sample_env: dict[str, str]) -> None:
    out = run("quickstart.py", sample_env)
    assert "crashed: simulated crash in 'review'" in out
    assert "saved progress: ['plan', 'research', 'draft'], next: ['review']" in out
    assert "finished: ['plan', 'research', 'draft', 'review', 'publish']" in out
    assert out.count("running plan") == 1  # resumed, not restarted
    assert any(line.startswith("FoundryCheckpointer(backend='local-sqlite'") for line in out)


def test_langgraph_human_in_the_loop(sample_env: dict[str, str], tmp_path: Path) -> None:
    out = run("langgraph_human_in_the_loop.py", sample_env)
    reply = "Refund of 42 EUR approved; it reaches you in 3 days."
    assert out[:4] == [
        f"[process 1] drafted: {reply}",
        "[process 1] paused, waiting for a human: Send this reply?",
        "[process 2] pending question: Send this reply? (next node: approve)",
        f"[process 2] resumed with 'yes'; sent: {reply}",
    ]
    assert out[4] == "[process 2] checkpoints in the thread: 5"
    assert (tmp_path / "state" / "foundry_checkpoint" / "state.sqlite3").is_file()


def test_langgraph_large_state(sample_env: dict[str, str]) -> None:
    out = run("langgraph_large_state.py", sample_env)
    assert "graph finished: 768 pages" in out
    checkpoints = int(next(x for x in out if x.startswith("checkpoints written:")).split()[-1])
    match = next(
        m
        for x in out
        if (m := re.match(r"blobs in the local spill folder: (\d+) \(([\d,]+) bytes\)", x))
    )
    blobs, stored = int(match.group(1)), int(match.group(2).replace(",", ""))
    assert 1 <= blobs < checkpoints  # the 3 MB value is not stored once per checkpoint
    assert 3 * 1024 * 1024 <= stored <= blobs * (3 * 1024 * 1024 + 4096)
    assert "read back: 3,145,728 bytes, intact: True" in out
    assert out[-1] == "after delete_thread: 0 blobs"


def test_langgraph_memory(sample_env: dict[str, str], tmp_path: Path) -> None:
    out = run("langgraph_memory.py", sample_env)
    assert out == [
        "[process 1] alice (thread alice-monday): noted seat = window",
        "[process 1] alice (thread alice-monday): noted meal = vegetarian",
        "[process 1] bob (thread bob-monday): noted seat = aisle",
        "[process 2] alice (thread alice-friday): booked: meal vegetarian, seat window",
        "[process 2] bob (thread bob-friday): booked: seat aisle",
        "[process 2] messages in thread alice-friday: 2",
        "[process 2] namespaces remembered: "
        "[('users', 'alice', 'preferences'), ('users', 'bob', 'preferences')]",
    ]
    # threads and memories in the one embedded store of the local default
    assert (tmp_path / "state" / "foundry_checkpoint" / "state.sqlite3").is_file()


def test_maf_workflow_resume(sample_env: dict[str, str]) -> None:
    out = run("maf_workflow_resume.py", sample_env)
    assert "crashed: simulated crash in 'review'" in out
    assert out.count("running plan") == 1 and out.count("running draft") == 1
    assert "finished: start > plan > draft > review > publish" in out
    assert any(re.fullmatch(r"3 checkpoints saved; resuming from the latest, \S+", x) for x in out)


def test_maf_human_in_the_loop(sample_env: dict[str, str]) -> None:
    out = run("maf_human_in_the_loop.py", sample_env)
    assert out == [
        "[process 1] waiting for a human: Approve taxi receipt, 38 EUR?",
        "[process 2] pending request found: Approve taxi receipt, 38 EUR?",
        "[process 2] notified: Approve taxi receipt, 38 EUR? -> approved",
    ]


@pytest.mark.emulator
def test_hosted_offline(sample_env: dict[str, str], tmp_path: Path) -> None:
    out = run("hosted_offline.py", sample_env)
    assert "backend: hosted" in out
    assert "saved progress: ['plan', 'research', 'draft']" in out
    assert "finished: ['plan', 'research', 'draft', 'review', 'publish']" in out
    assert "bob sees a checkpoint: False" in out
    served = next(x for x in out if x.startswith("requests served:"))
    match = re.match(
        r"requests served: (\d+) \(put_item (\d+), get_item (\d+), list_keys (\d+)\)", served
    )
    assert match and int(match.group(2)) >= 7  # at least one write per checkpoint went over HTTPS
    # hosted mode: nothing was written to the local embedded store
    assert not (tmp_path / "state" / "foundry_checkpoint" / "state.sqlite3").exists()


@pytest.mark.emulator
def test_hosted_agents_offline(sample_env: dict[str, str]) -> None:
    out = run("hosted_agents_offline.py", sample_env)
    assert out[:10] == [
        "LangGraph graph on the Invocations protocol:",
        "[alice] thread 'main': agent: turn 1: noted 'hello, I am alice'",
        "[bob] thread 'main': agent: turn 1: noted 'hello, I am bob'",
        "[alice] paused: Approve the refund in 'refund order 17'?",
        "server killed; a new process starts",
        "[alice] still pending: Approve the refund in 'refund order 17'?",
        "[alice] resumed: agent: refund approved",
        "[bob] thread 'main': "
        "['user: hello, I am bob', \"agent: turn 1: noted 'hello, I am bob'\"]",
        "MAF workflow on ResponsesHostServer:",
        "[alice] conversation 'conv_expenses' waits for a human: Approve taxi 38 EUR (claim 1)?",
    ]
    assert out[10:16] == [
        "[bob] conversation 'conv_expenses' waits for a human: Approve hotel 120 EUR (claim 1)?",
        "server killed; a new process starts",
        "[alice] answered: notified: Approve taxi 38 EUR (claim 1)? -> approved",
        "[bob] answered: notified: Approve hotel 120 EUR (claim 1)? -> rejected",
        "[alice] next: Approve train 20 EUR (claim 2)?",
        "MAF chat agent on ResponsesHostServer:",
    ]
    assert out[16:22] == [
        "[alice] conversation 'conv_notes': 1 notes: buy milk",
        "[bob] conversation 'conv_notes': 1 notes: call the bank",
        "server killed; a new process starts",
        "[alice] conversation 'conv_notes': 2 notes: buy milk; book a table",
        "[bob] conversation 'conv_notes': 2 notes: call the bank; pay rent",
        out[21],
    ]
    assert re.fullmatch(r"state-store requests served: \d+", out[21])


def test_autogen_grpc_failover(sample_env: dict[str, str]) -> None:
    out = run("autogen_grpc_failover.py", sample_env)
    assert out == [
        "1) worker 1 hosts the counter agents:",
        "worker 1 replied: count=1 history=['a']",
        "worker 1 replied: count=2 history=['a', 'b']",
        "worker 1 replied: count=3 history=['a', 'b', 'c']",
        "worker 1 save_state(): {'counter/ann': {'history': ['a', 'b', 'c']}}",
        "2) worker 1 stopped",
        "3) worker 2 (a new runtime and a new store object) takes the agent type over:",
        "worker 2 replied: count=4 history=['a', 'b', 'c', 'd']",
        "versions stored for counter/ann: 4",
    ]


def _cli(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "foundry_checkpoint.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(params=["local", "hosted"])
def stored_env(
    request: pytest.FixtureRequest, sample_env: dict[str, str]
) -> Iterator[dict[str, str]]:
    """The samples' environment on the local default, or as a hosted agent on a fresh emulator
    (the platform's variables and a managed identity the emulator serves: no code changes)."""
    if request.param == "local":
        yield sample_env
        return
    with FoundryEmulator() as emu:
        yield {**sample_env, **emu.agent_environment()}


def test_cli_lists_what_the_samples_stored(stored_env: dict[str, str]) -> None:
    """After the quickstart and the MAF sample (run twice: each starts clean), the command line
    on the same default store lists the thread and the context they stored, locally and
    through the emulator."""
    sample_env = stored_env
    for _ in range(2):
        run("quickstart.py", sample_env)
    run("maf_workflow_resume.py", sample_env)
    listing = _cli(sample_env, "threads", "--json")
    hosted = "FOUNDRY_HOSTING_ENVIRONMENT" in sample_env
    assert listing["backend"]["kind"] == ("hosted" if hosted else "local-sqlite")
    threads = listing["threads"]
    assert [t["thread_id"] for t in threads] == ["demo-thread"]
    history = _cli(sample_env, "--json", "history", "demo-thread")["checkpoints"]
    assert history[0]["checkpoint_id"] == threads[0]["checkpoint_id"]
    assert len(history) == 7  # one run's checkpoints: the second run deleted the first's
    contexts = _cli(sample_env, "maf", "contexts", "--json")["contexts"]
    assert [(c["context_id"], c["workflows"]) for c in contexts] == [("conv-42", ["report"])]
    listed = _cli(sample_env, "maf", "checkpoints", "conv-42", "--json")["checkpoints"]
    assert len(listed) == contexts[0]["checkpoints"] and listed[-1]["latest"] is True
