"""``copy --store`` and :func:`~foundry_checkpoint.migrate.copy_store`: LangGraph long-term memory
moved from SqliteStore and PostgresStore (a throw-away local server) into FoundryStore, in local
and hosted mode: every item kept (namespace, key, value), TTLs kept, a re-run copies nothing."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from foundry_checkpoint._memory import FoundryStore, _layout
from foundry_checkpoint.errors import InvalidArgumentError
from foundry_checkpoint.migrate import STORE_PAGE, acopy_store, copy_store

from .conftest import Cli

#: Namespaces of the source: nested, with '/' and '%' in labels, non-ASCII, one deep.
NAMESPACES: list[tuple[str, ...]] = [
    ("users", "ann"),
    ("users", "ann", "notes"),
    ("users", "a/b%c"),
    ("docs",),
    ("ünï", "名前"),
    ("a", "b", "c", "d", "e", "f", "g", "h", "i"),
]


def fill(store: Any, per_namespace: int = 40) -> dict[tuple[tuple[str, ...], str], Any]:
    """Items in every namespace (more than one source page in all); every third has a TTL of
    30 minutes. Returns what was written."""
    written: dict[tuple[tuple[str, ...], str], Any] = {}
    for n, ns in enumerate(NAMESPACES):
        for i in range(per_namespace):
            value = {"n": i, "ns": n, "text": f"memory {i} of {'/'.join(ns)}", "tags": [i, "x"]}
            store.put(ns, f"k{i}", value, ttl=30 if i % 3 == 0 else None)
            written[(ns, f"k{i}")] = value
    return written


def everything(store: Any) -> dict[tuple[tuple[str, ...], str], Any]:
    out: dict[tuple[tuple[str, ...], str], Any] = {}
    offset = 0
    while True:
        page = store.search((), limit=100, offset=offset)
        out.update({(tuple(i.namespace), i.key): i.value for i in page})
        if len(page) < 100:
            return out
        offset += 100


@pytest.fixture
def sqlite_source(tmp_path: Path) -> Iterator[tuple[Path, dict[tuple[tuple[str, ...], str], Any]]]:
    path = tmp_path / "memory.db"
    with SqliteStore.from_conn_string(str(path)) as old:
        old.setup()
        yield path, fill(old)


def test_cli_copies_every_item_keeps_ttls_and_a_rerun_copies_nothing(
    cli: Cli, sqlite_source: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, written = sqlite_source
    assert len(written) > 2 * STORE_PAGE  # several pages
    first = cli.json("copy", "--store", "--from", f"sqlite:{path}", "--to", "foundry-store")
    assert first == {
        "from": f"sqlite:{path}",
        "to": "foundry-store",
        "namespace_prefix": [],
        "items": len(written),
        "copied": len(written),
        "already_there": 0,
    }
    with FoundryStore(**cli.env.kwargs()) as new:
        assert everything(new) == written
        assert sorted(new.list_namespaces()) == sorted(NAMESPACES)

    again = cli("copy", "--store", "--from", f"sqlite:{path}", "--to", "foundry-store")
    assert again.exit_code == 0, again.stderr
    assert again.stdout.strip() == (
        f"copied 0 item(s) of {len(written)} from sqlite:{path} to foundry-store; "
        f"{len(written)} already there (left alone)"
    )

    later = _layout.now() + 31 * 60  # past the 30-minute TTLs, which count from the copy
    monkeypatch.setattr(_layout, "now", lambda: later)
    with FoundryStore(**cli.env.kwargs()) as new:
        left = everything(new)
    assert left == {k: v for k, v in written.items() if v["n"] % 3 != 0}


def test_the_target_keeps_what_it_has_and_expired_items_stay_behind(
    cli: Cli, sqlite_source: Any
) -> None:
    path, written = sqlite_source
    with sqlite3.connect(path) as conn:  # expired, not swept yet: SqliteStore's own rule
        conn.execute(
            "UPDATE store SET expires_at = '2000-01-01 00:00:00' WHERE prefix = ? AND key = ?",
            ("docs", "k0"),
        )
    with FoundryStore(**cli.env.kwargs()) as new:
        new.put(("users", "ann"), "k1", {"changed": "in the new store"})
    done = cli.json("copy", "--store", "--from", f"sqlite:{path}", "--to", "foundry-store")
    assert done["items"] == len(written) - 1
    assert done["copied"] == len(written) - 2 and done["already_there"] == 1
    with FoundryStore(**cli.env.kwargs()) as new:
        kept, gone, copied = (
            new.get(*ref)
            for ref in ((("users", "ann"), "k1"), (("docs",), "k0"), (("docs",), "k1"))
        )
        assert kept is not None and kept.value == {"changed": "in the new store"}
        assert gone is None
        assert copied is not None and copied.value == written[(("docs",), "k1")]


def test_prefix_ns_copies_one_subtree_and_stores_copy_between_prefixes(
    cli: Cli, sqlite_source: Any
) -> None:
    path, written = sqlite_source
    under = cli.json(
        "copy", "--store", "--from", f"sqlite:{path}", "--to", "foundry-store",
        "--prefix-ns", "users/ann",
    )  # fmt: skip
    mine = {k: v for k, v in written.items() if k[0][:2] == ("users", "ann")}
    assert under["namespace_prefix"] == ["users", "ann"] and under["copied"] == len(mine)
    with FoundryStore(**cli.env.kwargs()) as new:
        assert everything(new) == mine

    other = f"{cli.env.prefix}-copy"
    moved = cli.json("copy", "--store", "--from", "foundry-store", "--to", f"foundry-store:{other}")
    assert moved["copied"] == len(mine)
    with FoundryStore(**cli.env.kwargs(store_prefix=other)) as copy:
        assert everything(copy) == mine

    back = path.parent / "back.db"  # and back into a new SQLite file, private to its owner
    exported = cli.json("copy", "--store", "--from", "foundry-store", "--to", f"sqlite:{back}")
    assert exported["copied"] == len(mine)
    assert back.stat().st_mode & 0o777 == 0o600
    with SqliteStore.from_conn_string(str(back)) as sqlite_copy:
        assert everything(sqlite_copy) == mine


def test_bad_store_copies_are_refused_before_anything_is_read(cli: Cli, tmp_path: Path) -> None:
    cases = [
        (["--from", "foundry", "--to", "foundry-store"], "unknown store URI 'foundry'"),
        (["--from", "foundry-store", "--to", "foundry-store"], "name the same store"),
        (["--from", f"sqlite:{tmp_path / 'x.db'}", "--to", "foundry-store", "--thread", "t"], ""),
        (["--from", "foundry-store", "--to", "foundry-store:b", "--prefix-ns", "a//b"], "empty"),
    ]
    for args, said in cases:
        refused = cli("copy", "--store", *args)
        assert refused.exit_code == 2, (args, refused.stderr)
        assert refused.stderr.startswith("error: ") and said in refused.stderr
    missing = cli(
        "copy", "--store", "--from", f"sqlite:{tmp_path / 'x.db'}", "--to", "foundry-store"
    )
    assert missing.exit_code == 1 and "does not exist" in missing.stderr
    without = cli("copy", "--from", "foundry-store", "--to", "foundry")
    assert without.exit_code == 2 and "copy stores with --store" in without.stderr
    assert cli("copy", "--from", "foundry", "--to", "x:y", "--prefix-ns", "a").exit_code == 2


def test_copy_store_api_progress_async_twin_and_its_refusals(store_env: Any) -> None:
    old = InMemoryStore()
    written = {}
    for i in range(STORE_PAGE + 5):
        old.put(("docs", str(i % 3)), f"d{i}", {"i": i})
        written[(("docs", str(i % 3)), f"d{i}")] = {"i": i}
    seen: list[tuple[int, int]] = []
    with FoundryStore(**store_env.kwargs()) as new:
        assert copy_store(old, new, progress=lambda a, b: seen.append((a, b))) == len(written)
        assert seen == [(STORE_PAGE, STORE_PAGE), (len(written), len(written))]
        assert everything(new) == written
        assert asyncio.run(acopy_store(old, new)) == 0
        assert copy_store(old, new, namespace_prefix=("docs", "1")) == 0
        with pytest.raises(InvalidArgumentError, match="source is target"):
            copy_store(new, new)
        with pytest.raises(InvalidArgumentError, match="namespace_prefix"):
            copy_store(old, new, namespace_prefix="docs")
    timed = InMemoryStore()
    with SqliteStore.from_conn_string(":memory:") as sqlite_old:
        sqlite_old.setup()
        sqlite_old.put(("a",), "k", {"v": 1}, ttl=5)
        with pytest.raises(InvalidArgumentError, match="does not support TTLs"):
            copy_store(sqlite_old, timed)
    assert everything(timed) == {}


@pytest.fixture(scope="module")
def postgres_dsn() -> Iterator[str]:
    pytest.importorskip("langgraph.store.postgres")
    from benchmarks._postgres import LocalPostgres, PostgresUnavailable

    try:
        server = LocalPostgres.start()
    except PostgresUnavailable as exc:
        pytest.skip(f"no local PostgreSQL: {exc}")
    with server:
        yield server.dsn


def test_from_postgres_store(cli: Cli, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(postgres_dsn) as old:
        old.setup()
        with old._cursor() as cur:
            cur.execute("DELETE FROM store")  # the server is shared by this module's tests
        written = fill(old, per_namespace=25)
    uri = f"postgres:{postgres_dsn}"
    done = cli.json("copy", "--store", "--from", uri, "--to", "foundry-store")
    assert done["copied"] == done["items"] == len(written)
    again = cli.json("copy", "--store", "--from", uri, "--to", "foundry-store")
    assert again["copied"] == 0 and again["already_there"] == len(written)
    with FoundryStore(**cli.env.kwargs()) as new:
        assert everything(new) == written
    later = _layout.now() + 31 * 60
    monkeypatch.setattr(_layout, "now", lambda: later)
    with FoundryStore(**cli.env.kwargs()) as new:
        assert everything(new) == {k: v for k, v in written.items() if v["n"] % 3 != 0}


@pytest.mark.parametrize("store_mode", ["hosted"])  # counted by the emulator
def test_a_rerun_costs_one_read_per_item_and_writes_nothing(cli: Cli, sqlite_source: Any) -> None:
    path, written = sqlite_source
    args = ("copy", "--store", "--from", f"sqlite:{path}", "--to", "foundry-store")
    assert cli.json(*args)["copied"] == len(written)
    before = cli.env.emulator.requests
    assert cli.json(*args)["copied"] == 0
    spent = cli.env.emulator.requests - before
    assert spent["get_item"] == len(written)  # one look-up per item...
    assert not any(spent[call] for call in ("put_item", "create_item", "delete_item"))
    assert spent["list_keys"] == 0  # ...and nothing listed
