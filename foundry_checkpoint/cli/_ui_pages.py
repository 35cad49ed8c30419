"""The explorer's overview and Agent Framework and AutoGen pages, rendered from the stores.

Each page is an ``async`` function of the :class:`~._ui_stores.Stores` and the request that
returns a :class:`~._ui_stores.Page` (title and escaped body) or raises
:class:`~._ui_stores.Refused`; the explorer puts the frame around it and sends it.

Example:
    >>> import asyncio
    >>> from ._common import Options
    >>> from ._ui_stores import Stores
    >>> stores = Stores(Options(None, False, None, None, None, None, "sqlite"),
    ...                 allow_writes=False)
    >>> page = asyncio.run(index(stores, None))
    >>> page.title, "no threads" in page.body
    ('What is stored', True)
    >>> asyncio.run(stores.aclose())
"""

from __future__ import annotations

from urllib.parse import urlencode

from aiohttp import web

from ..errors import CorruptPayloadError
from . import _html, _tree, _ui_maf_agents, _ui_memory
from ._format import jsonable, summary
from ._html import actions, esc, seg
from ._ui_stores import Page, Refused, Stores, config

__all__ = ["autogen_state", "context", "index", "maf_checkpoint", "scope"]


async def index(stores: Stores, request: web.Request) -> Page:
    """Threads, memory namespaces, contexts, agent sessions and scopes of this user."""
    parts = ["<h1>What is stored</h1>"]
    saver = stores.saver()
    parts.append("<h2>LangGraph threads</h2>")
    if saver is None:
        parts.append(f'<p class="muted">not installed: {esc(stores.missing["langgraph"])}</p>')
    else:
        rows = []
        for thread in await saver.alist_threads():
            latest = None
            try:
                async for item in saver.alist(config(thread), limit=1):
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
    parts.append(await _ui_memory.overview(stores))
    maf = stores.maf()
    parts.append("<h2>Agent Framework contexts</h2>")
    if maf is None:
        parts.append(f'<p class="muted">not installed: {esc(stores.missing["maf"])}</p>')
    else:
        rows = []
        for context_id in await maf.list_contexts():
            if context_id is None:
                continue  # the default store has no name to link; the CLI names it ''
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
    parts.append(await _ui_maf_agents.overview(stores))
    parts.append("<h2>AutoGen states</h2>")
    store = stores.autogen()
    if store is None:
        parts.append(f'<p class="muted">not installed: {esc(stores.missing["autogen"])}</p>')
    else:
        rows = []
        for scope in await store.alist_scopes():
            if scope is None:
                continue  # the default store has no name to link; the CLI names it ''
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
    return Page("What is stored", "".join(parts))


# -- AutoGen ----------------------------------------------------------------------------------


async def scope(stores: Stores, request: web.Request) -> Page:
    """A scope's states (agents, runtimes, teams) with their versions."""
    scope = request.match_info["scope"]
    store = stores.need_autogen()
    states = await store.alist_states(scope)
    if not states:
        raise Refused(404, f"scope {scope!r} has no states")
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
    return Page(f"Scope {scope}", body)


async def autogen_state(stores: Stores, request: web.Request) -> Page:
    """One state's versions, and one version (the latest by default) as JSON."""
    scope = request.match_info["scope"]
    kind, name = request.query.get("kind", ""), request.query.get("name", "")
    store = stores.need_autogen()
    versions = await store.aversions(scope, kind, name)
    if not versions:
        raise Refused(404, f"no stored {kind} {name!r} in scope {scope!r}")
    chosen = request.query.get("version") or versions[-1].version
    state = await store.aload(scope, kind, name, version=chosen)
    if state is None:
        raise Refused(404, f"no version {chosen!r} of {kind} {name!r}")
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
    return Page(f"{kind} {name}", body)


# -- Agent Framework --------------------------------------------------------------------------


async def context(stores: Stores, request: web.Request) -> Page:
    """A context's checkpoints per workflow, with the lineage drawn as a tree."""
    context_id = request.match_info["context"]
    storage = stores.need_maf().for_context(context_id)
    items = await storage.list_stored()
    if not items:
        raise Refused(404, f"context {context_id!r} has no checkpoints")
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
    parts.append(actions(base, "context", allow_writes=stores.allow_writes))
    return Page(f"Context {context_id}", "".join(parts))


async def maf_checkpoint(stores: Stores, request: web.Request) -> Page:
    """One MAF checkpoint: size, spilled, state, messages, pending request-info events."""
    context_id = request.match_info["context"]
    checkpoint_id = request.match_info["checkpoint"]
    full = request.query.get("full") == "1"
    storage = stores.need_maf().for_context(context_id)
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
        return Page(f"Checkpoint {checkpoint_id}", "".join(parts))
    info.append(["iteration_count", esc(loaded.iteration_count)])
    parts.append(_html.table(["field", "value"], info, cls="info"))
    more = "?full=1"
    parts.append("<h2>State</h2>")
    parts.append(
        _html.table(
            ["key", "value"],
            [[esc(k), _html.value_block(v, full=full, more=more)] for k, v in loaded.state.items()],
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
        _html.table(["executor", "messages"], messages) if messages else '<p class="muted">none</p>'
    )
    parts.append("<h2>Metadata</h2>")
    parts.append(_html.value_block(jsonable(loaded.metadata), full=full, more=more))
    return Page(f"Checkpoint {checkpoint_id}", "".join(parts))
