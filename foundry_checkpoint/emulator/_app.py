"""HTTP face of the emulator: the wire contract of the Foundry state-store API over an engine.

Every request goes through the same steps, in this order:

1. route the path (any prefix ending in ``/storage/``) and method to one of the ten call types
   (the nine calls the SDK makes, and the public spec's list of stores);
2. count it in :attr:`StorageApp.requests`;
3. apply an injected fault, if one is armed (before anything else, so a faulted request has no
   effect on state; a rule narrowed to one user or store resolves the caller and the store
   name first, only while such a rule is armed);
4. resolve the caller with :func:`~foundry_checkpoint.emulator._identity.resolve_caller`, the
   one identity rule (bearer token required; then the bound user of ``x-agent-foundry-call-id``,
   else the delegated ``x-ms-user-id`` when the token's caller is trusted, else the token's
   user);
5. check ``api-version``;
6. decode names and keys (base64url of UTF-8 without padding), parse and shape-check the JSON
   body, and call the engine (on its worker thread, off the event loop), which enforces the
   documented limits and semantics;
7. map the engine's answer or its ``FoundryStorage*Error`` to a status code, the error envelope
   ``{"error": {"code", "message", "param"?}}`` and the ``ETag`` header.

Beyond what the SDK's client exercises, the handlers follow the public spec: a PATCH naming an
immutable field (:data:`IMMUTABLE_STORE_FIELDS`) is 400 naming it; creating an item answers its
``ETag`` header as a put does; a delete that found nothing (item or store) omits ``id`` from its
body; ``GET state_stores`` lists the stores by ``(created_at, id)`` in the ``list_keys`` envelope
and with its paging (``limit``, ``after``, ``before``, ``order``).

No ordinary 4xx carries ``Retry-After``: azure-core retries any response that has one.

Beside the state store it serves what the hosts call on the platform, with the same identity
rule and ``api-version`` check but neither counted in :attr:`StorageApp.requests` nor faulted
(their counts are in :attr:`StorageApp.platform_requests`): the task API (``…/tasks``,
``_tasks.py``) and the response store (``…/storage/responses``, ``…/storage/items/batch/
retrieve``, ``…/storage/history/item_ids``, ``_responses.py``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import logging
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, ParamSpec, TypeVar

from aiohttp import web
from azure.ai.agentserver.core.storage import (
    FoundryStorageApiError,
    FoundryStorageBadRequestError,
    FoundryStorageConflictError,
    FoundryStorageError,
    FoundryStorageNotFoundError,
    FoundryStoragePreconditionError,
)

from foundry_checkpoint._store._engine import UNSET, StateEngine, Unset
from foundry_checkpoint._store._limits import DEFAULT_ITEM_TTL_SECONDS, MAX_PAGE
from foundry_checkpoint.errors import InvalidArgumentError

from ._faults import Fault, FaultPlan
from ._identity import CallerRejected, CallTable, resolve_caller
from ._platform import IDENTITY_PATH, ManagedIdentityEndpoint
from ._responses import ResponseTable
from ._tasks import TaskError, TaskTable

__all__ = ["IMMUTABLE_STORE_FIELDS", "StorageApp", "SUPPORTED_API_VERSIONS"]

_LOGGER = logging.getLogger("foundry_checkpoint.emulator")
_P = ParamSpec("_P")
_T = TypeVar("_T")

#: Store fields fixed at creation: a PATCH naming one is refused with 400 naming it.
IMMUTABLE_STORE_FIELDS: Final = ("name", "user_isolation", "item_ttl_seconds")
#: The ``api-version`` values the emulator accepts.
SUPPORTED_API_VERSIONS: Final[frozenset[str]] = frozenset({"v1"})
#: Large enough that an over-limit value reaches the engine and gets its 400 ``param: value``;
#: a larger body is answered 413 (before it is read when its Content-Length says so).
CLIENT_MAX_BODY_BYTES: Final = 32 * 1024 * 1024
#: Request bodies read at once; more wait, so parallel large bodies cannot exhaust memory.
_CONCURRENT_BODY_READS: Final = 4

_ROUTE = re.compile(
    r"^(?:.*)/storage/state_stores"
    r"(?:/(?P<store>[^/]+)"
    r"(?:/(?P<items>items:keys|items)(?:/(?P<key>[^/]+))?)?)?/?$"
)
_TASK_ROUTE = re.compile(r"^(?:.*)/tasks(?:/(?P<task>[^/]+))?/?$")
_RESPONSE_ROUTE = re.compile(
    r"^(?:.*)/storage/(?:"
    r"(?P<responses>responses)(?:/(?P<response>[^/]+)(?P<input_items>/input_items)?)?"
    r"|(?P<batch>items/batch/retrieve)|(?P<history>history/item_ids))/?$"
)
_SEGMENT = re.compile(r"^[A-Za-z0-9_-]+$")
_FAULT_CODES: Final[Mapping[int, str]] = {
    429: "too_many_requests",
    500: "internal_error",
    502: "bad_gateway",
    503: "service_unavailable",
    504: "gateway_timeout",
}


class _HttpError(Exception):
    """A request the HTTP layer answers with an error envelope without calling the engine."""

    def __init__(self, status: int, code: str, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param


def _error_response(
    status: int,
    code: str,
    message: str,
    *,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    error: dict[str, Any] = {"code": code, "message": message}
    if param is not None:
        error["param"] = param
    return web.json_response({"error": error}, status=status, headers=headers)


def _engine_error_response(exc: FoundryStorageError) -> web.Response:
    """Map an SDK error raised by the engine to the status and envelope the client expects."""
    message = exc.message or str(exc)
    if isinstance(exc, FoundryStorageNotFoundError):
        return _error_response(404, "not_found", message)
    if isinstance(exc, FoundryStorageConflictError):
        return _error_response(409, "conflict", message)
    if isinstance(exc, FoundryStorageBadRequestError):
        return _error_response(400, "invalid_request", message, param=exc.param)
    if isinstance(exc, FoundryStoragePreconditionError):
        headers = {"ETag": exc.current_etag} if exc.current_etag is not None else None
        return _error_response(412, "precondition_failed", message, headers=headers)
    status = exc.status_code if isinstance(exc, FoundryStorageApiError) and exc.status_code else 500
    return _error_response(status, "server_error", message)


def _decode_segment(segment: str, param: str) -> str:
    """Decode a base64url-without-padding path segment; only the canonical spelling is valid."""
    if not _SEGMENT.match(segment) or len(segment) % 4 == 1:
        raise _HttpError(
            400, "invalid_request", f"The {param} is not unpadded base64url.", param=param
        )
    try:
        decoded = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise _HttpError(
            400, "invalid_request", f"The {param} segment is not base64url of UTF-8.", param=param
        ) from exc
    canonical = base64.urlsafe_b64encode(decoded.encode("utf-8")).decode("ascii").rstrip("=")
    if canonical != segment:
        raise _HttpError(
            400, "invalid_request", f"The {param} is not canonical base64url.", param=param
        )
    return decoded


def _reject_constant(name: str) -> Any:
    raise InvalidArgumentError(f"{name} is not valid JSON")


def _parse_body(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise _HttpError(400, "invalid_request", "The request body must be a JSON object.")
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _HttpError(400, "invalid_json", f"The request body is not valid JSON: {exc}") from exc
    except RecursionError:
        raise _HttpError(400, "invalid_json", "The request body is nested too deeply.") from None
    if not isinstance(body, dict):
        raise _HttpError(400, "invalid_request", "The request body must be a JSON object.")
    return body


def _tags_field(body: Mapping[str, Any], field: str = "tags") -> dict[str, str] | None:
    tags = body.get(field)
    if tags is None:
        return None
    if not isinstance(tags, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in tags.items()
    ):
        raise _HttpError(
            400, "invalid_request", f"'{field}' must be an object of strings.", param=field
        )
    return tags


def _string_field(body: Mapping[str, Any], field: str, *, required: bool) -> str | None:
    value = body.get(field)
    if value is None:
        if required:
            raise _HttpError(400, "invalid_request", f"'{field}' is required.", param=field)
        return None
    if not isinstance(value, str):
        raise _HttpError(400, "invalid_request", f"'{field}' must be a string.", param=field)
    return value


def _value_field(body: Mapping[str, Any]) -> dict[str, Any]:
    value = body.get("value")
    if not isinstance(value, dict):
        raise _HttpError(400, "invalid_request", "'value' must be a JSON object.", param="value")
    return value


def _no_null_id(deleted: dict[str, Any]) -> dict[str, Any]:
    """A delete's answer without ``id`` when it found nothing (the spec omits it, not null)."""
    return {k: v for k, v in deleted.items() if not (k == "id" and v is None)}


def _limit_param(raw: str | None) -> int | None:
    """The ``limit`` query parameter of a listing: 1 to ``MAX_PAGE``, None when absent."""
    if raw is None:
        return None
    if not re.fullmatch(r"[0-9]+", raw) or not 1 <= int(raw) <= MAX_PAGE:
        raise _HttpError(
            400,
            "invalid_request",
            f"'limit' must be an integer from 1 to {MAX_PAGE}.",
            param="limit",
        )
    return int(raw)


class StorageApp:
    """The request handler: routing, counting, faults, identity, and engine calls.

    It runs on the emulator's own event loop; its counters and fault plan may be read and changed
    from any thread.

    Args:
        faults: The fault rules consulted before each storage call is served.
        calls: The call ids resolved to users; a new, empty table when None.
    """

    def __init__(self, faults: FaultPlan, calls: CallTable | None = None) -> None:
        self._engine: StateEngine | None = None
        self._worker: ThreadPoolExecutor | None = None
        self._faults = faults
        self._calls = calls if calls is not None else CallTable()
        self._lock = threading.Lock()
        self._requests: Counter[str] = Counter()
        self._faults_served: Counter[str] = Counter()
        self._platform_requests: Counter[str] = Counter()
        self._platform_db: sqlite3.Connection | None = None
        self._tasks: TaskTable | None = None
        self._responses: ResponseTable | None = None
        self._body_reads = asyncio.Semaphore(_CONCURRENT_BODY_READS)
        self._reading = 0
        self._peak_reading = 0

    # --- observability -------------------------------------------------------------------

    @property
    def requests(self) -> Counter[str]:
        """A snapshot: call type -> requests routed (faulted ones included)."""
        with self._lock:
            return Counter(self._requests)

    @property
    def faults_served(self) -> Counter[str]:
        """A snapshot: call type -> requests that an injected fault was applied to."""
        with self._lock:
            return Counter(self._faults_served)

    @property
    def platform_requests(self) -> Counter[str]:
        """A snapshot: task and response-store call -> requests routed (``create_task``...)."""
        with self._lock:
            return Counter(self._platform_requests)

    def reset_counts(self) -> None:
        """Set every request and fault count back to zero."""
        with self._lock:
            self._requests.clear()
            self._platform_requests.clear()
            self._faults_served.clear()
            self._peak_reading = self._reading

    @property
    def body_reads(self) -> tuple[int, int]:
        """``(in flight, most at once since reset_counts)`` of request bodies being read."""
        with self._lock:
            return self._reading, self._peak_reading

    @property
    def calls(self) -> CallTable:
        """The call ids this handler resolves to users."""
        return self._calls

    def bind(self, engine: StateEngine) -> None:
        """Serve ``engine``; its calls run on one worker thread of their own, off the loop.

        The engine blocks (SQLite, and a wait for another process's write lock can last up to
        its busy timeout), so the event loop only hands calls to that thread and keeps serving
        every other request meanwhile. One thread is enough: the engine runs one call at a
        time on its single connection anyway.

        Args:
            engine: The engine to serve.
        """
        self._engine = engine
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="emulator-engine")

    def bind_platform(self, conn: sqlite3.Connection, clock: Callable[[], float]) -> None:
        """Serve the task API and the response store from ``conn`` (closed by :meth:`unbind`).

        Args:
            conn: The platform database (the emulator's SQLite file, or memory).
            clock: Epoch seconds; task leases expire by it.
        """
        self._platform_db = conn
        self._tasks = TaskTable(conn, clock)
        self._responses = ResponseTable(conn)

    def unbind(self) -> None:
        """Forget the engine (it is being closed) once the calls in flight have finished."""
        self._engine = None
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.shutdown(wait=True)
        conn, self._platform_db = self._platform_db, None
        self._tasks = self._responses = None
        if conn is not None:
            conn.close()

    async def _engine_call(self, call: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run one engine call on the engine's worker thread and await its answer."""
        worker = self._worker
        if worker is None:
            raise _HttpError(503, "service_unavailable", "The emulator is shutting down.")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(worker, functools.partial(call, *args, **kwargs))

    def _require_engine(self) -> StateEngine:
        engine = self._engine
        if engine is None:
            raise _HttpError(503, "service_unavailable", "The emulator is shutting down.")
        return engine

    def web_app(self, identity: ManagedIdentityEndpoint | None = None) -> web.Application:
        """Build the aiohttp application that serves every path through this handler.

        Args:
            identity: When given, ``GET /msi/token`` is its managed-identity token endpoint (not
                a storage call: neither counted nor faulted).

        Returns:
            The application, for one serving loop.
        """
        self._body_reads = asyncio.Semaphore(_CONCURRENT_BODY_READS)  # one per serving loop
        app = web.Application(client_max_size=CLIENT_MAX_BODY_BYTES)
        if identity is not None:
            app.router.add_get(IDENTITY_PATH, identity.handle)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    # --- request pipeline ----------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        match = _ROUTE.match(request.path)
        if match is None:
            return await self._handle_platform(request)
        call = self._call_type(request.method, match)
        if call is None:
            return _error_response(
                405, "method_not_allowed", f"{request.method} is not allowed on {request.path!r}."
            )
        with self._lock:
            self._requests[call] += 1
        if self._faults.scoped:
            user_hint, store_hint = self._fault_scope(request, match)
            fault = self._faults.take(call, user=user_hint, store=store_hint)
        else:
            fault = self._faults.take(call)
        if fault is not None:
            with self._lock:
                self._faults_served[call] += 1
            faulted = await self._apply_fault(request, fault)
            if faulted is not None:
                return faulted
        try:
            user = self._resolve_user(request)
            self._check_api_version(request)
            return await self._dispatch(call, request, match, user)
        except _HttpError as exc:
            return _error_response(exc.status, exc.code, exc.message, param=exc.param)
        except FoundryStorageError as exc:
            return _engine_error_response(exc)
        except Exception:
            _LOGGER.exception("emulator failed to serve %s %s", request.method, request.path)
            return _error_response(
                500, "internal_error", "The emulator failed to serve the request."
            )

    def _fault_scope(
        self, request: web.Request, match: re.Match[str]
    ) -> tuple[str | None, str | None]:
        """The user and store name a user- or store-scoped fault rule is matched against.

        None for what cannot be resolved (the request is refused later, unfaulted).
        """
        try:
            user: str | None = resolve_caller(request.headers, self._calls)
        except CallerRejected:
            user = None
        raw_store = match.group("store")
        try:
            store = _decode_segment(raw_store, "name") if raw_store is not None else None
        except _HttpError:
            store = None
        return user, store

    @staticmethod
    def _call_type(method: str, match: re.Match[str]) -> str | None:
        store, items, key = match.group("store"), match.group("items"), match.group("key")
        if store is None:
            return {"POST": "create_store", "GET": "list_stores"}.get(method)
        if items is None:
            return {"GET": "get_store", "PATCH": "update_store", "DELETE": "delete_store"}.get(
                method
            )
        if items == "items:keys":
            return "list_keys" if key is None and method == "GET" else None
        if key is None:
            return "create_item" if method == "POST" else None
        return {"PUT": "put_item", "GET": "get_item", "DELETE": "delete_item"}.get(method)

    @staticmethod
    async def _apply_fault(request: web.Request, fault: Fault) -> web.StreamResponse | None:
        if fault.delay > 0:
            await asyncio.sleep(fault.delay)
        if fault.drop:
            transport = request.transport
            if transport is not None:
                transport.close()
            return web.Response(status=500)
        if fault.status is None:
            return None
        headers: dict[str, str] = {}
        retry_after = fault.retry_after_header()
        if retry_after is not None:
            headers["Retry-After"] = retry_after
        return _error_response(
            fault.status,
            _FAULT_CODES.get(fault.status, "injected_fault"),
            f"Injected fault: HTTP {fault.status}.",
            headers=headers,
        )

    def _resolve_user(self, request: web.Request) -> str:
        try:
            return resolve_caller(request.headers, self._calls)
        except CallerRejected as exc:
            raise _HttpError(exc.status, exc.code, exc.message) from exc

    @staticmethod
    def _check_api_version(request: web.Request) -> None:
        version = request.query.get("api-version")
        if version is None:
            raise _HttpError(
                400,
                "invalid_request",
                "The 'api-version' query parameter is required.",
                param="api-version",
            )
        if version not in SUPPORTED_API_VERSIONS:
            supported = ", ".join(sorted(SUPPORTED_API_VERSIONS))
            raise _HttpError(
                400,
                "invalid_request",
                f"Unsupported api-version {version!r}; supported: {supported}.",
                param="api-version",
            )

    async def _body(self, request: web.Request) -> dict[str, Any]:
        """The JSON object body: 413 when too large, at most a few read at once."""
        too_large = _HttpError(
            413,
            "payload_too_large",
            f"The request body is larger than {CLIENT_MAX_BODY_BYTES} bytes.",
        )
        length = request.content_length
        if length is not None and length > CLIENT_MAX_BODY_BYTES:
            raise too_large
        async with self._body_reads:
            with self._lock:
                self._reading += 1
                self._peak_reading = max(self._peak_reading, self._reading)
            try:
                raw = await request.read()
            except web.HTTPRequestEntityTooLarge:
                raise too_large from None
            finally:
                with self._lock:
                    self._reading -= 1
        return _parse_body(raw)

    async def _dispatch(
        self, call: str, request: web.Request, match: re.Match[str], user: str
    ) -> web.Response:
        engine = self._require_engine()
        raw_store = match.group("store")
        name = _decode_segment(raw_store, "name") if raw_store is not None else ""
        raw_key = match.group("key")
        key = _decode_segment(raw_key, "key") if raw_key is not None else ""
        if_match = request.headers.get("If-Match")

        if call == "get_store":
            return web.json_response(await self._engine_call(engine.get_store, name))
        if call == "create_store":
            body = await self._body(request)
            return web.json_response(await self._create_store(body), status=201)
        if call == "list_stores":
            return web.json_response(await self._list_stores(request))
        if call == "update_store":
            body = await self._body(request)
            for field in IMMUTABLE_STORE_FIELDS:
                if field in body:
                    raise _HttpError(
                        400,
                        "invalid_request",
                        f"'{field}' is fixed when the store is created and cannot be updated.",
                        param=field,
                    )
            description: str | Unset | None = UNSET
            tags: dict[str, str] | Unset | None = UNSET
            if "description" in body:
                description = _string_field(body, "description", required=False)
            if "tags" in body:
                tags = _tags_field(body)
            updated = await self._engine_call(
                engine.update_store, name, description=description, tags=tags
            )
            return web.json_response(updated)
        if call == "delete_store":
            return web.json_response(
                _no_null_id(await self._engine_call(engine.delete_store, name))
            )
        if call == "create_item":
            body = await self._body(request)
            item_key = _string_field(body, "key", required=True)
            assert item_key is not None
            ref = await self._engine_call(
                engine.create_item, name, item_key, _value_field(body), _tags_field(body), user=user
            )
            return web.json_response(ref, status=201, headers={"ETag": ref["etag"]})
        if call == "put_item":
            body = await self._body(request)
            ref, created = await self._engine_call(
                engine.put_item,
                name,
                key,
                _value_field(body),
                _tags_field(body),
                user=user,
                if_match=if_match,
            )
            return web.json_response(
                ref, status=201 if created else 200, headers={"ETag": ref["etag"]}
            )
        if call == "get_item":
            item = await self._engine_call(engine.get_item, name, key, user=user)
            if item is None:
                return _error_response(404, "not_found", "The item does not exist.")
            return web.json_response(item, headers={"ETag": item["etag"]})
        if call == "delete_item":
            deleted = await self._engine_call(
                engine.delete_item, name, key, user=user, if_match=if_match
            )
            return web.json_response(_no_null_id(deleted))
        return web.json_response(await self._list_keys(name, request, user))

    async def _create_store(self, body: Mapping[str, Any]) -> dict[str, Any]:
        name = _string_field(body, "name", required=True)
        assert name is not None
        user_isolation = body.get("user_isolation", False)
        if user_isolation is None:
            user_isolation = False
        if not isinstance(user_isolation, bool):
            raise _HttpError(
                400,
                "invalid_request",
                "'user_isolation' must be a boolean.",
                param="user_isolation",
            )
        ttl = body.get("item_ttl_seconds", DEFAULT_ITEM_TTL_SECONDS)
        if ttl is None:
            ttl = DEFAULT_ITEM_TTL_SECONDS
        if isinstance(ttl, bool) or not isinstance(ttl, int):
            raise _HttpError(
                400,
                "invalid_request",
                "'item_ttl_seconds' must be an integer.",
                param="item_ttl_seconds",
            )
        return await self._engine_call(
            self._require_engine().create_store,
            name,
            user_isolation=user_isolation,
            item_ttl_seconds=ttl,
            description=_string_field(body, "description", required=False),
            tags=_tags_field(body),
        )

    async def _list_stores(self, request: web.Request) -> dict[str, Any]:
        query = request.query
        # order and the cursors are checked by the engine, as for list_keys
        return await self._engine_call(
            self._require_engine().list_stores,
            limit=_limit_param(query.get("limit")),
            after=query.get("after"),
            before=query.get("before"),
            order=query.get("order", "desc"),
        )

    async def _list_keys(self, name: str, request: web.Request, user: str) -> dict[str, Any]:
        query = request.query
        tags: dict[str, str] = {}
        for param, value in query.items():
            if param.startswith("tags."):
                tag_key = param[len("tags.") :]
                if tag_key in tags and tags[tag_key] != value:
                    raise _HttpError(
                        400,
                        "invalid_request",
                        f"Tag filter {tag_key!r} is given twice.",
                        param=param,
                    )
                tags[tag_key] = value
        limit = _limit_param(query.get("limit"))
        # order, after/before and the tag filter are checked by the engine (one source of truth)
        order = query.get("order", "desc")
        after, before = query.get("after"), query.get("before")
        return await self._engine_call(
            self._require_engine().list_keys,
            name,
            user=user,
            tags=tags or None,
            limit=limit,
            after=after,
            before=before,
            order=order,
        )

    # --- the task API and the response store ---------------------------------------------

    @staticmethod
    def _platform_call(method: str, path: str) -> tuple[str, dict[str, str]] | None:
        """The call type of a task or response-store request, with its path parameters."""
        task = _TASK_ROUTE.match(path)
        if task is not None:
            task_id = task.group("task")
            if task_id is None:
                call = {"POST": "create_task", "GET": "list_tasks"}.get(method)
                return (call, {}) if call else None
            call = {"GET": "get_task", "PATCH": "update_task", "DELETE": "delete_task"}.get(method)
            return (call, {"id": task_id}) if call else None
        match = _RESPONSE_ROUTE.match(path)
        if match is None:
            return None
        if match.group("batch"):
            return ("get_response_items", {}) if method == "POST" else None
        if match.group("history"):
            return ("get_history_item_ids", {}) if method == "GET" else None
        response_id = match.group("response")
        if response_id is None:
            return ("create_response", {}) if method == "POST" else None
        if match.group("input_items"):
            return ("list_input_items", {"id": response_id}) if method == "GET" else None
        call = {"GET": "get_response", "POST": "update_response", "DELETE": "delete_response"}.get(
            method
        )
        return (call, {"id": response_id}) if call else None

    async def _handle_platform(self, request: web.Request) -> web.StreamResponse:
        routed = self._platform_call(request.method, request.path)
        if routed is None:
            return _error_response(
                404, "not_found", f"No route for {request.method} {request.path!r}."
            )
        call, params = routed
        with self._lock:
            self._platform_requests[call] += 1
        try:
            user = self._resolve_user(request)
            self._check_api_version(request)
            return await self._dispatch_platform(call, params.get("id", ""), request, user)
        except _HttpError as exc:
            return _error_response(exc.status, exc.code, exc.message, param=exc.param)
        except TaskError as exc:
            return _error_response(exc.status, exc.code, exc.message)
        except Exception:
            _LOGGER.exception("emulator failed to serve %s %s", request.method, request.path)
            return _error_response(
                500, "internal_error", "The emulator failed to serve the request."
            )

    async def _dispatch_platform(
        self, call: str, ident: str, request: web.Request, user: str
    ) -> web.Response:
        tasks, responses = self._tasks, self._responses
        if tasks is None or responses is None:
            raise _HttpError(503, "service_unavailable", "The emulator is shutting down.")
        query = dict(request.query)
        if_match = request.headers.get("If-Match")
        if call == "create_task":
            body = await self._body(request)
            task = await self._engine_call(tasks.create, user, body, query)
            return web.json_response(task, status=201, headers={"ETag": task["etag"]})
        if call == "get_task":
            found = await self._engine_call(tasks.get, user, ident)
            if found is None:
                return _error_response(404, "not_found", f"Task {ident!r} was not found.")
            return web.json_response(found, headers={"ETag": found["etag"]})
        if call == "update_task":
            body = await self._body(request)
            task = await self._engine_call(tasks.patch, user, ident, body, query, if_match)
            return web.json_response(task, headers={"ETag": task["etag"]})
        if call == "delete_task":
            force = query.get("force", "false").lower() == "true"
            await self._engine_call(tasks.delete, user, ident, force=force, if_match=if_match)
            return web.Response(status=204)
        if call == "list_tasks":
            return web.json_response(await self._engine_call(tasks.list, user, query))
        if call == "create_response":
            body = await self._body(request)
            await self._engine_call(responses.create, user, body)
            return web.json_response(body.get("response"), status=201)
        if call == "get_response":
            return web.json_response(await self._engine_call(responses.get, user, ident))
        if call == "update_response":
            body = await self._body(request)
            await self._engine_call(responses.update, user, ident, body)
            return web.json_response(body)
        if call == "delete_response":
            return web.json_response(await self._engine_call(responses.delete, user, ident))
        if call == "list_input_items":
            return web.json_response(
                await self._engine_call(responses.input_items, user, ident, query)
            )
        if call == "get_response_items":
            body = await self._body(request)
            return web.json_response(await self._engine_call(responses.get_items, user, body))
        return web.json_response(await self._engine_call(responses.history_item_ids, user, query))
