"""Foundry's response store (``{FOUNDRY_PROJECT_ENDPOINT}/storage/...``) as the emulator serves it.

The Responses hosts (azure-ai-agentserver-responses' ``FoundryStorageProvider``, the default
store of ``ResponsesAgentServerHost`` in hosted mode) keep response objects, their input items
and the conversation history there. :class:`ResponseTable` implements the calls that client
makes:

* ``POST responses`` with ``{"response", "input_items", "history_item_ids"}`` creates (``201``;
  an id already stored is ``409`` with ``error.code`` ``conflict``);
* ``GET``, ``POST`` (replace the snapshot) and ``DELETE`` ``responses/{id}`` (``404`` when
  absent);
* ``GET responses/{id}/input_items`` pages the history and input items (``limit``, ``order``,
  ``after``, ``before``) as ``{"object": "list", "data", "first_id", "last_id", "has_more"}``;
* ``POST items/batch/retrieve`` with ``{"item_ids"}`` answers a JSON array in that order,
  ``null`` where an id is unknown;
* ``GET history/item_ids`` (``previous_response_id``, ``conversation_id``, ``limit``; ``-1``
  for all) answers the ids of the history, input and output items of the previous response
  and of every response of the conversation, first occurrence kept, the most recent ``limit``.

Responses and items are partitioned by the resolved caller, as state-store items are, and kept
in the emulator's SQLite database (tables of their own).
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
from collections.abc import Mapping
from typing import Any, Final

from ._tasks import TaskError

__all__ = ["ResponseTable"]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS emulator_responses (
    partition TEXT NOT NULL,
    id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    conversation_id TEXT,
    record TEXT NOT NULL,
    PRIMARY KEY (partition, id)
);
CREATE INDEX IF NOT EXISTS emulator_responses_conversation
    ON emulator_responses (partition, conversation_id, seq);
CREATE TABLE IF NOT EXISTS emulator_response_items (
    partition TEXT NOT NULL,
    id TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (partition, id)
);
"""
_MAX_INPUT_PAGE: Final = 100


def _not_found(response_id: str) -> TaskError:
    return TaskError(404, "not_found", f"Response {response_id!r} was not found.")


def _invalid(message: str) -> TaskError:
    return TaskError(400, "invalid_request", message)


def _conversation_id(response: Mapping[str, Any]) -> str | None:
    conversation = response.get("conversation")
    if isinstance(conversation, str):
        return conversation or None
    if isinstance(conversation, Mapping):
        value = conversation.get("id")
        return str(value) if value else None
    return None


def _item_ids(items: Any) -> list[str]:
    if not isinstance(items, list):
        return []
    return [str(item["id"]) for item in items if isinstance(item, dict) and item.get("id")]


class ResponseTable:
    """The stored responses and items of every caller.

    Args:
        conn: The platform database (``open_platform_database``).

    Example:
        >>> from foundry_checkpoint.emulator._tasks import open_platform_database
        >>> table = ResponseTable(open_platform_database(None))
        >>> item = {"id": "msg_1", "type": "message"}
        >>> table.create("alice", {"response": {"id": "r1"}, "input_items": [item]})
        >>> table.history_item_ids("alice", {"previous_response_id": "r1", "limit": "-1"})
        ['msg_1']
        >>> table.get_items("bob", {"item_ids": ["msg_1"]})
        [None]
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._conn.executescript(_SCHEMA)
        row = self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM emulator_responses").fetchone()
        self._seq = itertools.count(int(row[0]) + 1)

    def _load(self, user: str, response_id: str) -> dict[str, Any] | None:
        row = self._conn.execute(
            "SELECT record FROM emulator_responses WHERE partition = ? AND id = ?",
            (user, response_id),
        ).fetchone()
        if row is None:
            return None
        record: dict[str, Any] = json.loads(row[0])
        return record

    def _put_items(self, user: str, items: Any) -> None:
        if not isinstance(items, list):
            return
        self._conn.executemany(
            "INSERT OR REPLACE INTO emulator_response_items (partition, id, item) VALUES (?, ?, ?)",
            [
                (user, str(item["id"]), json.dumps(item))
                for item in items
                if isinstance(item, dict) and item.get("id")
            ],
        )

    def create(self, user: str, body: Mapping[str, Any]) -> None:
        """``POST responses``.

        Args:
            user: The resolved caller.
            body: ``{"response", "input_items", "history_item_ids"}``.

        Raises:
            TaskError: 400 without a response id, 409 when it is already stored.
        """
        response = body.get("response")
        if not isinstance(response, dict) or not response.get("id"):
            raise _invalid("'response' must be an object with an 'id'.")
        history = body.get("history_item_ids") or []
        if not isinstance(history, list) or not all(isinstance(i, str) for i in history):
            raise _invalid("'history_item_ids' must be an array of strings.")
        response_id = str(response["id"])
        with self._lock:
            if self._load(user, response_id) is not None:
                raise TaskError(409, "conflict", f"Response {response_id!r} already exists.")
            self._put_items(user, body.get("input_items"))
            self._put_items(user, response.get("output"))
            record = {
                "response": response,
                "input_item_ids": _item_ids(body.get("input_items")),
                "output_item_ids": _item_ids(response.get("output")),
                "history_item_ids": history,
            }
            self._conn.execute(
                "INSERT INTO emulator_responses (partition, id, seq, conversation_id, record) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    user,
                    response_id,
                    next(self._seq),
                    _conversation_id(response),
                    json.dumps(record),
                ),
            )

    def get(self, user: str, response_id: str) -> dict[str, Any]:
        """``GET responses/{id}``.

        Args:
            user: The resolved caller.
            response_id: The response id.

        Returns:
            The stored response object.

        Raises:
            TaskError: 404 when absent.
        """
        with self._lock:
            record = self._load(user, response_id)
        if record is None:
            raise _not_found(response_id)
        response: dict[str, Any] = record["response"]
        return response

    def update(self, user: str, response_id: str, response: Mapping[str, Any]) -> None:
        """``POST responses/{id}``: replace the snapshot (and store its output items).

        Args:
            user: The resolved caller.
            response_id: The response id.
            response: The new response object.

        Raises:
            TaskError: 404 when absent.
        """
        with self._lock:
            record = self._load(user, response_id)
            if record is None:
                raise _not_found(response_id)
            self._put_items(user, response.get("output"))
            record["response"] = dict(response)
            record["output_item_ids"] = _item_ids(response.get("output"))
            self._conn.execute(
                "UPDATE emulator_responses SET record = ? WHERE partition = ? AND id = ?",
                (json.dumps(record), user, response_id),
            )

    def delete(self, user: str, response_id: str) -> dict[str, Any]:
        """``DELETE responses/{id}``.

        Args:
            user: The resolved caller.
            response_id: The response id.

        Returns:
            ``{"object": "response.deleted", "id", "deleted": true}``.

        Raises:
            TaskError: 404 when absent.
        """
        with self._lock:
            deleted = self._conn.execute(
                "DELETE FROM emulator_responses WHERE partition = ? AND id = ?",
                (user, response_id),
            ).rowcount
        if not deleted:
            raise _not_found(response_id)
        return {"object": "response.deleted", "id": response_id, "deleted": True}

    def _items(self, user: str, ids: list[str]) -> list[dict[str, Any] | None]:
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for item_id, text in self._conn.execute(
                f"SELECT id, item FROM emulator_response_items WHERE partition = ? "
                f"AND id IN ({marks})",
                (user, *chunk),
            ):
                found[item_id] = json.loads(text)
        return [found.get(i) for i in ids]

    def input_items(self, user: str, response_id: str, query: Mapping[str, str]) -> dict[str, Any]:
        """``GET responses/{id}/input_items``: a page of the history and input items.

        Args:
            user: The resolved caller.
            response_id: The response id.
            query: ``limit`` (1-100, default 20), ``order`` (``desc`` default), ``after``,
                ``before``.

        Returns:
            The list envelope.

        Raises:
            TaskError: 404 when absent, 400 for a bad ``limit`` or ``order``.
        """
        raw = query.get("limit", "20")
        if not raw.isdigit() or not 1 <= int(raw) <= _MAX_INPUT_PAGE:
            raise _invalid(f"limit must be an integer from 1 to {_MAX_INPUT_PAGE}.")
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise _invalid("order must be 'asc' or 'desc'.")
        with self._lock:
            record = self._load(user, response_id)
            if record is None:
                raise _not_found(response_id)
            ids = [*record["history_item_ids"], *record["input_item_ids"]]
            if order == "desc":
                ids.reverse()
            after, before = query.get("after"), query.get("before")
            if after is not None and after in ids:
                ids = ids[ids.index(after) + 1 :]
            if before is not None and before in ids:
                ids = ids[: ids.index(before)]
            limit = int(raw)
            items = [i for i in self._items(user, ids[:limit]) if i is not None]
        return {
            "object": "list",
            "data": items,
            "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None,
            "has_more": len(ids) > limit,
        }

    def get_items(self, user: str, body: Mapping[str, Any]) -> list[dict[str, Any] | None]:
        """``POST items/batch/retrieve``.

        Args:
            user: The resolved caller.
            body: ``{"item_ids": [...]}``.

        Returns:
            The items in request order, None where unknown.

        Raises:
            TaskError: 400 when ``item_ids`` is not an array of strings.
        """
        ids = body.get("item_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise _invalid("'item_ids' must be an array of strings.")
        with self._lock:
            return self._items(user, ids)

    def history_item_ids(self, user: str, query: Mapping[str, str]) -> list[str]:
        """``GET history/item_ids``.

        Args:
            user: The resolved caller.
            query: ``previous_response_id``, ``conversation_id``, ``limit`` (``-1``: all).

        Returns:
            The ids, oldest first.

        Raises:
            TaskError: 400 for a ``limit`` that is not an integer.
        """
        try:
            limit = int(query.get("limit", "-1"))
        except ValueError:
            raise _invalid("limit must be an integer (-1 for all).") from None
        records: list[dict[str, Any]] = []
        with self._lock:
            previous = query.get("previous_response_id")
            if previous is not None:
                record = self._load(user, previous)
                if record is not None:
                    records.append(record)
            conversation = query.get("conversation_id")
            if conversation is not None:
                records.extend(
                    json.loads(text)
                    for (text,) in self._conn.execute(
                        "SELECT record FROM emulator_responses WHERE partition = ? "
                        "AND conversation_id = ? ORDER BY seq",
                        (user, conversation),
                    )
                )
        resolved: list[str] = []
        for record in records:
            resolved += record["history_item_ids"]
            resolved += record["input_item_ids"]
            resolved += record["output_item_ids"]
        unique = list(dict.fromkeys(resolved))
        if limit == -1:
            return unique
        return unique[-limit:] if limit > 0 else []
