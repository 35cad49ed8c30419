"""``FoundryHistoryProvider``: MAF's ``HistoryProvider`` on Foundry's durable state store.

Mapping (one store per session, isolated per end user):

* session id -> one store ``<store_prefix>/t/<session id>`` (``None``: ``<store_prefix>/default``),
  always ``user_isolation=True``;
* a **head** item (key ``head``, tag ``kind=maf.history``) holds ``{"first": F, "next": N}``: the
  messages kept are the sequence numbers ``F .. N-1``;
* one item per **message**, key ``msg/<sequence number, 12 digits>``, tags ``kind=maf.message``
  and ``seq``; the value is ``Message.to_dict()`` dumped as compact JSON (compressed when it
  pays), spilled through the scope's codec when it would exceed the 1 MB item limit;
* one **sealed page** per complete run of 50 messages (``page/<page number, 12 digits>``, tags
  ``kind=maf.page`` and ``page``): a copy of messages ``50p .. 50p+49`` in one item, each as its
  payload (up to 600 KB of payloads inline per page), a spilled one as its spill reference, one
  past that budget as None (read from its own item). A page is written once its 50 messages are
  all stored, by the append that completes it when it holds all 50 (its own messages and the
  tail it read), else by the first whole read that read them from their items; whoever writes it
  writes the same bytes. Readers prefer a page and fall back to the messages' items when it is
  missing (a history stored before pages existed, a page not sealed yet, a message never
  written).

Costs (store calls, whatever the length of the conversation):

* **append** (``save_messages`` of k messages): one head read, at most k message reads (the tail
  MAF's ``filter_new_messages`` compares the new messages with, so a replayed transcript is not
  stored twice, exactly as ``InMemoryHistoryProvider`` and ``FileHistoryProvider`` do), one
  conditional head write, k message writes, and, with ``max_messages``, a read and a delete per
  message that falls out of the window. Nothing already stored is rewritten;
* **read the last n** (``get_messages(session_id, last=n)``): one head read and n message reads
  (run concurrently, at most 16 at once);
* **read the whole history** (what MAF's ``before_run`` asks for every turn): one head read, one
  read per sealed page and one per message after the last sealed page: ``ceil(n/50)`` + fewer
  than 50 + 1 calls; a read that finds a complete page unsealed reads its 50 messages and writes
  the page (one write per 50 messages, once). An append writes a page only when it completes
  one it holds (a long append: at most one page write per 50 messages; an ordinary turn none),
  and retention deletes a page once all of its messages fell out of the window.

**Concurrent appends.** The head is advanced by compare-and-set on its etag (``if_match``; a
first append creates it, and a create that meets an existing head is a lost race too). A writer
that loses re-reads the head and tries again after a random pause that doubles up to 50 ms (up
to 100 times, then :class:`~foundry_checkpoint.errors.ConcurrentWriteError`, with nothing
stored: a writer appending back to back can win the head many times in a row), so every
append reserves its own range of sequence numbers, the ranges never overlap, and all readers see
one order: the order in which the reservations won. Messages are written after their range is
reserved: a reader that runs while an append is in flight may miss that append's messages
until its writes finish, and an append that fails between the two steps (it raises) leaves its
range empty; readers skip missing sequence numbers. No message is ever stored twice or lost
once ``save_messages`` has returned.

**Branches.** The ``state`` MAF passes (the provider's slice of ``AgentSession.state``, saved
with the session) records which sequence numbers make up this session's branch, under
``"branch"``: sorted ``[start, stop)`` ranges, contiguous ones merged, so the record grows only
when the session forks. A host that saves the session of every response and continues one
response twice (``previous_response_id``: a regenerated reply) loads two copies of one snapshot
with one session id; each copy's appends reserve their own ranges, and each reads exactly its
branch (the last n of it for ``last=n``), and compares new messages with its branch's newest:
what ``InMemoryHistoryProvider``, which keeps the messages inside the state, gives back. A state
without the record (a session saved before branches were recorded, or a call without a state)
reads the whole history as before, and its next append starts the record; a record that ends
past the head (the session was deleted since) is ignored. Reads cost the same with or without
the record.

**Retention.** ``max_messages=n`` keeps the last n messages: the head write that reserves a
range also moves ``first``, and the writer then deletes the messages it pushed out (and their
spilled blobs). A branch reads at most its last n messages. Deleting stays safe for forks by
stopping at the first one: an append whose branch does not end where the history ends (another
branch appended since its snapshot) marks the head ``forked`` in the same compare-and-set, and
from then on appends delete nothing, so no branch's window loses a message to another branch's
retention (the session's items then grow with every branch's turns until ``delete_session``);
a snapshot older than messages deleted before the fork sees what remains, as any reader of a
trimmed history does. ``delete_session`` deletes the session's store partition of this user.

**Decoding** is JSON only: ``json.loads`` and ``Message.from_dict`` (what ``FileHistoryProvider``
uses); nothing stored can run code on read.

**Inspection** (``list_sessions``, ``inspect``; what ``foundry-checkpoint maf sessions`` and
``maf history`` show) only reads: the session index, the head, the messages of a window with
their sequence numbers and stored sizes; nothing is written and no TTL renewed.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from agent_framework import HistoryProvider, Message
from agent_framework._sessions import filter_new_messages
from azure.ai.agentserver.core.storage import (
    FoundryStorageConflictError,
    FoundryStoragePreconditionError,
)

from foundry_checkpoint.adapter import (
    DEFAULT_ITEM_TTL_SECONDS,
    Call,
    CoreOwner,
    LocalBackend,
    Scope,
    bounded,
    check_identifier,
    item_key,
    new_core,
    spilled_digest,
)
from foundry_checkpoint.errors import (
    ConcurrentWriteError,
    CorruptPayloadError,
    FoundryCheckpointError,
    InvalidArgumentError,
)

from ._history_view import StoredHistory, decode_message, history_sessions, inspect_history

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from foundry_checkpoint.spill import SpillStore

__all__ = ["FoundryHistoryProvider"]

T = TypeVar("T")

_HEAD_KEY: Final = item_key("head")
_HEAD_TAGS: Final = {"kind": "maf.history"}
_MESSAGE_KIND: Final = "maf.message"
_SEQ_DIGITS: Final = 12
_READ_CONCURRENCY: Final = 16
_PAGE: Final = 100
_SEAL: Final = 50  # messages per sealed page item
_SEAL_INLINE: Final = 600_000  # payload bytes a page holds inline (the rest: read singly)
_PAGE_KIND: Final = "maf.page"
_MAX_ATTEMPTS: Final = 100
_BACKOFF_S: Final = 0.001
_BACKOFF_CAP_S: Final = 0.05
_BRANCH_KEY: Final = "branch"


def _message_key(seq: int) -> str:
    return item_key("msg", f"{seq:0{_SEQ_DIGITS}d}")


def _message_tags(seq: int) -> dict[str, str]:
    return {"kind": _MESSAGE_KIND, "seq": f"{seq:0{_SEQ_DIGITS}d}"}


def _page_key(page: int) -> str:
    return item_key("page", f"{page:0{_SEQ_DIGITS}d}")


def _page_tags(page: int) -> dict[str, str]:
    return {"kind": _PAGE_KIND, "page": f"{page:0{_SEQ_DIGITS}d}"}


Held = tuple[bytes, Mapping[str, Any]]  # a message's payload and its item value as stored


def _page_payload(page: int, held: Sequence[Held]) -> bytes:
    """The payload of sealed page ``page``: its messages' payloads inline (JSON, as each item
    holds it), a spilled one as its spill reference, and None for one past the page's inline
    budget (read from its own item). The same bytes whoever builds it.

    Example:
        >>> _page_payload(1, [(b'{"role":"user"}', {"v": 1})])
        b'{"page":1,"messages":[{"m":{"role":"user"}}]}'
    """
    parts: list[bytes] = []
    budget = _SEAL_INLINE
    for payload, value in held:
        if spilled_digest(value) is not None:
            ref = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            parts.append(b'{"r":' + ref + b"}")
        elif len(payload) <= budget:
            parts.append(b'{"m":' + payload + b"}")
            budget -= len(payload)
        else:
            parts.append(b"null")
    return b'{"page":%d,"messages":[' % page + b",".join(parts) + b"]}"


Ranges = list[tuple[int, int]]


def _recorded(state: dict[str, Any] | None) -> Ranges | None:
    """The branch record in the session's provider state: sorted, disjoint ``[start, stop)``
    ranges of sequence numbers; None when there is none (an older session, no state).

    Example:
        >>> _recorded({"branch": [[0, 4], [6, 8]]})
        [(0, 4), (6, 8)]
        >>> _recorded({}) is None
        True
    """
    if state is None or _BRANCH_KEY not in state:
        return None
    raw = state[_BRANCH_KEY]
    ranges: Ranges = []
    if isinstance(raw, list):
        for pair in raw:
            if (
                isinstance(pair, (list, tuple))
                and len(pair) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
                and 0 <= pair[0] < pair[1]
                and (not ranges or ranges[-1][1] < pair[0])
            ):
                ranges.append((pair[0], pair[1]))
            else:
                ranges = []
                break
        else:
            return ranges if ranges else None
    raise CorruptPayloadError(
        f"The session state's {_BRANCH_KEY!r} holds {raw!r}, not sorted ranges of sequence "
        "numbers; it was changed outside foundry-checkpoint. Remove the key to read the "
        "whole history."
    )


def _clip(ranges: Ranges, low: int, high: int) -> Ranges:
    """The ranges cut to ``[low, high)``.

    Example:
        >>> _clip([(0, 4), (6, 8)], 2, 7)
        [(2, 4), (6, 7)]
    """
    out = [(max(a, low), min(b, high)) for a, b in ranges]
    return [(a, b) for a, b in out if a < b]


def _last(ranges: Ranges, count: int | None) -> Ranges:
    """The ranges holding only the last ``count`` sequence numbers (None: all).

    Example:
        >>> _last([(0, 4), (6, 8)], 3)
        [(3, 4), (6, 8)]
    """
    if count is None:
        return list(ranges)
    out: Ranges = []
    for a, b in reversed(ranges):
        if count <= 0:
            break
        take = min(count, b - a)
        out.append((b - take, b))
        count -= take
    return out[::-1]


def _joined(ranges: Ranges, start: int, stop: int) -> Ranges:
    """``[start, stop)`` added after the ranges, merged when contiguous.

    Example:
        >>> _joined([(0, 4)], 4, 6)
        [(0, 6)]
        >>> _joined([(0, 4)], 8, 9)
        [(0, 4), (8, 9)]
    """
    if start >= stop:
        return list(ranges)
    if ranges and ranges[-1][1] == start:
        return [*ranges[:-1], (ranges[-1][0], stop)]
    return [*ranges, (start, stop)]


def _seqs(ranges: Ranges) -> list[int]:
    return [s for a, b in ranges for s in range(a, b)]


class FoundryHistoryProvider(CoreOwner, HistoryProvider):
    """Microsoft Agent Framework chat history on Foundry's durable state store.

    Pass it to an agent (``Agent(client, context_providers=[FoundryHistoryProvider()])``): the
    agent loads the session's history before each run and appends the run's input and response
    messages after it, in this or any other process or replica. With no configuration it uses
    the embedded local store under ``AGENTSERVER_STATE_ROOT``; inside a Foundry-hosted agent
    (``FOUNDRY_HOSTING_ENVIRONMENT`` set) the hosted service. Who a call is for is captured
    once per call from the request context (``docs/concepts/isolation.md``).

    Args:
        source_id: The provider's id among the agent's context providers.
        store_prefix: First segment of every store name (default ``"maf-history"``).
        credential: Async token credential for hosted mode (default: the SDK's
            ``DefaultAzureCredential``).
        endpoint: Foundry project endpoint for hosted mode (default:
            ``FOUNDRY_PROJECT_ENDPOINT``).
        user_id: The end user whose partition to use outside a request (see
            :class:`~foundry_checkpoint_maf.FoundryCheckpointStorage`).
        trusted_delegation: Declare this agent a trusted delegating caller (required for
            ``user_id=`` in hosted mode).
        item_ttl_seconds: Idle lifetime of items in stores this object creates (-1: never).
        spill: Where messages over the 1 MB item limit go (default: a directory under the
            state root in local mode, chunk items of the session's store in hosted mode).
        local_backend: ``"sqlite"`` (embedded, default) or ``"sdk"`` (the SDK's local mode).
        max_messages: Keep only the last ``max_messages`` messages of each session (None: all).
        load_messages: Whether the agent loads the history before a run (MAF's flag).
        store_inputs: Whether the run's input messages are stored.
        store_context_messages: Whether context messages of other providers are stored.
        store_context_from: If set, only context from these source ids is stored.
        store_outputs: Whether the run's response messages are stored.
        skip_excluded: Leave out messages whose ``additional_properties["_excluded"]`` is
            truthy when reading (as MAF's own providers do).
        **client_kwargs: Passed to the ``FoundryStateStore`` client (hosted mode).

    Raises:
        InvalidIdentifierError: ``store_prefix`` or ``user_id`` cannot be used.
        UntrustedDelegationError: ``user_id=`` in hosted mode without ``trusted_delegation``.
        InvalidArgumentError: ``max_messages`` or another option is out of range.

    Example:
        >>> import asyncio
        >>> from agent_framework import Message
        >>> async def demo() -> list[str]:
        ...     async with FoundryHistoryProvider() as history:
        ...         await history.delete_session("doc-chat")
        ...         await history.save_messages("doc-chat", [Message("user", ["hi"])])
        ...         return [m.text for m in await history.get_messages("doc-chat")]
        >>> asyncio.run(demo())
        ['hi']
    """

    DEFAULT_SOURCE_ID: Final = "foundry_history"

    def __init__(
        self,
        source_id: str = DEFAULT_SOURCE_ID,
        *,
        store_prefix: str = "maf-history",
        credential: AsyncTokenCredential | None = None,
        endpoint: str | None = None,
        user_id: str | None = None,
        trusted_delegation: bool = False,
        item_ttl_seconds: int = DEFAULT_ITEM_TTL_SECONDS,
        spill: SpillStore | None = None,
        local_backend: LocalBackend = "sqlite",
        max_messages: int | None = None,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
        skip_excluded: bool = False,
        **client_kwargs: Any,
    ) -> None:
        if max_messages is not None and (
            isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1
        ):
            raise InvalidArgumentError(
                f"max_messages must be a positive int or None, got {max_messages!r}"
            )
        core = new_core(locals(), scope_word="session")
        HistoryProvider.__init__(
            self,
            source_id,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        self._core = core
        self._owns_core = True
        self.max_messages = max_messages
        self.skip_excluded = skip_excluded

    def __repr__(self) -> str:
        return f"FoundryHistoryProvider(source_id={self.source_id!r}, {self._core.describe()})"

    # -- plumbing -----------------------------------------------------------------------------
    async def _run(self, coro: Coroutine[Any, Any, T], *, call: Call, shield: bool = False) -> T:
        return await self._core.arun(coro, shield=shield, call=call)

    @staticmethod
    def _checked(session_id: str | None) -> str | None:
        if session_id is not None:
            check_identifier(session_id, "session_id")
        return session_id

    @staticmethod
    def _bounds(value: Any) -> tuple[int, int]:
        first = value.get("first") if isinstance(value, dict) else None
        nxt = value.get("next") if isinstance(value, dict) else None
        if not isinstance(first, int) or not isinstance(nxt, int) or not 0 <= first <= nxt:
            raise CorruptPayloadError(
                f"The history head holds {value!r}, not a range of messages; it was changed "
                "outside foundry-checkpoint. delete_session() removes the session."
            )
        return first, nxt

    @staticmethod
    def _corrupt(scope: Scope, what: str, exc: Exception) -> CorruptPayloadError:
        return CorruptPayloadError(
            f"{what} of session {scope.scope_id!r} cannot be read "
            f"({type(exc).__name__}: {exc}); delete_session() removes the session."
        )

    async def _fetch(self, scope: Scope, seq: int) -> tuple[Message, Held] | None:
        """Message ``seq`` from its own item, with its payload and stored value."""
        key = _message_key(seq)
        item = await scope.store.get_item(key)
        if item is None:
            return None
        try:
            payload = await scope.decode(item.value, key=key)
            return decode_message(payload), (payload, item.value)
        except (FoundryCheckpointError, ValueError, TypeError, KeyError) as exc:
            raise self._corrupt(scope, f"Message {seq}", exc) from exc

    async def _fetch_seqs(
        self, scope: Scope, seqs: Sequence[int]
    ) -> dict[int, tuple[Message, Held]]:
        out: dict[int, tuple[Message, Held]] = {}
        for page in range(0, len(seqs), _PAGE):
            chunk = seqs[page : page + _PAGE]
            found = await bounded((self._fetch(scope, s) for s in chunk), limit=_READ_CONCURRENCY)
            out.update((s, f) for s, f in zip(chunk, found, strict=True) if f is not None)
        return out

    async def _read_seqs(self, scope: Scope, seqs: Sequence[int]) -> list[Message]:
        found = await self._fetch_seqs(scope, seqs)
        return [found[s][0] for s in seqs if s in found]

    async def _read_page(self, scope: Scope, page: int) -> list[Any] | None:
        """The entries of sealed page ``page`` (None: not sealed)."""
        key = _page_key(page)
        item = await scope.store.get_item(key)
        if item is None:
            return None
        try:
            data = json.loads(await scope.decode(item.value, key=key))
            entries = data["messages"] if isinstance(data, dict) else None
            if data.get("page") != page or not isinstance(entries, list) or len(entries) != _SEAL:
                raise ValueError(f"not page {page} of {_SEAL} messages")
        except (FoundryCheckpointError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise self._corrupt(scope, f"Page {page}", exc) from exc
        return entries

    async def _from_entry(self, scope: Scope, seq: int, entry: Any) -> Message | None:
        """A page entry as a message; None when the entry says to read the message's item."""
        try:
            if isinstance(entry, dict) and isinstance(entry.get("m"), dict):
                return Message.from_dict(entry["m"])
            if isinstance(entry, dict) and isinstance(entry.get("r"), dict):
                return decode_message(await scope.decode(entry["r"], key=_message_key(seq)))
            if entry is None:
                return None
            raise ValueError(f"a page entry holds {type(entry).__name__}")
        except (FoundryCheckpointError, ValueError, TypeError, KeyError) as exc:
            raise self._corrupt(scope, f"Message {seq}", exc) from exc

    async def _seal(self, scope: Scope, page: int, held: Sequence[Held]) -> None:
        key = _page_key(page)
        tags = _page_tags(page)
        item = await scope.encode(key, _page_payload(page, held), tags=tags)
        await scope.store.set_item(key, item, tags=tags)

    async def _read_whole(self, scope: Scope, seqs: list[int], nxt: int) -> list[Message]:
        """Messages ``seqs``: from sealed pages where a complete page holds two or more of them,
        the rest (and the entries a page does not hold inline) from their own items. A complete
        page found unsealed and read whole from its items, every one there, is sealed."""
        wanted: dict[int, list[int]] = {}
        for seq in seqs:
            wanted.setdefault(seq // _SEAL, []).append(seq)
        paged = [p for p, group in wanted.items() if len(group) > 1 and (p + 1) * _SEAL <= nxt]
        read = await bounded((self._read_page(scope, p) for p in paged), limit=_READ_CONCURRENCY)
        got: dict[int, Message] = {}
        for page, entries in zip(paged, read, strict=True):
            if entries is not None:
                for seq in wanted[page]:
                    message = await self._from_entry(scope, seq, entries[seq - page * _SEAL])
                    if message is not None:
                        got[seq] = message
        singles = [s for s in seqs if s not in got]
        found = await self._fetch_seqs(scope, singles)
        got.update((s, m) for s, (m, _) in found.items())
        unsealed = [
            p
            for p, entries in zip(paged, read, strict=True)
            if entries is None and len(wanted[p]) == _SEAL and all(s in found for s in wanted[p])
        ]
        await bounded(
            (self._seal(scope, p, [found[s][1] for s in wanted[p]]) for p in unsealed),
            limit=_READ_CONCURRENCY,
        )
        return [got[s] for s in seqs if s in got]

    def _visible(self, recorded: Ranges | None, first: int, nxt: int) -> Ranges:
        """The sequence numbers a session sees: its branch's (when recorded) or the whole kept
        range, clipped to the head's ``[first, next)``, and to the last ``max_messages``."""
        if recorded is None or recorded[-1][1] > nxt:  # none, or from a deleted session
            return [(first, nxt)] if first < nxt else []
        return _last(_clip(recorded, first, nxt), self.max_messages)

    # -- the HistoryProvider contract ---------------------------------------------------------
    async def get_messages(
        self,
        session_id: str | None,
        *,
        state: dict[str, Any] | None = None,
        last: int | None = None,
        **kwargs: Any,
    ) -> list[Message]:
        """The session's messages, oldest first (only the last ``last`` when given).

        With ``state`` (the provider's slice of the session's state, as MAF passes it) only the
        messages of the session's branch. ``last=n`` costs one head read and one read per
        message returned; the whole history one head read, one read per sealed page of 50 and
        one per message after them (and, once per page, a page write). A session never written
        has no messages (nothing is created).

        Raises:
            CorruptPayloadError: a stored message cannot be decoded.
            InvalidIdentifierError: ``session_id`` cannot be used.

        Example:
            >>> import asyncio
            >>> from agent_framework import Message
            >>> async def demo() -> list[str]:
            ...     async with FoundryHistoryProvider() as history:
            ...         await history.delete_session("doc-last")
            ...         await history.save_messages(
            ...             "doc-last", [Message("user", ["a"]), Message("assistant", ["b"])])
            ...         return [m.text for m in await history.get_messages("doc-last", last=1)]
            >>> asyncio.run(demo())
            ['b']
        """
        del kwargs
        session_id = self._checked(session_id)
        recorded = _recorded(state)
        if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 0):
            raise InvalidArgumentError(f"last must be a non-negative int or None, got {last!r}")
        call = self._core.capture()

        async def _get() -> list[Message]:
            scope = await self._core.scope(session_id, create=False)
            if scope is None:
                return []
            head = await scope.store.get_item(_HEAD_KEY)
            if head is None:
                return []
            first, nxt = self._bounds(head.value)
            seqs = _seqs(_last(self._visible(recorded, first, nxt), last))
            if last is None:
                return await self._read_whole(scope, seqs, nxt)
            return await self._read_seqs(scope, seqs)

        messages = await self._run(_get(), call=call)
        if self.skip_excluded:
            messages = [m for m in messages if not m.additional_properties.get("_excluded")]
        return messages

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Append the messages that are new to the session (MAF's ``filter_new_messages``).

        Raises:
            ConcurrentWriteError: other writers won the head 100 times in a row (nothing stored).
            InvalidIdentifierError: ``session_id`` cannot be used.

        Example:
            >>> import asyncio
            >>> from agent_framework import Message
            >>> async def demo() -> int:
            ...     async with FoundryHistoryProvider() as history:
            ...         await history.delete_session("doc-save")
            ...         turn = [Message("user", ["hi"], message_id="m1")]
            ...         await history.save_messages("doc-save", turn)
            ...         await history.save_messages("doc-save", turn)  # a replay: not stored
            ...         return len(await history.get_messages("doc-save"))
            >>> asyncio.run(demo())
            1
        """
        del kwargs
        session_id = self._checked(session_id)
        recorded = _recorded(state)
        incoming = list(messages)
        if not incoming:
            return
        payloads = [
            json.dumps(m.to_dict(), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            for m in incoming
        ]
        call = self._core.capture()
        branch = await self._run(
            self._append(session_id, incoming, payloads, recorded), call=call, shield=True
        )
        if state is not None and branch is not None:
            state[_BRANCH_KEY] = [[a, b] for a, b in branch]

    async def _append(
        self,
        session_id: str | None,
        incoming: list[Message],
        payloads: list[bytes],
        recorded: Ranges | None,
    ) -> Ranges | None:
        """Reserve and write the new messages; the session's branch after them (None: nothing
        was new)."""
        scope = await self._core.scope(session_id)
        store = scope.store
        for attempt in range(_MAX_ATTEMPTS):
            head = await store.get_item(_HEAD_KEY)
            first, nxt = (0, 0) if head is None else self._bounds(head.value)
            seen = self._visible(recorded, first, nxt)
            tail_seqs = _seqs(_last(seen, len(incoming)))
            held = await self._fetch_seqs(scope, tail_seqs)
            tail = [held[s][0] for s in tail_seqs if s in held]
            new = filter_new_messages(tail, incoming)
            if not new:
                return None
            start = len(incoming) - len(new)  # the new ones are a suffix of incoming
            stop = nxt + len(new)
            # a branch that does not end where the history does was forked off (a snapshot
            # of the session continued twice): from then on nothing is deleted
            was_forked = head is not None and head.value.get("forked") is True
            forked = was_forked or (recorded is not None and recorded[-1][1] < nxt)
            keep_from = (
                first
                if self.max_messages is None or forked
                else max(first, stop - self.max_messages)
            )
            value: dict[str, Any] = {"first": keep_from, "next": stop}
            if forked:
                value["forked"] = True
            try:
                if head is None:
                    await store.create_item(_HEAD_KEY, value, tags=_HEAD_TAGS)
                else:
                    await store.set_item(_HEAD_KEY, value, tags=_HEAD_TAGS, if_match=head.etag)
            except (FoundryStorageConflictError, FoundryStoragePreconditionError):
                await asyncio.sleep(random.uniform(0, min(_BACKOFF_CAP_S, _BACKOFF_S * 2**attempt)))
                continue
            break
        else:
            raise ConcurrentWriteError(
                f"Appending to session {session_id!r} lost the race for its history head "
                f"{_MAX_ATTEMPTS} times; nothing was stored. Retrying is safe."
            )

        have: dict[int, Held] = {s: h for s, (_, h) in held.items()}

        async def _write(seq: int, payload: bytes) -> None:
            key = _message_key(seq)
            tags = _message_tags(seq)
            item = await scope.encode(key, payload, tags=tags)
            await store.set_item(key, item, tags=tags)
            have[seq] = (payload, item)

        # messages already outside the window (a turn longer than max_messages) are not written
        await bounded(
            (_write(nxt + i, payloads[start + i]) for i in range(len(new)) if nxt + i >= keep_from),
            limit=_READ_CONCURRENCY,
        )
        # the pages this append completes, when it holds all their messages (its own, the tail)
        complete = [
            p
            for p in range(nxt // _SEAL, stop // _SEAL)
            if (p + 1) * _SEAL > keep_from
            and all(s in have for s in range(p * _SEAL, (p + 1) * _SEAL))
        ]
        await bounded(
            (
                self._seal(scope, p, [have[s] for s in range(p * _SEAL, (p + 1) * _SEAL)])
                for p in complete
            ),
            limit=_READ_CONCURRENCY,
        )
        if keep_from > first:
            await bounded(
                (self._evict(scope, _message_key(s)) for s in range(first, min(keep_from, nxt))),
                limit=_READ_CONCURRENCY,
            )
            await bounded(  # the pages now wholly out of the window
                (
                    self._evict(scope, _page_key(p))
                    for p in range(first // _SEAL, keep_from // _SEAL)
                ),
                limit=_READ_CONCURRENCY,
            )
        await scope.touch()
        branch = _joined(seen, nxt, stop)
        return _last(_clip(branch, keep_from, stop), self.max_messages)

    async def _evict(self, scope: Scope, key: str) -> None:
        await scope.delete(key)

    # -- beyond the contract ------------------------------------------------------------------
    async def list_sessions(self) -> list[str | None]:
        """Every session this user has a history in under the prefix (None: ``session_id=None``),
        sorted, None first; from the session index, no message read, nothing written.

        Example:
            >>> import asyncio
            >>> from agent_framework import Message
            >>> async def demo() -> bool:
            ...     async with FoundryHistoryProvider() as history:
            ...         await history.save_messages("doc-listed", [Message("user", ["x"])])
            ...         return "doc-listed" in await history.list_sessions()
            >>> asyncio.run(demo())
            True
        """
        return await history_sessions(self)

    async def inspect(
        self,
        session_id: str | None,
        *,
        offset: int = 0,
        limit: int | None = None,
        last: int | None = None,
    ) -> StoredHistory | None:
        """The session's head and a window of its messages as stored (sequence numbers, item
        sizes, spilled or not); None when the session has no history. Read-only: nothing is
        written and no TTL renewed; a message that does not decode is returned with its error.

        The window is the last ``last`` messages (default: every one kept), from ``offset`` on,
        at most ``limit`` (``limit=0``: the head alone, one read). Costs one head read and one
        read per message of the window.

        Raises:
            InvalidArgumentError: ``offset``, ``limit`` or ``last`` is negative.
            CorruptPayloadError: the session's head is damaged.

        Example:
            >>> import asyncio
            >>> from agent_framework import Message
            >>> async def demo() -> list[object]:
            ...     async with FoundryHistoryProvider() as history:
            ...         await history.delete_session("doc-inspect")
            ...         await history.save_messages(
            ...             "doc-inspect", [Message("user", ["a"]), Message("assistant", ["b"])])
            ...         stored = await history.inspect("doc-inspect", last=1)
            ...         return [stored.count, [(m.seq, m.message.text) for m in stored.messages]]
            >>> asyncio.run(demo())
            [2, [(1, 'b')]]
        """
        return await inspect_history(self, session_id, offset=offset, limit=limit, last=last)

    async def delete_session(self, session_id: str | None) -> int:
        """Delete the session's history (this user's only); how many messages it held.

        Every item of the session's store in this user's partition goes, with the spilled
        blobs, even when the head is damaged (then 0 is returned).

        Example:
            >>> import asyncio
            >>> from agent_framework import Message
            >>> async def demo() -> list[int]:
            ...     async with FoundryHistoryProvider() as history:
            ...         await history.delete_session("doc-del")
            ...         await history.save_messages("doc-del", [Message("user", ["x"])])
            ...         return [await history.delete_session("doc-del"),
            ...                 len(await history.get_messages("doc-del"))]
            >>> asyncio.run(demo())
            [1, 0]
        """
        session_id = self._checked(session_id)
        call = self._core.capture()

        async def _delete() -> int:
            scope = await self._core.scope(session_id, create=False)
            if scope is None:
                await self._core.unregister(session_id)
                return 0
            head = await scope.store.get_item(_HEAD_KEY)
            count = 0
            if head is not None:
                try:
                    first, nxt = self._bounds(head.value)
                except CorruptPayloadError:  # a damaged head: the session goes all the same
                    pass
                else:
                    count = nxt - first
            await scope.purge()
            return count

        return await self._run(_delete(), call=call, shield=True)
