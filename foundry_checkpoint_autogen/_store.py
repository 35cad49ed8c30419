"""``AutoGenStateStore``: versioned AutoGen states (agents, runtimes, teams) on the state store.

Mapping (one store per scope, isolated per end user):

* scope -> one store ``<store_prefix>/t/<scope>`` (``None``: ``<store_prefix>/default``), always
  ``user_isolation=True``;
* one state version -> item key ``v/<kind>/<name>/<version>``; the item value is the state as
  compact JSON through the shared codec (compressed when it pays, spilled over the 1 MB item
  limit), with the full kind and name kept in the value in case the key had to be hashed;
* tags: ``kind`` (``ag.<kind>``), ``name`` (the escaped name), ``ver`` (the version) and, for a
  spilled state, ``blob`` (the digest of its blob).

Items are append-only: every save creates a new version. A version is 20 digits of nanoseconds
since the epoch (monotonic within a process) and 8 random hex digits, so versions sort in write
order. ``load`` of the latest lists the keys of the newest ``created_at`` second and picks the
largest ``ver`` tag, then reads one item: its cost does not grow with the history. After each
save, versions beyond ``keep_versions`` are deleted with their spilled blobs (a blob still named
by a kept version stays). The versions to trim are listed while the new one is written, and
deleted together once it is: a save waits one round trip, two when it trims.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import secrets
import threading
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from foundry_checkpoint.adapter import (
    DEFAULT_ITEM_TTL_SECONDS,
    CoreOwner,
    ItemKey,
    LocalBackend,
    Scope,
    check_identifier,
    create_item,
    item_key,
    new_core,
    newest_item,
    spilled_digest,
    tag_value,
    unescape,
)
from foundry_checkpoint.errors import CorruptPayloadError, InvalidArgumentError, InvalidStateError

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from foundry_checkpoint.spill import SpillStore

__all__ = ["AutoGenStateStore", "StateVersion", "StoredState"]

T = TypeVar("T")

_KEY_WORD: Final = "v"
_TAG_KIND: Final = "kind"
_TAG_NAME: Final = "name"
_TAG_VER: Final = "ver"
_TAG_BLOB: Final = "blob"
_EXTRA_KIND: Final = "ak"
_EXTRA_NAME: Final = "an"
_EXTRA_VER: Final = "av"
_MAX_DEPTH: Final = 200
#: How many version deletes of one trim are in flight at once.
_DELETES_AT_ONCE: Final = 16

_clock_guard = threading.Lock()
_last_ns = 0


def _next_version() -> str:
    """A new version id: sortable, increasing within the process, unique across processes."""
    global _last_ns
    with _clock_guard:
        now = max(time.time_ns(), _last_ns + 1)
        _last_ns = now
    return f"{now:020d}-{secrets.token_hex(4)}"


def _tags_of(key: ItemKey) -> Mapping[str, str]:
    tags: Mapping[str, str] | None = key.tags
    return tags or {}


def _version_of(key: ItemKey) -> str:
    return _tags_of(key).get(_TAG_VER, "")


def _check_json(value: object, path: str, owner: str) -> None:
    """Raise :class:`InvalidStateError` unless ``value`` is plain JSON that round-trips."""
    stack: list[tuple[object, str, int]] = [(value, path, 0)]
    while stack:
        current, where, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise InvalidStateError(
                f"the state of {owner} nests deeper than {_MAX_DEPTH} levels at {where}. "
                "Nothing was written."
            )
        if isinstance(current, str):
            try:
                current.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidStateError(
                    f"the state of {owner} holds a string with a lone surrogate at {where}, "
                    "which UTF-8 cannot carry. Nothing was written."
                ) from None
            continue
        if current is None or isinstance(current, (bool, int)):
            continue
        if isinstance(current, float):
            if not math.isfinite(current):
                raise InvalidStateError(
                    f"the state of {owner} holds {current!r} at {where}, which JSON cannot hold; "
                    "store None or a string. Nothing was written."
                )
            continue
        if isinstance(current, Mapping):
            for key, item in current.items():
                if not isinstance(key, str):
                    raise InvalidStateError(
                        f"the state of {owner} has the non-string key {key!r} at {where}; JSON "
                        "would turn it into a string silently, so use string keys. "
                        "Nothing was written."
                    )
                stack.append((key, f"{where} (a key)", depth + 1))  # checked as a string
                stack.append((item, f"{where}[{key!r}]", depth + 1))
            continue
        if isinstance(current, (list, tuple)):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(current))
            continue
        raise InvalidStateError(
            f"the state of {owner} holds a {type(current).__name__} at {where}, which is not "
            "JSON; return JSON types from save_state() (pydantic: model_dump(mode='json'), "
            "bytes as base64 text). Nothing was written."
        )


def _dump(state: object, owner: str) -> bytes:
    if not isinstance(state, Mapping):
        raise InvalidStateError(
            f"the state of {owner} must be a mapping (what save_state() returns), got "
            f"{type(state).__name__}. Nothing was written."
        )
    _check_json(state, "state", owner)
    return json.dumps(state, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


class StateVersion:
    """One stored version of a state: its ``version`` id and its ``created_at`` second.

    Example:
        >>> StateVersion("00000000000000000001-0a0b0c0d", 1700000000)
        StateVersion(version='00000000000000000001-0a0b0c0d', created_at=1700000000)
    """

    __slots__ = ("created_at", "version")

    def __init__(self, version: str, created_at: int) -> None:
        self.version = version
        self.created_at = created_at

    def __repr__(self) -> str:
        return f"StateVersion(version={self.version!r}, created_at={self.created_at!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StateVersion):
            return NotImplemented
        return (self.version, self.created_at) == (other.version, other.created_at)

    def __hash__(self) -> int:
        return hash((self.version, self.created_at))


@dataclass(frozen=True)
class StoredState:
    """One state kept under a scope, read from the key listing alone (nothing is decoded):
    its ``kind`` and ``name``, how many ``versions`` are stored, and the newest one.

    Example:
        >>> state = StoredState("agent", "counter/ann", 3, "00000000000000000003-0a0b0c0d", 1)
        >>> state.kind, state.versions
        ('agent', 3)
    """

    kind: str
    name: str
    versions: int
    latest: str
    created_at: int


class AutoGenStateStore(CoreOwner):
    """Versioned AutoGen states on Foundry's durable state store.

    Keeps the JSON states AutoGen's ``save_state()`` returns (an agent's, a runtime's, a
    team's) as append-only versions per ``(scope, kind, name)``: ``scope`` picks the store
    (a conversation, a deployment), ``kind`` says what the state is (``"agent"``,
    ``"runtime"``, ``"team"`` or a word of your own) and ``name`` which one (an ``AgentId``
    string, a team name). With no configuration it uses the embedded local store under
    ``AGENTSERVER_STATE_ROOT``; inside a Foundry-hosted agent (``FOUNDRY_HOSTING_ENVIRONMENT``
    set) the hosted service, isolated per end user.

    Args:
        store_prefix: First segment of every store name (default ``"autogen"``).
        credential: Async token credential for hosted mode (default: one
            ``DefaultAzureCredential``).
        endpoint: Foundry project endpoint for hosted mode (default:
            ``FOUNDRY_PROJECT_ENDPOINT``).
        user_id: The end user whose partition to use outside a request (default: the
            request's user). Within a request the request's own identity always wins. Hosted
            mode needs ``trusted_delegation=True`` with it (``x-ms-user-id`` is honoured only
            for trusted callers).
        trusted_delegation: Declare this agent a trusted delegating caller (required for
            ``user_id=`` in hosted mode).
        item_ttl_seconds: Idle lifetime of items in stores this object creates (-1: never).
        spill: Where states over the 1 MB item limit go (default: a directory under the state
            root in local mode, ``FOUNDRY_CHECKPOINT_BLOB_*`` blob storage if set).
        local_backend: ``"sqlite"`` (embedded, default) or ``"sdk"`` (the SDK's local mode).
        keep_versions: How many versions of each state to keep (older ones are deleted after
            each save, with their spilled blobs); ``None`` keeps every version.
        **client_kwargs: Passed to the ``FoundryStateStore`` client (hosted mode).

    Every operation has a sync face (``save``, ``load``, ``versions``, ``delete``, ``prune``)
    that blocks, and an async face (``asave``, ...) to await from any loop; both run the I/O on
    the store's own loop. A state that is not plain JSON raises
    :class:`~foundry_checkpoint.errors.InvalidStateError` naming the agent, and nothing is
    written.

    Example:
        >>> with AutoGenStateStore() as store:
        ...     first = store.save("conv-1", "agent", "counter/default", {"count": 1})
        ...     second = store.save("conv-1", "agent", "counter/default", {"count": 2})
        ...     latest = store.load("conv-1", "agent", "counter/default")
        ...     older = store.load("conv-1", "agent", "counter/default", version=first)
        ...     listed = [v.version for v in store.versions("conv-1", "agent", "counter/default")]
        >>> latest, older, listed == [first, second]
        ({'count': 2}, {'count': 1}, True)
    """

    def __init__(
        self,
        *,
        store_prefix: str = "autogen",
        credential: AsyncTokenCredential | None = None,
        endpoint: str | None = None,
        user_id: str | None = None,
        trusted_delegation: bool = False,
        item_ttl_seconds: int = DEFAULT_ITEM_TTL_SECONDS,
        spill: SpillStore | None = None,
        local_backend: LocalBackend = "sqlite",
        keep_versions: int | None = 10,
        **client_kwargs: Any,
    ) -> None:
        if keep_versions is not None and (
            isinstance(keep_versions, bool)
            or not isinstance(keep_versions, int)
            or keep_versions < 1
        ):
            raise InvalidArgumentError(
                f"keep_versions must be a positive int or None (keep all), got {keep_versions!r}"
            )
        self._core = new_core(locals(), scope_word="scope")
        self._owns_core = True
        self._keep = keep_versions
        # (user, scope, kind, name) -> [lock, holders]; an entry lives only while in use, so the
        # map stays small however many users (or per-request call ids) the object serves.
        self._write_locks: dict[tuple[str, str | None, str, str], list[Any]] = {}

    @property
    def keep_versions(self) -> int | None:
        """How many versions of each state are kept (None: all)."""
        return self._keep

    def __repr__(self) -> str:
        return f"AutoGenStateStore({self._core.describe()}, keep_versions={self._keep!r})"

    def _reset(self) -> None:
        self._write_locks.clear()

    # -- sync faces ---------------------------------------------------------------------------
    def save(self, scope: str | None, kind: str, name: str, state: Mapping[str, Any]) -> str:
        """Store a new version of ``state``; returns its version id. See :meth:`asave`."""
        payload = _dump(state, _owner(kind, name))
        return self._core.run(self._save(scope, kind, name, payload))

    def load(
        self, scope: str | None, kind: str, name: str, *, version: str | None = None
    ) -> dict[str, Any] | None:
        """The stored state (the latest, or ``version``), or None. See :meth:`aload`."""
        return self._core.run(self._load(scope, kind, name, version))

    def versions(self, scope: str | None, kind: str, name: str) -> list[StateVersion]:
        """Every stored version, oldest first. See :meth:`aversions`."""
        return self._core.run(self._versions(scope, kind, name))

    def delete(self, scope: str | None, kind: str, name: str) -> int:
        """Delete every version and its blobs; returns how many. See :meth:`adelete`."""
        return self._core.run(self._delete(scope, kind, name))

    def prune(self, scope: str | None, kind: str, name: str, *, keep: int | None = None) -> int:
        """Delete all but the newest ``keep`` versions; returns how many. See :meth:`aprune`."""
        return self._core.run(self._prune(scope, kind, name, _checked_keep(keep, self._keep)))

    # -- async faces --------------------------------------------------------------------------
    async def asave(self, scope: str | None, kind: str, name: str, state: Mapping[str, Any]) -> str:
        """Store a new version of ``state`` under ``(scope, kind, name)``; returns its version.

        ``state`` must be plain JSON (string keys, finite numbers); anything else raises
        :class:`~foundry_checkpoint.errors.InvalidStateError` and nothing is written. It is
        serialized before the first ``await``, so later changes do not reach the store.
        Versions beyond ``keep_versions`` are deleted afterwards.
        """
        payload = _dump(state, _owner(kind, name))
        # Once started, a save is not cancelled with its caller: close() waits for it.
        return await self._run(self._save(scope, kind, name, payload), shield=True)

    async def aload(
        self, scope: str | None, kind: str, name: str, *, version: str | None = None
    ) -> dict[str, Any] | None:
        """The stored state: the latest (``version=None``) or that version; None if absent.

        The latest costs one key listing (plus one page per 100 versions written within the
        newest second) and one item read, however many versions exist. A stored state that
        :meth:`asave` would have refused (NaN, infinities, ``1e999``, lone surrogates, nesting
        too deep) or that is not a JSON object raises
        :class:`~foundry_checkpoint.errors.CorruptPayloadError`: it was changed outside this
        package.
        """
        return await self._run(self._load(scope, kind, name, version))

    async def aversions(self, scope: str | None, kind: str, name: str) -> list[StateVersion]:
        """Every stored version of ``(scope, kind, name)``, oldest first."""
        return await self._run(self._versions(scope, kind, name))

    async def adelete(self, scope: str | None, kind: str, name: str) -> int:
        """Delete every version of ``(scope, kind, name)`` and its spilled blobs; the count."""
        return await self._run(self._delete(scope, kind, name))

    async def aprune(
        self, scope: str | None, kind: str, name: str, *, keep: int | None = None
    ) -> int:
        """Delete all but the newest ``keep`` (default ``keep_versions``) versions; the count."""
        return await self._run(self._prune(scope, kind, name, _checked_keep(keep, self._keep)))

    # -- inspection (what ``foundry-checkpoint autogen`` lists) -------------------------------
    def list_scopes(self) -> list[str | None]:
        """Every scope this user has states in (None: the default store), from the index.

        Example:
            >>> with AutoGenStateStore() as store:
            ...     _ = store.save("conv-ls", "agent", "counter/default", {"count": 1})
            ...     "conv-ls" in store.list_scopes()
            True
        """
        return self._core.run(self._list_scopes())

    def list_states(self, scope: str | None) -> list[StoredState]:
        """The states kept under ``scope`` (agents, runtimes, teams...), sorted by kind and
        name, from the key listing alone: no state is read or decoded.

        Example:
            >>> with AutoGenStateStore() as store:
            ...     for count in (1, 2):
            ...         _ = store.save("conv-st", "agent", "counter/default", {"count": count})
            ...     [(s.kind, s.name, s.versions) for s in store.list_states("conv-st")]
            [('agent', 'counter/default', 2)]
        """
        return self._core.run(self._list_states(scope))

    async def alist_scopes(self) -> list[str | None]:
        """Async form of :meth:`list_scopes`."""
        return await self._run(self._list_scopes())

    async def alist_states(self, scope: str | None) -> list[StoredState]:
        """Async form of :meth:`list_states`."""
        return await self._run(self._list_states(scope))

    async def _list_scopes(self) -> list[str | None]:
        ids = await self._core.scope_ids()
        named = sorted(i for i in ids if i is not None)
        return [None, *named] if None in ids else list(named)

    async def _list_states(self, scope_id: str | None) -> list[StoredState]:
        if scope_id is not None:
            check_identifier(scope_id, "scope")
        scope = await self._core.scope(scope_id, create=False)
        if scope is None:
            return []
        groups: dict[tuple[str, str], list[ItemKey]] = {}
        for key in await scope.keys():
            tags = _tags_of(key)
            kind_tag, name_tag = tags.get(_TAG_KIND), tags.get(_TAG_NAME)
            if not kind_tag or not name_tag:
                continue  # the scope's own bookkeeping items
            groups.setdefault((kind_tag, name_tag), []).append(key)
        out: list[StoredState] = []
        for (kind_tag, name_tag), keys in groups.items():
            newest = max(keys, key=lambda k: (_version_of(k), k.key))
            kind = unescape(kind_tag)
            name = unescape(name_tag)
            if kind is None or name is None:  # hashed (very long): the full text is in the value
                item = await scope.store.get_item(newest.key)
                value = item.value if item is not None else {}
                kind = value.get(_EXTRA_KIND, kind_tag) if kind is None else kind
                name = value.get(_EXTRA_NAME, name_tag) if name is None else name
            out.append(
                StoredState(
                    kind=str(kind).removeprefix("ag."),
                    name=str(name),
                    versions=len(keys),
                    latest=_version_of(newest),
                    created_at=int(newest.created_at),
                )
            )
        return sorted(out, key=lambda s: (s.kind, s.name))

    async def _run(self, coro: Coroutine[Any, Any, T], *, shield: bool = False) -> T:
        return await self._core.arun(coro, shield=shield)

    # -- coroutines on the core's loop --------------------------------------------------------
    def _checked(self, scope: str | None, kind: str, name: str) -> tuple[dict[str, str], str]:
        if scope is not None:
            check_identifier(scope, "scope")
        check_identifier(kind, "kind")
        check_identifier(name, "name")
        return {_TAG_KIND: tag_value(f"ag.{kind}"), _TAG_NAME: tag_value(name)}, item_key(
            _KEY_WORD, kind, name
        )

    async def _save(self, scope_id: str | None, kind: str, name: str, payload: bytes) -> str:
        tags, _ = self._checked(scope_id, kind, name)
        scope = await self._core.scope(scope_id)
        lock_key = (scope.user, scope_id, kind, name)
        gate = self._write_locks.setdefault(lock_key, [asyncio.Lock(), 0])
        gate[1] += 1
        try:
            async with gate[0]:
                return await self._save_locked(scope, kind, name, payload, tags)
        finally:
            gate[1] -= 1
            if gate[1] == 0:
                self._write_locks.pop(lock_key, None)

    async def _save_locked(
        self, scope: Scope, kind: str, name: str, payload: bytes, tags: dict[str, str]
    ) -> str:
        """One save under the (user, scope, kind, name) write lock."""
        version = _next_version()
        key = item_key(_KEY_WORD, kind, name, version)
        tags = {**tags, _TAG_VER: version}
        extra = {_EXTRA_KIND: kind, _EXTRA_NAME: name, _EXTRA_VER: version}
        value = await scope.encode(key, payload, tags=tags, extra=extra)
        digest = spilled_digest(value)
        if digest is not None:
            tags[_TAG_BLOB] = digest
        if self._keep is None:
            await create_item(scope.store, key, value, tags=tags)
            await scope.touch()
            return version
        # The versions to trim are listed while the new one is written: one round trip for
        # both. The listing may or may not show the new version; it is left out, kept, and
        # counted as one of the ``keep``. Nothing is deleted unless the write succeeded.
        listing = asyncio.ensure_future(self._keys(scope, kind, name))
        try:
            await create_item(scope.store, key, value, tags=tags)
        except BaseException:
            listing.cancel()
            with contextlib.suppress(BaseException):
                await listing
            raise
        older = [k for k in await listing if k.key != key]
        await scope.touch()
        await self._drop(scope, older, self._keep - 1, kept_blobs={digest})
        return version

    async def _load(
        self, scope_id: str | None, kind: str, name: str, version: str | None
    ) -> dict[str, Any] | None:
        tags, _ = self._checked(scope_id, kind, name)
        if version is not None:
            check_identifier(version, "version")
        scope = await self._core.scope(scope_id, create=False)
        if scope is None:
            return None
        if version is not None:
            key = item_key(_KEY_WORD, kind, name, version)
            item = await scope.store.get_item(key)
            if item is None:
                return None
            return await self._decoded(scope, key, item.value, kind, name)
        found = await newest_item(
            scope.store, tags, lambda keys: max(keys, key=lambda k: (_version_of(k), k.key))
        )
        if found is None:
            return None
        best, item = found
        return await self._decoded(scope, best.key, item.value, kind, name)

    async def _decoded(
        self, scope: Scope, key: str, value: Mapping[str, Any], kind: str, name: str
    ) -> dict[str, Any]:
        payload = await scope.decode(value, key=key)
        try:
            state = json.loads(payload)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
            raise CorruptPayloadError(
                f"the stored state of {_owner(kind, name)} ({scope.where(key)}) is not JSON: {exc}"
            ) from exc
        if not isinstance(state, dict):
            raise CorruptPayloadError(
                f"the stored state of {_owner(kind, name)} ({scope.where(key)}) is not an object"
            )
        try:  # what save() refuses (NaN, infinities, 1e999, lone surrogates) is refused here too
            _check_json(state, "state", _owner(kind, name))
        except InvalidStateError as exc:
            why = str(exc).removesuffix(" Nothing was written.")
            raise CorruptPayloadError(
                f"the stored state of {_owner(kind, name)} ({scope.where(key)}) cannot be "
                f"loaded: {why} save() never writes such a state: the item was changed outside "
                "foundry-checkpoint."
            ) from None
        return state

    async def _keys(self, scope: Scope, kind: str, name: str) -> list[ItemKey]:
        tags, _ = self._checked(scope.scope_id, kind, name)
        keys = await scope.keys(tags)
        return sorted(keys, key=lambda k: (_version_of(k), k.key))

    async def _versions(self, scope_id: str | None, kind: str, name: str) -> list[StateVersion]:
        self._checked(scope_id, kind, name)
        scope = await self._core.scope(scope_id, create=False)
        if scope is None:
            return []
        return [
            StateVersion(_version_of(k), int(k.created_at))
            for k in await self._keys(scope, kind, name)
        ]

    async def _delete(self, scope_id: str | None, kind: str, name: str) -> int:
        self._checked(scope_id, kind, name)
        scope = await self._core.scope(scope_id, create=False)
        if scope is None:
            return 0
        return await self._trim(scope, kind, name, 0)

    async def _prune(self, scope_id: str | None, kind: str, name: str, keep: int) -> int:
        self._checked(scope_id, kind, name)
        scope = await self._core.scope(scope_id, create=False)
        if scope is None:
            return 0
        return await self._trim(scope, kind, name, keep)

    async def _trim(self, scope: Scope, kind: str, name: str, keep: int) -> int:
        """Delete all but the newest ``keep`` versions, then the blobs no kept version names."""
        return await self._drop(scope, await self._keys(scope, kind, name), keep)

    async def _drop(
        self,
        scope: Scope,
        keys: list[ItemKey],
        keep: int,
        *,
        kept_blobs: set[str | None] | None = None,
    ) -> int:
        """Delete all but the newest ``keep`` of ``keys`` (oldest first), then the blobs that
        neither a kept version nor ``kept_blobs`` names."""
        cut = max(len(keys) - keep, 0)
        dropped, kept = keys[:cut], keys[cut:]
        if not dropped:
            return 0
        # independent deletes: in flight together (a bounded number at a time), one round trip
        for start in range(0, len(dropped), _DELETES_AT_ONCE):
            batch = dropped[start : start + _DELETES_AT_ONCE]
            await asyncio.gather(*(scope.store.delete_item(key.key) for key in batch))
        still = {_tags_of(k).get(_TAG_BLOB) for k in kept} | (kept_blobs or set())
        orphans = sorted(
            {d for k in dropped if (d := _tags_of(k).get(_TAG_BLOB)) and d not in still}
        )
        spill = scope.spill
        if orphans and spill is not None:
            namespace = await scope.namespace(create=False)
            if namespace is not None:
                await spill.delete(namespace, orphans)
        return len(dropped)


def _owner(kind: str, name: str) -> str:
    return f"{kind} {name!r}"


def _checked_keep(keep: int | None, default: int | None) -> int:
    chosen = default if keep is None else keep
    if chosen is None:
        raise InvalidArgumentError(
            "prune() needs keep= when the store keeps every version (keep_versions=None)"
        )
    if isinstance(chosen, bool) or not isinstance(chosen, int) or chosen < 0:
        raise InvalidArgumentError(f"keep must be a non-negative int, got {chosen!r}")
    return chosen
