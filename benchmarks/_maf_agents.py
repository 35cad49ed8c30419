"""Agent Framework agents: chat history per turn, at 10 and 2,000 messages, and past 1 MB.

Subjects (``NAMES``):

* ``memory``: ``InMemoryHistoryProvider`` (the history lives in the in-process ``AgentSession``;
  nothing is persisted: the floor);
* ``file``: ``FileHistoryProvider`` (one JSON Lines file per session);
* ``fhp-local`` / ``fhp-hosted``: ``FoundryHistoryProvider`` on the embedded local store and on
  the emulator (one item per message, a head advanced by compare-and-set);
* ``fass-hosted``: agent-framework-foundry-hosting's ``FoundryAgentSessionStore`` on the
  emulator, as hosting uses it: one store object per request, the session read at the start and
  written at the end, the history inside the session (``InMemoryHistoryProvider``), so a turn
  rewrites the whole session. That store takes its client settings from the environment only,
  so the benchmark subclasses it to pass the emulator's credential, endpoint and CA file to
  ``FoundryStateStore.get_or_create``; every call it makes is otherwise its own;
* ``fss-hosted``: this package's ``FoundrySessionStore`` used the same way (the whole session per
  turn, spilled past the item limit), to show what the session-holds-history design costs
  whoever stores it.

Workload ``turns``: at each of ``sizes``, a session filled with that many messages (~``chars``
characters each, user and assistant in turn; not timed), then ``reps`` times each of:

* ``agent``: one ``Agent.run`` turn (a chat client that answers at once): the agent loads the
  session's history and stores the input and the reply (session stores: ``get`` before the run,
  ``set`` after it);
* ``append``: storing one turn (a user and an assistant message) without the agent:
  ``save_messages`` (session stores: ``get``, append to the session's history, ``set``);
* ``last20``: the last 20 messages (``get_messages(last=20)`` where the provider has it; the
  others read the whole history and slice it; session stores: ``get``).

Then ``grow``: a session filled to ~``grow_from_kb`` KB, and agent turns whose replies are
``grow_reply_chars`` characters of base64 (an attachment or a binary tool result) until a turn
failed, or ``grow_after`` turns had written the session past the item limit of 1,000,000
serialized bytes (into chunks or blobs), or ``grow_max_turns`` ran (session stores only: the
providers store one item per message, so a history's length never meets the limit).

Counts per op: store calls (hosted: counted by the emulator; local: in-process, in the same
units), bytes written (item values, spilled blobs; ``file``: bytes appended to its file) and
``file_read_kb`` for ``file`` (its whole file is read on every load and every save).
"""

from __future__ import annotations

import base64
import contextlib
import json
import random
import string
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from ._common import LocalCounters, median, ms

__all__ = ["NAMES", "OPS", "report_lines", "run_unit"]

NAMES: dict[str, str] = {
    "memory": "InMemoryHistoryProvider (in process, nothing persisted)",
    "file": "FileHistoryProvider",
    "fhp-local": "**FoundryHistoryProvider** local (embedded SQLite, default)",
    "fhp-hosted": "**FoundryHistoryProvider** hosted (emulator)",
    "fass-hosted": "FoundryAgentSessionStore, agent-framework-foundry-hosting (hosted, emulator)",
    "fss-hosted": "**FoundrySessionStore** hosted (emulator), history in the session",
}

#: The ops of the ``turns`` workload, in table order: (key, column heading).
OPS: tuple[tuple[str, str], ...] = (
    ("agent", "agent turn"),
    ("append", "append a turn"),
    ("last20", "last 20 messages"),
)

_HISTORY_SOURCE = "in_memory"  # InMemoryHistoryProvider's source id: its key in session.state
_ITEM_LIMIT = 1_000_000  # bytes of an item value's serialized JSON (the service's limit)
_WRITES = ("put_item", "create_item")


_VOCABULARY = [
    "".join(random.Random(w).choices(string.ascii_lowercase, k=2 + w % 8)) for w in range(2000)
]


def _text(i: int, chars: int) -> str:
    """~``chars`` characters of words drawn from a 2,000-word vocabulary (compresses like
    prose, about 2.5x), the same for the same ``i``."""
    rng = random.Random(i)
    words = [f"message {i}:"]
    length = len(words[0])
    while length < chars:
        words.append(rng.choice(_VOCABULARY))
        length += len(words[-1]) + 1
    return " ".join(words)[:chars]


def _tool_output(i: int, chars: int) -> str:
    """``chars`` characters of base64 (an attachment or a binary tool result: incompressible
    beyond base64's own 3/4)."""
    data = random.Random(-1 - i).randbytes(chars * 3 // 4 + 3)
    return base64.b64encode(data).decode()[:chars]


def _messages(start: int, count: int, chars: int, prefix: str = "m") -> list[Any]:
    from agent_framework import Message

    roles = ("user", "assistant")
    return [
        Message(roles[i % 2], [_text(i, chars)], message_id=f"{prefix}-{i}")
        for i in range(start, start + count)
    ]


def _bench_client(chars: int) -> Any:
    from agent_framework import BaseChatClient, ChatResponse, Message

    class _Client(BaseChatClient):
        """Answers at once with a reply of ``reply_chars`` characters."""

        def __init__(self) -> None:
            super().__init__()
            self.reply_chars = chars
            self.tool_output = False  # replies of base64 instead of words
            self.turn = 0

        async def _answer(self) -> ChatResponse:
            self.turn += 1
            make = _tool_output if self.tool_output else _text
            text = make(self.turn, self.reply_chars)
            return ChatResponse(
                messages=[Message("assistant", [text], message_id=f"r-{self.turn}")]
            )

        def _inner_get_response(
            self, *, messages: Sequence[Any], stream: bool, options: Any, **kwargs: Any
        ) -> Any:
            return self._answer()

    return _Client()


# --------------------------------------------------------------------------- subjects


class Subject:
    """One history to measure: how to fill it, run a turn, read it and count its writes."""

    def __init__(self, key: str, workdir: Path, emulator: Any, chars: int) -> None:
        self.key = key
        self.workdir = workdir
        self.emulator = emulator
        self.local = LocalCounters()
        self.client = _bench_client(chars)
        self.provider: Any = None
        self.store: Any = None
        self._sessions: dict[str, Any] = {}  # ``memory``: the in-process sessions
        self._built: Any = None

    @property
    def session_store(self) -> bool:
        """Whether the history lives inside the session (a SessionStore subject)."""
        return self.key in ("fass-hosted", "fss-hosted")

    def skip_reason(self) -> str | None:
        """Why this subject cannot run here, or None."""
        try:
            if self.key.startswith(("fhp-", "fss-")):
                import foundry_checkpoint_maf  # noqa: F401
            if self.key == "fass-hosted":
                from agent_framework_foundry_hosting import _state_store  # noqa: F401
        except ImportError as exc:
            return f"not importable: {exc}"
        if self.key.endswith("-hosted") and self.emulator is None:
            return "no emulator"
        return None

    def _hosted_kwargs(self) -> dict[str, Any]:
        from foundry_checkpoint.emulator import EmulatorCredential

        return {
            "credential": EmulatorCredential("alice"),
            "endpoint": self.emulator.endpoint,
            **self.emulator.client_kwargs(),
        }

    @contextlib.asynccontextmanager
    async def opened(self) -> AsyncIterator[Subject]:
        """Build the provider or session store (closed afterwards)."""
        from agent_framework import FileHistoryProvider, InMemoryHistoryProvider

        if self.key == "memory" or self.session_store:
            self.provider = InMemoryHistoryProvider()
        elif self.key == "file":
            self.provider = FileHistoryProvider(self.workdir / "history")
        else:
            from foundry_checkpoint_maf import FoundryHistoryProvider

            self.local.install(sdk=False)
            kwargs = self._hosted_kwargs() if self.key == "fhp-hosted" else {}
            self.provider = FoundryHistoryProvider(store_prefix="bench", **kwargs)
        if self.key == "fss-hosted":
            from foundry_checkpoint_maf import FoundrySessionStore

            self.local.install(sdk=False)
            self.store = FoundrySessionStore(store_prefix="bench", **self._hosted_kwargs())
        try:
            yield self
        finally:
            for closing in (self.provider, self.store):
                if closing is not None and hasattr(closing, "aclose"):
                    await closing.aclose()

    def _request_store(self) -> Any:
        """The session store of one request (hosting builds a FoundryAgentSessionStore each)."""
        if self.key == "fss-hosted":
            return self.store
        from agent_framework_foundry_hosting._state_store import FoundryAgentSessionStore
        from azure.ai.agentserver.core import FoundryAgentRequestContext
        from azure.ai.agentserver.core.storage import FoundryStateStore

        kwargs = self._hosted_kwargs()

        class _EmulatorAgentSessionStore(FoundryAgentSessionStore):
            """The hosting package's store, pointed at the emulator (client settings only)."""

            async def _get_store(self) -> FoundryStateStore:
                return await FoundryStateStore.get_or_create(
                    self._store_name,
                    kwargs["credential"],
                    kwargs["endpoint"],
                    user_isolation=True,
                    **{k: v for k, v in kwargs.items() if k not in ("credential", "endpoint")},
                )

        return _EmulatorAgentSessionStore(FoundryAgentRequestContext())

    def _agent(self) -> Any:
        """One agent per subject (an agent holds no conversation: the session does)."""
        from agent_framework import Agent

        if self._built is None:
            self._built = Agent(client=self.client, context_providers=[self.provider])
        return self._built

    def _memory_session(self, session_id: str) -> Any:
        from agent_framework import AgentSession

        return self._sessions.setdefault(session_id, AgentSession(session_id=session_id))

    # -- the ops ------------------------------------------------------------------------------
    async def fill(self, session_id: str, messages: list[Any]) -> None:
        """Store ``messages`` as the session's history (not timed)."""
        from agent_framework import AgentSession

        if self.session_store:
            store = self._request_store()
            await store.get(session_id)
            session = AgentSession(session_id=session_id)
            session.state[_HISTORY_SOURCE] = {"messages": list(messages)}
            await store.set(session_id, session)
            return
        state = None
        if self.key == "memory":
            state = self._memory_session(session_id).state.setdefault(_HISTORY_SOURCE, {})
        for start in range(0, len(messages), 250):
            await self.provider.save_messages(
                session_id, messages[start : start + 250], state=state
            )

    async def agent_turn(self, session_id: str, text: str, message_id: str) -> str:
        """One ``Agent.run`` turn; the reply's text."""
        from agent_framework import Message

        agent = self._agent()
        question = Message("user", [text], message_id=message_id)
        if self.session_store:
            store = self._request_store()
            session = await store.get(session_id)
            response = await agent.run(question, session=session)
            await store.set(session_id, session)
        elif self.key == "memory":
            response = await agent.run(question, session=self._memory_session(session_id))
        else:
            response = await agent.run(
                question, session=agent.create_session(session_id=session_id)
            )
        return str(response.messages[-1].text)

    async def append(self, session_id: str, messages: list[Any]) -> None:
        """Store one turn's messages without the agent."""
        if self.session_store:
            store = self._request_store()
            session = await store.get(session_id)
            state = session.state.setdefault(_HISTORY_SOURCE, {})
            await self.provider.save_messages(session_id, messages, state=state)
            await store.set(session_id, session)
        elif self.key == "memory":
            state = self._memory_session(session_id).state.setdefault(_HISTORY_SOURCE, {})
            await self.provider.save_messages(session_id, messages, state=state)
        else:
            await self.provider.save_messages(session_id, messages)

    async def last(self, session_id: str, n: int) -> list[str]:
        """The texts of the session's last ``n`` messages."""
        if self.session_store:
            session = await self._request_store().get(session_id)
            found = session.state[_HISTORY_SOURCE]["messages"][-n:]
        elif self.key == "memory":
            state = self._memory_session(session_id).state.setdefault(_HISTORY_SOURCE, {})
            found = (await self.provider.get_messages(session_id, state=state))[-n:]
        elif self.key == "file":
            found = (await self.provider.get_messages(session_id))[-n:]
        else:
            found = await self.provider.get_messages(session_id, last=n)
        return [m.text for m in found]

    async def session_bytes(self, session_id: str) -> int:
        """Bytes of the session's compact JSON (session stores only)."""
        session = await self._request_store().get(session_id)
        return len(json.dumps(session.to_dict(), separators=(",", ":")).encode())

    # -- counting -----------------------------------------------------------------------------
    def reset(self) -> None:
        """Zero every counter."""
        self.local.reset()
        if self.emulator is not None:
            self.emulator.reset()

    def counts(self) -> dict[str, Any]:
        """Store calls, items and bytes written since the last reset."""
        if self.key.endswith("-hosted"):
            out = dict(self.emulator.counts())
            local = self.local.snapshot()
            out.update(spill_puts=local["spill_puts"], spill_bytes=local["spill_bytes"])
            return out
        if self.key == "fhp-local":
            return self.local.snapshot()
        return {}

    def file_size(self, session_id: str) -> int:
        """Bytes of ``file``'s history file of the session (0 for other subjects)."""
        if self.key != "file":
            return 0
        return sum(p.stat().st_size for p in (self.workdir / "history").iterdir())


def _per(counts: dict[str, Any], n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    written = counts.get("item_bytes", 0) + counts.get("spill_bytes", 0)
    if counts:
        out["bytes_written"] = written / n
    requests = {k: v / n for k, v in sorted(counts.get("requests", {}).items()) if v}
    if requests:
        out["requests"] = requests
    return out


# --------------------------------------------------------------------------- workloads


async def turns(subject: Subject, scale: dict[str, Any]) -> dict[str, Any]:
    """Each op at each size of history."""
    chars, reps = scale["chars"], scale["reps"]
    out: dict[str, Any] = {"sizes": {}}
    for size in scale["sizes"]:
        session_id = f"turns-{size}"
        expected = [m.text for m in _messages(0, size, chars)]
        start = time.perf_counter()
        await subject.fill(session_id, _messages(0, size, chars))
        fill_s = time.perf_counter() - start
        # warm-up: one agent turn (imports, clients, the store's first touch)
        reply = await subject.agent_turn(session_id, "warm up", f"w-{size}")
        expected += ["warm up", reply]
        cell: dict[str, Any] = {"fill_s": fill_s}
        for op, _ in OPS:
            times: list[float] = []
            correct = True
            file_before = subject.file_size(session_id)
            subject.reset()
            for rep in range(reps):
                began = time.perf_counter()
                if op == "agent":
                    question = f"question {size}-{rep}"
                    reply = await subject.agent_turn(session_id, question, f"q-{size}-{rep}")
                    times.append(time.perf_counter() - began)
                    expected += [question, reply]
                elif op == "append":
                    turn = _messages(len(expected), 2, chars, prefix=f"a{size}")
                    await subject.append(session_id, turn)
                    times.append(time.perf_counter() - began)
                    expected += [m.text for m in turn]
                else:
                    got = await subject.last(session_id, 20)
                    times.append(time.perf_counter() - began)
                    correct = correct and got == expected[-20:]
            fig: dict[str, Any] = {"ms": ms(median(times)), "correct": correct}
            fig.update(_per(subject.counts(), reps))
            if subject.key == "file":
                fig["file_read_kb"] = subject.file_size(session_id) / 1024
                if op != "last20":
                    fig["bytes_written"] = (subject.file_size(session_id) - file_before) / reps
            cell[op] = fig
        if subject.session_store:
            cell["session_kb"] = await subject.session_bytes(session_id) / 1024
        # the whole history once more, through a reader that only knows the session id
        cell["messages"] = len(expected)
        cell["history_ok"] = await subject.last(session_id, len(expected)) == expected
        out["sizes"][str(size)] = cell
    if subject.session_store:
        out["grow"] = await grow(subject, scale)
    return out


async def grow(subject: Subject, scale: dict[str, Any]) -> dict[str, Any]:
    """Agent turns with long replies on a session of ~``grow_from_kb`` KB, past the 1 MB limit."""
    chars = scale["chars"]
    probe = await _probe_bytes(chars)
    count = int(scale["grow_from_kb"] * 1024 / probe)
    session_id = "grow"
    try:
        await subject.fill(session_id, _messages(0, count, chars, prefix="g"))
    except Exception as exc:  # reported: the session could not even be stored
        return {"from_messages": count, "rows": [], "fill_error": _error(exc)}
    subject.client.reply_chars = scale["grow_reply_chars"]
    subject.client.tool_output = True
    rows: list[dict[str, Any]] = []
    past = 0
    try:
        for turn in range(scale["grow_max_turns"]):
            before = await subject.session_bytes(session_id)
            subject.reset()
            began = time.perf_counter()
            error = None
            try:
                await subject.agent_turn(session_id, f"grow {turn}", f"grow-{turn}")
            except Exception as exc:  # measured, not hidden: the row says what failed
                error = _error(exc)
            elapsed = time.perf_counter() - began
            counts = subject.counts()
            after = await subject.session_bytes(session_id)
            row: dict[str, Any] = {
                "turn": turn,
                "before_kb": before / 1024,
                "after_kb": after / 1024,
                "ms": ms(elapsed),
                # more than the one item write: the session went to chunks or blobs
                "spilled": sum(counts.get("requests", {}).get(k, 0) for k in _WRITES) > 1
                or counts.get("spill_puts", 0) > 0,
                **_per(counts, 1),
            }
            if error is not None:
                row["error"] = error
                row["stored"] = after > before
                rows.append(row)
                break
            rows.append(row)
            if row["spilled"]:
                past += 1
                if past >= scale["grow_after"]:
                    break
    finally:
        subject.client.reply_chars = chars
        subject.client.tool_output = False
    return {"from_messages": count, "rows": rows}


def _error(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


async def _probe_bytes(chars: int) -> float:
    """Mean bytes of one filler message inside a session's JSON."""
    from agent_framework import AgentSession

    session = AgentSession(session_id="probe")
    session.state[_HISTORY_SOURCE] = {"messages": _messages(0, 100, chars)}
    return len(json.dumps(session.to_dict(), separators=(",", ":")).encode()) / 100


async def run_unit(
    workload: str,
    subject_key: str,
    scale: dict[str, Any],
    workdir: Path,
    *,
    pg_dsn: str | None = None,
    emulator: Any = None,
) -> dict[str, Any]:
    """Run one workload for one subject in this process; returns its figures."""
    del workload, pg_dsn
    subject = Subject(subject_key, workdir, emulator, scale["chars"])
    reason = subject.skip_reason()
    if reason is not None:
        return {"skipped": reason}
    async with subject.opened():
        return await turns(subject, scale)


# --------------------------------------------------------------------------- report


def report_lines(
    results: dict[str, Any], scales: dict[str, Any], lines: list[str], number: int
) -> None:
    """The ``maf-agents`` section of RESULTS.md."""
    from ._report import _kb, _num, _ratio, _requests, _rss, _Section, _table

    section = _Section(results, "maf-agents", NAMES)
    if not section.units:
        return
    scale = scales["maf-agents"]
    sizes = [str(s) for s in scale["sizes"]]
    lines += [
        f"## {number}. Agent Framework agents: chat history per turn at "
        + " and ".join(f"{int(s):,}" for s in sizes)
        + " messages",
        "",
        f"A session filled with {' / '.join(f'{int(s):,}' for s in sizes)} messages of "
        f"~{scale['chars']} characters, then, at each length, the median of {scale['reps']} of "
        "each op: *agent turn* = one `Agent.run` (a chat client that answers at once with "
        f"~{scale['chars']} characters; the agent loads the history before the run and stores "
        "the input and the reply after it), *append a turn* = storing a user and an assistant "
        "message without the agent (`save_messages`), *last 20* = the session's last 20 "
        "messages (`get_messages(last=20)` where the provider has it; the others read the "
        "whole history). The two session stores are used as agent-framework-foundry-hosting "
        "uses its `FoundryAgentSessionStore`: the session read before the turn and written "
        "after it, its history inside it (`InMemoryHistoryProvider`), one store object per "
        "request for the hosting package's store. Cells: ms (x FileHistoryProvider); *calls* = "
        "store calls per op (hosted: counted by the emulator); *written* = KB written per op "
        "(item values and spilled blobs; FileHistoryProvider: bytes appended to its file). "
        "✓ = every last-20 read and the final whole history were exactly what was stored.",
        "",
    ]
    anchor = section.result("file")
    ran = section.ran()
    for size in sizes:
        lines += [f"{int(size):,} messages:", ""]
        rows = []
        for subject, r, unit in ran:
            cell = r["sizes"].get(size)
            if cell is None:
                continue
            row = [section.names[subject]]
            for op, _ in OPS:
                fig = cell[op]
                base = (anchor or {}).get("sizes", {}).get(size, {}).get(op, {}).get("ms")
                row.append(f"{_num(fig['ms'], 3)} ({_ratio(fig['ms'], base)})")
                row.append(_requests(fig.get("requests")))
                if op != "last20":
                    row.append(_kb(fig.get("bytes_written")))
            ok = cell["history_ok"] and all(cell[op]["correct"] for op, _ in OPS)
            row.append("✓" if ok else "**no**")
            row.append(_rss(unit))
            rows.append(row)
        header = ["history"]
        for op, label in OPS:
            header += [f"{label}: ms (x File)", "calls"]
            if op != "last20":
                header.append("written KB")
        lines += _table([*header, "correct", "peak RSS MB"], rows)
    file_cells = (anchor or {}).get("sizes", {})
    if file_cells:
        lines += [
            "FileHistoryProvider reads its whole file on every load and every save (to drop "
            "messages already stored): "
            + ", ".join(
                f"{_num(c['append'].get('file_read_kb'), 0)} KB at {int(s):,} messages"
                for s, c in file_cells.items()
            )
            + ".",
            "",
        ]
    parts = [
        f"{section.names[subject]}: "
        + ", ".join(
            f"{_num(c['session_kb'], 0)} KB at {int(s):,} messages"
            for s, c in r["sizes"].items()
            if "session_kb" in c
        )
        for subject, r, _ in ran
        if any("session_kb" in c for c in r["sizes"].values())
    ]
    if parts:
        lines += ["Session size (what every turn rewrites): " + "; ".join(parts) + ".", ""]
    grows = [(s, r["grow"]) for s, r, _ in ran if "grow" in r]
    if grows:
        lines += [
            f"### {number}.1 Past the 1 MB item limit",
            "",
            f"A session filled to ~{scale['grow_from_kb']} KB of history (JSON), then agent "
            f"turns whose reply is {scale['grow_reply_chars']:,} characters of base64 (an "
            "attachment or a binary tool result), until a turn failed or "
            f"{scale['grow_after']} turn{'s' if scale['grow_after'] != 1 else ''} had written "
            "the session past the item limit "
            f"({_ITEM_LIMIT:,} serialized bytes), at most {scale['grow_max_turns']} turns. "
            "*session KB* = the session's JSON before → after the turn (FoundrySessionStore "
            "compresses it when that pays, so it spills later than the JSON passes the limit); "
            "of the plain turns before that, the first and the last are shown.",
            "",
        ]
        rows = []
        for subject, g in grows:
            if "fill_error" in g:
                rows.append([section.names[subject], "fill", "-", "-", "-", "-", g["fill_error"]])
            shown = g["rows"]
            quiet = [
                i for i, row in enumerate(shown) if not row.get("spilled") and "error" not in row
            ]
            if len(quiet) > 2:  # the plain turns before the limit: the first and the last
                keep = {quiet[0], quiet[-1]}
                shown = [row for i, row in enumerate(shown) if i in keep or i not in quiet]
            for row in shown:
                status = "ok, spilled" if row.get("spilled") else "ok"
                if "error" in row:
                    status = f"**failed**: {row['error']}" + (
                        "" if row.get("stored") else " (the turn is lost: nothing stored)"
                    )
                rows.append(
                    [
                        section.names[subject],
                        str(row["turn"] + 1),
                        f"{_num(row['before_kb'], 0)} → {_num(row['after_kb'], 0)}",
                        _num(row["ms"], 1),
                        _requests(row.get("requests")),
                        _kb(row.get("bytes_written")),
                        status,
                    ]
                )
        lines += _table(
            ["store", "turn", "session KB", "ms", "calls", "written KB", "result"], rows
        )
    section.close(lines)
