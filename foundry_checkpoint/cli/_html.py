"""HTML pieces of the explorer page: escaping, the page frame, tables, values and SVG trees.

Everything shown is stored data, which someone else may have written: every piece of text goes
through :func:`esc` (``visible`` then ``html.escape``, quotes included), every URL segment
through :func:`seg`. The page carries no script at all, and its Content-Security-Policy
forbids scripts, so even a missed escape could not run one.

Example:
    >>> esc('<script>alert("x")</script>')
    '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;'
    >>> seg("a/b c")
    'a%2Fb%20c'
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote

from ._format import jsonable, visible
from ._tree import Node

__all__ = [
    "CSP",
    "actions",
    "esc",
    "page",
    "pre",
    "seg",
    "svg_tree",
    "table",
    "value_block",
]

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""No script, no remote resource: the page needs none."""

TRUNCATE_AT = 2000
"""Characters of one value shown before "see more"."""

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2a44;color:#fff;padding:10px 20px;display:flex;gap:18px;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:600}
header .meta{font-size:12px;opacity:.8;overflow-wrap:anywhere}
header .mode{margin-left:auto;font-size:12px;padding:2px 8px;border-radius:10px;background:#3a4a6b}
header .mode.writes{background:#a33}
main{padding:16px 20px;max-width:1400px}
h1{font-size:20px;margin:8px 0 12px} h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;background:#fff;margin:6px 0 14px;width:100%}
th,td{border:1px solid #d9dde4;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600} td.id{font-family:ui-monospace,monospace;font-size:12px}
pre{background:#fff;border:1px solid #d9dde4;padding:8px;margin:0;white-space:pre-wrap;
overflow-wrap:anywhere;font-size:12px;max-height:60vh;overflow:auto}
.muted{color:#677} .warn{color:#a33} .ok{color:#176d2c}
.tree{background:#fff;border:1px solid #d9dde4;overflow:auto;max-height:70vh}
.tree .node circle{fill:#fff;stroke:#1d2a44;stroke-width:2}
.tree .node.head circle{fill:#1d2a44}
.tree .node.interrupt circle{stroke:#c60;stroke-dasharray:3 2;stroke-width:3}
.tree .node text{font:12px ui-monospace,monospace;fill:#1d2330}
.tree .edge{stroke:#8a96a8;stroke-width:2;fill:none}
.tree a:hover text{text-decoration:underline}
.add{background:#e6f6ea} .del{background:#fbe9e9}
form.inline{display:inline} button{padding:4px 12px;cursor:pointer}
.danger{background:#a33;color:#fff;border:0;border-radius:4px}
.badge{font-size:11px;padding:1px 6px;border-radius:8px;background:#eef1f5;margin-left:6px}
"""


def esc(value: object) -> str:
    """``value`` as HTML text: control characters as visible escapes, markup escaped."""
    return html.escape(visible(value), quote=True)


def seg(value: str) -> str:
    """``value`` as one URL path segment (every reserved character percent-encoded)."""
    return quote(value, safe="")


def pre(text: str) -> str:
    """A ``<pre>`` block of ``text``, line breaks kept, each line escaped."""
    return "<pre>" + "\n".join(esc(line) for line in text.split("\n")) + "</pre>"


def as_text(value: Any) -> str:
    """``value`` as indented JSON text (non-JSON values converted as ``--json`` does)."""
    return json.dumps(jsonable(value), indent=2, ensure_ascii=False, allow_nan=False)


def value_block(value: Any, *, full: bool, more: str) -> str:
    """A value as JSON, cut at :data:`TRUNCATE_AT` characters with a "see more" link."""
    text = as_text(value)
    if full or len(text) <= TRUNCATE_AT:
        return pre(text)
    shown = pre(text[:TRUNCATE_AT] + "…")
    hidden = len(text) - TRUNCATE_AT
    link = f'<a class="more" href="{esc(more)}">see more ({hidden:,} more characters)</a>'
    return f"{shown}<p>{link}</p>"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, cls: str = "") -> str:
    """A table; ``rows`` hold ready HTML (escape cells with :func:`esc` first)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def actions(base: str, what: str, *, allow_writes: bool) -> str:
    """The "Actions" section of a thread or context page at ``base`` (a ready URL path).

    Read-only explorers link only the delete page, which answers that writes are off.

    Example:
        >>> "prune this thread" in actions("/t/a", "thread", allow_writes=True)
        True
        >>> "read-only" in actions("/t/a", "thread", allow_writes=False)
        True
    """
    if not allow_writes:
        return (
            f'<h2>Actions</h2><p class="muted">read-only: start with --allow-writes to delete '
            f'or prune this {what}. <a class="delete" href="{base}/delete">delete</a></p>'
        )
    return (
        f'<h2>Actions</h2><p><a class="delete" href="{base}/delete">delete this {what}</a> · '
        f'<a class="prune" href="{base}/prune">prune this {what}</a></p>'
    )


def page(title: str, body: str, *, backend: str, allow_writes: bool) -> str:
    """The whole page around ``body`` (``title`` and ``backend`` are escaped here)."""
    mode = (
        '<span class="mode writes">writes allowed</span>'
        if allow_writes
        else '<span class="mode">read-only</span>'
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} · foundry-checkpoint</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<style>{_STYLE}</style></head><body>"
        '<header><a href="/">foundry-checkpoint explorer</a>'
        f'<span class="meta">{esc(backend)}</span>{mode}</header>'
        f"<main>{body}</main></body></html>"
    )


_ROW = 34
_COL = 22
_PAD = 18


def _layout(roots: Sequence[Node]) -> list[tuple[Node, int, Node | None]]:
    """Nodes in drawing order with their column: a first child stays in its parent's column,
    every later child opens a new one (no recursion: histories can be long)."""
    out: list[tuple[Node, int, Node | None]] = []
    next_col = 0
    stack: list[tuple[Node, int | None, Node | None]] = [
        (root, None, None) for root in reversed(roots)
    ]
    while stack:
        node, col, parent = stack.pop()
        if col is None:
            col = next_col
            next_col += 1
        out.append((node, col, parent))
        children = node.children
        for index in range(len(children) - 1, -1, -1):
            stack.append((children[index], col if index == 0 else None, node))
    return out


def svg_tree(roots: Sequence[Node], href: dict[str, str], *, label_of: Any = None) -> str:
    """The tree as an SVG: one ``g.node`` per checkpoint (``data-checkpoint``,
    ``data-parent``), the head filled, interrupts dashed; each node links to ``href[id]``."""
    placed = _layout(roots)
    if not placed:
        return '<p class="muted">nothing stored</p>'
    where: dict[int, tuple[float, float]] = {}
    columns = max(col for _, col, _ in placed) + 1
    text_x = _PAD + columns * _COL + 8
    edges: list[str] = []
    nodes: list[str] = []
    for row, (node, col, parent) in enumerate(placed):
        x, y = _PAD + col * _COL, _PAD + row * _ROW
        where[id(node)] = (x, y)
        if parent is not None:
            px, py = where[id(parent)]
            if px == x:
                edges.append(f'<path class="edge" d="M{px},{py} L{x},{y}"/>')
            else:
                bend = py + _ROW
                edges.append(
                    f'<path class="edge" d="M{px},{py} C{px},{bend - _ROW / 3} '
                    f'{x},{py + _ROW / 3} {x},{bend} L{x},{y}"/>'
                )
        classes = (
            "node" + (" head" if node.head else "") + (" interrupt" if node.interrupted else "")
        )
        label = label_of(node) if label_of is not None else node.label
        parent_id = "" if node.parent_id is None else node.parent_id
        nodes.append(
            f'<a href="{href[node.checkpoint_id]}"><g class="{classes}" '
            f'data-checkpoint="{esc(node.checkpoint_id)}" data-parent="{esc(parent_id)}">'
            f'<circle cx="{x}" cy="{y}" r="7"/>'
            f'<text x="{text_x}" y="{y + 4}">{esc(label)}</text></g></a>'
        )
    height = _PAD * 2 + (len(placed) - 1) * _ROW
    width = text_x + 900
    return (
        f'<div class="tree"><svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" role="img" aria-label="checkpoint tree">'
        + "".join(edges)
        + "".join(nodes)
        + "</svg></div>"
    )
