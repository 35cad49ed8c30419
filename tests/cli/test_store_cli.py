"""``foundry-checkpoint memory ...``: the FoundryStore's namespaces and items from a shell, in
local and hosted mode, with the JSON shapes docs/cli.md documents."""

from __future__ import annotations

from typing import Any

import pytest

from foundry_checkpoint._memory import FoundryStore
from foundry_checkpoint.cli._memory import format_namespace, parse_namespace
from foundry_checkpoint.errors import InvalidArgumentError

from .conftest import Cli
from .test_json_shapes import _check, documented

ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("users", "ann"), "prefs", {"theme": "dark", "kind": "pref"}),
    (("users", "ann"), "note-1", {"text": "likes tea", "kind": "note"}),
    (("users", "a/b%c"), "note-2", {"text": "slash and percent", "kind": "note"}),
    (("users", "bob", "work"), "role", {"title": "engineer", "kind": "fact"}),
    (("docs",), "d1", {"text": "\x1b]0;owned\x07 [link=https://x.example]y[/link]"}),
]


def store(cli: Cli, user: str = "alice") -> FoundryStore:
    return FoundryStore(**cli.env.kwargs(user=user))


@pytest.fixture
def memories(cli: Cli) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    with store(cli) as mine:
        for ns, key, value in ITEMS:
            mine.put(ns, key, value)
    return ITEMS


def test_namespace_syntax_round_trips_and_refuses_what_is_ambiguous() -> None:
    for labels in [("users", "a/b%c"), ("x%2F", "/", "%"), ("ünï", "名前")]:
        assert parse_namespace(format_namespace(labels)) == labels
        assert parse_namespace(f"{list(labels)!r}".replace("'", '"')) == labels
    assert parse_namespace("") == ()
    assert parse_namespace("a/%C3%BC") == ("a", "ü")
    for bad in ("a//b", "a/", "/a", "a/50%", "a/%zz", "a/%ff", '["a", ""]', '["a", 1]', "[x"):
        with pytest.raises(InvalidArgumentError):
            parse_namespace(bad)


def test_namespaces_lists_sorted_with_prefix_suffix_depth_and_paging(
    cli: Cli, memories: Any
) -> None:
    data = cli.json("memory", "namespaces")
    assert data["backend"]["store_prefix"] == prefix(cli)
    expected = sorted({ns for ns, _, _ in memories})
    assert data["namespaces"] == [list(ns) for ns in expected]
    with store(cli) as mine:
        assert data["namespaces"] == [list(ns) for ns in mine.list_namespaces()]
    users = cli.json("memory", "namespaces", "--prefix-ns", "users")["namespaces"]
    assert users == [list(ns) for ns in expected if ns[0] == "users"]
    assert cli.json("memory", "namespaces", "--max-depth", "1")["namespaces"] == [
        ["docs"],
        ["users"],
    ]
    assert cli.json("memory", "namespaces", "--suffix-ns", "work")["namespaces"] == [
        ["users", "bob", "work"]
    ]
    first = cli.json("memory", "namespaces", "--limit", "2")["namespaces"]
    rest = cli.json("memory", "namespaces", "--limit", "2", "--offset", "2")["namespaces"]
    assert first + rest == [list(ns) for ns in expected[:4]]

    shown = cli("memory", "namespaces", "--prefix-ns", '["users"]')
    assert shown.exit_code == 0, shown.stderr
    assert "users/a%2Fb%25c" in shown.stdout  # pasteable back as an argument
    assert "3 namespace(s)" in shown.stdout
    assert shown.stdout.splitlines()[0].startswith("backend ")


def test_items_search_a_namespace_with_filters_and_paging(cli: Cli, memories: Any) -> None:
    data = cli.json("memory", "items", "users")
    assert data["namespace"] == ["users"]
    got = {(tuple(i["namespace"]), i["key"]): i["value"] for i in data["items"]}
    assert got == {(ns, key): value for ns, key, value in memories if ns[0] == "users"}
    assert all(i["created_at"] and i["updated_at"] for i in data["items"])

    notes = cli.json("memory", "items", "users", "--filter", '{"kind": "note"}')["items"]
    assert sorted(i["key"] for i in notes) == ["note-1", "note-2"]
    not_notes = cli.json("memory", "items", "users", "--filter", '{"kind": {"$ne": "note"}}')
    assert sorted(i["key"] for i in not_notes["items"]) == ["prefs", "role"]
    exact = cli.json("memory", "items", "users/a%2Fb%25c")["items"]
    assert [(i["namespace"], i["key"]) for i in exact] == [(["users", "a/b%c"], "note-2")]
    page1 = cli.json("memory", "items", "users", "--limit", "2")["items"]
    page2 = cli.json("memory", "items", "users", "--limit", "2", "--offset", "2")["items"]
    assert {i["key"] for i in page1} | {i["key"] for i in page2} == {key for _, key in got}
    assert not {i["key"] for i in page1} & {i["key"] for i in page2}
    everything = cli.json("memory", "items", "", "--limit", "50")["items"]
    assert len(everything) == len(memories)

    shown = cli("memory", "items", "docs")
    assert shown.exit_code == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\\u001b]0;owned" in shown.stdout
    assert "[link=https://x.example]y[/link]" in shown.stdout  # never read as markup
    assert "1 item(s)" in shown.stdout

    for bad in (["--filter", "{nope"], ["--filter", "[1]"]):
        refused = cli("memory", "items", "users", *bad)
        assert refused.exit_code == 2 and refused.stderr.startswith("error: "), refused.stderr


def test_get_shows_the_value_and_a_missing_item_fails(cli: Cli, memories: Any) -> None:
    data = cli.json("memory", "get", "users/ann", "prefs")
    assert data["namespace"] == ["users", "ann"] and data["key"] == "prefs"
    assert data["value"] == {"theme": "dark", "kind": "pref"}
    same = cli.json("memory", "get", '["users", "a/b%c"]', "note-2")
    assert same["value"]["text"] == "slash and percent"

    shown = cli("memory", "get", "users/ann", "prefs")
    assert shown.exit_code == 0, shown.stderr
    assert '"theme": "dark"' in shown.stdout and "updated_at" in shown.stdout

    missing = cli("memory", "get", "users/ann", "nope")
    assert missing.exit_code == 1
    assert missing.stderr == (
        f"error: namespace 'users/ann' has no item 'nope' under prefix '{prefix(cli)}'\n"
    )
    bad = cli("memory", "get", "users//ann", "prefs")
    assert bad.exit_code == 2 and "empty label" in bad.stderr


def prefix(cli: Cli) -> str:
    return cli.env.prefix if cli.env.mode == "hosted" else "langgraph-store"


def test_delete_asks_then_deletes_one_item(cli: Cli, memories: Any) -> None:
    declined = cli("memory", "delete", "users/ann", "prefs", input="n\n")
    assert declined.exit_code == 1 and "aborted" in declined.stderr
    with store(cli) as mine:
        assert mine.get(("users", "ann"), "prefs") is not None
    done = cli.json("memory", "delete", "users/ann", "prefs")
    assert done["namespace"] == ["users", "ann"] and done["key"] == "prefs"
    assert done["deleted"] is True
    with store(cli) as mine:
        assert mine.get(("users", "ann"), "prefs") is None
        assert mine.get(("users", "ann"), "note-1") is not None
    again = cli("memory", "delete", "users/ann", "prefs", "--yes")
    assert again.exit_code == 1 and "has no item 'prefs'" in again.stderr
    shown = cli("memory", "delete", "docs", "d1", "--yes")
    assert shown.exit_code == 0 and "deleted item 'd1' of namespace 'docs'" in shown.stdout


def test_each_user_sees_only_their_own_memory(cli: Cli, memories: Any) -> None:
    with store(cli, user="bob") as theirs:
        theirs.put(("users", "ann"), "prefs", {"theme": "light"})
    assert cli.json("memory", "namespaces", user="bob")["namespaces"] == [["users", "ann"]]
    bobs = cli.json("memory", "get", "users/ann", "prefs", user="bob")
    assert bobs["value"] == {"theme": "light"}
    assert cli.json("memory", "get", "users/ann", "prefs")["value"]["theme"] == "dark"
    assert cli("memory", "get", "docs", "d1", user="bob").exit_code == 1


def test_an_empty_store_says_so(cli: Cli) -> None:
    assert cli.json("memory", "namespaces")["namespaces"] == []
    assert cli.json("memory", "items", "")["items"] == []
    shown = cli("memory", "namespaces")
    assert shown.exit_code == 0 and "no namespaces" in shown.stdout


def test_json_documents_match_docs_cli_md(cli: Cli, memories: Any) -> None:
    shapes = documented()
    runs = [
        ("memory namespaces", ["memory", "namespaces"]),
        ("memory items", ["memory", "items", "users"]),
        ("memory get", ["memory", "get", "users/ann", "prefs"]),
        ("memory delete", ["memory", "delete", "users/ann", "prefs"]),
    ]
    checked = 0
    for name, args in runs:
        checked += _check(name, cli.json(*args), shapes)
    assert checked >= 1  # the items' own fields were compared
