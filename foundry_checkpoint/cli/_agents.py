"""Agent Framework agents' sessions and histories as the commands and the explorer show them.

``foundry-checkpoint maf sessions`` and ``maf history`` and the explorer's session pages read a
``FoundryHistoryProvider``'s stores (and, for each session, what a ``FoundrySessionStore``
keeps of its ``AgentSession``) through their read-only inspection (``list_sessions``,
``inspect``: nothing written, no TTL renewed) and print the rows built here, so the two always
say the same. A message's contents are summarised one line each
(its text, ``call name({...})``, ``result of call-1: ...``, ``data image/png``...); the whole
message is ``Message.to_dict()``.

Example:
    >>> content_summary({"type": "function_call", "name": "lookup", "arguments": {"q": 1}})
    'call lookup({"q": 1})'
    >>> content_summary({"type": "text", "text": "a\\n  b"})
    'a b'
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from .._aio import bounded
from ..errors import CorruptPayloadError
from ._format import jsonable

if TYPE_CHECKING:
    from foundry_checkpoint_maf import (
        FoundryHistoryProvider,
        FoundrySessionStore,
        StoredHistory,
        StoredMessage,
        StoredSession,
    )

__all__ = [
    "HISTORY_PREFIX",
    "SESSIONS_PREFIX",
    "content_summary",
    "history_json",
    "iso",
    "message_json",
    "session_ids",
    "session_json",
    "session_row",
    "session_rows",
    "span",
    "state_cell",
]

HISTORY_PREFIX: Final = "maf-history"
"""``FoundryHistoryProvider``'s default ``store_prefix``: ``maf sessions``/``history``'s default."""
SESSIONS_PREFIX: Final = "maf-sessions"
"""``FoundrySessionStore``'s default ``store_prefix``: where ``maf sessions`` finds state."""

SUMMARY_WIDTH: Final = 160
"""A content's summary is cut to this many characters."""

ROW_CONCURRENCY: Final = 16
"""Sessions ``maf sessions`` and the explorer read at once."""

_SKIP: Final = frozenset({"type", "additional_properties", "raw_representation"})


def iso(seconds: int) -> str:
    """Unix seconds as ISO 8601 UTC.

    Example:
        >>> iso(1_767_225_600)
        '2026-01-01T00:00:00+00:00'
    """
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc).isoformat()


def _compact(value: Any) -> str:
    return json.dumps(jsonable(value), ensure_ascii=False, separators=(", ", ": "))


def _cut(text: str, width: int = SUMMARY_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def content_summary(content: Mapping[str, Any]) -> str:
    """One content of a message (``Content.to_dict()``) on one line, cut to 160 characters.

    Example:
        >>> content_summary({"type": "function_result", "call_id": "c1", "result": {"t": 21}})
        'result of c1: {"t": 21}'
        >>> content_summary({"type": "data", "media_type": "image/png", "uri": "data:..."})
        'data image/png'
    """
    kind = str(content.get("type", "?"))
    if kind == "text":
        return _cut(str(content.get("text", "")))
    if kind == "text_reasoning":
        return _cut(f"reasoning: {content.get('text') or ''}")
    if kind == "function_call":
        arguments = content.get("arguments")
        shown = arguments if isinstance(arguments, str) else _compact(arguments or {})
        return _cut(f"call {content.get('name')}({shown})")
    if kind == "function_result":
        if content.get("exception") is not None:
            return _cut(f"result of {content.get('call_id')}: raised {content.get('exception')}")
        result = content.get("result")
        shown = result if isinstance(result, str) else _compact(result)
        return _cut(f"result of {content.get('call_id')}: {shown}")
    if kind in ("data", "uri", "hosted_file"):
        parts = [kind, content.get("media_type"), content.get("name")]
        if kind == "uri":
            parts.append(content.get("uri"))
        if kind == "hosted_file":
            parts.append(content.get("file_id"))
        return _cut(" ".join(str(p) for p in parts if p))
    if kind == "error":
        return _cut(f"error {content.get('error_code') or ''}: {content.get('message') or ''}")
    rest = {k: v for k, v in content.items() if k not in _SKIP and v is not None}
    return _cut(f"{kind} {_compact(rest)}" if rest else kind)


def message_json(stored: StoredMessage) -> dict[str, Any]:
    """One stored message as ``maf history --json`` prints it.

    ``text`` is MAF's ``Message.text`` (the text contents joined), ``contents`` one summary per
    content, ``message`` the whole ``Message.to_dict()``; a message that does not decode has
    ``error`` set and those fields None.
    """
    message = stored.message
    data = None if message is None else message.to_dict()
    contents = [] if data is None else data.get("contents", [])
    return {
        "seq": stored.seq,
        "role": None if message is None else str(message.role),
        "author_name": None if message is None else message.author_name,
        "message_id": None if message is None else message.message_id,
        "text": None if message is None else message.text,
        "contents": [content_summary(c) for c in contents if isinstance(c, Mapping)],
        "size": stored.size,
        "spilled": stored.spilled,
        "updated_at": iso(stored.updated_at),
        "error": stored.error,
        "message": None if data is None else jsonable(data),
    }


def session_json(
    session_id: str | None,
    history: StoredHistory | None,
    state: StoredSession | None,
    *,
    error: str | None = None,
) -> dict[str, Any]:
    """One row of ``maf sessions --json``: what the history head says (``message_count``,
    ``first_seq``, ``next_seq``, ``history_updated_at``; None without a history) and what the
    session store holds (``state_size``, ``state_spilled``, ``state_updated_at``; None without a
    stored session); ``updated_at`` is the newer of the two writes; ``error`` why the history
    head cannot be read (else None)."""
    times = [t.updated_at for t in (history, state) if t is not None]
    return {
        "session_id": session_id,
        "message_count": None if history is None else history.count,
        "first_seq": None if history is None else history.first,
        "next_seq": None if history is None else history.next,
        "history_updated_at": None if history is None else iso(history.updated_at),
        "state_size": None if state is None else state.size,
        "state_spilled": None if state is None else state.spilled,
        "state_updated_at": None if state is None else iso(state.updated_at),
        "updated_at": iso(max(times)) if times else None,
        "error": error,
    }


async def session_ids(
    provider: FoundryHistoryProvider, store: FoundrySessionStore | None
) -> tuple[list[str | None], set[str]]:
    """Every session id of the current user, the history provider's and the session store's
    (sorted, None first), and the set of those the session store holds."""
    kept = set(await store.list_sessions()) if store is not None else set()
    ids = set(await provider.list_sessions()) | kept
    return sorted(ids, key=lambda i: (i is not None, i or "")), kept


async def session_row(
    provider: FoundryHistoryProvider,
    store: FoundrySessionStore | None,
    session_id: str | None,
    kept: set[str],
) -> dict[str, Any] | None:
    """:func:`session_json` of one session (one head read, one session read when the store has
    it); None when neither holds anything any more. A damaged head is reported in ``error``:
    one bad session does not hide the others."""
    error = None
    try:
        history = await provider.inspect(session_id, limit=0)
    except CorruptPayloadError as exc:
        history, error = None, " ".join(str(exc).split())
    state = None
    if store is not None and session_id is not None and session_id in kept:
        state = await store.inspect(session_id)
    if history is None and state is None and error is None:
        return None  # registered, but emptied or expired
    return session_json(session_id, history, state, error=error)


async def session_rows(
    provider: FoundryHistoryProvider,
    store: FoundrySessionStore | None,
    ids: list[str | None],
    kept: set[str],
) -> list[dict[str, Any]]:
    """:func:`session_row` of each of ``ids`` (at most 16 sessions read at once), in order,
    those that hold nothing left out."""
    rows = await bounded(
        (session_row(provider, store, i, kept) for i in ids), limit=ROW_CONCURRENCY
    )
    return [row for row in rows if row is not None]


def span(row: Mapping[str, Any]) -> str:
    """A session row's sequence numbers as ``first..last`` (``-`` when it keeps none).

    Example:
        >>> span({"message_count": 3, "first_seq": 2, "next_seq": 5})
        '2..4'
    """
    if not row.get("message_count"):
        return "-"
    return f"{row['first_seq']}..{row['next_seq'] - 1}"


def state_cell(row: Mapping[str, Any]) -> str:
    """A session row's stored session state: its bytes, spilled or not (``-`` when none).

    Example:
        >>> state_cell({"state_size": 1234, "state_spilled": False})
        '1,234 B'
    """
    if row.get("state_size") is None:
        return "-"
    return f"{row['state_size']:,} B" + (" (spilled)" if row.get("state_spilled") else "")


def history_json(history: StoredHistory, *, offset: int) -> dict[str, Any]:
    """``maf history --json`` without ``backend``: the head, the window, its messages."""
    return {
        "session_id": history.session_id,
        "message_count": history.count,
        "first_seq": history.first,
        "next_seq": history.next,
        "updated_at": iso(history.updated_at),
        "offset": offset,
        "messages": [message_json(m) for m in history.messages],
    }
