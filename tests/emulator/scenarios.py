"""Store scenarios written once and run against every face of the state store.

A scenario is an async function ``(open_store, clock) -> transcript``: it opens stores through
``open_store`` (a get-or-create factory), drives them through the item API of
:class:`foundry_checkpoint._store._protocol.StateStoreLike`, asserts what the documented semantics
require, and returns a transcript of what it observed, normalised so that two correct
implementations give equal transcripts: times are relative to the scenario's start on the
shared :class:`ScenarioClock`, etags and ids are reduced to the relations that matter (changed,
equal to the current one, absent) and errors to their class and ``param``.

The harness runs each scenario in the SDK's local mode and against the emulator with the real
client, and compares the transcripts. Documented differences stay out of these scenarios:
user isolation and the limits (the SDK's local mode enforces neither) have their own tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from azure.ai.agentserver.core.storage import (
    FoundryStorageConflictError,
    FoundryStorageError,
    FoundryStorageNotFoundError,
    FoundryStoragePreconditionError,
    JSONValue,
    Order,
)

from foundry_checkpoint._store._protocol import KeyPage, StateStoreLike, StoredItem

__all__ = [
    "SCENARIOS",
    "ScenarioClock",
    "StoreFactory",
    "Transcript",
]

Transcript = list[tuple[str, Any]]


class ScenarioClock:
    """A manual clock (epoch seconds) that every face under test reads instead of the time.

    Example:
        >>> clock = ScenarioClock(100.0)
        >>> clock.advance(2.5)
        >>> clock()
        102.5
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the time forward."""
        self.now += seconds


class StoreFactory(Protocol):
    """Get or create a store (settings apply only when it is created) bound to one user."""

    def __call__(
        self, name: str, *, user_isolation: bool = True, item_ttl_seconds: int = -1
    ) -> Awaitable[StateStoreLike]: ...


Scenario = Callable[[StoreFactory, ScenarioClock], Awaitable[Transcript]]


def _unique(label: str) -> str:
    return f"scn/{label}/{uuid.uuid4().hex[:10]}"


async def _outcome(call: Awaitable[Any]) -> tuple[str, Any]:
    """Run ``call`` and reduce a storage error to ``("error", class name, param)``."""
    try:
        await call
    except FoundryStorageError as exc:
        return ("error", (type(exc).__name__, getattr(exc, "param", None)))
    return ("ok", None)


def _item_view(item: StoredItem | None, t0: int) -> Any:
    if item is None:
        return None
    return {
        "key": item.key,
        "value": dict(item.value),
        "tags": dict(item.tags) if item.tags else None,
        "created": item.created_at - t0,
        "updated": item.updated_at - t0,
    }


def _page_keys(page: KeyPage) -> list[str]:
    return [entry.key for entry in page.keys]


def _page_view(page: KeyPage, t0: int) -> Any:
    return {
        "keys": _page_keys(page),
        "tags": [dict(entry.tags) if entry.tags else None for entry in page.keys],
        "created": [entry.created_at - t0 for entry in page.keys],
        "has_more": page.has_more,
        "first_is_first": page.first_id == (page.keys[0].id if page.keys else None),
        "last_is_last": page.last_id == (page.keys[-1].id if page.keys else None),
    }


async def store_settings(open_store: StoreFactory, clock: ScenarioClock) -> Transcript:
    """A store keeps the settings it was created with; reopening does not change them."""
    name = _unique("settings")
    store = await open_store(name, user_isolation=True, item_ttl_seconds=3600)
    first = await store.get()
    again = await open_store(name, user_isolation=False, item_ttl_seconds=60)
    second = await again.get()
    assert (second.user_isolation, second.item_ttl_seconds) == (True, 3600)
    assert store.name == name and first.name == name
    return [
        ("created", (first.name == name, first.user_isolation, first.item_ttl_seconds)),
        ("reopened", (second.name == name, second.user_isolation, second.item_ttl_seconds)),
        ("same id", first.id == second.id),
    ]


async def put_replace_get(open_store: StoreFactory, clock: ScenarioClock) -> Transcript:
    """Create-or-replace: created_at is kept, updated_at and the etag move, tags are replaced."""
    t0 = int(clock())
    store = await open_store(_unique("put"))
    out: Transcript = []
    first = await store.set_item("k", {"n": 1, "nested": {"a": [1, 2]}}, tags={"kind": "x"})
    out.append(("first etag quoted", first.etag.startswith('"') and first.etag.endswith('"')))
    out.append(("get 1", _item_view(await store.get_item("k"), t0)))
    clock.advance(2)
    second = await store.set_item("k", {"n": 2})
    assert second.etag != first.etag and second.id == first.id
    out.append(("etag moved", second.etag != first.etag))
    out.append(("same id", second.id == first.id))
    item = await store.get_item("k")
    assert item is not None and item.value == {"n": 2} and not item.tags
    assert item.etag == second.etag
    out.append(("get 2", _item_view(item, t0)))
    out.append(("get etag is latest", item.etag == second.etag))
    return out


async def conditional_writes(open_store: StoreFactory, clock: ScenarioClock) -> Transcript:
    """If-Match: a matching etag wins, a stale one fails with the current etag, missing fails."""
    store = await open_store(_unique("ifmatch"))
    out: Transcript = []
    first = await store.set_item("k", {"v": 1})
    second = await store.set_item("k", {"v": 2}, if_match=first.etag)
    out.append(("matching etag", "ok"))
    try:
        await store.set_item("k", {"v": 3}, if_match=first.etag)
    except FoundryStoragePreconditionError as exc:
        out.append(("stale etag", ("412", exc.current_etag == second.etag)))
    else:
        raise AssertionError("a stale If-Match must fail")
    try:
        await store.set_item("absent", {"v": 1}, if_match=first.etag)
    except FoundryStoragePreconditionError as exc:
        out.append(("if-match on missing", ("412", exc.current_etag)))
    else:
        raise AssertionError("If-Match on a missing item must fail")
    out.append(
        (
            "require_exists missing",
            await _outcome(store.set_item("absent", {}, require_exists=True)),
        )
    )
    out.append(("absent still absent", await store.get_item("absent") is None))
    third = await store.set_item("k", {"v": 3}, require_exists=True)
    out.append(("require_exists present", third.etag not in (first.etag, second.etag)))
    out.append(("delete stale", await _outcome(store.delete_item("k", if_match=second.etag))))
    out.append(("delete star missing", await _outcome(store.delete_item("absent", if_match="*"))))
    deleted = await store.delete_item("k", if_match=third.etag)
    out.append(("delete current", (deleted.deleted, deleted.key, deleted.id == third.id)))
    out.append(("gone", await store.get_item("k") is None))
    return out


async def create_duplicate(open_store: StoreFactory, clock: ScenarioClock) -> Transcript:
    """create_item refuses an existing key (409) and leaves the item as it was."""
    t0 = int(clock())
    store = await open_store(_unique("create"))
    ref = await store.create_item("k", {"v": "first"}, tags={"t": "1"})
    clock.advance(1)
    try:
        await store.create_item("k", {"v": "second"})
    except FoundryStorageConflictError:
        conflict = True
    else:
        conflict = False
    assert conflict
    item = await store.get_item("k")
    assert item is not None and item.value == {"v": "first"} and item.etag == ref.etag
    return [
        ("ref", (ref.key, ref.created_at - t0, ref.updated_at - t0)),
        ("duplicate refused", conflict),
        ("unchanged", _item_view(item, t0)),
        ("etag unchanged", item.etag == ref.etag),
    ]


async def get_and_delete(open_store: StoreFactory, clock: ScenarioClock) -> Transcript:
    """get of an absent key is None; delete is idempotent and reports whether the item existed."""
    store = await open_store(_unique("delete"))
    out: Transcript = [("get absent", await store.get_item("nope"))]
    missing = await store.delete_item("nope")
    out.append(("delete absent", (missing.deleted, missing.key, missing.id)))
    ref = await store.set_item("k", {"v": 1})
    deleted = await store.delete_item("k")
    out.append(("delete present", (deleted.deleted, deleted.key, deleted.id == ref.id)))
    out.append(("get after delete", await store.get_item("k")))
    again = await store.delete_item("k")
    out.append(("delete again", (again.deleted, again.id)))
    recreated = await store.create_item("k", {"v": 2})
    out.append(("create after delete", recreated.key))
    return out


async def identifiers_round_trip(open_store: StoreFactory, clock: ScenarioClock) -> Transcript:
    """Keys and values with slashes, spaces, unicode and JSON edge values survive the trip."""
    store = await open_store(_unique("ids") + "/ünï cödé")
    keys = ["a/b/c", "with space", "ünï-cödé ✓", "x" * 128, "=?&#%", "0"]
    value: dict[str, JSONValue] = {
        "text": 'línea\nnueva \u2028 "quoted" \\ back',
        "numbers": [0, -1, 1.5, 10**18],
        "flags": [True, False, None],
        "nested": {"deep": {"deeper": ["x", {"y": "z"}]}},
        "empty": {},
    }
    out: Transcript = []
    for key in keys:
        await store.set_item(key, value, tags={"k.e-y_1": "v " + key[:200]})
    for key in keys:
        item = await store.get_item(key)
        assert item is not None and item.key == key and item.value == value
        out.append((f"get {key[:20]}", (item.key, dict(item.value), dict(item.tags or {}))))
    listed = await store.list_keys(limit=100)
    out.append(("listed", sorted(_page_keys(listed))))
    assert sorted(_page_keys(listed)) == sorted(keys)
    return out


async def list_order_and_cursors(open_store: StoreFactory, clock: ScenarioClock) -> Transcript:
    """Keys created in distinct seconds list by created_at in both orders; cursors page by id."""
    t0 = int(clock())
    store = await open_store(_unique("list"))
    names = ["k0", "k1", "k2", "k3", "k4"]
    for index, key in enumerate(names):
        tags = {"parity": "even" if index % 2 == 0 else "odd", "group": "g"}
        if index == 4:
            tags["extra"] = "yes"
        await store.create_item(key, {"i": index}, tags=tags)
        clock.advance(1)
    out: Transcript = []
    desc = await store.list_keys()
    asc = await store.list_keys(order="asc")
    assert _page_keys(desc) == names[::-1] and _page_keys(asc) == names
    out.append(("desc", _page_view(desc, t0)))
    out.append(("asc", _page_view(asc, t0)))

    walked: list[str] = []
    pages: list[Any] = []
    after: str | None = None
    while True:
        page = await store.list_keys(limit=2, after=after, order="asc")
        walked += _page_keys(page)
        pages.append((_page_keys(page), page.has_more))
        if not page.has_more:
            break
        after = page.last_id
    assert walked == names
    out.append(("asc pages", pages))
    first_two = await store.list_keys(limit=2)
    rest = await store.list_keys(after=first_two.last_id)
    out.append(("desc after", (_page_keys(first_two), _page_keys(rest), rest.has_more)))

    middle_id = asc.keys[2].id
    out.append(("before, asc", _page_keys(await store.list_keys(before=middle_id, order="asc"))))
    out.append(("before, desc", _page_keys(await store.list_keys(before=middle_id))))
    out.append(
        (
            "before, limit 1",
            _page_keys(await store.list_keys(before=asc.keys[4].id, limit=1, order="asc")),
        )
    )
    out.append(("unknown cursor", _page_view(await store.list_keys(after="it_does_not_exist"), t0)))

    even = await store.list_keys(tags={"parity": "even"}, order="asc")
    both = await store.list_keys(tags={"parity": "even", "extra": "yes"})
    none = await store.list_keys(tags={"parity": "even", "group": "other"})
    odd_paged = await store.list_keys(tags={"parity": "odd"}, limit=1, order="asc")
    assert _page_keys(even) == ["k0", "k2", "k4"] and _page_keys(both) == ["k4"]
    out.append(("tag even", _page_view(even, t0)))
    out.append(("tag and", _page_keys(both)))
    out.append(("tag no match", _page_view(none, t0)))
    out.append(("tag paged", (_page_keys(odd_paged), odd_paged.has_more)))
    rest_odd = await store.list_keys(tags={"parity": "odd"}, after=odd_paged.last_id, order="asc")
    out.append(("tag paged rest", (_page_keys(rest_odd), rest_odd.has_more)))
    return out


async def same_second_listing(open_store: StoreFactory, clock: ScenarioClock) -> Transcript:
    """Keys written within one second all come back, ordered by (created_at, id), any tie order."""
    t0 = int(clock())
    store = await open_store(_unique("ties"))
    names = [f"step-{i:02d}" for i in range(8)]
    for key in names:
        await store.set_item(key, {"k": key})
    clock.advance(1)
    await store.set_item("later", {})
    out: Transcript = []
    orders: tuple[Order, ...] = ("asc", "desc")
    for order in orders:
        page = await store.list_keys(order=order)
        entries = [(entry.created_at, entry.id) for entry in page.keys]
        expected = sorted(entries, reverse=order == "desc")
        assert entries == expected
        out.append((f"{order} sorted by (created_at, id)", entries == expected))
        out.append((f"{order} keys", sorted(_page_keys(page))))
        out.append((f"{order} created", [created - t0 for created, _ in entries]))
    paged: list[str] = []
    after: str | None = None
    while True:
        page = await store.list_keys(limit=3, after=after)
        paged += _page_keys(page)
        if not page.has_more:
            break
        after = page.last_id
    assert sorted(paged) == sorted([*names, "later"]) and paged[0] == "later"
    out.append(("paged all once", (sorted(paged), paged[0])))
    return out


async def ttl_expiry(open_store: StoreFactory, clock: ScenarioClock) -> Transcript:
    """Store TTL: an item expires ttl seconds after its last write; reads do not renew it."""
    t0 = int(clock())
    store = await open_store(_unique("ttl"), item_ttl_seconds=10)
    out: Transcript = []
    await store.set_item("a", {"v": 1})
    clock.advance(6)
    out.append(("a read at +6", _item_view(await store.get_item("a"), t0)))
    await store.set_item("b", {"v": 1})
    clock.advance(5)  # +11: a expired at +10, b lives until +16
    out.append(("a at +11", await store.get_item("a")))
    out.append(("keys at +11", _page_keys(await store.list_keys())))
    clock.advance(3)  # +14
    await store.set_item("b", {"v": 2})  # renewed: lives until +24
    clock.advance(7)  # +21
    out.append(("b renewed at +21", _item_view(await store.get_item("b"), t0)))
    clock.advance(5)  # +26
    out.append(("b at +26", await store.get_item("b")))
    out.append(("keys at +26", _page_keys(await store.list_keys())))
    out.append(("recreate expired", (await store.create_item("a", {"v": 3})).key))
    assert out[1][1] is None and out[4][1] is None
    return out


async def store_delete_cascade(open_store: StoreFactory, clock: ScenarioClock) -> Transcript:
    """Deleting a store removes its items; the name can be created again, empty."""
    name = _unique("cascade")
    store = await open_store(name)
    for key in ("a", "b", "c"):
        await store.set_item(key, {"k": key}, tags={"t": "x"})
    out: Transcript = []
    deleted = await store.delete()
    out.append(("deleted", (deleted.deleted, deleted.name == name)))
    out.append(("get store", await _outcome(store.get())))
    out.append(("list on deleted", await _outcome(store.list_keys())))
    out.append(("create item on deleted", await _outcome(store.create_item("d", {}))))
    again = await store.delete()
    out.append(("deleted again", (again.deleted, again.id)))
    fresh = await open_store(name)
    out.append(("fresh keys", _page_keys(await fresh.list_keys())))
    out.append(("fresh get", await fresh.get_item("a")))
    out.append(("fresh tag list", _page_keys(await fresh.list_keys(tags={"t": "x"}))))
    try:
        await store.get()
    except FoundryStorageNotFoundError:
        raise AssertionError("the store was created again") from None
    return out


#: Every scenario, by name.
SCENARIOS: Mapping[str, Scenario] = {
    scenario.__name__: scenario
    for scenario in (
        store_settings,
        put_replace_get,
        conditional_writes,
        create_duplicate,
        get_and_delete,
        identifiers_round_trip,
        list_order_and_cursors,
        same_second_listing,
        ttl_expiry,
        store_delete_cascade,
    )
}
