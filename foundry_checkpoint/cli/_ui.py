"""``foundry-checkpoint ui``: a local explorer page of what is stored, served on loopback.

One aiohttp application, server-rendered HTML with inline CSS and SVG: no JavaScript, no build
step, nothing fetched from elsewhere. It lists LangGraph threads and Agent Framework contexts,
draws a thread's checkpoint tree (and a workflow's lineage) as SVG, shows a checkpoint's
values, metadata and pending writes (long values cut, with "see more"), and diffs two
checkpoints. It goes through the same public API as the commands, on the backend the global
options select (hosted mode and the emulator included).

Safety: it binds to 127.0.0.1 unless told otherwise (and refuses a non-loopback host without
``--allow-remote``), answers only requests whose ``Host`` names that address (DNS rebinding),
escapes every stored value, and forbids scripts through its Content-Security-Policy. It is
read-only unless started with ``--allow-writes``; then delete and prune ask on a confirmation
page whose form carries a per-process token, so another site cannot post to it.
"""

from __future__ import annotations

import asyncio
import difflib
import ipaddress
import secrets
import signal
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from .._cli_format import jsonable, summary
from ..errors import CorruptPayloadError
from . import _html, _tree
from ._common import Options
from ._html import esc, seg

if TYPE_CHECKING:
    from foundry_checkpoint_autogen import AutoGenStateStore
    from foundry_checkpoint_maf import FoundryCheckpointStorage

    from .._saver import FoundryCheckpointer

__all__ = ["Explorer", "check_host", "serve"]

_INTERRUPT = "__interrupt__"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def check_host(host: str, *, allow_remote: bool) -> None:
    """Refuse a host that is not a loopback address unless ``allow_remote``.

    Example:
        >>> check_host("127.0.0.1", allow_remote=False)
        >>> check_host("0.0.0.0", allow_remote=False)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: refusing to serve on '0.0.0.0': not a loopback address ...
    """
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not allow_remote:
        raise ValueError(
            f"refusing to serve on {host!r}: not a loopback address (state is user data); "
            "pass --allow-remote to serve it there anyway"
        )


class _Refused(Exception):
    """A request the explorer will not serve (status, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Explorer:
    """The explorer's application state: the stores it reads and what it allows.

    Example:
        >>> explorer = Explorer(Options(None, False, None, None, None, None, "sqlite"),
        ...                     allow_writes=False)  # doctest: +SKIP
        >>> app = explorer.app()  # doctest: +SKIP
    """

    def __init__(self, opts: Options, *, allow_writes: bool) -> None:
        self._opts = opts
        self.allow_writes = allow_writes
        self.token = secrets.token_urlsafe(24)
        self.hosts: set[str] = set()
        self._saver: FoundryCheckpointer | None = None
        self._maf: FoundryCheckpointStorage | None = None
        self._autogen: AutoGenStateStore | None = None
        self._missing: dict[str, str] = {}

    # -- stores ------------------------------------------------------------------------------
    def saver(self) -> FoundryCheckpointer | None:
        """The LangGraph checkpointer (None when the ``langgraph`` extra is missing)."""
        if self._saver is None and "langgraph" not in self._missing:
            try:
                from .._saver import FoundryCheckpointer
            except ImportError as exc:
                self._missing["langgraph"] = str(exc)
                return None
            prefix = self._opts.prefix or "langgraph"
            self._saver = FoundryCheckpointer(**self._opts.store_kwargs(prefix))
        return self._saver

    def maf(self) -> FoundryCheckpointStorage | None:
        """The MAF storage of the default context (None when the ``maf`` extra is missing)."""
        if self._maf is None and "maf" not in self._missing:
            try:
                from foundry_checkpoint_maf import FoundryCheckpointStorage
            except ImportError as exc:
                self._missing["maf"] = str(exc)
                return None
            prefix = self._opts.prefix or "maf"
            self._maf = FoundryCheckpointStorage(**self._opts.store_kwargs(prefix))
        return self._maf

    def autogen(self) -> AutoGenStateStore | None:
        """The AutoGen state store (None when the ``autogen`` extra is missing)."""
        if self._autogen is None and "autogen" not in self._missing:
            try:
                from foundry_checkpoint_autogen import AutoGenStateStore
            except ImportError as exc:
                self._missing["autogen"] = str(exc)
                return None
            prefix = self._opts.prefix or "autogen"
            self._autogen = AutoGenStateStore(**self._opts.store_kwargs(prefix), keep_versions=None)
        return self._autogen

    async def aclose(self) -> None:
        """Close the stores (idempotent)."""
        if self._autogen is not None:
            await self._autogen.aclose()
        if self._saver is not None:
            await self._saver.aclose()
        if self._maf is not None:
            await self._maf.aclose()

    def _backend_line(self) -> str:
        owner = self.saver() or self.maf()
        if owner is None:
            return "no framework extra installed"
        return f"backend {owner.kind} · data {owner.location}"

    # -- application -------------------------------------------------------------------------
    def app(self) -> web.Application:
        """The aiohttp application (routes, host check, headers, error pages)."""
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self.index)
        app.router.add_get("/t/{thread}", self.thread)
        app.router.add_get("/t/{thread}/c/{checkpoint}", self.checkpoint)
        app.router.add_get("/t/{thread}/diff", self.diff)
        app.router.add_route("*", "/t/{thread}/delete", self.thread_delete)
        app.router.add_route("*", "/t/{thread}/prune", self.thread_prune)
        app.router.add_get("/m/{context}", self.context)
        app.router.add_get("/m/{context}/c/{checkpoint}", self.maf_checkpoint)
        app.router.add_route("*", "/m/{context}/delete", self.context_delete)
        app.router.add_route("*", "/m/{context}/prune", self.context_prune)
        app.router.add_get("/a/{scope}", self.scope)
        app.router.add_get("/a/{scope}/state", self.autogen_state)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.hosts and request.host not in self.hosts:
            response: web.StreamResponse = web.Response(
                status=421, text="misdirected request: unknown Host\n"
            )
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                if exc.status >= 400:
                    response = self._error(exc.status, exc.reason)
                else:
                    raise
            except _Refused as exc:
                response = self._error(exc.status, str(exc))
            except CorruptPayloadError as exc:  # stored data refused: not a fault of the page
                response = self._error(422, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
            except Exception as exc:
                text = " ".join(str(exc).split()) or "(no message)"
                response = self._error(500, f"{type(exc).__name__}: {text}")
        response.headers["Content-Security-Policy"] = _html.CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Cache-Control"] = "no-store"
        return response

    def _page(self, title: str, body: str, status: int = 200) -> web.Response:
        text = _html.page(title, body, backend=self._backend_line(), allow_writes=self.allow_writes)
        return web.Response(text=text, content_type="text/html", status=status)

    def _error(self, status: int, message: str) -> web.Response:
        body = (
            f'<h1>error {status}</h1><p class="warn">{esc(message)}</p><p><a href="/">home</a></p>'
        )
        return self._page(f"error {status}", body, status)

    def _need_saver(self) -> FoundryCheckpointer:
        saver = self.saver()
        if saver is None:
            raise _Refused(404, f"LangGraph support is not installed: {self._missing['langgraph']}")
        return saver

    def _need_maf(self) -> FoundryCheckpointStorage:
        storage = self.maf()
        if storage is None:
            raise _Refused(404, f"Agent Framework support is not installed: {self._missing['maf']}")
        return storage

    # -- index -------------------------------------------------------------------------------
    async def index(self, request: web.Request) -> web.Response:
        """Threads and contexts of this user."""
        parts = ["<h1>What is stored</h1>"]
        saver = self.saver()
        parts.append("<h2>LangGraph threads</h2>")
        if saver is None:
            parts.append(f'<p class="muted">not installed: {esc(self._missing["langgraph"])}</p>')
        else:
            rows = []
            for thread in await saver.alist_threads():
                latest = None
                try:
                    async for item in saver.alist(_config(thread), limit=1):
                        latest = summary(item)
                except CorruptPayloadError as exc:  # one bad thread must not hide the others
                    latest = {"checkpoint_id": "-", "step": "-", "source": f"refused: {exc}"}
                    latest["ts"] = "-"
                if latest is None:
                    continue
                count = await saver.acount_checkpoints(thread)
                rows.append(
                    [
                        f'<a class="thread" href="/t/{seg(thread)}">{esc(thread)}</a>',
                        esc(count),
                        f'<span class="id">{esc(latest["checkpoint_id"])}</span>',
                        esc(latest["step"]),
                        esc(latest["source"]),
                        esc(latest["ts"]),
                    ]
                )
            parts.append(
                _html.table(
                    ["thread", "checkpoints", "latest checkpoint", "step", "source", "ts"],
                    rows,
                    cls="threads",
                )
                if rows
                else '<p class="muted">no threads</p>'
            )
        maf = self.maf()
        parts.append("<h2>Agent Framework contexts</h2>")
        if maf is None:
            parts.append(f'<p class="muted">not installed: {esc(self._missing["maf"])}</p>')
        else:
            rows = []
            for context_id in await maf.list_contexts():
                if context_id is None:
                    continue  # the default store has no name to link; the CLI lists it
                items = await maf.for_context(context_id).list_stored()
                if not items:
                    continue
                newest = max(items, key=lambda i: i.timestamp or "")
                rows.append(
                    [
                        f'<a class="context" href="/m/{seg(context_id)}">{esc(context_id)}</a>',
                        esc(len(items)),
                        esc(", ".join(sorted({i.workflow_name for i in items}))),
                        f'<span class="id">{esc(newest.checkpoint_id)}</span>',
                        esc(newest.timestamp or "-"),
                    ]
                )
            parts.append(
                _html.table(
                    ["context", "checkpoints", "workflows", "latest checkpoint", "timestamp"],
                    rows,
                    cls="contexts",
                )
                if rows
                else '<p class="muted">no contexts</p>'
            )
        parts.append("<h2>AutoGen states</h2>")
        store = self.autogen()
        if store is None:
            parts.append(f'<p class="muted">not installed: {esc(self._missing["autogen"])}</p>')
        else:
            rows = []
            for scope in await store.alist_scopes():
                if scope is None:
                    continue  # the default store has no name to link; the CLI lists it
                states = await store.alist_states(scope)
                if states:
                    rows.append(
                        [
                            f'<a class="scope" href="/a/{seg(scope)}">{esc(scope)}</a>',
                            esc(len(states)),
                            esc(sum(s.versions for s in states)),
                            esc(", ".join(sorted({s.kind for s in states}))),
                        ]
                    )
            parts.append(
                _html.table(["scope", "states", "versions", "kinds"], rows, cls="scopes")
                if rows
                else '<p class="muted">no scopes</p>'
            )
        return self._page("What is stored", "".join(parts))

    # -- AutoGen -----------------------------------------------------------------------------
    def _need_autogen(self) -> AutoGenStateStore:
        store = self.autogen()
        if store is None:
            raise _Refused(404, f"AutoGen support is not installed: {self._missing['autogen']}")
        return store

    async def scope(self, request: web.Request) -> web.Response:
        """A scope's states (agents, runtimes, teams) with their versions."""
        scope = request.match_info["scope"]
        store = self._need_autogen()
        states = await store.alist_states(scope)
        if not states:
            raise _Refused(404, f"scope {scope!r} has no states")
        rows = []
        for state in states:
            query = esc(urlencode({"kind": state.kind, "name": state.name}))
            rows.append(
                [
                    esc(state.kind),
                    f'<a class="state" href="/a/{seg(scope)}/state?{query}">{esc(state.name)}</a>',
                    esc(state.versions),
                    f'<span class="id">{esc(state.latest)}</span>',
                ]
            )
        body = f"<h1>Scope {esc(scope)}</h1>" + _html.table(
            ["kind", "name", "versions", "latest version"], rows, cls="states"
        )
        return self._page(f"Scope {scope}", body)

    async def autogen_state(self, request: web.Request) -> web.Response:
        """One state's versions, and one version (the latest by default) as JSON."""
        scope = request.match_info["scope"]
        kind, name = request.query.get("kind", ""), request.query.get("name", "")
        store = self._need_autogen()
        versions = await store.aversions(scope, kind, name)
        if not versions:
            raise _Refused(404, f"no stored {kind} {name!r} in scope {scope!r}")
        chosen = request.query.get("version") or versions[-1].version
        state = await store.aload(scope, kind, name, version=chosen)
        if state is None:
            raise _Refused(404, f"no version {chosen!r} of {kind} {name!r}")
        full = request.query.get("full") == "1"
        more = "?" + urlencode({"kind": kind, "name": name, "version": chosen, "full": "1"})

        def link(version: str) -> str:
            return esc("?" + urlencode({"kind": kind, "name": name, "version": version}))

        links = [
            [
                f'<a class="version" href="{link(v.version)}">{esc(v.version)}</a>'
                + (" ←" if v.version == chosen else ""),
                esc(v.created_at),
            ]
            for v in reversed(versions)
        ]
        body = (
            f'<p><a href="/a/{seg(scope)}">← scope {esc(scope)}</a></p>'
            f"<h1>{esc(kind)} {esc(name)}</h1><h2>Version {esc(chosen)}</h2>"
            + _html.value_block(state, full=full, more=more)
            + "<h2>Versions, newest first</h2>"
            + _html.table(["version", "created at (epoch s)"], links, cls="versions")
        )
        return self._page(f"{kind} {name}", body)

    # -- LangGraph ---------------------------------------------------------------------------
    async def _history(self, thread: str, ns: str | None = None) -> list[Any]:
        saver = self._need_saver()
        items = [item async for item in saver.alist(_config(thread, ns))]
        if not items:
            raise _Refused(404, f"thread {thread!r} has no checkpoints")
        return items

    async def thread(self, request: web.Request) -> web.Response:
        """The checkpoint tree, the checkpoints, a diff form and the actions."""
        thread = request.match_info["thread"]
        items = await self._history(thread)
        rows = [summary(item) for item in items]
        interrupted = [
            str(item.config["configurable"]["checkpoint_id"])
            for item in items
            if any(channel == _INTERRUPT for _, channel, _ in item.pending_writes or [])
        ]
        forest = _tree.build(rows, interrupted)
        base = f"/t/{seg(thread)}"
        parts = [f"<h1>Thread {esc(thread)}</h1>"]
        for ns, roots in forest.items():
            href = {
                node.checkpoint_id: f"{base}/c/{seg(node.checkpoint_id)}?{urlencode({'ns': ns})}"
                for node in _walk(roots)
            }
            parts.append(f"<h2>Checkpoint tree · namespace {esc(ns or '(root)')}</h2>")
            parts.append(_html.svg_tree(roots, href))
        parts.append("<h2>Checkpoints, newest first</h2>")
        table_rows = []
        for row in rows:
            ns = row["checkpoint_ns"] or ""
            link = f"{base}/c/{seg(row['checkpoint_id'])}?{urlencode({'ns': ns})}"
            table_rows.append(
                [
                    f'<a class="checkpoint" href="{link}">{esc(row["checkpoint_id"])}</a>',
                    esc(row["parent_checkpoint_id"] or "-"),
                    esc(ns or "(root)"),
                    esc(row["step"]),
                    esc(row["source"]),
                    esc(row["pending_writes"]),
                    esc(row["ts"]),
                ]
            )
        parts.append(
            _html.table(
                ["checkpoint", "parent", "ns", "step", "source", "writes", "ts"],
                table_rows,
                cls="history",
            )
        )
        root_ids = [r["checkpoint_id"] for r in rows if not r["checkpoint_ns"]]

        def choices(selected: int) -> str:
            return "".join(
                f'<option value="{esc(cid)}"{" selected" if i == selected else ""}>'
                f"{esc(cid)}</option>"
                for i, cid in enumerate(root_ids)
            )

        parts.append(
            f'<h2>Compare two checkpoints</h2><form class="diff" method="get" action="{base}/diff">'
            f'<select name="a">{choices(min(1, len(root_ids) - 1))}</select> → '
            f'<select name="b">{choices(0)}</select> <button type="submit">diff</button></form>'
        )
        parts.append(self._actions(base, "thread", thread))
        return self._page(f"Thread {thread}", "".join(parts))

    async def checkpoint(self, request: web.Request) -> web.Response:
        """One checkpoint: metadata, channel values (cut, with "see more"), pending writes."""
        thread = request.match_info["thread"]
        checkpoint_id = request.match_info["checkpoint"]
        ns = request.query.get("ns", "")
        full = request.query.get("full") == "1"
        saver = self._need_saver()
        item = await saver.aget_tuple(_config(thread, ns, checkpoint_id))
        if item is None:
            raise _Refused(404, f"thread {thread!r} has no checkpoint {checkpoint_id!r}")
        head = summary(item)
        more = f"?{urlencode({'ns': ns, 'full': '1'})}"
        parts = [
            f'<p><a href="/t/{seg(thread)}">← thread {esc(thread)}</a></p>',
            f"<h1>Checkpoint {esc(checkpoint_id)}</h1>",
        ]
        info = [
            [
                esc(name),
                f'<span class="id">{esc(_or_dash(head[name]))}</span>',
            ]
            for name in (
                "thread_id",
                "checkpoint_ns",
                "checkpoint_id",
                "parent_checkpoint_id",
                "ts",
                "step",
                "source",
            )
        ]
        parts.append(_html.table(["field", "value"], info, cls="info"))
        parts.append("<h2>Metadata</h2>")
        parts.append(_html.value_block(item.metadata or {}, full=full, more=more))
        parts.append("<h2>Channel values</h2>")
        versions = item.checkpoint.get("channel_versions", {})
        values = item.checkpoint.get("channel_values", {})
        rows = [
            [
                f'<span class="channel">{esc(name)}</span>',
                esc(versions.get(name, "")),
                _html.value_block(value, full=full, more=more),
            ]
            for name, value in values.items()
        ]
        parts.append(_html.table(["channel", "version", "value"], rows, cls="values"))
        parts.append("<h2>Pending writes</h2>")
        writes = [
            [esc(task), esc(channel), _html.value_block(value, full=full, more=more)]
            for task, channel, value in item.pending_writes or []
        ]
        parts.append(
            _html.table(["task", "channel", "value"], writes, cls="writes")
            if writes
            else '<p class="muted">none</p>'
        )
        return self._page(f"Checkpoint {checkpoint_id}", "".join(parts))

    async def diff(self, request: web.Request) -> web.Response:
        """Channel by channel, what changed from checkpoint ``a`` to checkpoint ``b``."""
        thread = request.match_info["thread"]
        ns = request.query.get("ns", "")
        ids = request.query.get("a"), request.query.get("b")
        if not all(ids):
            raise _Refused(400, "choose two checkpoints (a and b)")
        saver = self._need_saver()
        loaded = []
        for checkpoint_id in ids:
            item = await saver.aget_tuple(_config(thread, ns, checkpoint_id))
            if item is None:
                raise _Refused(404, f"thread {thread!r} has no checkpoint {checkpoint_id!r}")
            loaded.append(item.checkpoint.get("channel_values", {}))
        old, new = loaded
        parts = [
            f'<p><a href="/t/{seg(thread)}">← thread {esc(thread)}</a></p>',
            f"<h1>Diff of thread {esc(thread)}</h1>",
            f'<p>from <span class="id">{esc(ids[0])}</span> to '
            f'<span class="id">{esc(ids[1])}</span></p>',
        ]
        rows = []
        for name in sorted(set(old) | set(new)):
            before = _html.as_text(old[name]).split("\n") if name in old else []
            after = _html.as_text(new[name]).split("\n") if name in new else []
            if name not in old:
                status = "added"
            elif name not in new:
                status = "removed"
            elif before == after:
                status = "same"
            else:
                status = "changed"
            lines = []
            for line in difflib.unified_diff(before, after, lineterm="", n=2):
                if line.startswith(("---", "+++")):
                    continue
                cls = "add" if line.startswith("+") else "del" if line.startswith("-") else ""
                lines.append(f'<span class="{cls}">{esc(line)}</span>')
            shown = "<pre>" + "\n".join(lines) + "</pre>" if lines else ""
            rows.append([f'<span class="channel">{esc(name)}</span>', esc(status), shown])
        parts.append(_html.table(["channel", "change", "diff"], rows, cls="diff"))
        return self._page(f"Diff of {thread}", "".join(parts))

    # -- Agent Framework ---------------------------------------------------------------------
    async def context(self, request: web.Request) -> web.Response:
        """A context's checkpoints per workflow, with the lineage drawn as a tree."""
        context_id = request.match_info["context"]
        storage = self._need_maf().for_context(context_id)
        items = await storage.list_stored()
        if not items:
            raise _Refused(404, f"context {context_id!r} has no checkpoints")
        base = f"/m/{seg(context_id)}"
        parts = [f"<h1>Context {esc(context_id)}</h1>"]
        for workflow in sorted({i.workflow_name for i in items}):
            mine = [i for i in items if i.workflow_name == workflow]
            rows = [
                {
                    "checkpoint_id": i.checkpoint_id,
                    "parent_checkpoint_id": i.previous,
                    "checkpoint_ns": "",
                    "step": None,
                    "source": i.timestamp,
                    "pending_writes": 0,
                }
                for i in reversed(mine)  # newest first, as build() expects
            ]
            roots = _tree.build(rows).get("", [])
            href = {i.checkpoint_id: f"{base}/c/{seg(i.checkpoint_id)}" for i in mine}
            parts.append(f"<h2>Workflow {esc(workflow)} · lineage</h2>")
            parts.append(
                _html.svg_tree(
                    roots,
                    href,
                    label_of=lambda n: (
                        f"{n.checkpoint_id}  {n.source or ''}" + ("  ← latest" if n.head else "")
                    ),
                )
            )
            parts.append(
                _html.table(
                    ["checkpoint", "previous", "timestamp"],
                    [
                        [
                            f'<a class="checkpoint" href="{href[i.checkpoint_id]}">'
                            f"{esc(i.checkpoint_id)}</a>",
                            esc(i.previous or "-"),
                            esc(i.timestamp or "-"),
                        ]
                        for i in mine
                    ],
                    cls="lineage",
                )
            )
        parts.append(self._actions(base, "context", context_id))
        return self._page(f"Context {context_id}", "".join(parts))

    async def maf_checkpoint(self, request: web.Request) -> web.Response:
        """One MAF checkpoint: size, spilled, state, messages, pending request-info events."""
        context_id = request.match_info["context"]
        checkpoint_id = request.match_info["checkpoint"]
        full = request.query.get("full") == "1"
        storage = self._need_maf().for_context(context_id)
        stored = await storage.inspect(checkpoint_id)
        parts = [
            f'<p><a href="/m/{seg(context_id)}">← context {esc(context_id)}</a></p>',
            f"<h1>Checkpoint {esc(checkpoint_id)}</h1>",
        ]
        spilled = "spilled to the spill store" if stored.spilled else "inline"
        info = [
            ["workflow", esc(stored.workflow_name)],
            ["previous", esc(stored.previous or "-")],
            ["timestamp", esc(stored.timestamp or "-")],
            ["size", esc(f"{stored.size:,} bytes stored ({spilled})")],
        ]
        try:
            loaded = await storage.load(checkpoint_id)
        except Exception as exc:
            parts.append(_html.table(["field", "value"], info, cls="info"))
            text = " ".join(str(exc).split())
            parts.append(f'<p class="warn">cannot be decoded here: {esc(text)}</p>')
            return self._page(f"Checkpoint {checkpoint_id}", "".join(parts))
        info.append(["iteration_count", esc(loaded.iteration_count)])
        parts.append(_html.table(["field", "value"], info, cls="info"))
        more = "?full=1"
        parts.append("<h2>State</h2>")
        parts.append(
            _html.table(
                ["key", "value"],
                [
                    [esc(k), _html.value_block(v, full=full, more=more)]
                    for k, v in loaded.state.items()
                ],
                cls="values",
            )
        )
        parts.append("<h2>Pending request-info events</h2>")
        events = [
            [
                esc(k),
                esc(type(getattr(v, "data", None)).__name__),
                _html.value_block(getattr(v, "data", None), full=full, more=more),
            ]
            for k, v in loaded.pending_request_info_events.items()
        ]
        parts.append(
            _html.table(["request", "type", "data"], events, cls="events")
            if events
            else '<p class="muted">none</p>'
        )
        parts.append("<h2>Messages in flight</h2>")
        messages = [[esc(k), esc(len(v))] for k, v in loaded.messages.items()]
        parts.append(
            _html.table(["executor", "messages"], messages)
            if messages
            else '<p class="muted">none</p>'
        )
        parts.append("<h2>Metadata</h2>")
        parts.append(_html.value_block(jsonable(loaded.metadata), full=full, more=more))
        return self._page(f"Checkpoint {checkpoint_id}", "".join(parts))

    # -- writes (only with --allow-writes, always confirmed) ---------------------------------
    def _actions(self, base: str, what: str, name: str) -> str:
        if not self.allow_writes:
            return (
                f'<h2>Actions</h2><p class="muted">read-only: start with --allow-writes to delete '
                f'or prune this {what}. <a class="delete" href="{base}/delete">delete</a></p>'
            )
        return (
            f'<h2>Actions</h2><p><a class="delete" href="{base}/delete">delete this {what}</a> · '
            f'<a class="prune" href="{base}/prune">prune this {what}</a></p>'
        )

    async def _confirmed(self, request: web.Request, action: str) -> dict[str, str] | None:
        """The posted form when the write may happen; None for the confirmation page (GET)."""
        if not self.allow_writes:
            raise _Refused(403, f"read-only explorer: {action} refused (start with --allow-writes)")
        if request.method == "GET":
            return None
        if request.method != "POST":
            raise _Refused(405, "use the confirmation form")
        origin = request.headers.get("Origin")
        if origin is not None and origin.split("://", 1)[-1] not in self.hosts:
            raise _Refused(403, "cross-origin form refused")
        form = await request.post()
        token = form.get("token")
        if not isinstance(token, str) or not secrets.compare_digest(token, self.token):
            raise _Refused(403, "missing or wrong form token")
        return {k: v for k, v in form.items() if isinstance(v, str)}

    def _confirm_page(self, title: str, question: str, extra: str = "") -> web.Response:
        body = (
            f"<h1>{esc(title)}</h1><p>{esc(question)}</p>"
            f'<form class="confirm" method="post"><input type="hidden" name="token" '
            f'value="{esc(self.token)}">{extra}'
            '<button class="danger" type="submit">yes, do it</button></form>'
            '<p><a href="/">no, go back</a></p>'
        )
        return self._page(title, body)

    async def thread_delete(self, request: web.Request) -> web.StreamResponse:
        """Delete a thread, after confirmation."""
        thread = request.match_info["thread"]
        form = await self._confirmed(request, "delete")
        saver = self._need_saver()
        count = await saver.acount_checkpoints(thread)
        if not count:
            raise _Refused(404, f"thread {thread!r} has no checkpoints")
        if form is None:
            return self._confirm_page(
                f"Delete thread {thread}?",
                f"Every checkpoint ({count}), pending write and spilled blob of thread "
                f"{thread!r} will be deleted.",
            )
        await saver.adelete_thread(thread)
        raise web.HTTPSeeOther("/")

    async def thread_prune(self, request: web.Request) -> web.StreamResponse:
        """Keep only the newest N checkpoints per namespace, after confirmation."""
        thread = request.match_info["thread"]
        form = await self._confirmed(request, "prune")
        saver = self._need_saver()
        if form is None:
            return self._confirm_page(
                f"Prune thread {thread}?",
                "All but the newest checkpoints of each namespace will be deleted.",
                '<label>keep <input name="keep" type="number" min="1" value="1"></label> ',
            )
        await saver.aprune([thread], keep=_keep(form))
        raise web.HTTPSeeOther(f"/t/{seg(thread)}")

    async def context_delete(self, request: web.Request) -> web.StreamResponse:
        """Delete a MAF context, after confirmation."""
        context_id = request.match_info["context"]
        form = await self._confirmed(request, "delete")
        storage = self._need_maf().for_context(context_id)
        count = len(await storage.list_stored())
        if not count:
            raise _Refused(404, f"context {context_id!r} has no checkpoints")
        if form is None:
            return self._confirm_page(
                f"Delete context {context_id}?",
                f"Every checkpoint ({count}) and spilled blob of context {context_id!r} will be "
                "deleted.",
            )
        await storage.delete_context()
        raise web.HTTPSeeOther("/")

    async def context_prune(self, request: web.Request) -> web.StreamResponse:
        """Keep only the newest N checkpoints per workflow, after confirmation."""
        context_id = request.match_info["context"]
        form = await self._confirmed(request, "prune")
        storage = self._need_maf().for_context(context_id)
        if form is None:
            return self._confirm_page(
                f"Prune context {context_id}?",
                "All but the newest checkpoints of each workflow will be deleted.",
                '<label>keep <input name="keep" type="number" min="1" value="1"></label> ',
            )
        await storage.prune(keep=_keep(form))
        raise web.HTTPSeeOther(f"/m/{seg(context_id)}")


def _or_dash(value: object) -> object:
    return "-" if value in (None, "") else value


def _keep(form: dict[str, str]) -> int:
    try:
        keep = int(form.get("keep", "1"))
    except ValueError:
        raise _Refused(400, "keep must be a whole number") from None
    if keep < 1:
        raise _Refused(400, "keep must be at least 1")
    return keep


def _walk(roots: list[_tree.Node]) -> list[_tree.Node]:
    out: list[_tree.Node] = []
    stack = list(roots)
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children)
    return out


def _config(thread: str, ns: str | None = None, checkpoint: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    if checkpoint is not None:
        conf["checkpoint_id"] = checkpoint
    return {"configurable": conf}


async def serve(explorer: Explorer, host: str, port: int, announce: Callable[[str], None]) -> None:
    """Serve ``explorer`` on ``host:port`` (0: a free port) until SIGINT or SIGTERM; calls
    ``announce(url)`` once listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    explorer.hosts = {f"{shown}:{bound}"}
    if host in ("127.0.0.1", "::1"):
        explorer.hosts.add(f"localhost:{bound}")
    runner = web.AppRunner(explorer.app(), access_log=None)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        site = web.SockSite(runner, sock)
        await site.start()
        announce(f"http://{shown}:{bound}/")
        await stop.wait()
    finally:
        await runner.cleanup()
        await explorer.aclose()
        sock.close()
