"""Typed errors raised by foundry-checkpoint.

Every error derives from :class:`FoundryCheckpointError`, names the thread or context it
concerns (the store and item key only in its ``store`` and ``key`` attributes, for logs), and
says what to do about it. Nothing is half-written when one of them is raised: the
operation that raised it either completed before the error or left the store as it was.

The tree (a class in ``foundry_checkpoint_maf`` in brackets; ``+ X`` is a second base)::

    FoundryCheckpointError
    ├── InvalidArgumentError                   + ValueError
    │   ├── InvalidIdentifierError
    │   ├── UntrustedDelegationError
    │   └── [AllowedTypeEntryError]            + TypeError
    ├── InvalidStateError                      + ValueError
    ├── CheckpointTooLargeError
    ├── IsolationRefusedError
    ├── ConcurrentWriteError
    ├── CorruptPayloadError
    │   ├── UnsafeValueError
    │   ├── TamperedPayloadError
    │   │   └── [CheckpointTamperedError]      + [CheckpointDecodeError]
    │   └── [CheckpointDecodeError]            + WorkflowCheckpointException
    ├── TypeBlockedError
    │   └── [CheckpointTypeBlockedError]       + WorkflowCheckpointException
    ├── UnreadableValueError                   + TypeError
    ├── NonJsonValueError                      + TypeError
    ├── MissingBlobError
    ├── MissingDependencyError                 + ImportError
    ├── CrossUserMessageError
    ├── PayloadNotFoundError
    └── StoreError                             + the SDK's FoundryStorageError
        ├── StoreNotFoundError                 + FoundryStorageNotFoundError
        ├── StoreBadRequestError               + FoundryStorageBadRequestError
        │   └── StoreConflictError             + FoundryStorageConflictError
        ├── StorePreconditionError             + FoundryStoragePreconditionError
        └── StoreServiceError                  + FoundryStorageApiError

The ``Store*`` errors are the state store's own failures (``azure.ai.agentserver.core.storage``'s
``FoundryStorage*Error``) as the adapters pass them on: each is also the SDK's class, so code
that catches the SDK's errors keeps working, and keeps the SDK's error as ``__cause__``.

Example:
    >>> from foundry_checkpoint.errors import FoundryCheckpointError, InvalidIdentifierError
    >>> issubclass(InvalidIdentifierError, FoundryCheckpointError)
    True
"""

from __future__ import annotations

from typing import Any

from azure.ai.agentserver.core.storage import (
    FoundryStorageApiError,
    FoundryStorageBadRequestError,
    FoundryStorageConflictError,
    FoundryStorageError,
    FoundryStorageNotFoundError,
    FoundryStoragePreconditionError,
)

__all__ = [
    "CheckpointTooLargeError",
    "ConcurrentWriteError",
    "CorruptPayloadError",
    "CrossUserMessageError",
    "FoundryCheckpointError",
    "InvalidArgumentError",
    "InvalidIdentifierError",
    "InvalidStateError",
    "IsolationRefusedError",
    "MissingBlobError",
    "MissingDependencyError",
    "NonJsonValueError",
    "PayloadNotFoundError",
    "StoreBadRequestError",
    "StoreConflictError",
    "StoreError",
    "StoreNotFoundError",
    "StorePreconditionError",
    "StoreServiceError",
    "TamperedPayloadError",
    "TypeBlockedError",
    "UnreadableValueError",
    "UnsafeValueError",
    "UntrustedDelegationError",
]


class FoundryCheckpointError(Exception):
    """Base class of every error this package raises on purpose.

    The message names the thread or context (the caller's own identifiers) and what to do; it
    names no state store and no item key, because a host may hand ``str(error)`` to its client
    (the Responses hosts put it in a failed response). Where it happened is kept for logs in
    :attr:`store` and :attr:`key` when the error concerns one item.

    Args:
        *args: the message (as for ``Exception``).
        store: the state store the error concerns, if one (for logs, never in the message).
        key: the item key the error concerns, if one (for logs, never in the message).

    Example:
        >>> error = FoundryCheckpointError("thread 't-1': too large", store="lg/t/1", key="c//1")
        >>> str(error), error.store, error.key
        ("thread 't-1': too large", 'lg/t/1', 'c//1')
    """

    def __init__(
        self, *args: Any, store: str | None = None, key: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)  # the SDK's storage errors take keyword fields too
        self.store = store
        self.key = key


class InvalidArgumentError(FoundryCheckpointError, ValueError):
    """An argument of a public call is out of range or conflicts with another one.

    For example ``prune(keep=0)``, an empty ``context_id``, or two mutually exclusive ways of
    configuring a spill store. Raised before anything is written. It is also a ``ValueError``,
    so code that catches ``ValueError`` keeps working.
    """


class InvalidIdentifierError(InvalidArgumentError):
    """An identifier (thread id, context id, checkpoint id, prefix) cannot be used.

    Raised for empty identifiers or identifiers of the wrong type, before anything is written.
    """


class InvalidStateError(FoundryCheckpointError, ValueError):
    """A state handed over to be stored is not plain JSON (AutoGen states must be).

    The message names the agent, runtime or team and the path of the first offending value
    (a non-string key, NaN, an object JSON cannot hold). Nothing was written.
    """


class CheckpointTooLargeError(FoundryCheckpointError):
    """A value is too large to store: over the 1 MB item limit with no spill store, or over 1 GiB.

    The defaults leave no 1 MB wall: local mode spills to ``LocalSpill``, and hosted mode with
    no spill store keeps a value over the item limit as chunk items of the thread's own store.
    So it is raised for a payload over 1 GiB (refused even with a spill store: readers refuse
    to inflate anything larger; keep large artifacts outside the graph's state and store a
    reference), or when an item's key, tags and extra fields alone exceed the request budget.
    For very large or many large values in hosted mode, pass ``spill=AzureBlobSpill(...)`` or
    set the ``FOUNDRY_CHECKPOINT_BLOB_*`` environment variables. Nothing was written.
    """


class IsolationRefusedError(FoundryCheckpointError):
    """An existing store was created without ``user_isolation`` and is refused.

    Such a store would let every end user read every other user's checkpoints. Fix: use another
    ``store_prefix`` or delete the store (after moving its data) so it is re-created isolated.
    """


class ConcurrentWriteError(FoundryCheckpointError):
    """A write lost the race against concurrent writers on every attempt and was given up.

    For example the pending writes of one task merged into an item that other processes kept
    changing, or a checkpoint that ``prune`` keeps rewritten by another process while prune
    rewrote it. Nothing of the losing write was stored (prune deleted nothing); retrying is
    safe. Two workers running the same thread at the same time is the usual cause.
    """


class CorruptPayloadError(FoundryCheckpointError):
    """A stored payload failed its integrity check (sha256 mismatch, bad encoding, bad codec).

    The item or spilled blob was changed outside this package or damaged in storage.
    """


class MissingBlobError(FoundryCheckpointError):
    """An item references a spilled blob that no longer exists.

    The blob was deleted outside this package (for example by a lifecycle rule that is shorter
    than the store's item TTL) or the spill store configuration points at another container.
    """


class MissingDependencyError(FoundryCheckpointError, ImportError):
    """A part of the package needs a dependency of an extra that is not installed.

    The message names the package and the extra that brings it, for example
    ``pip install 'foundry-checkpoint[emulator]'`` for the emulator's ``cryptography``. It is
    also an ``ImportError``, raised when the module that needs it is imported.
    """


class UntrustedDelegationError(InvalidArgumentError):
    """Hosted mode was given ``user_id=`` without ``trusted_delegation=True``.

    ``user_id=`` is sent as the delegated ``x-ms-user-id`` header, which the service honours
    "only for trusted (S2S/managed-identity) callers; ignored otherwise (falls back to
    hash(oid, tid))" (the SDK's TypeSpec, ``DelegatedUserIdHeader``). Ignored, every user of
    such an adapter would share one partition. What isolates end users in a hosted agent is the
    platform's per-request call id, which the hosts put in the request context and the SDK
    forwards on every store call: drop ``user_id=``. Pass ``trusted_delegation=True`` only when
    this agent's identity is configured as a trusted delegating caller. Raised at construction,
    before anything is sent.

    Example:
        >>> issubclass(UntrustedDelegationError, InvalidArgumentError)
        True
    """


class CrossUserMessageError(FoundryCheckpointError):
    """A durable AutoGen agent holding one end user's state got a message of another user.

    An AutoGen runtime keeps one agent instance per ``AgentId``; a
    :class:`~foundry_checkpoint_autogen.DurableAgent` restores that instance from its first
    sender's partition, so handling another user's message with it would save the first
    user's state into the second user's partition. Give each end user (or conversation) its
    own agent key, for example ``AgentId("assistant", conversation_id)``. Raised before the
    handler runs; nothing was written.

    Example:
        >>> issubclass(CrossUserMessageError, FoundryCheckpointError)
        True
    """


class UnsafeValueError(CorruptPayloadError):
    """A stored value names a constructor outside the serializer's allow-list; nothing ran.

    Either the store was written by something else (tampering), or the value was written by a
    graph whose types this reader does not know (another graph, or no graph at all: a direct
    ``get_tuple``, the CLI). The graph's own state types are admitted while the graph calls the
    saver; for anything else, add it with
    ``FoundryCheckpointer().with_allowlist([("my_app.models", "MyState")])``.

    Args:
        message: what was refused and what to do.
        names: the ``(module, name)`` the value names, when the refusal is about a class.

    Example:
        >>> error = UnsafeValueError("refused", names=("os", "system"))
        >>> isinstance(error, CorruptPayloadError), error.names
        (True, ('os', 'system'))
    """

    def __init__(self, message: str, *, names: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.names = names


class UnreadableValueError(FoundryCheckpointError, TypeError):
    """A value to be stored could not be read back: its class is not in the allow-list.

    Raised by ``put``/``put_writes`` (and their async forms) before anything is written, on the
    run that would store it, so that no checkpoint is ever refused first at resume. The message
    names the class and the fix: declare the type in the graph's state (or a node's input)
    schema, or allow it with
    ``FoundryCheckpointer().with_allowlist([("my_app.models", "Item")])``. A ``TypeError``, as
    every "cannot serialize this" error of LangGraph's serializers is.

    Example:
        >>> issubclass(UnreadableValueError, TypeError)
        True
        >>> issubclass(UnreadableValueError, CorruptPayloadError)
        False
    """


class NonJsonValueError(FoundryCheckpointError, TypeError):
    """A memory value handed to ``FoundryStore.put`` is not plain JSON.

    Memory values are stored as JSON, so that whatever is stored reads back equal and decoding
    never runs code. The message names the namespace, the key and the path of the first
    offending value (a non-string key, NaN, a datetime, an object JSON cannot hold) and the
    fix. Raised before anything of the batch is written. A ``TypeError``, as ``json.dumps``
    raises for what it cannot encode.

    Example:
        >>> issubclass(NonJsonValueError, TypeError)
        True
    """


class PayloadNotFoundError(FoundryCheckpointError):
    """A payload reference names nothing the current user can read.

    Raised by :meth:`~foundry_checkpoint.PayloadStore.get` when the payload was deleted, expired
    (a payload lives ``item_ttl_seconds`` after it was put), was put by another end user (each
    user reads only their own partition), was put under another ``store_prefix`` or backend,
    or lost its stored bytes. Put the payload again and pass the new reference; a task handler
    that cannot get its input back should fail the task rather than retry.

    Example:
        >>> issubclass(PayloadNotFoundError, FoundryCheckpointError)
        True
    """


class TamperedPayloadError(CorruptPayloadError):
    """A stored payload holds what no encoder of this package writes; nothing in it was run.

    Signs of tampering rather than damage (MAF's checkpoints: a pickle calling a function, a
    metaclass, ``BUILD`` on a class, out-of-band buffers). MAF raises it as
    ``foundry_checkpoint_maf.CheckpointTamperedError`` and logs a WARNING. Restore the store
    from a copy you trust, and find out who could write to it.

    Example:
        >>> issubclass(TamperedPayloadError, CorruptPayloadError)
        True
    """


class TypeBlockedError(FoundryCheckpointError):
    """A stored value holds a class that is not admitted: deserialization blocked, nothing run.

    A configuration matter, not damage: admit the class (MAF: ``allowed_checkpoint_types`` or
    ``agent_framework.register_checkpoint_type``). MAF raises it as
    ``foundry_checkpoint_maf.CheckpointTypeBlockedError``.

    Example:
        >>> issubclass(TypeBlockedError, CorruptPayloadError)
        False
    """


class StoreError(FoundryCheckpointError, FoundryStorageError):
    """The state store refused or failed a call (its own error, passed on typed).

    Also the SDK's ``FoundryStorageError`` with the same ``message``, ``status_code`` and
    ``response_body`` (the SDK's own text, which names the store, stays in ``message``); the
    SDK's error is ``__cause__``. The message says what to do and names no store: that is in
    :attr:`store`, for logs. The subclasses tell the cases apart.

    Example:
        >>> from azure.ai.agentserver.core.storage import FoundryStorageError
        >>> issubclass(StoreError, FoundryStorageError)
        True
    """


class StoreNotFoundError(StoreError, FoundryStorageNotFoundError):
    """The store (or item) does not exist: it was deleted, or expired under its TTL.

    Example:
        >>> from azure.ai.agentserver.core.storage import FoundryStorageNotFoundError
        >>> issubclass(StoreNotFoundError, FoundryStorageNotFoundError)
        True
    """


class StoreBadRequestError(StoreError, FoundryStorageBadRequestError):
    """The store refused a request as invalid (``param`` names the field): a limit or a name.

    Example:
        >>> StoreBadRequestError("bad", param="key").param
        'key'
    """


class StoreConflictError(StoreBadRequestError, FoundryStorageConflictError):
    """What was to be created exists already.

    Example:
        >>> from azure.ai.agentserver.core.storage import FoundryStorageConflictError
        >>> issubclass(StoreConflictError, FoundryStorageConflictError)
        True
    """


class StorePreconditionError(StoreError, FoundryStoragePreconditionError):
    """A conditional write lost: another writer changed the item first (``current_etag``).

    Example:
        >>> StorePreconditionError("changed", current_etag="e2").current_etag
        'e2'
    """


class StoreServiceError(StoreError, FoundryStorageApiError):
    """The service failed or refused the call (``status_code``: 401/403 identity, 429 or 5xx).

    Example:
        >>> StoreServiceError("busy", status_code=503).status_code
        503
    """
