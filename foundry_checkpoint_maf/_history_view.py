"""Reading a :class:`~foundry_checkpoint_maf.FoundryHistoryProvider`'s sessions as they are stored.

What the command line (``foundry-checkpoint maf sessions``, ``maf history``) and the explorer
show: which sessions the current user has a history in, and a window of a session's messages
with their sequence numbers, the bytes each item holds and whether it spilled.

Read-only by construction: every read opens stores with ``create=False``, nothing is written
and no TTL is renewed (the store renews an item's TTL on writes only). Messages are decoded as
the provider decodes them (``json.loads`` and ``Message.from_dict``: nothing stored can run
code); a message that does not decode is listed with the reason instead of failing the page.

Costs: :func:`history_sessions` reads the session index (one ``list_keys`` per 100 sessions);
:func:`inspect_history` one store look-up, one head read and one read per message of the window
(at most 16 at once), whatever the length of the conversation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent_framework import Message

from foundry_checkpoint.adapter import Scope, bounded, spilled_digest
from foundry_checkpoint.errors import FoundryCheckpointError, InvalidArgumentError

if TYPE_CHECKING:
    from ._history import FoundryHistoryProvider

__all__ = [
    "StoredHistory",
    "StoredMessage",
    "decode_message",
    "history_sessions",
    "inspect_history",
]

_READ_CONCURRENCY = 16


@dataclass(frozen=True)
class StoredMessage:
    """One message of a session's history as stored.

    ``seq`` is its sequence number (the order of the conversation), ``size`` the bytes of the
    item value as stored (compressed or spilled: what the item holds), ``spilled`` whether the
    message lives in the spill store, ``updated_at`` when the item was written (Unix seconds).
    ``message`` is the decoded MAF ``Message``, or None with ``error`` saying why it could not
    be decoded.

    Example:
        >>> from agent_framework import Message
        >>> StoredMessage(0, 52, False, 1_767_225_600, Message("user", ["hi"])).message.text
        'hi'
    """

    seq: int
    size: int
    spilled: bool
    updated_at: int
    message: Message | None
    error: str | None = None


@dataclass(frozen=True)
class StoredHistory:
    """A session's history head and a window of its messages, as stored.

    ``first`` and ``next`` are the head's range: the messages kept are the sequence numbers
    ``first .. next - 1`` (``count`` of them; retention moves ``first``); ``updated_at`` is when
    the head was last written (the last append, Unix seconds). ``messages`` holds the window
    asked for, oldest first; a sequence number whose item is missing (an append in flight, or
    one that failed between reserving its range and writing it) is left out.

    Example:
        >>> StoredHistory(None, first=3, next=10, updated_at=1_767_225_600).count
        7
    """

    session_id: str | None
    first: int
    next: int
    updated_at: int
    messages: list[StoredMessage] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many messages the head says are kept (``next - first``)."""
        return self.next - self.first


def decode_message(payload: bytes) -> Message:
    """A stored message payload back as a MAF ``Message``: JSON only, then ``Message.from_dict``.

    Raises:
        ValueError: not a JSON object (``json.JSONDecodeError`` included).
        TypeError, KeyError: an object ``Message.from_dict`` refuses.

    Example:
        >>> decode_message(b'{"role": "user", "contents": [{"type": "text", "text": "hi"}]}').text
        'hi'
    """
    data = json.loads(payload)
    if not isinstance(data, dict):
        raise ValueError(f"a {type(data).__name__}, not an object")
    return Message.from_dict(data)


def _window(
    first: int, nxt: int, *, offset: int, limit: int | None, last: int | None
) -> tuple[int, int]:
    """The sequence numbers ``[start, stop)`` of a window of the kept range ``[first, nxt)``.

    Example:
        >>> _window(0, 10, offset=0, limit=None, last=3)
        (7, 10)
        >>> _window(0, 10, offset=2, limit=3, last=None)
        (2, 5)
    """
    start = first if last is None else max(first, nxt - last)
    start = min(nxt, start + offset)
    stop = nxt if limit is None else min(nxt, start + limit)
    return start, stop


def _checked_count(value: int | None, name: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidArgumentError(f"{name} must be a non-negative int or None, got {value!r}")


async def _stored_message(scope: Scope, seq: int) -> StoredMessage | None:
    from ._history import _message_key

    key = _message_key(seq)
    item = await scope.store.get_item(key)
    if item is None:
        return None
    size = len(json.dumps(item.value, separators=(",", ":")).encode("utf-8"))
    spilled = spilled_digest(item.value) is not None
    try:
        message = decode_message(await scope.decode(item.value, key=key))
    except (FoundryCheckpointError, ValueError, TypeError, KeyError) as exc:
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        return StoredMessage(seq, size, spilled, item.updated_at, None, error)
    return StoredMessage(seq, size, spilled, item.updated_at, message)


async def history_sessions(provider: FoundryHistoryProvider) -> list[str | None]:
    """Every session the current user has a history in under the provider's prefix, from the
    session index (no message is read): sorted, with None (``session_id=None``) first."""
    core = provider._core
    ids = await core.arun(core.scope_ids(), call=core.capture())
    named: list[str | None] = list(sorted({i for i in ids if i is not None}))
    return [None, *named] if None in ids else named


async def inspect_history(
    provider: FoundryHistoryProvider,
    session_id: str | None,
    *,
    offset: int = 0,
    limit: int | None = None,
    last: int | None = None,
) -> StoredHistory | None:
    """Session ``session_id``'s head and a window of its messages; None when it has no history.

    The window is the last ``last`` messages (default: all kept), from ``offset`` on, at most
    ``limit`` of them (``limit=0``: the head alone, one read).

    Raises:
        InvalidArgumentError: ``offset``, ``limit`` or ``last`` is negative or not an int.
        InvalidIdentifierError: ``session_id`` cannot be used.
        CorruptPayloadError: the session's head is damaged.
    """
    _checked_count(offset, "offset")
    _checked_count(limit, "limit")
    _checked_count(last, "last")
    session_id = provider._checked(session_id)
    core = provider._core

    async def _inspect() -> StoredHistory | None:
        from ._history import _HEAD_KEY

        scope = await core.scope(session_id, create=False)
        if scope is None:
            return None
        head = await scope.store.get_item(_HEAD_KEY)
        if head is None:
            return None
        first, nxt = provider._bounds(head.value)
        start, stop = _window(first, nxt, offset=offset, limit=limit, last=last)
        found = await bounded(
            (_stored_message(scope, seq) for seq in range(start, stop)), limit=_READ_CONCURRENCY
        )
        messages = [m for m in found if m is not None]
        return StoredHistory(session_id, first, nxt, head.updated_at, messages)

    return await core.arun(_inspect(), call=core.capture())
