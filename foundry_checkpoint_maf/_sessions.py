"""``FoundrySessionStore``: MAF's ``SessionStore`` (agent sessions) on Foundry's state store.

Mapping (one store per end user's partition, ``user_isolation=True``):

* all sessions of a prefix -> one store ``<store_prefix>/default`` (default prefix
  ``"maf-sessions"``), partitioned per end user (each request's own identity);
* session id -> item key ``s/<session id>`` (escaped; hashed when too long, the id is kept in
  the value), tags ``kind=maf.session`` and ``sid`` (the escaped id);
* the item value is ``AgentSession.to_dict()`` wrapped in a versioned envelope, dumped as
  compact JSON and encoded by the core (compressed when it pays); a session over the 1 MB
  item limit spills to the spill store (hosted mode without one: chunk items of the store).

Costs (store calls, once the store is known to this object): ``get`` 1 (``get_item``), ``set``
1 (``set_item`` with ``if_match``, or ``create_item`` after a ``get`` found nothing; a TTL
refresh of the store's metadata at most every quarter TTL), ``delete`` 1 (``delete_item``),
``list_sessions`` one ``list_keys`` per 100 sessions. A spilled session adds its blob (or its
chunk items) to ``get`` and ``set``.

Concurrency: ``set`` is a compare-and-set against the ETag this object saw in the last
``get``/``set`` of that session for the same caller and request (call id; outside any request,
the object's own: tasks that share one object outside requests should each use their own
object, or a :meth:`FoundrySessionStore.for_request` context with its own call id). A writer
that lost the race raises :class:`~foundry_checkpoint.errors.ConcurrentWriteError` (also a
``RuntimeError`` whose message is the one Foundry hosting reports to its client: "Another
request advanced this agent session; reload before writing."); nothing of it is stored (a blob
it spilled first is left to :meth:`FoundrySessionStore.gc`). A ``set`` with no earlier
``get`` replaces the session (last writer wins, as ``SessionStore`` and ``FileSessionStore``).

Decoding is JSON only: the state is restored by ``AgentSession.from_dict`` (registered state
types only); nothing that runs code is ever read.

What agent-framework-foundry-hosting's ``FoundryAgentSessionStore`` does differently: it builds
a new ``FoundryStateStore`` client (and credential, and a store GET/create) on every call; it
has no size handling (a session over 1 MB fails to save); it stores the raw ``to_dict()``
value; it cannot list sessions; its ETag memory is per object (hosting makes one per request).
Here one object serves every request and user (clients and loop reused), sessions of any size
spill, and sessions are listable.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from agent_framework import AgentSession, SessionStore
from azure.ai.agentserver.core.storage import (
    FoundryStorageConflictError,
    FoundryStoragePreconditionError,
)

from foundry_checkpoint.adapter import (
    DEFAULT_GC_GRACE_SECONDS,
    DEFAULT_ITEM_TTL_SECONDS,
    Call,
    CheckpointCore,
    CoreOwner,
    GcReport,
    LocalBackend,
    Scope,
    check_identifier,
    item_key,
    new_core,
    spilled_digest,
    tag_value,
    unescape,
)
from foundry_checkpoint.errors import (
    ConcurrentWriteError,
    CorruptPayloadError,
    NonJsonValueError,
)

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from azure.ai.agentserver.core import FoundryAgentRequestContext
    from azure.core.credentials_async import AsyncTokenCredential

    from foundry_checkpoint.spill import SpillStore

__all__ = ["FoundrySessionStore", "StoredSession"]

T = TypeVar("T")

KIND: Final = "maf.session"
_TAGS: Final = {"kind": KIND}
_FORMAT: Final = "maf.session/1"
_ID_FIELD: Final = "session_id"
#: ETags remembered per object at most (oldest forgotten first: that session's next ``set``
#: without a ``get`` replaces it).
MAX_ETAGS: Final = 4096
#: The message Foundry hosting recognises as a lost session race (it shows it to the client).
CONFLICT_MESSAGE: Final = "Another request advanced this agent session; reload before writing."


class _SessionConflict(ConcurrentWriteError, RuntimeError):
    """A session ``set`` lost the race; a ``ConcurrentWriteError`` and a ``RuntimeError``."""

    def __init__(self, session_id: str, *, store: str, key: str) -> None:
        super().__init__(CONFLICT_MESSAGE, store=store, key=key)
        self.session_id = session_id


def _key(session_id: str) -> str:
    return item_key("s", session_id)


def _checked(session_id: object) -> str:
    SessionStore.validate_session_id(session_id)  # type: ignore[arg-type]
    return check_identifier(session_id, "session_id")


def _payload(session_id: str, session: AgentSession) -> bytes:
    if type(session) is not AgentSession:
        raise TypeError(
            "FoundrySessionStore stores AgentSession instances only (got "
            f"{type(session).__name__}); convert it, or write a SessionStore of your own"
        )
    try:
        return json.dumps(
            {"format": _FORMAT, "session": session.to_dict()},
            allow_nan=False,
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise NonJsonValueError(
            f"Session {session_id!r} holds state that is not plain JSON ({exc}); register its "
            "type with agent_framework.register_state_type() or store plain values. Nothing "
            "was written."
        ) from exc


def _restored(session_id: str, payload: bytes) -> AgentSession:
    try:
        document = json.loads(payload.decode("utf-8"))
        if not isinstance(document, dict) or document.get("format") != _FORMAT:
            raise ValueError("not a stored session")
        data = document["session"]
        if not isinstance(data, dict) or not isinstance(data.get("session_id"), str):
            raise ValueError("no session in the stored value")
        if not isinstance(data.get("state", {}), dict):
            raise ValueError("the session state is not a mapping")
        return AgentSession.from_dict(data)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise CorruptPayloadError(
            f"Session {session_id!r} cannot be restored ({exc}); it was changed outside "
            "foundry-checkpoint or written by a newer version. Delete it to start over."
        ) from exc


@dataclass(frozen=True)
class StoredSession:
    """What the store holds for one agent session, read without decoding it.

    ``size`` is the bytes of the item value as stored (compressed, or the reference to a
    spilled session), ``spilled`` whether the session lives in the spill store (or in chunk
    items), ``updated_at`` when it was last written (Unix seconds).

    Example:
        >>> StoredSession("chat-1", size=180, spilled=False, updated_at=1_767_225_600).size
        180
    """

    session_id: str
    size: int
    spilled: bool
    updated_at: int


class FoundrySessionStore(CoreOwner, SessionStore):
    """Microsoft Agent Framework agent sessions on Foundry's durable state store.

    A ``SessionStore``: ``get``, ``set`` and ``delete`` of an ``AgentSession`` by id, with
    compare-and-set on write (see the module docstring for the mapping and costs). With no
    configuration it uses the embedded local store under ``AGENTSERVER_STATE_ROOT``; inside a
    Foundry-hosted agent (``FOUNDRY_HOSTING_ENVIRONMENT`` set) the hosted service. Each call
    runs as the end user of the request it is made in (per-request identity), so users with
    identical session ids never see each other's sessions. MAF marks ``SessionStore``
    experimental (agent-framework-core 1.23 warns once when this class is first imported).

    Args:
        store_prefix: First segment of every store name (default ``"maf-sessions"``).
        credential: Async token credential for hosted mode (default: the SDK's
            ``DefaultAzureCredential``).
        endpoint: Foundry project endpoint for hosted mode (default:
            ``FOUNDRY_PROJECT_ENDPOINT``).
        user_id: The end user whose partition to use outside a request (hosted mode needs
            ``trusted_delegation=True``); within a request the request's identity wins.
        trusted_delegation: Declare this agent a trusted delegating caller.
        item_ttl_seconds: Idle lifetime of items in stores this object creates (-1: never).
        spill: Where sessions over the 1 MB item limit go (default: a directory under the
            state root in local mode, ``FOUNDRY_CHECKPOINT_BLOB_*`` blob storage if set, chunk
            items of the store in hosted mode otherwise).
        local_backend: ``"sqlite"`` (embedded, default) or ``"sdk"`` (the SDK's local mode).
        **client_kwargs: Passed to the ``FoundryStateStore`` client (hosted mode).

    Raises:
        InvalidIdentifierError: ``store_prefix`` or ``user_id`` cannot be used.
        UntrustedDelegationError: ``user_id=`` in hosted mode without ``trusted_delegation``.
        InvalidArgumentError: ``item_ttl_seconds`` or ``local_backend`` is out of range.

    Example:
        >>> import asyncio
        >>> from agent_framework import AgentSession
        >>> async def demo() -> list[object]:
        ...     async with FoundrySessionStore() as sessions:
        ...         session = AgentSession(session_id="chat-1")
        ...         session.state["topic"] = "billing"
        ...         await sessions.set("chat-1", session)
        ...         again = await sessions.get("chat-1")
        ...         await sessions.delete("chat-1")
        ...         return [again.state if again else None, await sessions.get("chat-1")]
        >>> asyncio.run(demo())
        [{'topic': 'billing'}, None]
    """

    def __init__(
        self,
        *,
        store_prefix: str = "maf-sessions",
        credential: AsyncTokenCredential | None = None,
        endpoint: str | None = None,
        user_id: str | None = None,
        trusted_delegation: bool = False,
        item_ttl_seconds: int = DEFAULT_ITEM_TTL_SECONDS,
        spill: SpillStore | None = None,
        local_backend: LocalBackend = "sqlite",
        **client_kwargs: Any,
    ) -> None:
        core = new_core(locals(), scope_word="session store")
        self._setup(core, owns_core=True, request_context=None, etags=OrderedDict())

    def _setup(
        self,
        core: CheckpointCore,
        *,
        owns_core: bool,
        request_context: FoundryAgentRequestContext | None,
        etags: OrderedDict[tuple[str, str | None, str], str | None],
    ) -> None:
        self._core = core
        self._owns_core = owns_core
        self._request_context = request_context
        # (caller, call id, session id) -> the ETag seen last, or None: seen absent; shared
        # with the stores for_request() makes (a request is told apart by its call id)
        self._etags = etags

    def for_request(self, platform_context: FoundryAgentRequestContext) -> FoundrySessionStore:
        """A store acting for the request ``platform_context`` (Foundry hosting hands one to a
        provider), on this one's clients and loop; closing it leaves them open.

        Example:
            >>> import asyncio
            >>> from azure.ai.agentserver.core import FoundryAgentRequestContext
            >>> async def demo() -> bool:
            ...     async with FoundrySessionStore() as sessions:
            ...         view = sessions.for_request(FoundryAgentRequestContext(call_id="c-1"))
            ...         return await view.get("chat-x") is None
            >>> asyncio.run(demo())
            True
        """
        store = type(self).__new__(type(self))
        store._setup(
            self._core, owns_core=False, request_context=platform_context, etags=self._etags
        )
        return store

    def __repr__(self) -> str:
        return f"FoundrySessionStore({self._core.describe()})"

    # -- plumbing ---------------------------------------------------------------------------
    def _capture(self) -> Call:
        return self._core.capture(self._request_context)

    async def _run(self, coro: Coroutine[Any, Any, T], call: Call, *, shield: bool = False) -> T:
        return await self._core.arun(coro, shield=shield, call=call)

    def _memo(self, call: Call, session_id: str) -> tuple[str, str | None, str]:
        return (call.caller.key, call.context.call_id, session_id)

    def _remember(self, memo: tuple[str, str | None, str], etag: str | None) -> None:
        self._etags[memo] = etag
        self._etags.move_to_end(memo)
        while len(self._etags) > MAX_ETAGS:
            self._etags.popitem(last=False)

    # -- the SessionStore protocol ----------------------------------------------------------
    async def get(self, session_id: str) -> AgentSession | None:
        """A new copy of session ``session_id`` of the current user, or None when absent.

        One store call (``get_item``). Remembers the item's ETag for the next :meth:`set`.

        Raises:
            ValueError: ``session_id`` is empty or not a string.
            CorruptPayloadError: the stored session is damaged.
        """
        session_id = _checked(session_id)
        call = self._capture()
        found = await self._run(self._read(session_id), call)
        memo = self._memo(call, session_id)
        if found is None:
            self._remember(memo, None)
            return None
        etag, payload = found
        self._remember(memo, etag)
        return _restored(session_id, payload)

    async def _read(self, session_id: str) -> tuple[str, bytes] | None:
        scope = await self._core.scope(None, create=False)
        if scope is None:
            return None
        key = _key(session_id)
        item = await scope.store.get_item(key)
        if item is None:
            return None
        return item.etag, await scope.decode(item.value, key=key)

    async def set(self, session_id: str, session: AgentSession) -> None:
        """Store ``session`` as ``session_id`` of the current user.

        After a :meth:`get` (or ``set``) of this session in the same request, the write is a
        compare-and-set against what that call saw: a session another writer changed (or
        created) since raises ``ConcurrentWriteError`` and stores nothing; call :meth:`get`
        again and redo the turn. Without one it replaces whatever is stored.

        Raises:
            ValueError: ``session_id`` is empty or not a string.
            TypeError: ``session`` is not an ``AgentSession``.
            NonJsonValueError: its state holds a value JSON cannot store (nothing written).
            ConcurrentWriteError: another writer advanced the session (also a RuntimeError).
            CheckpointTooLargeError: too large, with nowhere to spill (nothing written).
        """
        session_id = _checked(session_id)
        payload = _payload(session_id, session)
        call = self._capture()
        memo = self._memo(call, session_id)
        known = memo in self._etags
        expected = self._etags.get(memo)
        etag = await self._run(
            self._write(session_id, payload, known=known, expected=expected), call, shield=True
        )
        self._remember(memo, etag)

    async def _write(
        self, session_id: str, payload: bytes, *, known: bool, expected: str | None
    ) -> str:
        scope = await self._core.scope(None)
        key = _key(session_id)
        tags = {**_TAGS, "sid": tag_value(session_id)}
        value = await scope.encode(key, payload, tags=tags, extra={_ID_FIELD: session_id})
        try:
            if expected is not None:
                ref = await scope.store.set_item(key, value, tags=tags, if_match=expected)
            elif known:  # seen absent: only a create may follow
                ref = await scope.store.create_item(key, value, tags=tags)
            else:
                ref = await scope.store.set_item(key, value, tags=tags)
        except (FoundryStorageConflictError, FoundryStoragePreconditionError) as exc:
            raise _SessionConflict(session_id, store=scope.name, key=key) from exc
        await scope.touch()
        return ref.etag

    async def delete(self, session_id: str) -> None:
        """Delete session ``session_id`` of the current user, if present (one store call).

        A spilled session's blob is left to :meth:`gc`.

        Raises:
            ValueError: ``session_id`` is empty or not a string.
        """
        session_id = _checked(session_id)
        call = self._capture()
        await self._run(self._delete(session_id), call, shield=True)
        self._etags.pop(self._memo(call, session_id), None)

    async def _delete(self, session_id: str) -> None:
        scope = await self._core.scope(None, create=False)
        if scope is not None:
            await scope.store.delete_item(_key(session_id))

    # -- listing and maintenance ------------------------------------------------------------
    async def list_sessions(self) -> list[str]:
        """The ids of the current user's sessions, newest first.

        One ``list_keys`` call per 100 sessions (by the ``kind`` tag); a session whose id is too
        long for its key is read once to learn it.

        Example:
            >>> import asyncio
            >>> from agent_framework import AgentSession
            >>> async def demo() -> list[str]:
            ...     async with FoundrySessionStore(store_prefix="docs-sessions") as sessions:
            ...         for sid in ("a", "b"):
            ...             await sessions.set(sid, AgentSession(session_id=sid))
            ...         return sorted(await sessions.list_sessions())
            >>> asyncio.run(demo())
            ['a', 'b']
        """
        return await self._run(self._list(), self._capture())

    async def _list(self) -> list[str]:
        scope = await self._core.scope(None, create=False)
        if scope is None:
            return []
        out: list[str] = []
        for entry in await scope.keys(_TAGS):
            kind, _, escaped = entry.key.partition("/")
            session_id = unescape(escaped) if kind == "s" else None
            if session_id is None:
                item = await scope.store.get_item(entry.key)
                found = None if item is None else item.value.get(_ID_FIELD)
                session_id = found if isinstance(found, str) else None
            if session_id is not None:
                out.append(session_id)
        return out

    async def inspect(self, session_id: str) -> StoredSession | None:
        """What is stored for session ``session_id`` of the current user (size, spilled, last
        write), or None when absent: one ``get_item``, nothing decoded, nothing written.

        Raises:
            ValueError: ``session_id`` is empty or not a string.

        Example:
            >>> import asyncio
            >>> from agent_framework import AgentSession
            >>> async def demo() -> list[object]:
            ...     async with FoundrySessionStore(store_prefix="docs-inspect") as sessions:
            ...         await sessions.set("s-1", AgentSession(session_id="s-1"))
            ...         found = await sessions.inspect("s-1")
            ...         return [found.spilled, found.size > 0, await sessions.inspect("s-2")]
            >>> asyncio.run(demo())
            [False, True, None]
        """
        session_id = _checked(session_id)
        return await self._run(self._inspect(session_id), self._capture())

    async def _inspect(self, session_id: str) -> StoredSession | None:
        scope = await self._core.scope(None, create=False)
        item = None if scope is None else await scope.store.get_item(_key(session_id))
        if item is None:
            return None
        size = len(json.dumps(item.value, separators=(",", ":")).encode("utf-8"))
        spilled = spilled_digest(item.value) is not None
        return StoredSession(session_id, size, spilled, item.updated_at)

    async def gc(
        self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, dry_run: bool = False
    ) -> GcReport:
        """Delete the current user's spilled session blobs no session references any more
        (older than ``grace_seconds``); what was scanned, kept and deleted.

        Example:
            >>> import asyncio
            >>> async def demo() -> int:
            ...     async with FoundrySessionStore() as sessions:
            ...         return len((await sessions.gc(dry_run=True)).deleted)
            >>> asyncio.run(demo())
            0
        """
        return await self._run(
            self._core.gc(_referenced, grace_seconds=grace_seconds, dry_run=dry_run),
            self._capture(),
        )


async def _referenced(scope: Scope) -> set[str]:
    """Every blob the sessions of a scope reference (each item is read, none decoded)."""
    found: set[str] = set()
    for entry in await scope.keys(_TAGS):
        item = await scope.store.get_item(entry.key)
        value: Mapping[str, Any] = {} if item is None else item.value
        digest = spilled_digest(value)
        if digest is not None:
            found.add(digest)
    return found
