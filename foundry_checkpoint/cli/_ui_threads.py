"""The explorer's LangGraph pages: a thread's tree and history, one checkpoint, a diff.

Each page is an ``async`` function of the :class:`~._ui_stores.Stores` and the request that
returns a :class:`~._ui_stores.Page` or raises :class:`~._ui_stores.Refused` (404 for a thread
or checkpoint that does not exist).

Example:
    >>> _or_dash(None), _or_dash(""), _or_dash(3)
    ('-', '-', 3)
"""

from __future__ import annotations

import difflib
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from . import _html, _tree
from ._format import summary
from ._html import actions, esc, seg
from ._ui_stores import Page, Refused, Stores, config

__all__ = ["checkpoint", "diff", "thread"]

_INTERRUPT = "__interrupt__"


async def _history(stores: Stores, thread: str, ns: str | None = None) -> list[Any]:
    saver = stores.need_saver()
    items = [item async for item in saver.alist(config(thread, ns))]
    if not items:
        raise Refused(404, f"thread {thread!r} has no checkpoints")
    return items


async def thread(stores: Stores, request: web.Request) -> Page:
    """The checkpoint tree, the checkpoints, a diff form and the actions."""
    thread = request.match_info["thread"]
    items = await _history(stores, thread)
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
            f'<option value="{esc(cid)}"{" selected" if i == selected else ""}>{esc(cid)}</option>'
            for i, cid in enumerate(root_ids)
        )

    parts.append(
        f'<h2>Compare two checkpoints</h2><form class="diff" method="get" action="{base}/diff">'
        f'<select name="a">{choices(min(1, len(root_ids) - 1))}</select> → '
        f'<select name="b">{choices(0)}</select> <button type="submit">diff</button></form>'
    )
    parts.append(actions(base, "thread", allow_writes=stores.allow_writes))
    return Page(f"Thread {thread}", "".join(parts))


async def checkpoint(stores: Stores, request: web.Request) -> Page:
    """One checkpoint: metadata, channel values (cut, with "see more"), pending writes."""
    thread = request.match_info["thread"]
    checkpoint_id = request.match_info["checkpoint"]
    ns = request.query.get("ns", "")
    full = request.query.get("full") == "1"
    saver = stores.need_saver()
    item = await saver.aget_tuple(config(thread, ns, checkpoint_id))
    if item is None:
        raise Refused(404, f"thread {thread!r} has no checkpoint {checkpoint_id!r}")
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
    return Page(f"Checkpoint {checkpoint_id}", "".join(parts))


async def diff(stores: Stores, request: web.Request) -> Page:
    """Channel by channel, what changed from checkpoint ``a`` to checkpoint ``b``."""
    thread = request.match_info["thread"]
    ns = request.query.get("ns", "")
    ids = request.query.get("a"), request.query.get("b")
    if not all(ids):
        raise Refused(400, "choose two checkpoints (a and b)")
    saver = stores.need_saver()
    loaded = []
    for checkpoint_id in ids:
        item = await saver.aget_tuple(config(thread, ns, checkpoint_id))
        if item is None:
            raise Refused(404, f"thread {thread!r} has no checkpoint {checkpoint_id!r}")
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
    return Page(f"Diff of {thread}", "".join(parts))


def _or_dash(value: object) -> object:
    return "-" if value in (None, "") else value


def _walk(roots: list[_tree.Node]) -> list[_tree.Node]:
    out: list[_tree.Node] = []
    stack = list(roots)
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children)
    return out
