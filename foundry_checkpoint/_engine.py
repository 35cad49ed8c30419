"""One SQLite implementation of the Foundry state store's documented semantics.

:class:`StateEngine` is the embedded local default (through
:class:`foundry_checkpoint._local_store.EngineStore`) and the engine the HTTPS emulator serves,
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
writes), safe for several threads (one connection behind a lock) and several processes on one
file. Indexes make a write and a latest-key lookup cost the same for 10 and for 100,000 items.

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
import hashlib
import json
import os
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from azure.ai.agentserver.core.storage import (
    FoundryStorageBadRequestError,
    FoundryStorageConflictError,
    FoundryStorageNotFoundError,
    FoundryStoragePreconditionError,
)

from foundry_checkpoint._private import private_file
from foundry_checkpoint.errors import FoundryCheckpointError

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

_MAX_NAME = 128
_MAX_VALUE_BYTES = 1_048_576
_MAX_TAGS = 16
_MAX_TAG_KEY = 64
_MAX_TAG_VALUE = 256
_DEFAULT_LIMIT = 20
_MAX_LIMIT = 100
_MAX_TTL = 2_147_483_647
_TAG_KEY_RE = re.compile(r"[a-zA-Z0-9_.\-]+")
_BUSY_TIMEOUT_MS = 30_000
_PURGE_BATCH = 64
_SHARED_PARTITION = ""
_SCHEMA_VERSION = 1
_ITEM_OBJECT = "state_store.item"
_STORE_OBJECT = "state_store"

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS stores (
        name TEXT PRIMARY KEY,
        id TEXT NOT NULL,
        user_isolation INTEGER NOT NULL,
        item_ttl_seconds INTEGER NOT NULL,
        description TEXT,
        tags TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS items (
        store TEXT NOT NULL,
        part TEXT NOT NULL,
        key TEXT NOT NULL,
        id TEXT NOT NULL,
        value TEXT NOT NULL,
        tags TEXT,
        etag TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        expires_at INTEGER,
        PRIMARY KEY (store, part, key)
    )""",
    "CREATE UNIQUE INDEX IF NOT EXISTS items_by_id ON items (store, part, id)",
    "CREATE INDEX IF NOT EXISTS items_by_order ON items (store, part, created_at, id)",
    """CREATE INDEX IF NOT EXISTS items_by_expiry ON items (store, expires_at)
        WHERE expires_at IS NOT NULL""",
    """CREATE TABLE IF NOT EXISTS item_tags (
        store TEXT NOT NULL,
        part TEXT NOT NULL,
        key TEXT NOT NULL,
        tag_key TEXT NOT NULL,
        tag_value TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        id TEXT NOT NULL,
        PRIMARY KEY (store, part, key, tag_key)
    ) WITHOUT ROWID""",
    """CREATE INDEX IF NOT EXISTS item_tags_by_value
        ON item_tags (store, part, tag_key, tag_value, created_at, id)""",
)

_ITEM_COLUMNS = "i.id, i.key, i.etag, i.created_at, i.updated_at, i.tags"


def _bad_request(message: str, param: str) -> FoundryStorageBadRequestError:
    return FoundryStorageBadRequestError(message, status_code=400, param=param)


def _validate_identifier(value: object, param: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= _MAX_NAME:
        raise _bad_request(
            f"{param} must be a string of 1 to {_MAX_NAME} characters, got {value!r:.80}.",
            param,
        )
    return value


def _validate_value(value: object) -> str:
    """Check one item value and return its compact JSON text."""
    if not isinstance(value, Mapping):
        raise _bad_request(f"value must be a JSON object, got {type(value).__name__}.", "value")
    plain = dict(value)
    try:
        size = len(json.dumps(plain, allow_nan=False).encode("utf-8"))
        compact = json.dumps(plain, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise _bad_request(f"value is not serializable as JSON: {exc}.", "value") from exc
    if size > _MAX_VALUE_BYTES:
        raise _bad_request(
            f"value is {size} bytes serialized; the limit is {_MAX_VALUE_BYTES} bytes.",
            "value",
        )
    return compact


def _validate_tags(tags: object) -> dict[str, str] | None:
    """Check a tag mapping; ``None`` and ``{}`` both mean "no tags"."""
    if tags is None:
        return None
    if not isinstance(tags, Mapping):
        raise _bad_request(f"tags must be a mapping, got {type(tags).__name__}.", "tags")
    if len(tags) > _MAX_TAGS:
        raise _bad_request(f"at most {_MAX_TAGS} tags are allowed, got {len(tags)}.", "tags")
    out: dict[str, str] = {}
    for key, value in tags.items():
        if (
            not isinstance(key, str)
            or len(key) > _MAX_TAG_KEY
            or _TAG_KEY_RE.fullmatch(key) is None
        ):
            raise _bad_request(
                f"tag key {key!r:.80} must be 1 to {_MAX_TAG_KEY} characters of [a-zA-Z0-9_.-].",
                "tags",
            )
        if not isinstance(value, str) or len(value) > _MAX_TAG_VALUE:
            raise _bad_request(
                f"tag {key!r} must have a string value of at most {_MAX_TAG_VALUE} characters.",
                "tags",
            )
        out[key] = value
    return out or None


def _validate_ttl(ttl: object) -> int:
    if not isinstance(ttl, int) or isinstance(ttl, bool) or not (ttl == -1 or 1 <= ttl <= _MAX_TTL):
        raise _bad_request(
            f"item_ttl_seconds must be -1 (never expire) or 1 to {_MAX_TTL}, got {ttl!r}.",
            "item_ttl_seconds",
        )
    return ttl


def _validate_limit(limit: object) -> int:
    if limit is None:
        return _DEFAULT_LIMIT
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= _MAX_LIMIT:
        raise _bad_request(f"limit must be 1 to {_MAX_LIMIT}, got {limit!r}.", "limit")
    return limit


def _validate_description(description: object) -> str | None:
    if description is not None and not isinstance(description, str):
        raise _bad_request("description must be a string or null.", "description")
    return description


def _dump_tags(tags: Mapping[str, str] | None) -> str | None:
    return json.dumps(dict(tags), separators=(",", ":"), ensure_ascii=False) if tags else None


def _new_etag() -> str:
    # ``secrets``, not ``uuid.uuid4``: a graph that patches or seeds uuid generation (as
    # LangGraph's own tests do) must see the same ids with this store as with any other saver.
    return f'"{secrets.token_hex(16)}"'


class _Store:
    """The fields of a store row an item call needs."""

    __slots__ = ("isolated", "name", "ttl")

    def __init__(self, name: str, isolated: bool, ttl: int) -> None:
        self.name = name
        self.isolated = isolated
        self.ttl = ttl

    def partition(self, user: str) -> str:
        if not self.isolated:
            return _SHARED_PARTITION
        if not isinstance(user, str):
            raise _bad_request("user must be a string.", "user")
        return user

    def expires_at(self, now: int) -> int | None:
        return None if self.ttl == -1 else now + self.ttl


class StateEngine:
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

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        tie_seed: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._path: Path | None = None if path is None else Path(path)
        self._tie_seed = tie_seed
        self._clock = clock
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = self._open()

    @property
    def path(self) -> Path | None:
        """The database file, or None for an in-memory engine."""
        return self._path

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn is None

    def close(self) -> None:
        """Close the database connection; calling it again does nothing."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # ------------------------------------------------------------------ stores

    def get_store(self, name: str) -> dict[str, Any]:
        """The store's descriptor; 404 when it does not exist.

        Example:
            >>> e = StateEngine(clock=lambda: 7.0)
            >>> _ = e.create_store("s", user_isolation=True, item_ttl_seconds=5)
            >>> {k: e.get_store("s")[k] for k in ("name", "user_isolation", "created_at")}
            {'name': 's', 'user_isolation': True, 'created_at': 7}
        """
        _validate_identifier(name, "name")
        with self._transaction(write=False) as conn:
            row = self._store_row(conn, name)
        return self._store_dict(row)

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
        _validate_identifier(name, "name")
        if not isinstance(user_isolation, bool):
            raise _bad_request("user_isolation must be a boolean.", "user_isolation")
        ttl = _validate_ttl(item_ttl_seconds)
        desc = _validate_description(description)
        clean_tags = _validate_tags(tags)
        with self._transaction(write=True) as conn:
            if self._find_store(conn, name) is not None:
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
                    _dump_tags(clean_tags),
                    now,
                    now,
                ),
            )
            row = self._store_row(conn, name)
        return self._store_dict(row)

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
        _validate_identifier(name, "name")
        sets: list[str] = []
        params: list[Any] = []
        if description is not UNSET:
            sets.append("description = ?")
            params.append(_validate_description(description))
        if tags is not UNSET:
            sets.append("tags = ?")
            params.append(_dump_tags(_validate_tags(tags)))
        with self._transaction(write=True) as conn:
            self._store_row(conn, name)
            sets.append("updated_at = ?")
            params.append(self._now())
            conn.execute(f"UPDATE stores SET {', '.join(sets)} WHERE name = ?", (*params, name))
            row = self._store_row(conn, name)
        return self._store_dict(row)

    def delete_store(self, name: str) -> dict[str, Any]:
        """Delete a store and every item and tag in it; deleting twice is fine.

        Example:
            >>> e = StateEngine()
            >>> e.delete_store("never-existed")["deleted"]
            True
        """
        _validate_identifier(name, "name")
        with self._transaction(write=True) as conn:
            row = self._find_store(conn, name)
            conn.execute("DELETE FROM item_tags WHERE store = ?", (name,))
            conn.execute("DELETE FROM items WHERE store = ?", (name,))
            conn.execute("DELETE FROM stores WHERE name = ?", (name,))
        return {
            "id": None if row is None else row["id"],
            "object": _STORE_OBJECT,
            "name": name,
            "deleted": True,
        }

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
        _validate_identifier(name, "name")
        _validate_identifier(key, "key")
        text = _validate_value(value)
        clean_tags = _validate_tags(tags)
        with self._transaction(write=True) as conn:
            store = self._item_store(conn, name)
            part = store.partition(user)
            now = self._now()
            self._purge_expired(conn, name, now)
            if self._current(conn, name, part, key, now) is not None:
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
        _validate_identifier(name, "name")
        _validate_identifier(key, "key")
        text = _validate_value(value)
        clean_tags = _validate_tags(tags)
        with self._transaction(write=True) as conn:
            store = self._item_store(conn, name)
            part = store.partition(user)
            now = self._now()
            self._purge_expired(conn, name, now)
            current = self._current(conn, name, part, key, now)
            self._check_if_match(key, current, if_match)
            if current is None:
                return self._insert(conn, store, part, key, text, clean_tags, now), True
            etag = _new_etag()
            conn.execute(
                "UPDATE items SET value = ?, tags = ?, etag = ?, updated_at = ?, expires_at = ?"
                " WHERE store = ? AND part = ? AND key = ?",
                (text, _dump_tags(clean_tags), etag, now, store.expires_at(now), name, part, key),
            )
            self._replace_tags(
                conn, name, part, key, clean_tags, current["created_at"], current["id"]
            )
            ref = {
                "id": current["id"],
                "object": _ITEM_OBJECT,
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
        _validate_identifier(name, "name")
        _validate_identifier(key, "key")
        with self._transaction(write=False) as conn:
            store = self._item_store(conn, name)
            row = conn.execute(
                "SELECT id, key, value, tags, etag, created_at, updated_at FROM items"
                " WHERE store = ? AND part = ? AND key = ?"
                " AND (expires_at IS NULL OR expires_at > ?)",
                (name, store.partition(user), key, self._now()),
            ).fetchone()
        if row is None:
            return None
        item: dict[str, Any] = {
            "id": row["id"],
            "object": _ITEM_OBJECT,
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
        _validate_identifier(name, "name")
        _validate_identifier(key, "key")
        with self._transaction(write=True) as conn:
            store = self._item_store(conn, name)
            part = store.partition(user)
            now = self._now()
            self._purge_expired(conn, name, now)
            current = self._current(conn, name, part, key, now)
            self._check_if_match(key, current, if_match)
            if current is not None:
                self._delete_row(conn, name, part, key)
        return {
            "id": None if current is None else current["id"],
            "object": _ITEM_OBJECT,
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
        sql, params, cursor, clean_tags = self._list_query(
            name, user=user, tags=tags, limit=limit, after=after, before=before, order=order
        )
        size = _validate_limit(limit)
        with self._transaction(write=False) as conn:
            store = self._item_store(conn, name)
            part = store.partition(user)
            now = self._now()
            position: tuple[int, str] | None = None
            if cursor is not None:
                position = self._cursor_position(conn, name, part, cursor, clean_tags, now)
                if position is None:
                    return _page([], has_more=False)
            named = self._list_params(params, name, part, now, position)
            rows = conn.execute(sql, named).fetchall()
        data = []
        for row in rows[:size]:
            entry: dict[str, Any] = {
                "id": row["id"],
                "object": _ITEM_OBJECT,
                "key": row["key"],
                "etag": row["etag"],
                "created_at": row["created_at"],
                "updated_at": row["updated_at"],
            }
            if row["tags"]:
                entry["tags"] = json.loads(row["tags"])
            data.append(entry)
        return _page(data, has_more=len(rows) > size)

    # --------------------------------------------------------------- internals

    def _open(self) -> sqlite3.Connection:
        target = ":memory:" if self._path is None else str(self._path)
        if self._path is not None:
            private_file(self._path)  # 0600 before SQLite opens it; -wal/-shm inherit the mode
        conn = sqlite3.connect(
            target,
            timeout=_BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            if self._path is not None:
                self._set_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version < _SCHEMA_VERSION:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            elif version > _SCHEMA_VERSION:
                raise FoundryCheckpointError(
                    f"The state database {target} has schema version {version}, newer than "
                    f"this foundry-checkpoint understands ({_SCHEMA_VERSION}); upgrade the "
                    "package or point AGENTSERVER_STATE_ROOT elsewhere."
                )
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _set_wal(conn: sqlite3.Connection) -> None:
        # Switching to WAL needs a moment of exclusive access; another process opening the
        # same file at the same instant can make it report "locked" despite busy_timeout.
        for attempt in range(100):
            try:
                conn.execute("PRAGMA journal_mode = WAL").fetchone()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 99:
                    raise
                time.sleep(0.01)

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise FoundryCheckpointError(
                    "This StateEngine is closed; create a new one (or call default_engine())."
                )
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _now(self) -> int:
        return int(self._clock())

    def _hash(self, *parts: str) -> str:
        material = json.dumps([self._tie_seed, *parts], ensure_ascii=False)
        return hashlib.sha256(material.encode("utf-8")).hexdigest()[:24]

    def _store_id(self, name: str) -> str:
        return "ss_" + self._hash("store", name)

    def _item_id(self, store: str, part: str, key: str) -> str:
        return "it_" + self._hash("item", store, part, key)

    @staticmethod
    def _find_store(conn: sqlite3.Connection, name: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = conn.execute(
            "SELECT * FROM stores WHERE name = ?", (name,)
        ).fetchone()
        return row

    def _store_row(self, conn: sqlite3.Connection, name: str) -> sqlite3.Row:
        row = self._find_store(conn, name)
        if row is None:
            raise FoundryStorageNotFoundError(
                f"State store {name!r} does not exist.", status_code=404
            )
        return row

    def _item_store(self, conn: sqlite3.Connection, name: str) -> _Store:
        row = self._store_row(conn, name)
        return _Store(name, bool(row["user_isolation"]), int(row["item_ttl_seconds"]))

    @staticmethod
    def _store_dict(row: sqlite3.Row) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": row["id"],
            "object": _STORE_OBJECT,
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

    @staticmethod
    def _current(
        conn: sqlite3.Connection, store: str, part: str, key: str, now: int
    ) -> sqlite3.Row | None:
        """The live row for a key; an expired row for the key is removed on the way."""
        row: sqlite3.Row | None = conn.execute(
            "SELECT id, etag, created_at, expires_at FROM items"
            " WHERE store = ? AND part = ? AND key = ?",
            (store, part, key),
        ).fetchone()
        if row is not None and row["expires_at"] is not None and row["expires_at"] <= now:
            StateEngine._delete_row(conn, store, part, key)
            return None
        return row

    @staticmethod
    def _check_if_match(key: str, current: sqlite3.Row | None, if_match: str | None) -> None:
        if if_match is None:
            return
        etag = None if current is None else str(current["etag"])
        if current is None or (if_match != "*" and if_match != etag):
            raise FoundryStoragePreconditionError(
                f"ETag precondition {if_match!r} failed for state store item {key!r}.",
                status_code=412,
                current_etag=etag,
            )

    def _insert(
        self,
        conn: sqlite3.Connection,
        store: _Store,
        part: str,
        key: str,
        text: str,
        tags: dict[str, str] | None,
        now: int,
    ) -> dict[str, Any]:
        item_id = self._item_id(store.name, part, key)
        etag = _new_etag()
        conn.execute(
            "INSERT INTO items (store, part, key, id, value, tags, etag, created_at, updated_at,"
            " expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                store.name,
                part,
                key,
                item_id,
                text,
                _dump_tags(tags),
                etag,
                now,
                now,
                store.expires_at(now),
            ),
        )
        self._replace_tags(conn, store.name, part, key, tags, now, item_id)
        return {
            "id": item_id,
            "object": _ITEM_OBJECT,
            "key": key,
            "etag": etag,
            "created_at": now,
            "updated_at": now,
        }

    @staticmethod
    def _replace_tags(
        conn: sqlite3.Connection,
        store: str,
        part: str,
        key: str,
        tags: Mapping[str, str] | None,
        created_at: int,
        item_id: str,
    ) -> None:
        conn.execute(
            "DELETE FROM item_tags WHERE store = ? AND part = ? AND key = ?", (store, part, key)
        )
        if tags:
            conn.executemany(
                "INSERT INTO item_tags (store, part, key, tag_key, tag_value, created_at, id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(store, part, key, k, v, created_at, item_id) for k, v in tags.items()],
            )

    @staticmethod
    def _delete_row(conn: sqlite3.Connection, store: str, part: str, key: str) -> None:
        conn.execute(
            "DELETE FROM item_tags WHERE store = ? AND part = ? AND key = ?", (store, part, key)
        )
        conn.execute(
            "DELETE FROM items WHERE store = ? AND part = ? AND key = ?", (store, part, key)
        )

    def _purge_expired(self, conn: sqlite3.Connection, store: str, now: int) -> None:
        """Remove a bounded batch of expired items of one store (lazy TTL clean-up)."""
        rows = conn.execute(
            "SELECT part, key FROM items WHERE store = ? AND expires_at IS NOT NULL"
            " AND expires_at <= ? LIMIT ?",
            (store, now, _PURGE_BATCH),
        ).fetchall()
        for row in rows:
            self._delete_row(conn, store, row["part"], row["key"])

    def _cursor_position(
        self,
        conn: sqlite3.Connection,
        store: str,
        part: str,
        cursor: str,
        tags: dict[str, str] | None,
        now: int,
    ) -> tuple[int, str] | None:
        """``(created_at, id)`` of a live cursor item that passes the tag filter, else None."""
        row = conn.execute(
            "SELECT id, created_at, tags FROM items WHERE store = ? AND part = ? AND id = ?"
            " AND (expires_at IS NULL OR expires_at > ?)",
            (store, part, cursor, now),
        ).fetchone()
        if row is None:
            return None
        if tags:
            own = json.loads(row["tags"]) if row["tags"] else {}
            if any(own.get(k) != v for k, v in tags.items()):
                return None
        return int(row["created_at"]), str(row["id"])

    def _list_query(
        self,
        name: str,
        *,
        user: str,
        tags: Mapping[str, str] | None,
        limit: int | None,
        after: str | None,
        before: str | None,
        order: str,
    ) -> tuple[str, dict[str, Any], str | None, dict[str, str] | None]:
        """Validate list arguments and build the page query.

        Returns the SQL, the tag parameters (store, partition, clock and cursor parameters are
        added by :meth:`_list_params`), the cursor id, and the validated tag filter.
        """
        _validate_identifier(name, "name")
        size = _validate_limit(limit)
        if order not in ("asc", "desc"):
            raise _bad_request(f"order must be 'asc' or 'desc', got {order!r}.", "order")
        if after is not None and before is not None:
            raise _bad_request("after and before cannot be used together.", "after")
        for cursor_param, cursor_value in (("after", after), ("before", before)):
            if cursor_value is not None and not isinstance(cursor_value, str):
                raise _bad_request(f"{cursor_param} must be an item id string.", cursor_param)
        clean_tags = _validate_tags(tags)
        direction = "DESC" if order == "desc" else "ASC"
        cursor = after if after is not None else before
        # "after" follows the chosen order; "before" is the opposite side of the cursor, still
        # read from the start of the list in the chosen order.
        less = (after is not None) == (order == "desc")
        params: dict[str, Any] = {}
        if clean_tags:
            (first_key, first_value), *rest = clean_tags.items()
            sql = (
                f"SELECT {_ITEM_COLUMNS} FROM item_tags t CROSS JOIN items i"
                " ON i.store = t.store AND i.part = t.part AND i.key = t.key"
                " WHERE t.store = :store AND t.part = :part"
                " AND t.tag_key = :k0 AND t.tag_value = :v0"
            )
            params.update(k0=first_key, v0=first_value)
            for index, (tag_key, tag_value) in enumerate(rest, start=1):
                sql += (
                    " AND EXISTS (SELECT 1 FROM item_tags x WHERE x.store = t.store"
                    f" AND x.part = t.part AND x.key = t.key AND x.tag_key = :k{index}"
                    f" AND x.tag_value = :v{index})"
                )
                params[f"k{index}"] = tag_key
                params[f"v{index}"] = tag_value
            columns = ("t.created_at", "t.id")
        else:
            sql = f"SELECT {_ITEM_COLUMNS} FROM items i WHERE i.store = :store AND i.part = :part"
            columns = ("i.created_at", "i.id")
        sql += " AND (i.expires_at IS NULL OR i.expires_at > :now)"
        if cursor is not None:
            sql += f" AND ({columns[0]}, {columns[1]}) {'<' if less else '>'} (:c_at, :c_id)"
        sql += f" ORDER BY {columns[0]} {direction}, {columns[1]} {direction} LIMIT {size + 1}"
        return sql, params, cursor, clean_tags

    @staticmethod
    def _list_params(
        params: dict[str, Any],
        store: str,
        part: str,
        now: int,
        position: tuple[int, str] | None,
    ) -> dict[str, Any]:
        named: dict[str, Any] = {**params, "store": store, "part": part, "now": now}
        if position is not None:
            named["c_at"], named["c_id"] = position
        return named

    def _explain_list_keys(
        self,
        name: str,
        *,
        user: str,
        tags: Mapping[str, str] | None = None,
        limit: int | None = None,
        after: str | None = None,
        order: str = "desc",
    ) -> list[str]:
        """``EXPLAIN QUERY PLAN`` details of the page query :meth:`list_keys` would run."""
        sql, params, _, _ = self._list_query(
            name, user=user, tags=tags, limit=limit, after=after, before=None, order=order
        )
        position = (0, "") if after is not None else None
        with self._transaction(write=False) as conn:
            rows = conn.execute(
                "EXPLAIN QUERY PLAN " + sql, self._list_params(params, name, user, 0, position)
            ).fetchall()
        return [str(row["detail"]) for row in rows]


def _page(data: list[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
