"""Big task inputs by reference: :class:`PayloadStore` and its :class:`PayloadRef`.

The platform's task runtime (``azure.ai.agentserver.core.tasks``: ``@task``,
``@multi_turn_task``) persists a task's input before the handler runs, which is what recovery
rests on. Inputs over 200 KiB of JSON are moved to the task's attachments, and inputs over
10 MiB are refused with ``InputTooLarge`` before any call is made. The platform's advice is to
keep big payloads elsewhere and pass a reference: :meth:`PayloadStore.put` stores the bytes and
returns a :class:`PayloadRef`, a JSON object of four short fields (about 160 bytes) to use as,
or inside, the task input; the handler reads the bytes back with :meth:`PayloadStore.get`,
which checks them against the reference's sha256 and size.

**Where the bytes go.** One isolated state store per prefix, ``<store_prefix>/default``, holds
one item per payload (key ``p/<id>``). The item goes through the shared item codec, so a payload
over the 1 MB item limit goes where every other large value goes: to the ``spill=`` store
(``LocalSpill`` in local mode, ``AzureBlobSpill`` when given or configured by
``FOUNDRY_CHECKPOINT_BLOB_*``) or, in hosted mode with no spill store, into chunk items of the
same store (no other Azure resource needed). Each payload's blob is its own: its bytes are
salted with the payload's random id before they are stored, so two payloads with equal content
never share a blob (deleting one never touches the other), and a spilled blob lives in a
namespace of its own (``<store_prefix>/payload-<random>``), recorded in the payload's item.

**Who can read it.** The store is opened with ``user_isolation=True`` and every call resolves
its caller once, as the checkpointers do (``CheckpointCore.capture`` in ``run``/``arun``): in
hosted mode the request's call id (which the task runtime carries into the handler), in local
mode the request context's user id, else ``user_id=``, else ``"local"``. A reference is therefore
only a name: another user holding it finds nothing in their partition and gets
:class:`~foundry_checkpoint.errors.PayloadNotFoundError`. A task the runtime recovers after a
crash is re-entered at start-up, outside any request; the runtime then takes the call id from
a ``call_id`` field of the input, so put the request's call id there next to the reference.

**How payloads are cleaned up.** Three ways, none of which needs the reference's holder to be
alive:

1. :meth:`PayloadStore.delete` removes the item and its blob or chunks at once (call it when
   the task that used the payload has completed);
2. the store's item TTL (``item_ttl_seconds``, 30 days by default: the platform's idle lifetime
   of a task) expires every payload that long after it was put (an item is written once and
   reads do not renew it). Chunk items expire with it, so in hosted mode with no spill store
   nothing outlives the TTL;
3. with a spill store, :meth:`PayloadStore.gc` deletes the blobs of expired payloads: every
   blob of a payload namespace older than the TTL plus a grace period. It needs no list of
   live payloads (a payload older than the TTL has expired for every user), so it is safe to
   run from any process, as any user. With ``item_ttl_seconds=-1`` payloads live until deleted.

Example:
    >>> with PayloadStore() as payloads:
    ...     ref = payloads.put(b"a document far too big for a task input")
    ...     back = payloads.get(ref)
    ...     gone = payloads.delete(ref)
    >>> sorted(ref), back[:10], gone
    (['id', 'payload_ref', 'sha256', 'size'], b'a document', True)
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, TypedDict, TypeGuard

from . import _codec
from ._core import LocalBackend, Scope
from ._lifecycle import CoreOwner
from ._offload import offload
from ._store._limits import DEFAULT_ITEM_TTL_SECONDS
from ._store._listing import create_item
from ._store._naming import item_key
from .adapter import new_core
from .errors import (
    CorruptPayloadError,
    FoundryCheckpointError,
    InvalidArgumentError,
    MissingBlobError,
    PayloadNotFoundError,
)
from .spill._protocol import blob_bytes

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from .spill import SpillStore

__all__ = ["DEFAULT_PAYLOAD_PREFIX", "PayloadRef", "PayloadStore"]

DEFAULT_PAYLOAD_PREFIX: Final = "payloads"
"""The default ``store_prefix`` of :class:`PayloadStore`: its own, apart from the checkpointers'."""

REF_FORMAT: Final = 1
"""The ``payload_ref`` field of the references this version writes."""

DEFAULT_GC_GRACE_SECONDS: Final = 24 * 3600
"""How much older than the TTL a blob must be before :meth:`PayloadStore.gc` deletes it."""

_ID_RE: Final = re.compile(r"[0-9a-f]{32}")
_SHA_RE: Final = re.compile(r"[0-9a-f]{64}")
_NS_WORD: Final = "payload-"
_SALT: Final = 16
_TAGS: Final = {"kind": "payload"}
_REF_FIELDS: Final = frozenset({"payload_ref", "id", "sha256", "size"})


class PayloadRef(TypedDict):
    """A reference to a payload stored by :meth:`PayloadStore.put`: plain JSON, about 160 bytes.

    ``payload_ref`` is the format (1), ``id`` the payload's random id (32 hex digits),
    ``sha256`` and ``size`` the digest and length of the bytes, which :meth:`PayloadStore.get`
    checks. Pass it as the task input (or a field of it) as it is.

    Example:
        >>> ref: PayloadRef = {"payload_ref": 1, "id": "0" * 32, "sha256": "0" * 64, "size": 0}
        >>> PayloadStore.is_ref(ref)
        True
    """

    payload_ref: int
    id: str
    sha256: str
    size: int


def _checked_ref(ref: object) -> PayloadRef:
    """``ref`` when it has the shape :meth:`PayloadStore.put` returns, else InvalidArgumentError."""
    if not isinstance(ref, Mapping) or set(ref) != _REF_FIELDS:
        shown = sorted(ref) if isinstance(ref, Mapping) else type(ref).__name__
        raise InvalidArgumentError(
            f"not a payload reference: expected the fields {sorted(_REF_FIELDS)}, got {shown}. "
            "Pass the object PayloadStore.put() returned, unchanged."
        )
    version, pid, sha, size = ref["payload_ref"], ref["id"], ref["sha256"], ref["size"]
    problems = []
    if version != REF_FORMAT or isinstance(version, bool):
        problems.append(f"payload_ref {version!r} is not {REF_FORMAT}")
    if not isinstance(pid, str) or not _ID_RE.fullmatch(pid):
        problems.append(f"id {pid!r} is not 32 lowercase hex digits")
    if not isinstance(sha, str) or not _SHA_RE.fullmatch(sha):
        problems.append(f"sha256 {sha!r} is not 64 lowercase hex digits")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= _codec.MAX_PAYLOAD:
        problems.append(f"size {size!r} is not a byte count")
    if problems:
        raise InvalidArgumentError(
            f"bad payload reference: {'; '.join(problems)}. Pass the object PayloadStore.put() "
            "returned, unchanged."
        )
    return {"payload_ref": version, "id": pid, "sha256": sha, "size": size}


async def _sha256(data: bytes) -> str:
    return await offload(len(data), lambda: hashlib.sha256(data).hexdigest())


class PayloadStore(CoreOwner):
    """Payloads too big for a task input, stored durably and passed by reference.

    Put the bytes where the task is started (a request handler), pass the returned
    :class:`PayloadRef` as the task input, read them back in the task handler (again after a
    crash: the input is persisted, the payload stays until deleted or expired), and delete
    them once the task has completed. How payloads are stored, isolated per user and cleaned
    up is described in :mod:`foundry_checkpoint.payloads`.

    Args:
        store_prefix: First segment of the store's name (default ``"payloads"``; keep it apart
            from the checkpointers' prefixes).
        credential: Async token credential for hosted mode (default: one
            ``DefaultAzureCredential``).
        endpoint: Foundry project endpoint for hosted mode (default: ``FOUNDRY_PROJECT_ENDPOINT``).
        user_id: The end user whose partition to use outside a request. Within a request the
            request's own identity always wins. Hosted mode needs ``trusted_delegation=True``.
        trusted_delegation: Declare this agent a trusted delegating caller (required for
            ``user_id=`` in hosted mode).
        item_ttl_seconds: How long a payload lives after :meth:`put` unless deleted (-1:
            until deleted). Fixed when the store is first created (default 30 days).
        spill: Where payloads over the 1 MB item limit go (default: a folder under the state
            root locally; in hosted mode ``FOUNDRY_CHECKPOINT_BLOB_*`` blob storage if set,
            else chunk items of the payload store itself).
        local_backend: ``"sqlite"`` (embedded, default), ``"sdk"`` (the SDK's local mode) or
            the name of a registered backend.
        **client_kwargs: Passed to the ``FoundryStateStore`` client (hosted mode).

    Every operation has a sync face (``put``, ``get``, ``delete``, ``gc``) and an async one
    (``aput``, ...); both run the I/O on the object's own loop.

    Example:
        >>> import json
        >>> big = b"x" * 3_000_000  # over the 1 MB item limit: spilled
        >>> with PayloadStore(item_ttl_seconds=3600) as payloads:
        ...     task_input = {"document": payloads.put(big)}
        ...     small = len(json.dumps(task_input)) < 200
        ...     small, payloads.get(task_input["document"]) == big
        (True, True)
    """

    def __init__(
        self,
        *,
        store_prefix: str = DEFAULT_PAYLOAD_PREFIX,
        credential: AsyncTokenCredential | None = None,
        endpoint: str | None = None,
        user_id: str | None = None,
        trusted_delegation: bool = False,
        item_ttl_seconds: int = DEFAULT_ITEM_TTL_SECONDS,
        spill: SpillStore | None = None,
        local_backend: LocalBackend = "sqlite",
        **client_kwargs: Any,
    ) -> None:
        self._core = new_core(locals(), scope_word="payload store")
        self._owns_core = True

    def __repr__(self) -> str:
        return f"PayloadStore({self._core.describe()})"

    @property
    def spill_location(self) -> str | None:
        """Where payloads over the item limit go: the spill store (a folder, a blob container),
        or, in hosted mode with none, chunk items of the payload store itself."""
        core = self._core
        if core.spill is not None:
            return core.spill.describe
        return "chunk items of the payload store itself" if core.backend.chunks_in_store else None

    @staticmethod
    def is_ref(value: object) -> TypeGuard[PayloadRef]:
        """Whether ``value`` has the shape of a :class:`PayloadRef` (no I/O, nothing checked
        against the store): lets a handler accept an inline input or a reference.

        Example:
            >>> PayloadStore.is_ref({"text": "inline"}), PayloadStore.is_ref(None)
            (False, False)
        """
        try:
            _checked_ref(value)
        except InvalidArgumentError:
            return False
        return True

    # -- sync faces ---------------------------------------------------------------------------
    def put(self, data: bytes) -> PayloadRef:
        """Store ``data``; returns its reference. See :meth:`aput`."""
        payload = blob_bytes(data)
        return self._core.run(self._put(payload))

    def get(self, ref: PayloadRef | Mapping[str, Any]) -> bytes:
        """The bytes ``ref`` names, verified. See :meth:`aget`."""
        checked = _checked_ref(ref)
        return self._core.run(self._get(checked))

    def delete(self, ref: PayloadRef | Mapping[str, Any]) -> bool:
        """Delete the payload; whether it existed. See :meth:`adelete`."""
        checked = _checked_ref(ref)
        return self._core.run(self._delete(checked))

    def gc(self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS) -> int:
        """Delete the spilled blobs of expired payloads; how many. See :meth:`agc`."""
        return self._core.run(self._gc(grace_seconds))

    # -- async faces --------------------------------------------------------------------------
    async def aput(self, data: bytes) -> PayloadRef:
        """Store ``data`` (bytes, up to 1 GiB) for the current user; returns its reference.

        The bytes are copied before the first ``await``. A payload over the item limit is
        stored (blob or chunks) before the item that names it, so a reference never names
        bytes that were not stored.

        Raises:
            InvalidArgumentError: ``data`` is not bytes.
            CheckpointTooLargeError: ``data`` is over 1 GiB; nothing was written.
        """
        payload = blob_bytes(data)
        return await self._core.arun(self._put(payload))

    async def aget(self, ref: PayloadRef | Mapping[str, Any]) -> bytes:
        """The bytes ``ref`` names, checked against its sha256 and size.

        Raises:
            InvalidArgumentError: ``ref`` is not a payload reference.
            PayloadNotFoundError: no such payload for the current user (deleted, expired,
                put by another user, or under another ``store_prefix`` or backend).
            CorruptPayloadError: the stored bytes, or the reference, were changed.
        """
        checked = _checked_ref(ref)
        return await self._core.arun(self._get(checked))

    async def adelete(self, ref: PayloadRef | Mapping[str, Any]) -> bool:
        """Delete the payload ``ref`` names (its item, then its blob or chunks).

        Returns:
            Whether the current user had it (False: already gone, or another user's).

        Raises:
            InvalidArgumentError: ``ref`` is not a payload reference.
        """
        checked = _checked_ref(ref)
        return await self._core.arun(self._delete(checked))

    async def agc(self, *, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS) -> int:
        """Delete every blob of a payload namespace older than the store's TTL plus
        ``grace_seconds``: the blobs of expired payloads, whoever put them.

        Nothing to do (0) in hosted mode without a spill store (chunks expire with their
        payload), with ``item_ttl_seconds=-1``, or before the store exists.

        Returns:
            How many blobs were deleted.
        """
        return await self._core.arun(self._gc(grace_seconds))

    # -- coroutines on the core's loop --------------------------------------------------------
    def _where(self, pid: str) -> str:
        """The payload, for messages: its id (the caller's own), never the store or the key
        (a host may show the message to its client)."""
        return f"payload {pid}"

    async def _put(self, payload: bytes) -> PayloadRef:
        pid = secrets.token_hex(_SALT)
        sha = await _sha256(payload)
        scope = await self._core.scope(None, indexed=False)  # payloads are never listed
        key = item_key("p", pid)
        namespace = f"{self._core.prefix}/{_NS_WORD}{secrets.token_hex(16)}"
        extra = {"ns": namespace, "sha256": sha, "size": str(len(payload))}
        value = await _codec.encode(
            bytes.fromhex(pid) + payload,  # salted: this payload's blob is its own
            key=key,
            tags=_TAGS,
            extra=extra,
            spill=scope.spill,
            namespace=namespace,
            where=self._where(pid),
            compress=self._core.backend.compresses,
        )
        await create_item(scope.store, key, value, tags=_TAGS)
        return {"payload_ref": REF_FORMAT, "id": pid, "sha256": sha, "size": len(payload)}

    async def _item(self, ref: PayloadRef) -> tuple[Scope, Mapping[str, Any]] | None:
        scope = await self._core.scope(None, create=False)
        if scope is None:
            return None
        item = await scope.store.get_item(item_key("p", ref["id"]))
        if item is None:
            return None
        return scope, item.value

    def _namespace(self, value: Mapping[str, Any], where: str) -> str:
        """The payload's own spill namespace, as :meth:`_put` wrote it (else corrupt)."""
        ns = value.get("ns")
        word = f"{self._core.prefix}/{_NS_WORD}"
        if (
            not isinstance(ns, str)
            or not ns.startswith(word)
            or not _ID_RE.fullmatch(ns[len(word) :])
        ):
            raise CorruptPayloadError(
                f"{where} records the spill namespace {ns!r}, which this package never writes: "
                "the item was changed outside foundry-checkpoint. Put the payload again."
            )
        return ns

    def _missing(self, ref: PayloadRef, why: str) -> PayloadNotFoundError:
        return PayloadNotFoundError(
            f"payload {ref['id']} ({ref['size']} bytes) {why} under store prefix "
            f"{self._core.prefix!r} ({self._core.kind}). It was deleted, expired (payloads "
            f"live item_ttl_seconds after put), put by another user (each user reads only "
            "their own), or put with another store_prefix or backend. Put it again and start "
            "the task with the new reference."
        )

    async def _get(self, ref: PayloadRef) -> bytes:
        try:
            return await self._read(ref)
        except FoundryCheckpointError as error:
            if error.store is None:  # where it happened, for logs (never in the message)
                error.store = self._core.name_for(None)
                error.key = item_key("p", ref["id"])
            raise

    async def _read(self, ref: PayloadRef) -> bytes:
        found = await self._item(ref)
        if found is None:
            raise self._missing(ref, "is not stored for this user")
        scope, value = found
        where = self._where(ref["id"])
        if value.get("sha256") != ref["sha256"] or value.get("size") != str(ref["size"]):
            raise CorruptPayloadError(
                f"the reference to {where} records sha256 {ref['sha256']} and size "
                f"{ref['size']}, but the payload stored under its id records sha256 "
                f"{value.get('sha256')!r} and size {value.get('size')!r}: the reference (or the "
                "item) was changed. Pass the reference PayloadStore.put() returned, unchanged."
            )
        namespace = self._namespace(value, where)
        try:
            salted = await _codec.decode(value, spill=scope.spill, namespace=namespace, where=where)
        except MissingBlobError as exc:
            raise self._missing(ref, "has lost its stored bytes") from exc
        data = salted[_SALT:]
        if salted[:_SALT] != bytes.fromhex(ref["id"]) or len(data) != ref["size"]:
            raise CorruptPayloadError(
                f"{where} holds bytes that are not the payload its reference names: they were "
                "changed outside foundry-checkpoint. Put the payload again."
            )
        actual = await _sha256(data)
        if actual != ref["sha256"]:
            raise CorruptPayloadError(
                f"{where} hashes to {actual}, not to the sha256 {ref['sha256']} its reference "
                "records: it was changed outside foundry-checkpoint. Put the payload again."
            )
        return data

    async def _delete(self, ref: PayloadRef) -> bool:
        found = await self._item(ref)
        if found is None:
            return False
        scope, value = found
        await scope.store.delete_item(item_key("p", ref["id"]))
        digest = _codec.spilled_digest(value)
        spill = scope.spill
        if digest is not None and spill is not None:
            # the item first: nothing is left naming a blob that is gone; a blob left by a
            # crash here is an expired payload's, which gc() collects
            await spill.delete(self._namespace(value, self._where(ref["id"])), [digest])
        return True

    async def _gc(self, grace_seconds: float) -> int:
        if grace_seconds < 0:
            raise InvalidArgumentError(f"grace_seconds must be >= 0, got {grace_seconds!r}")
        spill = self._core.spill
        if spill is None:
            return 0
        scope = await self._core.scope(None, create=False)
        if scope is None:
            return 0
        ttl = (await scope.store.get()).item_ttl_seconds  # the store's own, fixed at creation
        if ttl is None or ttl == -1:
            return 0
        cutoff = time.time() - ttl - grace_seconds
        word = f"{self._core.prefix}/{_NS_WORD}"
        deleted = 0
        for ns in await spill.namespaces():
            if not ns.startswith(word) or not _ID_RE.fullmatch(ns[len(word) :]):
                continue
            stale = [b.digest for b in await spill.list(ns) if b.last_modified < cutoff]
            if stale:
                deleted += await spill.delete(ns, stale)
        return deleted
