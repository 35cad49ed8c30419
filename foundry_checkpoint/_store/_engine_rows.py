"""Row-level statements of the SQLite engine: stores, items, tags and lazy TTL clean-up.

The statements are named constants, so a test can ``EXPLAIN`` exactly what the engine runs.
Every function takes an open connection inside the caller's transaction.

Example:
    >>> from foundry_checkpoint._store._engine_db import open_database
    >>> conn = open_database(None)
    >>> find_store(conn, "nothing") is None
    True
    >>> conn.close()
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any, Final

from azure.ai.agentserver.core.storage import (
    FoundryStorageNotFoundError,
    FoundryStoragePreconditionError,
)

from ._engine_checks import bad_request, dump_tags

__all__ = [
    "CURRENT_ITEM_SQL",
    "DELETE_ITEM_SQL",
    "DELETE_TAG_SQL",
    "EXPIRED_ITEMS_SQL",
    "INSERT_ITEM_SQL",
    "INSERT_TAG_SQL",
    "ITEM_OBJECT",
    "READ_ITEM_SQL",
    "STORE_OBJECT",
    "UPDATE_ITEM_SQL",
    "StoreRow",
    "check_if_match",
    "current",
    "delete_row",
    "find_store",
    "insert",
    "item_store",
    "purge_expired",
    "replace_tags",
    "store_dict",
    "store_row",
]

#: The ``object`` field of an item answer.
ITEM_OBJECT: Final = "state_store.item"
#: The ``object`` field of a store answer.
STORE_OBJECT: Final = "state_store"
_SHARED_PARTITION: Final = ""
_PURGE_BATCH: Final = 64

#: The row of a key, live or expired (params: store, part, key).
CURRENT_ITEM_SQL: Final = (
    "SELECT id, etag, created_at, expires_at, tags FROM items"
    " WHERE store = ? AND part = ? AND key = ?"
)
#: A live item read back (params: store, part, key, now).
READ_ITEM_SQL: Final = (
    "SELECT id, key, value, tags, etag, created_at, updated_at FROM items"
    " WHERE store = ? AND part = ? AND key = ?"
    " AND (expires_at IS NULL OR expires_at > ?)"
)
#: A batch of expired items of one store (params: store, now, batch size).
EXPIRED_ITEMS_SQL: Final = (
    "SELECT part, key, id, created_at, tags FROM items WHERE store = ?"
    " AND expires_at IS NOT NULL AND expires_at <= ? LIMIT ?"
)
#: Insert an item (params: store, part, key, id, value, tags, etag, created, updated, expires).
INSERT_ITEM_SQL: Final = (
    "INSERT INTO items (store, part, key, id, value, tags, etag, created_at, updated_at,"
    " expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: Replace an item's value (params: value, tags, etag, updated, expires, store, part, key).
UPDATE_ITEM_SQL: Final = (
    "UPDATE items SET value = ?, tags = ?, etag = ?, updated_at = ?, expires_at = ?"
    " WHERE store = ? AND part = ? AND key = ?"
)
#: Delete one tag row of an item (params: store, part, tag key, tag value, created, id): the
#: whole primary key, as an item's tags are stored in value order (see ``_engine_db``).
DELETE_TAG_SQL: Final = (
    "DELETE FROM item_tags WHERE store = ? AND part = ? AND tag_key = ? AND tag_value = ?"
    " AND created_at = ? AND id = ?"
)
#: Delete an item (params: store, part, key).
DELETE_ITEM_SQL: Final = "DELETE FROM items WHERE store = ? AND part = ? AND key = ?"
#: Insert one tag row (params: store, part, tag key, tag value, created, id, key).
INSERT_TAG_SQL: Final = (
    "INSERT INTO item_tags (store, part, tag_key, tag_value, created_at, id, key)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)


class StoreRow:
    """The fields of a store row an item call needs.

    Example:
        >>> row = StoreRow("s", isolated=True, ttl=60)
        >>> row.partition("ann"), row.expires_at(100)
        ('ann', 160)
        >>> StoreRow("s", isolated=False, ttl=-1).partition("ann") == ""
        True
    """

    __slots__ = ("isolated", "name", "ttl")

    def __init__(self, name: str, isolated: bool, ttl: int) -> None:
        self.name = name
        self.isolated = isolated
        self.ttl = ttl

    def partition(self, user: str) -> str:
        """The partition of ``user``'s items: their own with isolation, else the shared one.

        Args:
            user: The caller's user.

        Returns:
            The partition value stored in ``part``.

        Raises:
            FoundryStorageBadRequestError: ``user`` is not a string (isolated stores).
        """
        if not self.isolated:
            return _SHARED_PARTITION
        if not isinstance(user, str):
            raise bad_request("user must be a string.", "user")
        return user

    def expires_at(self, now: int) -> int | None:
        """When an item written at ``now`` expires (None: never).

        Args:
            now: The write time in epoch seconds.

        Returns:
            The expiry in epoch seconds, or None.
        """
        return None if self.ttl == -1 else now + self.ttl


def find_store(conn: sqlite3.Connection, name: str) -> sqlite3.Row | None:
    """The store row of ``name``, or None."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM stores WHERE name = ?", (name,)
    ).fetchone()
    return row


def store_row(conn: sqlite3.Connection, name: str) -> sqlite3.Row:
    """The store row of ``name``.

    Raises:
        FoundryStorageNotFoundError: No such store (404).
    """
    row = find_store(conn, name)
    if row is None:
        raise FoundryStorageNotFoundError(f"State store {name!r} does not exist.", status_code=404)
    return row


def item_store(conn: sqlite3.Connection, name: str) -> StoreRow:
    """The :class:`StoreRow` of ``name`` (404 when it does not exist)."""
    row = store_row(conn, name)
    return StoreRow(name, bool(row["user_isolation"]), int(row["item_ttl_seconds"]))


def store_dict(row: sqlite3.Row) -> dict[str, Any]:
    """The wire shape of a store row."""
    out: dict[str, Any] = {
        "id": row["id"],
        "object": STORE_OBJECT,
        "name": row["name"],
        "user_isolation": bool(row["user_isolation"]),
        "item_ttl_seconds": row["item_ttl_seconds"],
    }
    if row["description"] is not None:
        out["description"] = row["description"]
    if row["tags"]:
        out["tags"] = json.loads(row["tags"])
    out.update(created_at=row["created_at"], updated_at=row["updated_at"])
    return out


def current(
    conn: sqlite3.Connection, store: str, part: str, key: str, now: int
) -> sqlite3.Row | None:
    """The live row for a key; an expired row for the key is removed on the way."""
    row: sqlite3.Row | None = conn.execute(CURRENT_ITEM_SQL, (store, part, key)).fetchone()
    if row is not None and row["expires_at"] is not None and row["expires_at"] <= now:
        delete_row(conn, store, part, key, row)
        return None
    return row


def check_if_match(key: str, row: sqlite3.Row | None, if_match: str | None) -> None:
    """Check an ``if_match`` precondition against the current row of ``key``.

    Raises:
        FoundryStoragePreconditionError: The item is missing or has another ETag (412).
    """
    if if_match is None:
        return
    etag = None if row is None else str(row["etag"])
    if row is None or (if_match != "*" and if_match != etag):
        raise FoundryStoragePreconditionError(
            f"ETag precondition {if_match!r} failed for state store item {key!r}.",
            status_code=412,
            current_etag=etag,
        )


def insert(
    conn: sqlite3.Connection,
    store: StoreRow,
    part: str,
    key: str,
    text: str,
    tags: dict[str, str] | None,
    now: int,
    *,
    item_id: str,
    etag: str,
) -> dict[str, Any]:
    """Insert a new item and its tags; the ItemRef dict of it."""
    conn.execute(
        INSERT_ITEM_SQL,
        (
            store.name,
            part,
            key,
            item_id,
            text,
            dump_tags(tags),
            etag,
            now,
            now,
            store.expires_at(now),
        ),
    )
    if tags:  # a new item has no tag rows yet (delete_row removes them with the item)
        _insert_tags(conn, store.name, part, key, tags, now, item_id)
    return {
        "id": item_id,
        "object": ITEM_OBJECT,
        "key": key,
        "etag": etag,
        "created_at": now,
        "updated_at": now,
    }


def replace_tags(
    conn: sqlite3.Connection,
    store: str,
    part: str,
    key: str,
    old: sqlite3.Row,
    tags: Mapping[str, str] | None,
) -> None:
    """Replace the tag rows of an item (``old``: its current row) with rows for ``tags``; they
    keep its order columns (``created_at``, ``id``) for indexed listing."""
    _delete_tags(conn, store, part, old)
    if tags:
        _insert_tags(conn, store, part, key, tags, old["created_at"], old["id"])


def _insert_tags(
    conn: sqlite3.Connection,
    store: str,
    part: str,
    key: str,
    tags: Mapping[str, str],
    created_at: int,
    item_id: str,
) -> None:
    conn.executemany(
        INSERT_TAG_SQL, [(store, part, k, v, created_at, item_id, key) for k, v in tags.items()]
    )


def _delete_tags(conn: sqlite3.Connection, store: str, part: str, row: sqlite3.Row) -> None:
    """Delete the tag rows of an item, found from its row (tags, ``created_at``, ``id``)."""
    if row["tags"]:
        created_at, item_id = row["created_at"], row["id"]
        conn.executemany(
            DELETE_TAG_SQL,
            [(store, part, k, v, created_at, item_id) for k, v in json.loads(row["tags"]).items()],
        )


def delete_row(conn: sqlite3.Connection, store: str, part: str, key: str, row: sqlite3.Row) -> None:
    """Delete an item (``row``: its current row) and its tag rows."""
    _delete_tags(conn, store, part, row)
    conn.execute(DELETE_ITEM_SQL, (store, part, key))


def purge_expired(conn: sqlite3.Connection, store: str, now: int) -> None:
    """Remove a bounded batch of expired items of one store (lazy TTL clean-up)."""
    rows = conn.execute(EXPIRED_ITEMS_SQL, (store, now, _PURGE_BATCH)).fetchall()
    for row in rows:
        delete_row(conn, store, row["part"], row["key"], row)
