"""The platform's task API (``{FOUNDRY_PROJECT_ENDPOINT}/tasks``) as the emulator serves it.

azure-ai-agentserver-core's resilient task runtime (``@task``, ``@multi_turn_task``, the
Responses hosts' ``resilient_background``) keeps its tasks there in hosted mode, through
``HostedTaskProvider``. :class:`TaskTable` implements the service side of that client's calls:

* ``POST /tasks`` creates (``201``); lease parameters travel in the query string
  (``lease_owner``, ``lease_instance_id``, ``lease_duration_seconds``); a status of
  ``in_progress`` requires them, ``pending`` refuses them; an existing id is ``409
  task_already_exists``.
* ``GET /tasks/{id}`` reads (``404`` when absent); ``PATCH /tasks/{id}`` changes status, payload
  (shallow merge), tags and attachments (null deletes a key; ``"attachments": null`` clears
  them), error and suspension reason, and acquires, renews or force-expires
  (``lease_duration_seconds=0``) the lease; ``If-Match`` must equal the current ``etag``
  (else ``412 etag_mismatch``); a lease held by another live owner is ``409
  lease_held_by_another``, a completed task ``409 task_immutable``, an illegal transition
  ``409 invalid_state_transition``.
* ``DELETE /tasks/{id}`` (``force=true`` for a task not completed) answers ``204``.
* ``GET /tasks`` lists newest first (``order=asc`` oldest first) with the filters the client
  sends, in pages of ``limit`` (1-100) answered as ``{"object": "list", "data", "first_id",
  "last_id", "has_more"}``; the client follows ``after=last_id``.

A lease expires when the emulator's clock passes its ``expires_at``: another owner may then take
it (``generation`` and ``expiry_count`` grow). Field checks are the SDK's own
(``azure.ai.agentserver.core.tasks._validation``), so a request its local provider refuses is
refused here with the same code. Tasks are partitioned by the resolved caller, as items are,
and kept in the emulator's SQLite database (a table of their own).
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
import secrets
import sqlite3
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from azure.ai.agentserver.core.tasks import _validation
from azure.ai.agentserver.core.tasks._exceptions_internal import _HostedConflict

__all__ = ["TaskError", "TaskTable", "open_platform_database"]

#: Page size of ``GET /tasks`` when the request names none, and the largest allowed.
DEFAULT_TASK_PAGE: Final = 20
MAX_TASK_PAGE: Final = 100
_MAX_ATTACHMENTS: Final = 20

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS emulator_tasks (
    partition TEXT NOT NULL,
    id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (partition, id)
);
CREATE INDEX IF NOT EXISTS emulator_tasks_seq ON emulator_tasks (partition, seq);
"""


class TaskError(Exception):
    """A task call the service refuses: its status, error code and message.

    Args:
        status: The HTTP status (400, 404, 409 or 412).
        code: The ``error.code`` the client dispatches on.
        message: The ``error.message``.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def open_platform_database(path: str | None) -> sqlite3.Connection:
    """Open the connection the platform tables (tasks, responses) share.

    Args:
        path: The emulator's SQLite file, or None for memory.

    Returns:
        An autocommit connection usable from any one thread at a time.
    """
    conn = sqlite3.connect(
        path if path is not None else ":memory:",
        timeout=30.0,
        isolation_level=None,
        check_same_thread=False,
    )
    return conn


def _conflict(status: int, code: str, message: str) -> TaskError:
    return TaskError(status, code, message)


def _lease_held() -> TaskError:
    return TaskError(409, "lease_held_by_another", "Lease is held by another owner or instance.")


def _invalid(message: str) -> TaskError:
    return TaskError(400, "invalid_request", message)


def _optional_str(body: Mapping[str, Any], field: str) -> str | None:
    value = body.get(field)
    if value is not None and not isinstance(value, str):
        raise _invalid(f"'{field}' must be a string.")
    return value


def _optional_dict(body: Mapping[str, Any], field: str) -> dict[str, Any] | None:
    value = body.get(field)
    if value is not None and not isinstance(value, dict):
        raise _invalid(f"'{field}' must be a JSON object.")
    return value


class TaskTable:
    """The task records of every caller, with the service's lease and etag rules.

    Not thread-safe by itself beyond its own lock; the emulator calls it from its engine thread.

    Args:
        conn: The platform database (:func:`open_platform_database`).
        clock: Epoch seconds; lease expiry and timestamps follow it.

    Example:
        >>> table = TaskTable(open_platform_database(None), clock=lambda: 1000.0)
        >>> task = table.create("alice", {"agent_name": "a", "session_id": "s", "title": "t"}, {})
        >>> task["status"], table.get("bob", task["id"]) is None
        ('pending', True)
        >>> table.list("alice", {})["data"][0]["id"] == task["id"]
        True
    """

    def __init__(self, conn: sqlite3.Connection, clock: Callable[[], float]) -> None:
        self._conn = conn
        self._clock = clock
        self._lock = threading.Lock()
        self._conn.executescript(_SCHEMA)
        row = self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM emulator_tasks").fetchone()
        self._seq = itertools.count(int(row[0]) + 1)

    # --- time ------------------------------------------------------------------------------

    def _iso(self, offset: float = 0.0) -> str:
        moment = datetime.datetime.fromtimestamp(self._clock() + offset, tz=datetime.timezone.utc)
        return moment.isoformat()

    def _expired(self, lease: Mapping[str, Any] | None) -> bool:
        if lease is None:
            return True
        try:
            expires = datetime.datetime.fromisoformat(str(lease.get("expires_at", "")))
        except ValueError:
            return True
        return self._clock() >= expires.timestamp()

    # --- rows ------------------------------------------------------------------------------

    def _load(self, user: str, task_id: str) -> dict[str, Any] | None:
        row = self._conn.execute(
            "SELECT record FROM emulator_tasks WHERE partition = ? AND id = ?", (user, task_id)
        ).fetchone()
        if row is None:
            return None
        record: dict[str, Any] = json.loads(row[0])
        return record

    def _store(self, user: str, task: dict[str, Any], *, new: bool) -> dict[str, Any]:
        task["etag"] = f'"{secrets.token_hex(8)}"'
        text = json.dumps(task, separators=(",", ":"))
        if new:
            self._conn.execute(
                "INSERT INTO emulator_tasks (partition, id, seq, record) VALUES (?, ?, ?, ?)",
                (user, task["id"], next(self._seq), text),
            )
        else:
            self._conn.execute(
                "UPDATE emulator_tasks SET record = ? WHERE partition = ? AND id = ?",
                (text, user, task["id"]),
            )
        return copy.deepcopy(task)

    @staticmethod
    def _lease_request(query: Mapping[str, str]) -> tuple[str, str, int] | None:
        raw = query.get("lease_duration_seconds")
        duration: int | None = None
        if raw is not None:
            try:
                duration = int(raw)
            except ValueError:
                raise _invalid("lease_duration_seconds must be an integer.") from None
        return _validation.validate_lease_params(
            query.get("lease_owner"), query.get("lease_instance_id"), duration
        )

    def _new_lease(
        self, current: Mapping[str, Any] | None, request: tuple[str, str, int]
    ) -> dict[str, Any]:
        owner, instance_id, duration = request
        generation = 0
        expiry_count = 0
        if current is not None:
            expired = self._expired(current)
            generation = int(current.get("generation", 0))
            expiry_count = int(current.get("expiry_count", 0))
            same_owner = current.get("owner") == owner
            if same_owner and current.get("instance_id") == instance_id:
                pass
            elif same_owner:
                generation += 1
                expiry_count += 1 if expired else 0
            elif expired:
                generation += 1
                expiry_count += 1
            else:
                raise _lease_held()
        return {
            "owner": owner,
            "instance_id": instance_id,
            "generation": generation,
            "expires_at": self._iso(duration),
            "expiry_count": expiry_count,
            "heartbeat_at": self._iso(),
        }

    # --- calls -----------------------------------------------------------------------------

    def create(
        self, user: str, body: Mapping[str, Any], query: Mapping[str, str]
    ) -> dict[str, Any]:
        """``POST /tasks``: a new task in ``user``'s partition.

        Args:
            user: The resolved caller.
            body: The request's JSON object.
            query: The query parameters (the lease triplet).

        Returns:
            The created task record.

        Raises:
            TaskError: a refused field, lease or an existing id.
        """
        with self._lock:
            try:
                return self._create(user, body, query)
            except _HostedConflict as exc:
                raise TaskError(exc.status_code, exc._code, str(exc.message or exc)) from None

    def _create(
        self, user: str, body: Mapping[str, Any], query: Mapping[str, str]
    ) -> dict[str, Any]:
        task_id = _optional_str(body, "id") or f"task-{secrets.token_hex(8)}"
        _validation.validate_task_id(task_id)
        agent_name = _optional_str(body, "agent_name")
        session_id = _optional_str(body, "session_id")
        title = _optional_str(body, "title")
        description = _optional_str(body, "description")
        _validation.validate_required_string(
            agent_name, "agent_name", _validation.MAX_AGENT_NAME_LEN
        )
        _validation.validate_required_string(
            session_id, "session_id", _validation.MAX_SESSION_ID_LEN
        )
        if title is not None:
            _validation.validate_required_string(title, "title", _validation.MAX_TITLE_LEN)
        _validation.validate_optional_string(
            description, "description", _validation.MAX_DESCRIPTION_LEN
        )
        tags = _optional_dict(body, "tags")
        _validation.validate_tags(tags)
        payload = body.get("payload")
        _validation.validate_payload_size(payload)
        source = _optional_dict(body, "source")
        _validation.validate_source(source)
        attachments = _optional_dict(body, "attachments")
        _validation.validate_attachment_keys(attachments)
        status = _validation.validate_create_status(_optional_str(body, "status") or "pending")
        lease_request = self._lease_request(query)
        if status == "pending" and lease_request is not None:
            raise _invalid(
                "lease_owner, lease_instance_id, and lease_duration_seconds must not be "
                "provided when status is pending."
            )
        if status == "in_progress" and (lease_request is None or lease_request[2] == 0):
            raise _invalid("A task created in_progress needs a lease (lease_duration_seconds > 0).")
        if self._load(user, task_id) is not None:
            raise TaskError(409, "task_already_exists", f"Task {task_id!r} already exists.")
        kept = {k: v for k, v in (attachments or {}).items() if v is not None}
        if len(kept) > _MAX_ATTACHMENTS:
            raise _invalid(f"A task has at most {_MAX_ATTACHMENTS} attachments.")
        now = self._iso()
        task: dict[str, Any] = {
            "object": "task",
            "id": task_id,
            "agent_name": agent_name,
            "session_id": session_id,
            "status": status,
            "title": title,
            "description": description,
            "lease": self._new_lease(None, lease_request) if lease_request else None,
            "payload": payload,
            "tags": tags,
            "error": None,
            "suspension_reason": None,
            "source": source,
            "attachments": kept or None,
            "created_at": now,
            "updated_at": now,
            "started_at": now if status == "in_progress" else None,
            "completed_at": now if status == "completed" else None,
        }
        return self._store(user, task, new=True)

    def get(self, user: str, task_id: str) -> dict[str, Any] | None:
        """``GET /tasks/{id}``.

        Args:
            user: The resolved caller.
            task_id: The task id.

        Returns:
            The record, or None when ``user`` has no such task.
        """
        with self._lock:
            return self._load(user, task_id)

    def patch(
        self,
        user: str,
        task_id: str,
        body: Mapping[str, Any],
        query: Mapping[str, str],
        if_match: str | None,
    ) -> dict[str, Any]:
        """``PATCH /tasks/{id}``: status, fields and lease, under ``If-Match``.

        Args:
            user: The resolved caller.
            task_id: The task id.
            body: The request's JSON object.
            query: The query parameters (the lease triplet).
            if_match: The ``If-Match`` header, or None.

        Returns:
            The updated record.

        Raises:
            TaskError: 404 absent, 412 etag mismatch, 409 lease/immutable/transition, 400 field.
        """
        with self._lock:
            task = self._load(user, task_id)
            if task is None:
                raise TaskError(404, "not_found", f"Task {task_id!r} was not found.")
            try:
                return self._patch(user, task, body, query, if_match)
            except _HostedConflict as exc:
                raise TaskError(exc.status_code, exc._code, str(exc.message or exc)) from None

    def _patch(
        self,
        user: str,
        task: dict[str, Any],
        body: Mapping[str, Any],
        query: Mapping[str, str],
        if_match: str | None,
    ) -> dict[str, Any]:
        if if_match is not None and if_match != task["etag"]:
            raise TaskError(412, "etag_mismatch", "ETag mismatch.")
        for field in _validation.IMMUTABLE_PATCH_FIELDS:
            if body.get(field) is not None:
                raise _invalid(f"{field} is immutable and cannot be patched.")
        target = _validation.validate_patch_status(_optional_str(body, "status"))
        lease_request = self._lease_request(query)
        tags = _optional_dict(body, "tags")
        _validation.validate_tags(tags)
        payload = body.get("payload")
        _validation.validate_payload_size(payload)
        error = _optional_dict(body, "error")
        _validation.validate_error(error)
        reason = _optional_str(body, "suspension_reason")
        _validation.validate_optional_string(
            reason, "suspension_reason", _validation.MAX_SUSPENSION_REASON_LEN
        )
        clear_attachments = "attachments" in body and body["attachments"] is None
        attachments = _optional_dict(body, "attachments")
        target_status = target or task["status"]
        if reason is not None and target_status != "suspended":
            raise _invalid("suspension_reason is only allowed when target status is suspended.")
        if task["status"] == "completed":
            changes = (payload, tags, error, reason, lease_request, attachments)
            unchanged = all(c is None for c in changes) and not clear_attachments
            if target in (None, "completed") and unchanged:
                return copy.deepcopy(task)
            raise _conflict(409, "task_immutable", "Completed tasks are immutable.")
        status_change = target is not None and target != task["status"]
        if status_change:
            _validation.validate_transition(task["status"], target_status)
        self._check_lease(task, target_status, status_change, lease_request)

        now = self._iso()
        if status_change:
            task["status"] = target_status
            if target_status == "pending":
                task["lease"] = None
                task["suspension_reason"] = None
            elif target_status == "in_progress":
                if lease_request is not None:
                    task["lease"] = self._new_lease(task.get("lease"), lease_request)
                task["started_at"] = task.get("started_at") or now
                task["suspension_reason"] = None
                task["completed_at"] = None
            elif target_status == "completed":
                task["lease"] = None
                task["suspension_reason"] = None
                task["completed_at"] = task.get("completed_at") or now
            else:  # suspended
                task["lease"] = None
                task["suspension_reason"] = reason
                task["completed_at"] = None
        elif lease_request is not None:
            if lease_request[2] == 0:
                task["lease"]["expires_at"] = now
                task["lease"]["heartbeat_at"] = now
            else:
                task["lease"] = self._new_lease(task.get("lease"), lease_request)

        if payload is not None:
            if isinstance(payload, dict):
                current = task.get("payload")
                merged = {**(current if isinstance(current, dict) else {}), **payload}
                _validation.validate_payload_size(merged)
                task["payload"] = merged
            else:
                task["payload"] = payload
        if tags is not None:
            merged_tags = dict(task.get("tags") or {})
            for key, value in tags.items():
                if value is None:
                    merged_tags.pop(key, None)
                else:
                    merged_tags[key] = value
            _validation.validate_tags(merged_tags)
            task["tags"] = merged_tags or None
        if clear_attachments:
            task["attachments"] = None
        elif attachments is not None:
            _validation.validate_attachment_keys(attachments)
            merged_att = dict(task.get("attachments") or {})
            for key, value in attachments.items():
                if value is None:
                    merged_att.pop(key, None)
                else:
                    merged_att[key] = value
            if len(merged_att) > _MAX_ATTACHMENTS:
                raise _invalid(f"A task has at most {_MAX_ATTACHMENTS} attachments.")
            task["attachments"] = merged_att or None
        if error is not None:
            task["error"] = _validation.normalize_error(error)
        if not status_change and reason is not None:
            task["suspension_reason"] = reason
        task["updated_at"] = now
        return self._store(user, task, new=False)

    def _check_lease(
        self,
        task: Mapping[str, Any],
        target_status: str,
        status_change: bool,
        request: tuple[str, str, int] | None,
    ) -> None:
        lease = task.get("lease")
        if request is None:
            if status_change and task["status"] == "in_progress" and target_status == "pending":
                raise _lease_held()
            return
        owner, instance_id, duration = request
        mine = lease is not None and lease["owner"] == owner and lease["instance_id"] == instance_id
        if status_change and duration == 0:
            raise _invalid("lease_duration_seconds=0 cannot be combined with a status change.")
        if status_change and target_status in {"completed", "suspended"}:
            raise _invalid(
                f"lease parameters cannot be supplied when transitioning to {target_status}."
            )
        leaving = status_change and task["status"] == "in_progress" and target_status == "pending"
        if leaving and not mine:
            raise _lease_held()
        if not status_change and duration > 0 and task["status"] != "in_progress":
            raise _invalid("Lease renewal is only allowed when current status is in_progress.")
        if duration == 0:
            if lease is None:
                raise _invalid("No lease is available to force-expire.")
            if not self._expired(lease) and not mine:
                raise _lease_held()
        elif lease is not None and lease["owner"] != owner and not self._expired(lease):
            raise _lease_held()

    def delete(self, user: str, task_id: str, *, force: bool, if_match: str | None) -> None:
        """``DELETE /tasks/{id}``.

        Args:
            user: The resolved caller.
            task_id: The task id.
            force: Whether a task that is not completed may be deleted.
            if_match: The ``If-Match`` header, or None.

        Raises:
            TaskError: 404 absent, 412 etag mismatch, 400 not completed without ``force``.
        """
        with self._lock:
            task = self._load(user, task_id)
            if task is None:
                raise TaskError(404, "not_found", f"Task {task_id!r} was not found.")
            if if_match is not None and if_match != task["etag"]:
                raise TaskError(412, "etag_mismatch", "ETag mismatch.")
            if task["status"] != "completed" and not force:
                raise _invalid("Non-terminal tasks require force=true for deletion.")
            self._conn.execute(
                "DELETE FROM emulator_tasks WHERE partition = ? AND id = ?", (user, task_id)
            )

    def list(self, user: str, query: Mapping[str, str]) -> dict[str, Any]:
        """``GET /tasks``: one page of ``user``'s tasks that match the filters.

        Args:
            user: The resolved caller.
            query: The filters and paging parameters.

        Returns:
            ``{"object": "list", "data", "first_id", "last_id", "has_more"}``.

        Raises:
            TaskError: 400 for a bad ``limit``, ``order``, ``status`` or flag.
        """
        raw_limit = query.get("limit")
        limit = DEFAULT_TASK_PAGE
        if raw_limit is not None:
            if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_TASK_PAGE:
                raise _invalid(f"limit must be an integer from 1 to {MAX_TASK_PAGE}.")
            limit = int(raw_limit)
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise _invalid("order must be 'asc' or 'desc'.")
        after, before = query.get("after"), query.get("before")
        try:
            status = _validation.normalize_legacy_status(query.get("status"))
        except _HostedConflict as exc:
            raise TaskError(exc.status_code, exc._code, str(exc.message or exc)) from None
        tag = {k[len("tag.") :]: v for k, v in query.items() if k.startswith("tag.")}

        def flag(name: str) -> bool | None:
            value = query.get(name)
            if value is None:
                return None
            if value not in ("true", "false"):
                raise _invalid(f"{name} must be 'true' or 'false'.")
            return value == "true"

        has_error, lease_expired = flag("has_error"), flag("lease_expired")
        omit = flag("omit_attachment_values") or False
        with self._lock:
            rows = self._conn.execute(
                "SELECT record FROM emulator_tasks WHERE partition = ? ORDER BY seq "
                + ("DESC" if order == "desc" else "ASC"),
                (user,),
            ).fetchall()
            tasks: list[dict[str, Any]] = [json.loads(r[0]) for r in rows]
            lease_states = [self._expired(t.get("lease")) for t in tasks]

        def keep(task: Mapping[str, Any], expired: bool) -> bool:
            lease = task.get("lease")
            checks = (
                ("agent_name", query.get("agent_name"), task.get("agent_name")),
                ("session_id", query.get("session_id"), task.get("session_id")),
                ("status", status, task.get("status")),
                ("lease_owner", query.get("lease_owner"), lease and lease.get("owner")),
                ("source_type", query.get("source_type"), (task.get("source") or {}).get("type")),
            )
            if any(wanted is not None and actual != wanted for _, wanted, actual in checks):
                return False
            tags = task.get("tags") or {}
            if any(tags.get(k) != v for k, v in tag.items()):
                return False
            if has_error is not None and bool(task.get("error")) != has_error:
                return False
            return lease_expired is None or expired == lease_expired

        matching = [t for t, e in zip(tasks, lease_states, strict=True) if keep(t, e)]
        ids = [t["id"] for t in matching]
        if before is not None:  # the tasks before the cursor (with `after`: between the two)
            matching = matching[: ids.index(before)] if before in ids else []
        if after is not None:
            matching = matching[ids.index(after) + 1 :] if after in ids else []
        if before is not None and after is None:  # the page that ends at the cursor
            page, has_more = matching[-limit:], len(matching) > limit
        else:
            page, has_more = matching[:limit], len(matching) > limit
        if omit:
            for task in page:
                if task.get("attachments") is not None:
                    task["attachments"] = dict.fromkeys(task["attachments"])
        return {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": has_more,
        }
