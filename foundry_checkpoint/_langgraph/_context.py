"""What the LangGraph saver's operations share: the core, the serializer and the caches.

The operations (:mod:`._read`, :mod:`._list`, :mod:`._history`, :mod:`._write`,
:mod:`._maintenance`) are module-level coroutines over one :class:`Context`, built per call
by ``FoundryCheckpointer``. The caches (:class:`Caches`) belong to the saver and are shared by
its ``with_allowlist`` clones, which differ only in their serializer.

Example:
    >>> caches = Caches()
    >>> state = caches.state("user", "t-1")
    >>> caches.state("user", "t-1") is state, len(caches.threads)
    (True, 1)
    >>> caches.drop("user", "t-1"); len(caches.threads)
    0
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

from langgraph.checkpoint.serde.base import SerializerProtocol

from ..adapter import Call, CheckpointCore
from ..errors import CorruptPayloadError
from ._records import CheckpointRecord

__all__ = ["Caches", "Context", "ThreadState", "Token"]

_THREAD_CACHE: Final = 256
_EARLY_BOUND: Final = 4096

Token = tuple[str, str, str, str]
"""(user key, thread id, namespace, checkpoint id): one checkpoint as this process sees it."""


@dataclass
class ThreadState:
    """What this process knows about one thread, kept to avoid reads.

    ``heads`` maps a namespace to the last checkpoint written or read there and its channel
    table; a ``put`` whose parent is that checkpoint carries unchanged channels from it (inline
    bytes or blob references) without a read, so an unchanged large value is neither
    serialized nor uploaded again.
    """

    heads: dict[str, CheckpointRecord] = field(default_factory=dict)
    etags: dict[str, str] = field(default_factory=dict)
    """The etag of each head's item as this process wrote or read it: a listing that shows the
    same key with the same etag proves the head current, so it is not read again."""

    def set_head(self, ns: str, record: CheckpointRecord, etag: str | None) -> None:
        """Remember ``record`` as the head of ``ns`` (with its item's etag when known)."""
        self.heads[ns] = record
        if etag:
            self.etags[ns] = etag
        else:
            self.etags.pop(ns, None)


@dataclass
class Caches:
    """One saver's knowledge of its threads and of the puts running in this process."""

    threads: OrderedDict[tuple[str, str], ThreadState] = field(default_factory=OrderedDict)
    """(user key, thread id) -> what this process knows; the user key is the call's
    :class:`~foundry_checkpoint.adapter.Caller` key (``Context.call``)."""
    pending: dict[Token, asyncio.Future[None]] = field(default_factory=dict)
    """Checkpoints whose put is running in this process."""
    early: OrderedDict[Token, None] = field(default_factory=OrderedDict)
    """Checkpoints that got writes before their put started (LangGraph's async loop may
    submit ``put_writes`` first)."""

    def state(self, user: str, thread_id: str) -> ThreadState:
        """The cached knowledge of one user's thread (bounded, least recent out)."""
        key = (user, thread_id)
        state = self.threads.get(key)
        if state is None:
            state = self.threads[key] = ThreadState()
            while len(self.threads) > _THREAD_CACHE:
                self.threads.popitem(last=False)
        else:
            self.threads.move_to_end(key)
        return state

    def drop(self, user: str, thread_id: str) -> None:
        """Forget what is cached about one user's thread."""
        self.threads.pop((user, thread_id), None)

    def note_early(self, token: Token) -> None:
        """Remember that ``token`` got writes before its put started (bounded)."""
        self.early[token] = None
        self.early.move_to_end(token)
        while len(self.early) > _EARLY_BOUND:
            self.early.popitem(last=False)


@dataclass(frozen=True)
class Context:
    """The core, the serializer and the caches of one saver, and the identity of one call.

    ``call`` is captured once, when the saver's public method builds the context
    (``CheckpointCore.capture``); the saver hands it to ``run``/``arun`` (``call=``), so the
    store's partition (``core.scope``) and this saver's caches (:meth:`state`, :meth:`token`)
    follow the same :class:`~foundry_checkpoint.adapter.Caller`, for every page of a listing
    too.
    """

    core: CheckpointCore
    serde: SerializerProtocol
    caches: Caches
    call: Call

    @property
    def user(self) -> str:
        """The cache key of the call's caller."""
        return self.call.caller.key

    def state(self, thread_id: str) -> ThreadState:
        """The caller's cached knowledge of ``thread_id``."""
        return self.caches.state(self.user, thread_id)

    def drop_state(self, thread_id: str) -> None:
        """Forget the caller's cached knowledge of ``thread_id``."""
        self.caches.drop(self.user, thread_id)

    def token(self, thread_id: str, ns: str, checkpoint_id: str) -> Token:
        """The caller's :data:`Token` of a checkpoint."""
        return (self.user, thread_id, ns, checkpoint_id)

    def loads(self, typed: tuple[str, bytes]) -> Any:
        """``serde.loads_typed``; whatever it raises becomes a ``CorruptPayloadError``.

        Args:
            typed: a serialized value and its type name.

        Returns:
            The value.

        Raises:
            CorruptPayloadError: the serializer refused or failed on the bytes.
        """
        try:
            return self.serde.loads_typed(typed)
        except CorruptPayloadError:
            raise
        except Exception as exc:  # the serializer's errors are as varied as its inputs
            raise CorruptPayloadError(
                f"A stored {typed[0]!r} value cannot be decoded by {type(self.serde).__name__}: "
                f"{type(exc).__name__}: {exc}. Nothing was called from it."
            ) from exc

    def loads_dict(self, typed: tuple[str, bytes], what: str) -> Any:
        """:meth:`loads` of a value that must be a mapping (a checkpoint, its metadata).

        Raises:
            CorruptPayloadError: the value cannot be decoded or is not a mapping.
        """
        value = self.loads(typed)
        if not isinstance(value, dict):
            raise CorruptPayloadError(
                f"A stored {what} decodes to a {type(value).__name__}, not a mapping; the item "
                "was changed outside foundry-checkpoint"
            )
        return value
