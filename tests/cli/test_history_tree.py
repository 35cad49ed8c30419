"""``history --tree`` and ``--format mermaid|dot``: a thread forked twice (``update_state`` and
time travel) is drawn with the parent links the saver stores, the head marked once."""

from __future__ import annotations

import re
from typing import Any

import pytest

from .conftest import Cli, build, config

BRANCH = re.compile(r"^(?P<lead>[│ ]*)(?P<glyph>├─ |└─ )?(?P<label>\S.*)$")


@pytest.fixture
def forked(cli: Cli) -> dict[str, Any]:
    """Thread ``f``: one run of ``a -> b``, an ``update_state`` fork from the checkpoint before
    ``a``, then a time-travel replay from the checkpoint before ``b``."""
    with cli.saver() as saver:
        graph = build(saver)
        graph.invoke({"steps": []}, config("f"))
        history = list(saver.list(config("f")))  # newest first: b, a, start, input
        before_a, before_b = history[2].config, history[1].config
        graph.update_state(before_a, {"steps": ["edited"]})
        graph.invoke(None, before_b)
        stored = list(saver.list(config("f")))
    parents = {
        c.config["configurable"]["checkpoint_id"]: (c.parent_config or {})
        .get("configurable", {})
        .get("checkpoint_id")
        for c in stored
    }
    forks = [p for p in set(parents.values()) if list(parents.values()).count(p) > 1]
    assert len(forks) == 2  # the setup really forked twice
    return {"parents": parents, "head": stored[0].config["configurable"]["checkpoint_id"]}


def _parse_text(lines: list[str]) -> dict[str, str | None]:
    """Parent links back from the drawn tree: a chain continues in its column; a ``├─``/``└─``
    line is a child of the last node drawn in the column the glyph stands in."""
    parents: dict[str, str | None] = {}
    last_at: dict[int, str] = {}
    for line in lines:
        match = BRANCH.match(line)
        assert match, line
        column = len(match["lead"]) + (3 if match["glyph"] else 0)
        node = match["label"].split()[0]
        if match["glyph"]:
            parents[node] = last_at[len(match["lead"])]
        else:
            parents[node] = last_at.get(column)
        last_at[column] = node
        for deeper in [c for c in last_at if c > column]:
            del last_at[deeper]
    return parents


def test_tree_in_the_terminal(cli: Cli, forked: dict[str, Any]) -> None:
    result = cli("history", "f", "--tree")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()[1:-1]  # between the backend line and the count
    assert len(lines) == len(forked["parents"])
    assert _parse_text(lines) == forked["parents"]
    [head] = [line for line in lines if line.endswith("← head")]
    assert forked["head"] in head
    assert sum(1 for line in lines if re.match(r"^[│ ]*[├└]─ ", line)) == 4
    assert any("· update" in line for line in lines)

    same = cli("history", "f", "--format", "tree")
    assert same.stdout == result.stdout


def test_mermaid_and_dot(cli: Cli, forked: dict[str, Any]) -> None:
    result = cli("history", "f", "--format", "mermaid")
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert text.startswith("flowchart TD\n")
    names = dict(re.findall(r'^  (c\d+)\["([^<"]+)<br/>', text, re.MULTILINE))
    assert sorted(names.values()) == sorted(forked["parents"])
    edges = re.findall(r"^  (c\d+) --> (c\d+)$", text, re.MULTILINE)
    drawn = {names[child]: names[parent] for parent, child in edges}
    expected = {k: v for k, v in forked["parents"].items() if v is not None}
    assert drawn == expected
    assert re.findall(r"^  class (c\d+) head$", text, re.MULTILINE) == [
        n for n, cid in names.items() if cid == forked["head"]
    ]

    graph = cli("history", "f", "--format", "dot").stdout
    assert graph.startswith("digraph checkpoints {") and graph.rstrip().endswith("}")
    labels = dict(re.findall(r'^  (c\d+) \[label="(\S+)  ', graph, re.MULTILINE))
    edges = re.findall(r"^  (c\d+) -> (c\d+);$", graph, re.MULTILINE)
    assert {labels[c]: labels[p] for p, c in edges} == expected


def test_interrupt_is_marked(cli: Cli) -> None:
    with cli.saver() as saver:
        build(saver, ask=True).invoke({"steps": []}, config("ask"))
    lines = cli("history", "ask", "--tree").stdout.splitlines()
    assert sum("[interrupt]" in line for line in lines) == 1
    assert any("pending write(s)]" in line for line in lines)


def test_json_wins_over_the_format(cli: Cli, forked: dict[str, Any]) -> None:
    data = cli.json("history", "f", "--format", "mermaid")
    assert {r["checkpoint_id"] for r in data["checkpoints"]} == set(forked["parents"])
