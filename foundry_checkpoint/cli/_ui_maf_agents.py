"""The explorer's Agent Framework agent pages: sessions, a session's history, one message.

They read a ``FoundryHistoryProvider``'s stores (``--prefix``, default ``maf-history``) through
its read-only ``list_sessions`` and ``inspect``, as ``maf sessions`` and ``maf history`` do,
with the same rows (:mod:`._agents`): looking at a conversation writes nothing and renews no
TTL. A session travels as the ``session`` query parameter (``/agents/history?session=chat-1``;
empty: the session of ``session_id=None``), so a session id may hold any character. Each page
is an ``async`` function of the :class:`~._ui_stores.Stores` and the request.

Example:
    >>> history_href("a/b c")
    '/agents/history?session=a%2Fb+c'
    >>> message_href(None, 3)
    '/agents/message?session=&seq=3'
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlencode

from aiohttp import web

from . import _html
from ._agents import (
    history_json,
    message_json,
    session_ids,
    session_json,
    session_rows,
    span,
    state_cell,
)
from ._html import esc
from ._ui_stores import Page, Refused, Stores

__all__ = ["history", "history_href", "message", "message_href", "overview", "sessions"]

SESSIONS_PER_PAGE: Final = 100
"""Sessions listed per page."""
MESSAGES_PER_PAGE: Final = 50
"""Messages of a history shown per page."""
OVERVIEW: Final = 20
"""Sessions the index page lists before linking the rest."""


def history_href(session_id: str | None, **extra: int) -> str:
    """The URL of a session's history page (``extra``: ``offset``, ``last``)."""
    pairs = [("session", session_id or ""), *((k, str(v)) for k, v in extra.items())]
    return "/agents/history?" + urlencode(pairs)


def message_href(session_id: str | None, seq: int, **extra: int) -> str:
    """The URL of one message's page (``extra``: ``full=1``)."""
    pairs = [("session", session_id or ""), ("seq", str(seq))]
    pairs += [(k, str(v)) for k, v in extra.items()]
    return "/agents/message?" + urlencode(pairs)


def _shown(session_id: str | None) -> str:
    return "(default: '')" if session_id is None else session_id


def _session_of(request: web.Request) -> str | None:
    session = request.query.get("session")
    if session is None:
        raise Refused(400, "name the session: ?session=ID (empty: the default session)")
    return session or None


def _count(request: web.Request, name: str, default: int | None = None) -> int | None:
    text = request.query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise Refused(400, f"{name} must be a whole number") from None
    if value < 0:
        raise Refused(400, f"{name} must be at least 0")
    return value


def _link(session_id: str | None) -> str:
    return (
        f'<a class="session" href="{esc(history_href(session_id))}">{esc(_shown(session_id))}</a>'
    )


async def _ids(stores: Stores) -> tuple[list[str | None], set[str]]:
    return await session_ids(stores.need_history(), stores.session_store())


async def _rows(stores: Stores, ids: list[str | None], kept: set[str]) -> list[list[str]]:
    provider = stores.need_history()
    store = stores.session_store()
    rows = []
    for row in await session_rows(provider, store, ids, kept):
        session_id = row["session_id"]
        if row["error"] is not None:
            count = f'<span class="warn">cannot be read: {esc(row["error"])}</span>'
        else:
            count = esc("-" if row["message_count"] is None else row["message_count"])
        rows.append(
            [
                _link(session_id),
                count,
                esc(span(row)),
                esc(state_cell(row)),
                esc(row["updated_at"] or "-"),
            ]
        )
    return rows


_HEADERS: Final = ["session", "messages", "sequence numbers", "session state", "last write"]


async def overview(stores: Stores) -> str:
    """The index page's section: the first sessions, linked, and a link to all of them."""
    parts = ["<h2>Agent Framework sessions</h2>"]
    provider = stores.history()
    if provider is None:
        parts.append(f'<p class="muted">not installed: {esc(stores.missing["maf"])}</p>')
        return "".join(parts)
    ids, kept = await _ids(stores)
    rows = await _rows(stores, ids[:OVERVIEW], kept)
    if not rows:
        parts.append('<p class="muted">no agent sessions</p>')
        return "".join(parts)
    parts.append(_html.table(_HEADERS, rows, cls="sessions"))
    more = " (more there)" if len(ids) > OVERVIEW else ""
    parts.append(f'<p><a class="sessions" href="/agents">all sessions{more}</a></p>')
    return "".join(parts)


async def sessions(stores: Stores, request: web.Request) -> Page:
    """Every session of the user, sorted by id, a page at a time."""
    offset = _count(request, "offset", 0) or 0
    ids, kept = await _ids(stores)
    rows = await _rows(stores, ids[offset : offset + SESSIONS_PER_PAGE], kept)
    parts = ["<h1>Agent Framework sessions</h1>"]
    if rows:
        parts.append(_html.table(_HEADERS, rows, cls="sessions"))
    else:
        parts.append('<p class="muted">no agent sessions</p>')
    links = []
    if offset:
        back = urlencode({"offset": max(0, offset - SESSIONS_PER_PAGE)})
        links.append(f'<a class="prev" href="/agents?{esc(back)}">← previous</a>')
    if len(ids) > offset + SESSIONS_PER_PAGE:
        on = urlencode({"offset": offset + SESSIONS_PER_PAGE})
        links.append(f'<a class="next" href="/agents?{esc(on)}">next →</a>')
    if links:
        parts.append(f"<p>{' · '.join(links)}</p>")
    return Page("Agent Framework sessions", "".join(parts))


def _contents(item: dict[str, Any]) -> str:
    if item["error"] is not None:
        return f'<span class="warn">cannot be read: {esc(item["error"])}</span>'
    lines = item["contents"] or ["(no contents)"]
    return "<br>".join(esc(line) for line in lines)


def _size(item: dict[str, Any]) -> str:
    return esc(f"{item['size']:,} B" + (" (spilled)" if item["spilled"] else ""))


async def history(stores: Stores, request: web.Request) -> Page:
    """A session's messages, oldest first, a page at a time (``last``: only the last N)."""
    session_id = _session_of(request)
    offset = _count(request, "offset", 0) or 0
    last = _count(request, "last")
    provider = stores.need_history()
    stored = await provider.inspect(
        session_id, offset=offset, limit=MESSAGES_PER_PAGE, last=last or None
    )
    store = stores.session_store()
    state = None if session_id is None or store is None else await store.inspect(session_id)
    title = f"Session {_shown(session_id)}"
    kept = session_json(session_id, None, state)
    written = f" · written {kept['state_updated_at']}" if state is not None else ""
    state_row = ["session state", esc(state_cell(kept) + written)]
    if stored is None:
        if state is None:
            raise Refused(404, f"session {_shown(session_id)!r} has no history")
        info = [["session", f'<span class="id">{esc(_shown(session_id))}</span>'], state_row]
        body = (
            '<p><a href="/agents">← sessions</a></p>'
            f"<h1>{esc(title)}</h1>"
            + _html.table(["field", "value"], info, cls="info")
            + '<p class="muted">no history: only its AgentSession is stored</p>'
        )
        return Page(title, body)
    data = history_json(stored, offset=offset)
    window = stored.count if not last else min(last, stored.count)
    seqs = f"{stored.first}..{stored.next - 1}" if stored.count else "-"
    info = [
        ["session", f'<span class="id">{esc(_shown(session_id))}</span>'],
        ["messages kept", esc(stored.count)],
        ["sequence numbers", esc(seqs)],
        ["last append", esc(data["updated_at"])],
        state_row,
    ]
    rows = [
        [
            f'<a class="message" href="{esc(message_href(session_id, item["seq"]))}">'
            f"{esc(item['seq'])}</a>",
            esc(item["role"] or "?"),
            esc(item["author_name"] or "-"),
            _contents(item),
            _size(item),
        ]
        for item in data["messages"]
    ]
    parts = [
        '<p><a href="/agents">← sessions</a></p>',
        f"<h1>{esc(title)}</h1>",
        _html.table(["field", "value"], info, cls="info"),
        "<h2>Messages</h2>",
    ]
    if rows:
        headers = ["seq", "role", "author", "contents", "size"]
        parts.append(_html.table(headers, rows, cls="messages"))
    else:
        parts.append('<p class="muted">no messages on this page</p>')
    keep = {"last": last} if last else {}
    links = []
    if offset:
        back = history_href(session_id, offset=max(0, offset - MESSAGES_PER_PAGE), **keep)
        links.append(f'<a class="prev" href="{esc(back)}">← earlier</a>')
    if window > offset + MESSAGES_PER_PAGE:
        on = history_href(session_id, offset=offset + MESSAGES_PER_PAGE, **keep)
        links.append(f'<a class="next" href="{esc(on)}">later →</a>')
        newest = history_href(session_id, last=MESSAGES_PER_PAGE)
        links.append(f'<a class="newest" href="{esc(newest)}">newest</a>')
    if links:
        parts.append(f"<p>{' · '.join(links)}</p>")
    return Page(title, "".join(parts))


async def message(stores: Stores, request: web.Request) -> Page:
    """One message whole: its stored facts and ``Message.to_dict()`` (cut, with "see more")."""
    session_id = _session_of(request)
    seq = _count(request, "seq")
    if seq is None:
        raise Refused(400, "name the message: &seq=N (its sequence number)")
    provider = stores.need_history()
    head = await provider.inspect(session_id, limit=0)
    found = None
    if head is not None and head.first <= seq < head.next:
        window = await provider.inspect(session_id, offset=seq - head.first, limit=1)
        found = next((m for m in (window.messages if window else []) if m.seq == seq), None)
    if found is None:
        raise Refused(404, f"session {_shown(session_id)!r} has no message {seq}")
    item = message_json(found)
    info = [
        ["session", _link(session_id)],
        ["seq", esc(seq)],
        ["role", esc(item["role"] or "?")],
        ["author", esc(item["author_name"] or "-")],
        ["message_id", esc(item["message_id"] or "-")],
        ["size", _size(item)],
        ["written", esc(item["updated_at"])],
        ["contents", _contents(item)],
    ]
    full = request.query.get("full") == "1"
    more = message_href(session_id, seq, full=1)
    body = (
        f'<p><a href="{esc(history_href(session_id))}">← session {esc(_shown(session_id))}</a></p>'
        f"<h1>Message {esc(seq)}</h1>"
        + _html.table(["field", "value"], info, cls="info")
        + "<h2>Message</h2>"
        + (
            _html.value_block(item["message"], full=full, more=more)
            if item["message"] is not None
            else '<p class="warn">this message cannot be decoded</p>'
        )
    )
    return Page(f"Message {seq} of {_shown(session_id)}", body)
