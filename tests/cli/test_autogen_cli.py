"""``foundry-checkpoint autogen ...``: AutoGen states seen, pruned and deleted from the shell,
in local mode and against the emulator (``store_env``)."""

from __future__ import annotations

from typing import Any

import pytest

from foundry_checkpoint_autogen import AutoGenStateStore

from .conftest import Cli

AGENT = "counter/ann"


def _store(cli: Cli, user: str = "alice") -> AutoGenStateStore:
    return AutoGenStateStore(**cli.env.kwargs(user=user), keep_versions=None)


def _one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert lines[0].startswith("error: "), text
    return lines[0]


@pytest.fixture
def seeded(cli: Cli) -> dict[str, Any]:
    with _store(cli) as store:
        versions = [store.save("demo", "agent", AGENT, {"count": n}) for n in range(1, 4)]
        store.save("demo", "team", "writers", {"type": "TeamState", "agent_states": {}})
        store.save("other", "runtime", "worker-1", {"agents": {AGENT: {"count": 3}}})
    return {"versions": versions}


def test_scopes_states_and_versions(cli: Cli, seeded: dict[str, Any]) -> None:
    data = cli.json("autogen", "scopes")
    rows = {r["scope"]: r for r in data["scopes"]}
    assert set(rows) == {"demo", "other"}
    assert (rows["demo"]["states"], rows["demo"]["versions"]) == (2, 4)
    assert rows["demo"]["kinds"] == ["agent", "team"]

    states = cli.json("autogen", "states", "demo")["states"]
    assert [(s["kind"], s["name"], s["versions"]) for s in states] == [
        ("agent", AGENT, 3),
        ("team", "writers", 1),
    ]
    assert states[0]["latest_version"] == seeded["versions"][-1]
    agents = cli.json("autogen", "states", "demo", "--kind", "agent")["states"]
    assert [s["name"] for s in agents] == [AGENT]

    listed = cli.json("autogen", "versions", "demo", "agent", AGENT)["versions"]
    assert [v["version"] for v in listed] == seeded["versions"]

    human = cli("autogen", "states", "demo")
    assert human.exit_code == 0, human.stderr
    assert AGENT in human.stdout and "2 state(s) in scope 'demo'" in human.stdout

    assert cli.json("autogen", "scopes", user="bob")["scopes"] == []


def test_show_latest_and_a_version(cli: Cli, seeded: dict[str, Any]) -> None:
    latest = cli.json("autogen", "show", "demo", "agent", AGENT)
    assert latest["state"] == {"count": 3} and latest["version"] == seeded["versions"][-1]
    first = cli.json("autogen", "show", "demo", "agent", AGENT, "--version", seeded["versions"][0])
    assert first["state"] == {"count": 1}
    human = cli("autogen", "show", "other", "runtime", "worker-1")
    assert human.exit_code == 0 and "agents" in human.stdout
    missing = cli("autogen", "show", "demo", "agent", "nobody")
    assert missing.exit_code == 1 and "'nobody'" in _one_error_line(missing.stderr)


def test_prune_and_delete(cli: Cli, seeded: dict[str, Any]) -> None:
    pruned = cli.json("autogen", "prune", "demo", "agent", AGENT, "--keep", "2")
    assert (pruned["before"], pruned["after"], pruned["deleted"]) == (3, 2, 1)
    with _store(cli) as store:
        assert [v.version for v in store.versions("demo", "agent", AGENT)] == seeded["versions"][1:]

    refused = cli("autogen", "delete", "demo", "team", "writers", input="n\n")
    assert refused.exit_code == 1 and "aborted" in _one_error_line(refused.stderr)
    done = cli("autogen", "delete", "demo", "team", "writers", "--yes")
    assert done.exit_code == 0 and "deleted 1 version(s)" in done.stdout
    assert [s["kind"] for s in cli.json("autogen", "states", "demo")["states"]] == ["agent"]
    again = cli("autogen", "delete", "demo", "team", "writers", "--yes")
    assert again.exit_code == 1

    bad = cli("autogen", "prune", "demo", "agent", AGENT, "--keep", "0")
    assert bad.exit_code == 2 and "--keep" in _one_error_line(bad.stderr)
