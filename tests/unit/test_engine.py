"""The SQLite state engine implements the state store's documented semantics."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import (
    FoundryStorageBadRequestError,
    FoundryStorageConflictError,
    FoundryStorageNotFoundError,
    FoundryStoragePreconditionError,
)

from foundry_checkpoint._store._engine import UNSET, StateEngine
from foundry_checkpoint._store._engine_db import SCHEMA_VERSION
from foundry_checkpoint._store._engine_list import (
    CURSOR_SQL,
    among_values,
    greatest_queries,
    list_params,
    list_query,
)
from foundry_checkpoint._store._engine_rows import (
    CURRENT_ITEM_SQL,
    DELETE_ITEM_SQL,
    DELETE_TAG_SQL,
    EXPIRED_ITEMS_SQL,
    READ_ITEM_SQL,
    UPDATE_ITEM_SQL,
)
from foundry_checkpoint.errors import FoundryCheckpointError

S = "store"
MB = 1_000_000  # the item limit on the stricter reading of "1 MB"


class Clock:
    """A settable clock for TTL and timestamp tests."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine(clock: Clock) -> Iterator[StateEngine]:
    eng = StateEngine(clock=clock)
    eng.create_store(S, user_isolation=True, item_ttl_seconds=-1)
    yield eng
    eng.close()


def put(eng: StateEngine, key: str, tags: dict[str, str] | None = None, **kw: Any) -> Any:
    ref, _ = eng.put_item(S, key, {"k": key}, tags, user=kw.pop("user", "u"), if_match=None)
    return ref


def keys(page: dict[str, Any]) -> list[str]:
    return [entry["key"] for entry in page["data"]]


def table_rows(eng: StateEngine, table: str) -> int:
    with eng._transaction(write=False) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


# ------------------------------------------------------------------------------------ limits


def _value_of_size(size: int) -> dict[str, Any]:
    # json.dumps({"d": s}) == '{"d": "' + s + '"}', 9 characters around s.
    return {"d": "x" * (size - 9)}


BAD_CALLS: list[tuple[str, Callable[[StateEngine], Any], str]] = [
    ("empty store name", lambda e: e.get_store(""), "name"),
    (
        "long store name",
        lambda e: e.create_store("n" * 129, user_isolation=True, item_ttl_seconds=-1),
        "name",
    ),
    ("empty key", lambda e: e.create_item(S, "", {}, None, user="u"), "key"),
    ("long key", lambda e: e.put_item(S, "k" * 129, {}, None, user="u", if_match=None), "key"),
    ("long key on get", lambda e: e.get_item(S, "k" * 129, user="u"), "key"),
    (
        "value not an object",
        lambda e: e.create_item(S, "k", [1], None, user="u"),  # type: ignore[arg-type]
        "value",
    ),
    (
        "value too big",
        lambda e: e.create_item(S, "k", _value_of_size(MB + 1), None, user="u"),
        "value",
    ),
    ("value not JSON", lambda e: e.create_item(S, "k", {"s": {1, 2}}, None, user="u"), "value"),
    ("value NaN", lambda e: e.create_item(S, "k", {"f": float("nan")}, None, user="u"), "value"),
    (
        "17 tags",
        lambda e: e.create_item(S, "k", {}, {f"t{i}": "v" for i in range(17)}, user="u"),
        "tags",
    ),
    ("tag key 65 chars", lambda e: e.create_item(S, "k", {}, {"a" * 65: "v"}, user="u"), "tags"),
    ("tag key with space", lambda e: e.create_item(S, "k", {}, {"a b": "v"}, user="u"), "tags"),
    ("tag key with slash", lambda e: e.create_item(S, "k", {}, {"a/b": "v"}, user="u"), "tags"),
    ("empty tag key", lambda e: e.create_item(S, "k", {}, {"": "v"}, user="u"), "tags"),
    (
        "tag value 257 chars",
        lambda e: e.create_item(S, "k", {}, {"a": "v" * 257}, user="u"),
        "tags",
    ),
    (
        "tag value not str",
        lambda e: e.create_item(S, "k", {}, {"a": 1}, user="u"),  # type: ignore[dict-item]
        "tags",
    ),
    ("list tags filter", lambda e: e.list_keys(S, user="u", tags={"a b": "v"}), "tags"),
    ("limit 0", lambda e: e.list_keys(S, user="u", limit=0), "limit"),
    ("limit 101", lambda e: e.list_keys(S, user="u", limit=101), "limit"),
    ("limit bool", lambda e: e.list_keys(S, user="u", limit=True), "limit"),
    ("order", lambda e: e.list_keys(S, user="u", order="up"), "order"),
    ("after and before", lambda e: e.list_keys(S, user="u", after="a", before="b"), "after"),
    (
        "ttl 0",
        lambda e: e.create_store("t", user_isolation=True, item_ttl_seconds=0),
        "item_ttl_seconds",
    ),
    (
        "ttl -2",
        lambda e: e.create_store("t", user_isolation=True, item_ttl_seconds=-2),
        "item_ttl_seconds",
    ),
    (
        "ttl too big",
        lambda e: e.create_store("t", user_isolation=True, item_ttl_seconds=2_147_483_648),
        "item_ttl_seconds",
    ),
    (
        "store tags",
        lambda e: e.create_store(
            "t", user_isolation=True, item_ttl_seconds=-1, tags={"bad key": "v"}
        ),
        "tags",
    ),
    ("update store tags", lambda e: e.update_store(S, tags={"x" * 65: "v"}), "tags"),
]


@pytest.mark.parametrize(
    ("call", "param"), [(c, p) for _, c, p in BAD_CALLS], ids=[name for name, _, _ in BAD_CALLS]
)
def test_limits_answer_400_naming_the_field(
    engine: StateEngine, call: Callable[[StateEngine], Any], param: str
) -> None:
    with pytest.raises(FoundryStorageBadRequestError) as info:
        call(engine)
    assert info.value.param == param
    assert info.value.status_code == 400
    assert type(info.value) is FoundryStorageBadRequestError
    assert table_rows(engine, "items") == 0
    assert table_rows(engine, "stores") == 1


def test_limits_accept_their_boundaries(engine: StateEngine) -> None:
    engine.create_store("n" * 128, user_isolation=True, item_ttl_seconds=2_147_483_647)
    engine.create_store("ttl-1", user_isolation=False, item_ttl_seconds=1)
    value = _value_of_size(MB)
    assert len(json.dumps(value).encode("utf-8")) == MB
    tags = {f"{i:02d}" + "k" * 62: "v" * 256 for i in range(16)}
    tags["a.B-c_9"] = tags.pop(next(iter(tags)))
    engine.create_item(S, "k" * 128, value, tags, user="u")
    item = engine.get_item(S, "k" * 128, user="u")
    assert item is not None and item["value"] == value and item["tags"] == tags
    for limit in (1, 100):
        assert len(engine.list_keys(S, user="u", limit=limit)["data"]) == 1


def test_value_size_counts_utf8_bytes_of_default_json(engine: StateEngine) -> None:
    # "é" is escaped by json.dumps (6 bytes each as \u00e9), so this is over the limit.
    over = {"d": "é" * (MB // 6)}
    assert len(json.dumps(over).encode("utf-8")) > MB
    with pytest.raises(FoundryStorageBadRequestError) as info:
        engine.create_item(S, "k", over, None, user="u")
    assert info.value.param == "value"


def test_value_size_counts_the_default_separators(engine: StateEngine) -> None:
    # Compact, this list fits the limit; json.dumps puts a space after every comma.
    over = {"d": [0] * (MB // 2 - 4)}
    compact = json.dumps(over, separators=(",", ":"))
    assert len(compact) <= MB < len(json.dumps(over))
    with pytest.raises(FoundryStorageBadRequestError):
        engine.create_item(S, "k", over, None, user="u")
    fits = {"d": "a,b:" * (MB // 4 - 8)}  # separators inside a string gain no space
    assert len(json.dumps(fits)) <= MB
    assert engine.create_item(S, "k", fits, None, user="u")["key"] == "k"


@pytest.mark.parametrize(
    "value",
    [
        {"v": 1, "c": "raw", "d": "QUJD+/=" * 2000, "k": "00000000"},
        {"d": "x" * 5000 + '"'},
        {"d": "x" * 5000 + "\\"},
        {"d": "x" * 5000 + "\n"},
        {"d": "x" * 5000 + "\x7f", "e": "é" * 5000},
        {"d": "ab" * 3000, "nested": {"s": "y" * 5000, "n": [1.5, None, True]}},
        {1: "x" * 5000, "a": "b"},
        {"ключ": "z" * 5000},
    ],
)
def test_values_are_encoded_as_json_dumps_encodes_them(value: dict[Any, Any]) -> None:
    from foundry_checkpoint._store._engine_checks import compact_json

    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    assert compact_json(value) == expected
    with pytest.raises(ValueError):
        compact_json({"d": "x" * 5000, "f": float("nan")})


def test_values_round_trip_and_are_stored_compactly(engine: StateEngine) -> None:
    value = {"text": "héllo ☃", "n": [1, 2.5, None, True], "o": {"x": {}}}
    engine.create_item(S, "k", value, None, user="u")
    item = engine.get_item(S, "k", user="u")
    assert item is not None and item["value"] == value
    with engine._transaction(write=False) as conn:
        stored = conn.execute("SELECT value FROM items").fetchone()[0]
    assert stored == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# ------------------------------------------------------------------------------------ stores


def test_store_lifecycle(engine: StateEngine, clock: Clock) -> None:
    with pytest.raises(FoundryStorageConflictError) as conflict:
        engine.create_store(S, user_isolation=False, item_ttl_seconds=5)
    assert conflict.value.status_code == 409
    store = engine.get_store(S)
    assert store["object"] == "state_store"
    assert store["id"].startswith("ss_") and store["name"] == S
    assert (store["user_isolation"], store["item_ttl_seconds"]) == (True, -1)
    assert store["created_at"] == store["updated_at"] == 1000
    assert "description" not in store and "tags" not in store

    clock.now = 1005
    updated = engine.update_store(S, description="d", tags={"team": "a"})
    assert (updated["description"], updated["tags"], updated["updated_at"]) == (
        "d",
        {"team": "a"},
        1005,
    )
    kept = engine.update_store(S, description=UNSET, tags=UNSET)
    assert (kept["description"], kept["tags"]) == ("d", {"team": "a"})
    cleared = engine.update_store(S, description=None, tags=None)
    assert "description" not in cleared and "tags" not in cleared
    assert cleared["created_at"] == 1000

    with pytest.raises(FoundryStorageNotFoundError) as missing:
        engine.get_store("other")
    assert missing.value.status_code == 404
    with pytest.raises(FoundryStorageNotFoundError):
        engine.update_store("other", description="x")


def test_item_calls_on_a_missing_store_are_404(engine: StateEngine) -> None:
    calls: list[Callable[[], Any]] = [
        lambda: engine.create_item("nope", "k", {}, None, user="u"),
        lambda: engine.put_item("nope", "k", {}, None, user="u", if_match=None),
        lambda: engine.get_item("nope", "k", user="u"),
        lambda: engine.delete_item("nope", "k", user="u", if_match=None),
        lambda: engine.list_keys("nope", user="u"),
    ]
    for call in calls:
        with pytest.raises(FoundryStorageNotFoundError):
            call()


def test_delete_store_cascades_and_is_idempotent(engine: StateEngine) -> None:
    for i in range(5):
        put(engine, f"k{i}", {"kind": "cp"})
        put(engine, f"k{i}", {"kind": "cp"}, user="other")
    engine.create_store("keep", user_isolation=False, item_ttl_seconds=-1)
    engine.create_item("keep", "k", {}, {"kind": "cp"}, user="u")
    store_id = engine.get_store(S)["id"]

    first = engine.delete_store(S)
    assert first == {"id": store_id, "object": "state_store", "name": S, "deleted": True}
    assert engine.delete_store(S) == {
        "id": None,
        "object": "state_store",
        "name": S,
        "deleted": True,
    }
    assert table_rows(engine, "items") == 1 and table_rows(engine, "item_tags") == 1
    with pytest.raises(FoundryStorageNotFoundError):
        engine.get_store(S)

    engine.create_store(S, user_isolation=True, item_ttl_seconds=-1)
    assert engine.get_item(S, "k0", user="u") is None
    assert engine.list_keys(S, user="u", tags={"kind": "cp"})["data"] == []
    assert engine.get_item("keep", "k", user="x") is not None


# ------------------------------------------------------------------------- items and etags


def test_create_put_get_and_etags(engine: StateEngine, clock: Clock) -> None:
    ref = engine.create_item(S, "a", {"n": 1}, {"kind": "cp"}, user="u")
    assert set(ref) == {"id", "object", "key", "etag", "created_at", "updated_at"}
    assert ref["object"] == "state_store.item" and ref["key"] == "a"
    assert ref["id"].startswith("it_") and len(ref["id"]) == 27
    assert ref["etag"].startswith('"') and ref["etag"].endswith('"')
    assert ref["created_at"] == ref["updated_at"] == 1000

    with pytest.raises(FoundryStorageConflictError) as dup:
        engine.create_item(S, "a", {"n": 2}, None, user="u")
    assert dup.value.status_code == 409

    clock.now = 1007.9
    replaced, created = engine.put_item(S, "a", {"n": 3}, {"kind": "x"}, user="u", if_match=None)
    assert created is False
    assert replaced["id"] == ref["id"] and replaced["etag"] != ref["etag"]
    assert (replaced["created_at"], replaced["updated_at"]) == (1000, 1007)

    item = engine.get_item(S, "a", user="u")
    assert item == {
        "id": ref["id"],
        "object": "state_store.item",
        "key": "a",
        "value": {"n": 3},
        "tags": {"kind": "x"},
        "etag": replaced["etag"],
        "created_at": 1000,
        "updated_at": 1007,
    }
    new_ref, new_created = engine.put_item(S, "b", {}, None, user="u", if_match=None)
    assert new_created is True and new_ref["created_at"] == 1007
    etags = {
        ref["etag"],
        replaced["etag"],
        new_ref["etag"],
        engine.put_item(S, "b", {}, None, user="u", if_match=None)[0]["etag"],
    }
    assert len(etags) == 4


def test_put_without_tags_clears_them(engine: StateEngine) -> None:
    put(engine, "a", {"kind": "cp", "thread": "t"})
    put(engine, "a")
    item = engine.get_item(S, "a", user="u")
    assert item is not None and "tags" not in item
    assert engine.list_keys(S, user="u", tags={"kind": "cp"})["data"] == []
    assert "tags" not in engine.list_keys(S, user="u")["data"][0]
    put(engine, "a", {})
    assert table_rows(engine, "item_tags") == 0


def test_if_match(engine: StateEngine) -> None:
    # Any If-Match on a missing item: 412 with no current etag.
    for header in ("*", '"nope"'):
        with pytest.raises(FoundryStoragePreconditionError) as missing:
            engine.put_item(S, "a", {}, None, user="u", if_match=header)
        assert missing.value.status_code == 412 and missing.value.current_etag is None
        with pytest.raises(FoundryStoragePreconditionError) as missing_delete:
            engine.delete_item(S, "a", user="u", if_match=header)
        assert missing_delete.value.current_etag is None
    assert engine.get_item(S, "a", user="u") is None

    first = put(engine, "a")
    second, created = engine.put_item(S, "a", {"v": 2}, None, user="u", if_match="*")
    assert created is False
    with pytest.raises(FoundryStoragePreconditionError) as stale:
        engine.put_item(S, "a", {"v": 3}, None, user="u", if_match=first["etag"])
    assert stale.value.current_etag == second["etag"]
    third, _ = engine.put_item(S, "a", {"v": 3}, None, user="u", if_match=second["etag"])
    item = engine.get_item(S, "a", user="u")
    assert item is not None and item["value"] == {"v": 3}

    with pytest.raises(FoundryStoragePreconditionError) as stale_delete:
        engine.delete_item(S, "a", user="u", if_match=second["etag"])
    assert stale_delete.value.current_etag == third["etag"]
    assert engine.get_item(S, "a", user="u") is not None
    deleted = engine.delete_item(S, "a", user="u", if_match=third["etag"])
    assert deleted == {"id": first["id"], "object": "state_store.item", "key": "a", "deleted": True}
    assert engine.get_item(S, "a", user="u") is None


def test_delete_is_idempotent(engine: StateEngine) -> None:
    put(engine, "a")
    assert engine.delete_item(S, "a", user="u", if_match=None)["id"] is not None
    again = engine.delete_item(S, "a", user="u", if_match=None)
    assert again == {"id": None, "object": "state_store.item", "key": "a", "deleted": True}


# ------------------------------------------------------------------------------ list_keys


def test_tag_filter_is_and_of_exact_matches(engine: StateEngine, clock: Clock) -> None:
    rows = {
        "a": {"kind": "cp", "thread": "t1"},
        "b": {"kind": "cp", "thread": "t2"},
        "c": {"kind": "write", "thread": "t1"},
        "d": {"kind": "cp"},
        "e": None,
        "f": {"kind": "cpx", "thread": "t1"},
    }
    for key, tags in rows.items():
        clock.now += 1
        put(engine, key, tags)

    def listed(tags: dict[str, str] | None) -> list[str]:
        return keys(engine.list_keys(S, user="u", tags=tags, order="asc"))

    assert listed(None) == ["a", "b", "c", "d", "e", "f"]
    assert listed({}) == ["a", "b", "c", "d", "e", "f"]
    assert listed({"kind": "cp"}) == ["a", "b", "d"]
    assert listed({"kind": "cp", "thread": "t1"}) == ["a"]
    assert listed({"thread": "t1", "kind": "cp"}) == ["a"]
    assert listed({"thread": "t1"}) == ["a", "c", "f"]
    assert listed({"kind": "c"}) == []
    assert listed({"kind": "cp", "thread": "t3"}) == []
    entry = engine.list_keys(S, user="u", tags={"kind": "write"})["data"][0]
    assert entry["tags"] == {"kind": "write", "thread": "t1"}
    assert set(entry) == {"id", "object", "key", "etag", "created_at", "updated_at", "tags"}


def test_greatest_returns_the_group_of_the_greatest_tag_value(
    engine: StateEngine, clock: Clock
) -> None:
    """The items sharing the greatest ``by`` value among those carrying the filters."""
    rows = {
        "c1": {"kind": "cp", "ns": "a", "id": "0001"},
        "c3": {"kind": "cp", "ns": "a", "id": "0003"},
        "w3": {"kind": "w", "ns": "a", "id": "0003"},
        "w3b": {"kind": "w", "ns": "a", "id": "0003"},
        "w9": {"kind": "w", "ns": "a", "id": "0009"},  # no checkpoint carries 0009
        "x7": {"kind": "cp", "ns": "b", "id": "0007"},  # another namespace
        "c2": {"kind": "cp", "ns": "a", "id": "0002"},  # written last, not the greatest
    }
    for key, tags in rows.items():
        put(engine, key, tags)

    def group(**kw: Any) -> list[str]:
        return sorted(k["key"] for k in engine.greatest(S, user="u", by="id", **kw))

    assert group(tags={"ns": "a"}, among={"kind": "cp"}) == ["c3", "w3", "w3b"]
    assert group(tags={"ns": "a"}) == ["w9"]
    assert group(tags={"ns": "b"}, among={"kind": "cp"}) == ["x7"]
    assert group(tags={}, among={"kind": "cp"}) == ["x7"]
    assert group(tags={"ns": "c"}) == []
    assert engine.greatest(S, user="other", by="id", tags={"ns": "a"}) == []  # partitioned
    entry = engine.greatest(S, user="u", by="id", tags={"ns": "b"})[0]
    assert entry == engine.list_keys(S, user="u", tags={"ns": "b"})["data"][0]
    with pytest.raises(FoundryStorageBadRequestError):
        engine.greatest(S, user="u", by="bad key!", tags={})


def test_greatest_takes_the_count_greatest_values_below_a_bound(engine: StateEngine) -> None:
    for i in range(1, 8):
        put(engine, f"c{i}", {"kind": "cp", "id": f"{i:04d}"})
        put(engine, f"w{i}", {"kind": "w", "id": f"{i:04d}"})

    def group(**kw: Any) -> list[str]:
        found = engine.greatest(S, user="u", by="id", tags={}, among={"kind": "cp"}, **kw)
        return sorted(k["key"] for k in found)

    assert group(count=3) == ["c5", "c6", "c7", "w5", "w6", "w7"]
    assert group(count=2, below="0005") == ["c3", "c4", "w3", "w4"]
    assert group(count=50, below="0002") == ["c1", "w1"]
    assert group(below="0001") == []
    with pytest.raises(FoundryStorageBadRequestError):
        group(count=0)


def test_greatest_skips_expired_items(clock: Clock) -> None:
    eng = StateEngine(clock=clock)
    eng.create_store(S, user_isolation=True, item_ttl_seconds=10)
    put(eng, "old", {"id": "2"})
    clock.now += 8
    put(eng, "new", {"id": "1"})
    assert [k["key"] for k in eng.greatest(S, user="u", by="id", tags={})] == ["old"]
    clock.now += 5  # "old" expired, "new" not
    assert [k["key"] for k in eng.greatest(S, user="u", by="id", tags={})] == ["new"]
    eng.close()


def test_pages_cursors_and_has_more(engine: StateEngine, clock: Clock) -> None:
    for i in range(25):
        clock.now = 1000 + i
        put(engine, f"k{i:02d}", {"kind": "cp"} if i % 2 == 0 else None)
    everything = [f"k{i:02d}" for i in range(25)]

    default = engine.list_keys(S, user="u")
    assert default["object"] == "list"
    assert keys(default) == everything[::-1][:20] and default["has_more"] is True
    assert default["first_id"] == default["data"][0]["id"]
    assert default["last_id"] == default["data"][-1]["id"]
    rest = engine.list_keys(S, user="u", after=default["last_id"])
    assert keys(rest) == everything[::-1][20:] and rest["has_more"] is False
    exact = engine.list_keys(S, user="u", limit=25)
    assert len(exact["data"]) == 25 and exact["has_more"] is False

    for order, expected in (("asc", everything), ("desc", everything[::-1])):
        for tags in (None, {"kind": "cp"}):
            wanted = [k for k in expected if tags is None or int(k[1:]) % 2 == 0]
            seen: list[str] = []
            page = engine.list_keys(S, user="u", tags=tags, limit=4, order=order)
            seen += keys(page)
            while page["has_more"]:
                page = engine.list_keys(
                    S, user="u", tags=tags, limit=4, order=order, after=page["last_id"]
                )
                seen += keys(page)
            assert seen == wanted

    ids = {entry["key"]: entry["id"] for entry in exact["data"]}
    # before=X: the first `limit` items of the part of the list that precedes X.
    before = engine.list_keys(S, user="u", before=ids["k10"], limit=3)
    assert keys(before) == ["k24", "k23", "k22"] and before["has_more"] is True
    before_all = engine.list_keys(S, user="u", before=ids["k10"], limit=100)
    assert keys(before_all) == everything[11:][::-1] and before_all["has_more"] is False
    before_asc = engine.list_keys(S, user="u", before=ids["k10"], order="asc", limit=100)
    assert keys(before_asc) == everything[:10]
    after_asc = engine.list_keys(S, user="u", after=ids["k10"], order="asc", limit=3)
    assert keys(after_asc) == ["k11", "k12", "k13"]
    assert engine.list_keys(S, user="u", after=ids["k00"])["data"] == []


def test_unknown_or_filtered_out_cursor_gives_an_empty_page(engine: StateEngine) -> None:
    a = put(engine, "a", {"kind": "cp"})
    b = put(engine, "b", {"kind": "other"})
    empty: dict[str, Any] = {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }
    assert engine.list_keys(S, user="u", after="it_unknown") == empty
    assert engine.list_keys(S, user="u", before="it_unknown") == empty
    assert engine.list_keys(S, user="u", tags={"kind": "cp"}, after=b["id"]) == empty
    engine.delete_item(S, "a", user="u", if_match=None)
    assert engine.list_keys(S, user="u", after=a["id"]) == empty
    assert engine.list_keys(S, user="other", after=b["id"]) == empty


def test_same_second_ties_are_seeded_not_insertion_order(clock: Clock) -> None:
    orders = []
    for seed in (0, 0, 1):
        eng = StateEngine(clock=clock, tie_seed=seed)
        eng.create_store(S, user_isolation=True, item_ttl_seconds=-1)
        written = [f"k{i:02d}" for i in range(30)]
        refs = {k: put(eng, k) for k in written}
        asc = keys(eng.list_keys(S, user="u", order="asc", limit=100))
        desc = keys(eng.list_keys(S, user="u", order="desc", limit=100))
        assert sorted(asc) == written
        assert asc != written and desc != written[::-1]
        assert desc == asc[::-1]
        assert asc == sorted(written, key=lambda k: refs[k]["id"])
        orders.append(asc)
        eng.close()
    assert orders[0] == orders[1]
    assert orders[0] != orders[2]


def test_created_at_is_kept_so_a_rewrite_does_not_move_an_item(
    engine: StateEngine, clock: Clock
) -> None:
    put(engine, "old")
    clock.now += 5
    put(engine, "new")
    clock.now += 5
    put(engine, "old")
    assert keys(engine.list_keys(S, user="u")) == ["new", "old"]


# ------------------------------------------------------------------------------------ TTL


def test_ttl_expiry_renewed_by_writes_only(clock: Clock) -> None:
    eng = StateEngine(clock=clock)
    eng.create_store(S, user_isolation=True, item_ttl_seconds=10)
    ref = put(eng, "a", {"kind": "cp"})  # t=1000, expires at 1010
    clock.now = 1009.99
    assert eng.get_item(S, "a", user="u") is not None  # a read does not renew
    assert keys(eng.list_keys(S, user="u")) == ["a"]
    clock.now = 1010
    assert eng.get_item(S, "a", user="u") is None
    assert eng.list_keys(S, user="u")["data"] == []
    assert eng.list_keys(S, user="u", tags={"kind": "cp"})["data"] == []
    assert eng.list_keys(S, user="u", after=ref["id"])["data"] == []
    with pytest.raises(FoundryStoragePreconditionError) as expired:
        eng.put_item(S, "a", {}, None, user="u", if_match="*")
    assert expired.value.current_etag is None
    with pytest.raises(FoundryStoragePreconditionError):
        eng.delete_item(S, "a", user="u", if_match=ref["etag"])
    assert eng.delete_item(S, "a", user="u", if_match=None)["id"] is None

    again = eng.create_item(S, "a", {"n": 2}, None, user="u")  # no 409: the old one expired
    assert again["created_at"] == 1010 and again["id"] == ref["id"]
    clock.now = 1015
    renewed, created = eng.put_item(S, "a", {"n": 3}, None, user="u", if_match=None)
    assert created is False and renewed["created_at"] == 1010
    clock.now = 1024
    assert eng.get_item(S, "a", user="u") is not None
    clock.now = 1025
    assert eng.get_item(S, "a", user="u") is None
    eng.close()


def test_put_on_an_expired_key_creates_a_new_item(clock: Clock) -> None:
    eng = StateEngine(clock=clock)
    eng.create_store(S, user_isolation=False, item_ttl_seconds=1)
    put(eng, "a", {"kind": "cp"})
    clock.now = 1001
    ref, created = eng.put_item(S, "a", {}, None, user="u", if_match=None)
    assert created is True and ref["created_at"] == 1001
    assert eng.list_keys(S, user="u", tags={"kind": "cp"})["data"] == []
    eng.close()


def test_expired_items_are_purged_by_later_writes(clock: Clock) -> None:
    eng = StateEngine(clock=clock)
    eng.create_store(S, user_isolation=True, item_ttl_seconds=5)
    for i in range(10):
        put(eng, f"k{i}", {"kind": "cp"}, user=f"user{i % 3}")
    assert table_rows(eng, "items") == 10
    clock.now = 1005
    assert eng.get_item(S, "k0", user="user0") is None
    assert table_rows(eng, "items") == 10  # reads do not write
    put(eng, "fresh")
    assert table_rows(eng, "items") == 1 and table_rows(eng, "item_tags") == 0
    eng.close()


def test_ttl_minus_one_never_expires(engine: StateEngine, clock: Clock) -> None:
    put(engine, "a")
    clock.now = 2_000_000_000
    assert engine.get_item(S, "a", user="u") is not None


# ------------------------------------------------------------------------------ isolation


def test_isolated_users_never_see_each_other(engine: StateEngine) -> None:
    ann = put(engine, "shared-key", {"kind": "cp"}, user="ann")
    assert engine.get_item(S, "shared-key", user="bob") is None
    assert engine.list_keys(S, user="bob")["data"] == []
    assert engine.list_keys(S, user="bob", tags={"kind": "cp"})["data"] == []
    assert engine.list_keys(S, user="bob", after=ann["id"])["data"] == []
    with pytest.raises(FoundryStoragePreconditionError) as cross:
        engine.put_item(S, "shared-key", {}, None, user="bob", if_match=ann["etag"])
    assert cross.value.current_etag is None
    assert engine.delete_item(S, "shared-key", user="bob", if_match=None)["id"] is None

    bob = engine.create_item(S, "shared-key", {"who": "bob"}, {"kind": "cp"}, user="bob")
    assert bob["id"] != ann["id"]
    engine.put_item(S, "shared-key", {"who": "bob2"}, None, user="bob", if_match=None)
    ann_item = engine.get_item(S, "shared-key", user="ann")
    assert ann_item is not None and ann_item["value"] == {"k": "shared-key"}
    assert ann_item["etag"] == ann["etag"]
    engine.delete_item(S, "shared-key", user="bob", if_match=None)
    assert engine.get_item(S, "shared-key", user="ann") is not None
    assert keys(engine.list_keys(S, user="ann", tags={"kind": "cp"})) == ["shared-key"]


def test_without_isolation_the_user_is_ignored(clock: Clock) -> None:
    eng = StateEngine(clock=clock)
    eng.create_store(S, user_isolation=False, item_ttl_seconds=-1)
    put(eng, "a", user="ann")
    item = eng.get_item(S, "a", user="bob")
    assert item is not None
    with pytest.raises(FoundryStorageConflictError):
        eng.create_item(S, "a", {}, None, user="carol")
    assert keys(eng.list_keys(S, user="dave")) == ["a"]
    eng.close()


# ------------------------------------------------------------------------------------ cost


def _assert_indexed(plan: list[str]) -> None:
    assert plan, "no plan"
    for detail in plan:
        assert not detail.startswith("SCAN"), plan
        assert "TEMP B-TREE" not in detail, plan
    assert any(d.startswith("SEARCH") and ("INDEX" in d or "PRIMARY KEY" in d) for d in plan), plan


@pytest.mark.parametrize(
    "tags",
    [None, {"kind": "cp"}, {"kind": "cp", "thread": "t"}],
    ids=["no-tags", "one-tag", "two-tags"],
)
@pytest.mark.parametrize("order", ["desc", "asc"])
@pytest.mark.parametrize("after", [None, "cursor"])
def test_latest_key_queries_use_an_index(
    tmp_path: Path, tags: dict[str, str] | None, order: str, after: str | None
) -> None:
    eng = StateEngine(tmp_path / "db.sqlite3")
    eng.create_store(S, user_isolation=True, item_ttl_seconds=3600)
    for i in range(200):
        put(
            eng,
            f"k{i}",
            {"kind": "cp", "thread": "t"} if i % 2 else {"kind": "w"},
            user=f"u{i % 2}",
        )
    with eng._transaction(write=True) as conn:
        conn.execute("ANALYZE")
    # the page query list_keys runs, built by the same function with the same arguments
    sql, params, _, _ = list_query(S, tags=tags, limit=100, after=after, before=None, order=order)
    named = list_params(params, S, "u1", 0, None if after is None else (0, ""))
    with eng._transaction(write=False) as conn:
        plan = [str(row["detail"]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, named)]
    _assert_indexed(plan)
    if tags:
        assert plan[0].startswith("SEARCH t USING PRIMARY KEY (store=? AND part=? AND tag_key=?")
    else:
        assert "items_by_order" in plan[0]
    eng.close()


def test_greatest_queries_use_an_index(tmp_path: Path) -> None:
    eng = StateEngine(tmp_path / "db.sqlite3")
    eng.create_store(S, user_isolation=True, item_ttl_seconds=3600)
    for i in range(200):
        put(eng, f"k{i}", {"kind": "cp" if i % 3 else "w", "ns": f"n{i % 2}", "id": f"{i:04d}"})
    with eng._transaction(write=True) as conn:
        conn.execute("ANALYZE")
    top, group, params = greatest_queries("id", {"ns": "n1"}, {"kind": "cp"}, count=10)
    named = list_params(params, S, "u", 0, None)
    group, tops = among_values(group, ["0199", "0197"])
    with eng._transaction(write=False) as conn:
        for sql, args in ((top, named), (group, {**named, **tops})):
            plan = [str(row["detail"]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, args)]
            _assert_indexed(plan)
            assert plan[0].startswith(
                "SEARCH t USING PRIMARY KEY (store=? AND part=? AND tag_key=?"
            )
    eng.close()


def test_write_statements_use_indexes(tmp_path: Path) -> None:
    eng = StateEngine(tmp_path / "db.sqlite3")
    # the statements the engine runs, with parameters of the right shape
    statements: list[tuple[str, tuple[object, ...]]] = [
        (CURRENT_ITEM_SQL, ("s", "u", "k")),
        (READ_ITEM_SQL, ("s", "u", "k", 5)),
        (EXPIRED_ITEMS_SQL, ("s", 5, 64)),
        (DELETE_TAG_SQL, ("s", "u", "kind", "cp", 5, "i")),
        (DELETE_ITEM_SQL, ("s", "u", "k")),
        (UPDATE_ITEM_SQL, ("{}", None, '"e"', 5, None, "s", "u", "k")),
        (CURSOR_SQL, ("s", "u", "i", 5)),
    ]
    with eng._transaction(write=False) as conn:
        for sql, args in statements:
            explained = conn.execute("EXPLAIN QUERY PLAN " + sql, args)
            _assert_indexed([str(row["detail"]) for row in explained])
    eng.close()


# ---------------------------------------------------------------- files, threads, lifecycle


def test_file_database_persists_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "state.sqlite3"
    eng = StateEngine(path)
    assert eng.path == path
    eng.create_store(S, user_isolation=True, item_ttl_seconds=-1)
    put(eng, "a", {"kind": "cp"})
    with eng._transaction(write=False) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    eng.close()
    reopened = StateEngine(path)
    assert keys(reopened.list_keys(S, user="u", tags={"kind": "cp"})) == ["a"]
    reopened.close()
    assert StateEngine().path is None


def test_a_schema_1_database_is_upgraded_in_place(tmp_path: Path) -> None:
    """Files written by schema 1 (tag rows keyed by item, indexed by value) open upgraded,
    with every tag still listed, ranked, replaced and deleted as before."""
    path = tmp_path / "state.sqlite3"
    eng = StateEngine(path)
    eng.create_store(S, user_isolation=True, item_ttl_seconds=-1)
    for i in range(5):
        put(eng, f"k{i}", {"kind": "cp", "id": f"{i:02d}"})
    eng.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(
        """BEGIN;
        CREATE TABLE old_tags (store TEXT NOT NULL, part TEXT NOT NULL, key TEXT NOT NULL,
            tag_key TEXT NOT NULL, tag_value TEXT NOT NULL, created_at INTEGER NOT NULL,
            id TEXT NOT NULL, PRIMARY KEY (store, part, key, tag_key)) WITHOUT ROWID;
        INSERT INTO old_tags SELECT store, part, key, tag_key, tag_value, created_at, id
            FROM item_tags;
        DROP TABLE item_tags;
        ALTER TABLE old_tags RENAME TO item_tags;
        CREATE INDEX item_tags_by_value
            ON item_tags (store, part, tag_key, tag_value, created_at, id);
        PRAGMA user_version = 1;
        COMMIT;"""
    )
    conn.close()

    eng = StateEngine(path)
    with eng._transaction(write=False) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert "item_tags_by_value" not in names
    assert sorted(keys(eng.list_keys(S, user="u", tags={"kind": "cp"}))) == [
        f"k{i}" for i in range(5)
    ]
    assert [r["key"] for r in eng.greatest(S, user="u", by="id", tags={"kind": "cp"})] == ["k4"]
    put(eng, "k4", {"kind": "w"})
    eng.delete_item(S, "k3", user="u", if_match=None)
    assert sorted(keys(eng.list_keys(S, user="u", tags={"kind": "cp"}))) == ["k0", "k1", "k2"]
    assert table_rows(eng, "item_tags") == 3 * 2 + 1
    eng.close()


def test_threads_share_one_engine(tmp_path: Path) -> None:
    eng = StateEngine(tmp_path / "db.sqlite3")
    eng.create_store(S, user_isolation=True, item_ttl_seconds=-1)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(50):
                eng.put_item(S, f"t{n}-{i}", {"i": i}, {"w": str(n)}, user="u", if_match=None)
                eng.list_keys(S, user="u", tags={"w": str(n)}, limit=5)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert table_rows(eng, "items") == 400
    eng.close()


def test_close_is_idempotent_and_later_calls_fail_clearly() -> None:
    eng = StateEngine()
    assert eng.closed is False
    eng.close()
    eng.close()
    assert eng.closed is True
    with pytest.raises(FoundryCheckpointError, match="closed"):
        eng.get_store(S)


def test_failed_write_leaves_nothing_behind(engine: StateEngine) -> None:
    put(engine, "a", {"kind": "cp"})
    with pytest.raises(FoundryStorageConflictError):
        engine.create_item(S, "a", {}, {"kind": "other"}, user="u")
    assert keys(engine.list_keys(S, user="u", tags={"kind": "cp"})) == ["a"]
    assert engine.list_keys(S, user="u", tags={"kind": "other"})["data"] == []
    # The connection is usable after the rolled-back transaction.
    put(engine, "b")
    assert sorted(keys(engine.list_keys(S, user="u"))) == ["a", "b"]
