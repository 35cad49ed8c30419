"""One SQLite implementation of the Foundry state store's documented semantics.

:class:`StateEngine` is the embedded local default (through
:class:`foundry_checkpoint._store._embedded.EngineStore`) and the engine the HTTPS emulator serves,
so both see exactly the same behaviour:

* **Limits** answered with ``FoundryStorageBadRequestError`` (status 400) naming the field in
  ``param``: store name and item key 1-128 characters, value a JSON object of at most 1 MB
  (``len(json.dumps(value).encode("utf-8"))``), at most 16 tags with keys of 1-64 characters of
  ``[a-zA-Z0-9_.-]`` and values of at most 256 characters, page size 1-100,
  ``item_ttl_seconds`` -1 or 1-2147483647, ``order`` ``asc``/``desc``, never ``after`` and
  ``before`` together.
* **ETags** are quoted strings, new on every write. ``if_match="*"`` means "must exist"; any
  ``if_match`` on a missing item fails with 412 and ``current_etag=None``; a mismatch fails with
  412 and the current ETag.
* **Timestamps** are whole epoch seconds from the injected ``clock``; ``created_at`` is kept
  when an item is replaced.
* **TTL** is store-level: an item expires at ``updated_at + item_ttl_seconds`` (never with -1),
  is renewed by writes and never by reads, and once expired it is invisible to every call.
  Expired rows are purged lazily by later writes to the same store.
* **Ids** are deterministic hashes of ``(tie_seed, store, partition, key)``, so items created
  within the same second list in a seeded order that is not their insertion order: nothing may
  depend on list order beyond ``(created_at, id)``.
* **Isolation**: a store created with ``user_isolation=True`` partitions its items by the
  ``user`` argument of every item call; another user's key is simply absent.

Storage is one SQLite database (WAL for files, ``busy_timeout``, ``BEGIN IMMEDIATE`` for
writes; :mod:`._engine_db`), safe for several threads (one connection behind a lock) and several
processes on one file. The argument checks are in :mod:`._engine_checks`, the row statements in
:mod:`._engine_rows` and the page query in :mod:`._engine_list`. Indexes make a write and a
latest-key lookup cost the same for 10 and for 100,000 items.

Example:
    >>> engine = StateEngine()
    >>> _ = engine.create_store("demo", user_isolation=True, item_ttl_seconds=-1)
    >>> ref, created = engine.put_item("demo", "k", {"a": 1}, {"kind": "x"}, user="u",
    ...                                if_match=None)
    >>> created, engine.get_item("demo", "k", user="u")["value"]
    (True, {'a': 1})
    >>> engine.get_item("demo", "k", user="someone-else") is None
    True
    >>> [k["key"] for k in engine.list_keys("demo", user="u", tags={"kind": "x"})["data"]]
    ['k']
    >>> engine.close()
"""

from __future__ import annotations

import enum
import json
import sqlite3
from collections.abc import Mapping
from typing import Any, Final

from azure.ai.agentserver.core.storage import FoundryStorageConflictError

from . import _engine_rows as rows
from ._engine_checks import (
    bad_request,
    dump_tags,
    new_etag,
    validate_description,
    validate_identifier,
    validate_limit,
    validate_tags,
    validate_ttl,
    validate_value,
)
from ._engine_db import EngineDatabase
from ._engine_list import (
    among_values,
    cursor_position,
    greatest_queries,
    list_params,
    list_query,
    page,
)
from ._engine_rows import ITEM_OBJECT, STORE_OBJECT

__all__ = ["UNSET", "StateEngine", "Unset"]


class Unset(enum.Enum):
    """The type of :data:`UNSET`, so that "not given" has its own type in signatures.

    Example:
        >>> UNSET is Unset.UNSET, repr(UNSET)
        (True, '<Unset.UNSET>')
    """

    UNSET = enum.auto()

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}>"


UNSET: Final = Unset.UNSET
"""Sentinel for "leave unchanged" in :meth:`StateEngine.update_store`."""


class StateEngine(EngineDatabase):
    """The state store's semantics on one SQLite database.

    ``path=None`` keeps everything in memory (tests, the emulator's default). ``tie_seed``
    changes the hash that orders items created within the same second. ``clock`` returns epoch
    seconds; inject one to test TTL. Every result is a plain JSON-ready dict in the wire shape
    of the hosted service; every failure is the SDK's ``FoundryStorage*Error`` with the status
    code the service answers.

    Example:
        >>> engine = StateEngine(clock=lambda: 1000.0)
        >>> engine.create_store("s", user_isolation=False, item_ttl_seconds=60)["name"]
        's'
        >>> ref = engine.create_item("s", "a", {"x": 1}, None, user="ignored")
        >>> ref["created_at"], ref["etag"].startswith('"')
        (1000, True)
        >>> engine.close(); engine.close()  # idempotent
    """

    # ------------------------------------------------------------------ stores

    def get_store(self, name: str) -> dict[str, Any]:
        """The store's descriptor; 404 when it does not exist.

        Example:
            >>> e = StateEngine(clock=lambda: 7.0)
            >>> _ = e.create_store("s", user_isolation=True, item_ttl_seconds=5)
            >>> {k: e.get_store("s")[k] for k in ("name", "user_isolation", "created_at")}
            {'name': 's', 'user_isolation': True, 'created_at': 7}
        """
        validate_identifier(name, "name")
        with self._transaction(write=False) as conn:
            row = rows.store_row(conn, name)
        return rows.store_dict(row)

    def create_store(
        self,
        name: str,
        *,
        user_isolation: bool,
        item_ttl_seconds: int,
        description: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create a store; 409 when one of that name exists.

        Example:
            >>> e = StateEngine()
            >>> e.create_store("s", user_isolation=True, item_ttl_seconds=-1)["item_ttl_seconds"]
            -1
        """
        validate_identifier(name, "name")
        if not isinstance(user_isolation, bool):
            raise bad_request("user_isolation must be a boolean.", "user_isolation")
        ttl = validate_ttl(item_ttl_seconds)
        desc = validate_description(description)
        clean_tags = validate_tags(tags)
        with self._transaction(write=True) as conn:
            if rows.find_store(conn, name) is not None:
                raise FoundryStorageConflictError(
                    f"State store {name!r} already exists.", status_code=409
                )
            now = self._now()
            conn.execute(
                "INSERT INTO stores (name, id, user_isolation, item_ttl_seconds, description,"
                " tags, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    self._store_id(name),
                    int(user_isolation),
                    ttl,
                    desc,
                    dump_tags(clean_tags),
                    now,
                    now,
                ),
            )
            row = rows.store_row(conn, name)
        return rows.store_dict(row)

    def update_store(
        self,
        name: str,
        *,
        description: str | Unset | None = UNSET,
        tags: Mapping[str, str] | Unset | None = UNSET,
    ) -> dict[str, Any]:
        """Change a store's description and/or tags (``None`` clears, :data:`UNSET` keeps).

        Example:
            >>> e = StateEngine()
            >>> _ = e.create_store("s", user_isolation=True, item_ttl_seconds=-1)
            >>> e.update_store("s", description="d")["description"]
            'd'
        """
        validate_identifier(name, "name")
        sets: list[str] = []
        params: list[Any] = []
        if description is not UNSET:
            sets.append("description = ?")
            params.append(validate_description(description))
        if tags is not UNSET:
            sets.append("tags = ?")
            params.append(dump_tags(validate_tags(tags)))
        with self._transaction(write=True) as conn:
            rows.store_row(conn, name)
            sets.append("updated_at = ?")
            params.append(self._now())
            conn.execute(f"UPDATE stores SET {', '.join(sets)} WHERE name = ?", (*params, name))
            row = rows.store_row(conn, name)
        return rows.store_dict(row)

    def delete_store(self, name: str) -> dict[str, Any]:
        """Delete a store and every item and tag in it; deleting twice is fine.

        Example:
            >>> e = StateEngine()
            >>> e.delete_store("never-existed")["deleted"]
            True
        """
        validate_identifier(name, "name")
        with self._transaction(write=True) as conn:
            row = rows.find_store(conn, name)
            conn.execute("DELETE FROM item_tags WHERE store = ?", (name,))
            conn.execute("DELETE FROM items WHERE store = ?", (name,))
            conn.execute("DELETE FROM stores WHERE name = ?", (name,))
        return {
            "id": None if row is None else row["id"],
            "object": STORE_OBJECT,
            "name": name,
            "deleted": True,
        }

    def list_stores(
        self,
        *,
        limit: int | None = None,
        after: str | None = None,
        before: str | None = None,
        order: str = "desc",
    ) -> dict[str, Any]:
        """One page of store descriptors ordered by ``(created_at, id)``, in the envelope and
        with the cursors of :meth:`list_keys` (``after``/``before`` take a store id; an unknown
        one gives an empty page).

        Example:
            >>> e = StateEngine(clock=lambda: 5.0)
            >>> for n in "abc":
            ...     _ = e.create_store(n, user_isolation=True, item_ttl_seconds=-1)
            >>> page = e.list_stores(limit=2, order="asc")
            >>> len(page["data"]), page["has_more"], page["object"]
            (2, True, 'list')
        """
        size = validate_limit(limit)
        if order not in ("asc", "desc"):
            raise bad_request(f"order must be 'asc' or 'desc', got {order!r}.", "order")
        if after is not None and before is not None:
            raise bad_request("after and before cannot be used together.", "after")
        cursor = after if after is not None else before
        direction = "DESC" if order == "desc" else "ASC"
        less = (after is not None) == (order == "desc")  # as list_keys: before reads from the start
        sql = "SELECT * FROM stores"
        params: tuple[Any, ...] = ()
        with self._transaction(write=False) as conn:
            if cursor is not None:
                at = conn.execute(
                    "SELECT created_at, id FROM stores WHERE id = ?", (cursor,)
                ).fetchone()
                if at is None:
                    return page([], has_more=False)
                sql += f" WHERE (created_at, id) {'<' if less else '>'} (?, ?)"
                params = (at["created_at"], at["id"])
            sql += f" ORDER BY created_at {direction}, id {direction} LIMIT {size + 1}"
            found = conn.execute(sql, params).fetchall()
        data = [rows.store_dict(row) for row in found[:size]]
        return page(data, has_more=len(found) > size)

    # ------------------------------------------------------------------- items

    def create_item(
        self,
        name: str,
        key: str,
        value: Mapping[str, Any],
        tags: Mapping[str, str] | None,
        *,
        user: str,
    ) -> dict[str, Any]:
        """Create an item (an ItemRef dict); 409 when the key exists, 404 without the store.

        Example:
            >>> e = StateEngine()
            >>> _ = e.create_store("s", user_isolation=True, item_ttl_seconds=-1)
            >>> e.create_item("s", "k", {}, None, user="u")["key"]
            'k'
        """
        validate_identifier(name, "name")
        validate_identifier(key, "key")
        text = validate_value(value)
        clean_tags = validate_tags(tags)
        with self._transaction(write=True) as conn:
            store = rows.item_store(conn, name)
            part = store.partition(user)
            now = self._now()
            self._purge(conn, name, now)
            if rows.current(conn, name, part, key, now) is not None:
                raise FoundryStorageConflictError(
                    f"State store item {key!r} already exists.", status_code=409
                )
            ref = self._insert(conn, store, part, key, text, clean_tags, now)
        return ref

    def put_item(
        self,
        name: str,
        key: str,
        value: Mapping[str, Any],
        tags: Mapping[str, str] | None,
        *,
        user: str,
        if_match: str | None,
    ) -> tuple[dict[str, Any], bool]:
        """Create or replace an item; returns ``(ItemRef dict, created)``.

        ``created`` is True when no live item had the key (HTTP 201), False when one was
        replaced (HTTP 200). Missing ``tags`` clear the item's tags; ``created_at`` is kept.

        Example:
            >>> e = StateEngine()
            >>> _ = e.create_store("s", user_isolation=True, item_ttl_seconds=-1)
            >>> ref, created = e.put_item("s", "k", {}, None, user="u", if_match=None)
            >>> created, e.put_item("s", "k", {}, None, user="u", if_match=ref["etag"])[1]
            (True, False)
        """
        validate_identifier(name, "name")
        validate_identifier(key, "key")
        text = validate_value(value)
        clean_tags = validate_tags(tags)
        with self._transaction(write=True) as conn:
            store = rows.item_store(conn, name)
            part = store.partition(user)
            now = self._now()
            self._purge(conn, name, now)
            current = rows.current(conn, name, part, key, now)
            rows.check_if_match(key, current, if_match)
            if current is None:
                return self._insert(conn, store, part, key, text, clean_tags, now), True
            etag = new_etag()
            conn.execute(
                rows.UPDATE_ITEM_SQL,
                (text, dump_tags(clean_tags), etag, now, store.expires_at(now), name, part, key),
            )
            rows.replace_tags(conn, name, part, key, current, clean_tags)
            ref = {
                "id": current["id"],
                "object": ITEM_OBJECT,
                "key": key,
                "etag": etag,
                "created_at": current["created_at"],
                "updated_at": now,
            }
        return ref, False

    def get_item(self, name: str, key: str, *, user: str) -> dict[str, Any] | None:
        """The item (a StateStoreItem dict), or None when absent or expired.

        Example:
            >>> e = StateEngine()
            >>> _ = e.create_store("s", user_isolation=True, item_ttl_seconds=-1)
            >>> e.get_item("s", "missing", user="u") is None
            True
        """
        validate_identifier(name, "name")
        validate_identifier(key, "key")
        with self._transaction(write=False) as conn:
            store = rows.item_store(conn, name)
            row = conn.execute(
                rows.READ_ITEM_SQL, (name, store.partition(user), key, self._now())
            ).fetchone()
        if row is None:
            return None
        item: dict[str, Any] = {
            "id": row["id"],
            "object": ITEM_OBJECT,
            "key": row["key"],
            "value": json.loads(row["value"]),
        }
        if row["tags"]:
            item["tags"] = json.loads(row["tags"])
        item.update(etag=row["etag"], created_at=row["created_at"], updated_at=row["updated_at"])
        return item

    def delete_item(
        self, name: str, key: str, *, user: str, if_match: str | None
    ) -> dict[str, Any]:
        """Delete an item (a DeletedStateStoreItem dict); idempotent, 412 on a failed if_match.

        Example:
            >>> e = StateEngine()
            >>> _ = e.create_store("s", user_isolation=True, item_ttl_seconds=-1)
            >>> e.delete_item("s", "missing", user="u", if_match=None)["deleted"]
            True
        """
        validate_identifier(name, "name")
        validate_identifier(key, "key")
        with self._transaction(write=True) as conn:
            store = rows.item_store(conn, name)
            part = store.partition(user)
            now = self._now()
            self._purge(conn, name, now)
            current = rows.current(conn, name, part, key, now)
            rows.check_if_match(key, current, if_match)
            if current is not None:
                rows.delete_row(conn, name, part, key, current)
        return {
            "id": None if current is None else current["id"],
            "object": ITEM_OBJECT,
            "key": key,
            "deleted": True,
        }

    def list_keys(
        self,
        name: str,
        *,
        user: str,
        tags: Mapping[str, str] | None = None,
        limit: int | None = None,
        after: str | None = None,
        before: str | None = None,
        order: str = "desc",
    ) -> dict[str, Any]:
        """One page of item keys ordered by ``(created_at, id)``.

        ``tags`` filters by exact match of every pair. ``after=<item id>`` returns the items
        after that item in the chosen order; ``before=<item id>`` the first ``limit`` of the
        items before it (from the start of the list). An unknown cursor id gives an empty page.

        Example:
            >>> e = StateEngine(clock=lambda: 5.0)
            >>> _ = e.create_store("s", user_isolation=True, item_ttl_seconds=-1)
            >>> for k in "abc":
            ...     _ = e.create_item("s", k, {}, {"t": "1"}, user="u")
            >>> page = e.list_keys("s", user="u", limit=2)
            >>> len(page["data"]), page["has_more"], page["last_id"] == page["data"][1]["id"]
            (2, True, True)
        """
        sql, params, cursor, clean_tags = list_query(
            name, tags=tags, limit=limit, after=after, before=before, order=order
        )
        size = validate_limit(limit)
        with self._transaction(write=False) as conn:
            store = rows.item_store(conn, name)
            part = store.partition(user)
            now = self._now()
            position: tuple[int, str] | None = None
            if cursor is not None:
                position = cursor_position(conn, name, part, cursor, clean_tags, now)
                if position is None:
                    return page([], has_more=False)
            named = list_params(params, name, part, now, position)
            found = conn.execute(sql, named).fetchall()
        return page([_key_entry(row) for row in found[:size]], has_more=len(found) > size)

    def greatest(
        self,
        name: str,
        *,
        user: str,
        by: str,
        tags: Mapping[str, str],
        among: Mapping[str, str] | None = None,
        count: int = 1,
        below: str | None = None,
    ) -> list[dict[str, Any]]:
        """The keys of the items carrying ``tags`` and one of the greatest values of tag ``by``.

        The ``count`` greatest values (string order; below ``below`` when given) are taken
        among the live items that carry ``tags`` and ``among``; every live item carrying
        ``tags`` with one of those values of ``by`` is returned (in no particular order). One
        indexed walk and one lookup in one read transaction, whatever the number of items:
        what a store with whole-second ``created_at`` cannot answer from its listing order.
        The wire API has no such call; it serves the embedded store's own clients.

        Example:
            >>> e = StateEngine(clock=lambda: 5.0)
            >>> _ = e.create_store("s", user_isolation=True, item_ttl_seconds=-1)
            >>> for key, tags in [("c1", {"id": "1", "k": "c"}), ("c2", {"id": "2", "k": "c"}),
            ...                   ("w2", {"id": "2", "k": "w"}), ("w3", {"id": "3", "k": "w"})]:
            ...     _ = e.create_item("s", key, {}, tags, user="u")
            >>> group = e.greatest("s", user="u", by="id", tags={}, among={"k": "c"})
            >>> sorted(k["key"] for k in group)
            ['c2', 'w2']
            >>> group = e.greatest("s", user="u", by="id", tags={}, among={"k": "c"}, count=2)
            >>> sorted(k["key"] for k in group)
            ['c1', 'c2', 'w2']
        """
        validate_identifier(name, "name")
        top_sql, group_sql, params = greatest_queries(by, tags, among, count=count, below=below)
        with self._transaction(write=False) as conn:
            store = rows.item_store(conn, name)
            named = list_params(params, name, store.partition(user), self._now(), None)
            values = [str(row[0]) for row in conn.execute(top_sql, named).fetchall()]
            if not values:
                return []
            sql, tops = among_values(group_sql, values)
            found = conn.execute(sql, {**named, **tops}).fetchall()
        return [_key_entry(row) for row in found]

    def _purge(self, conn: sqlite3.Connection, name: str, now: int) -> None:
        """Lazy TTL clean-up: a batch of a store's expired items, at most once a second.

        Reads filter expired items themselves; the clean-up only bounds what they leave.
        """
        second, stores = self._purged
        if second != now:
            self._purged = (now, {name})
        elif name in stores:
            return
        else:
            stores.add(name)
        rows.purge_expired(conn, name, now)

    def _insert(
        self,
        conn: sqlite3.Connection,
        store: rows.StoreRow,
        part: str,
        key: str,
        text: str,
        tags: dict[str, str] | None,
        now: int,
    ) -> dict[str, Any]:
        item_id = self._item_id(store.name, part, key)
        return rows.insert(
            conn, store, part, key, text, tags, now, item_id=item_id, etag=new_etag()
        )


def _key_entry(row: sqlite3.Row) -> dict[str, Any]:
    """The wire shape of one listed key (a StateStoreItemKey dict)."""
    entry: dict[str, Any] = {
        "id": row["id"],
        "object": ITEM_OBJECT,
        "key": row["key"],
        "etag": row["etag"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }
    if row["tags"]:
        entry["tags"] = json.loads(row["tags"])
    return entry
