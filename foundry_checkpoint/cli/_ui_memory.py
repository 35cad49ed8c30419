"""The explorer's LangGraph memory pages: the ``FoundryStore``'s namespaces, a namespace's items
and one item's whole value.

A namespace travels in the URL as repeated ``ns`` query parameters, one per label
(``/memory/items?ns=users&ns=ann``), so a label may hold any character, ``/`` included. The
pages read with ``refresh_ttl=False``: looking at a memory does not renew it. Each page is an
``async`` function of the :class:`~._ui_stores.Stores` and the request, as the other pages are.

Example:
    >>> namespace_query(("users", "a/b"))
    'ns=users&ns=a%2Fb'
    >>> labels_of({"ns": ["users", "a/b"]})
    ('users', 'a/b')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlencode

from aiohttp import web

from . import _html
from ._format import jsonable
from ._html import esc
from ._memory import format_namespace, value_preview
from ._ui_stores import Page, Refused, Stores

__all__ = ["item", "items", "labels_of", "namespace_query", "namespaces", "overview"]

NAMESPACES_PER_PAGE: Final = 100
"""Namespaces listed per page (``list_namespaces``' limit)."""
ITEMS_PER_PAGE: Final = 50
"""Items listed per page (``search``'s limit)."""
OVERVIEW: Final = 20
"""Namespaces the index page lists before linking the rest."""


def namespace_query(labels: Sequence[str], **extra: str | int) -> str:
    """The query string naming ``labels`` (one ``ns`` per label), plus ``extra`` parameters.

    Example:
        >>> namespace_query(("docs",), key="d 1")
        'ns=docs&key=d+1'
    """
    pairs: list[tuple[str, str]] = [("ns", label) for label in labels]
    pairs += [(name, str(value)) for name, value in extra.items()]
    return urlencode(pairs)


def labels_of(query: Mapping[str, Any]) -> tuple[str, ...]:
    """The namespace a query names (its ``ns`` values, in order; none: the empty namespace).

    Example:
        >>> from multidict import MultiDict
        >>> labels_of(MultiDict([("ns", "a"), ("x", "1"), ("ns", "b")]))
        ('a', 'b')
    """
    getall = getattr(query, "getall", None)
    values = getall("ns", []) if callable(getall) else query.get("ns", [])
    labels = tuple(str(v) for v in values)
    if any(not label for label in labels):
        raise Refused(400, "a namespace label is never empty")
    return labels


def _offset(request: web.Request) -> int:
    try:
        offset = int(request.query.get("offset", "0"))
    except ValueError:
        raise Refused(400, "offset must be a whole number") from None
    if offset < 0:
        raise Refused(400, "offset must be at least 0")
    return offset


def _link(labels: Sequence[str]) -> str:
    shown = format_namespace(tuple(labels)) or "(all)"
    href = f"/memory/items?{esc(namespace_query(labels))}"
    return f'<a class="namespace" href="{href}">{esc(shown)}</a>'


def _pager(path: str, labels: Sequence[str], offset: int, size: int, shown: int) -> str:
    links = []
    if offset:
        back = namespace_query(labels, offset=max(0, offset - size))
        links.append(f'<a class="prev" href="{path}?{esc(back)}">← previous</a>')
    if shown == size:
        on = namespace_query(labels, offset=offset + size)
        links.append(f'<a class="next" href="{path}?{esc(on)}">next →</a>')
    return f"<p>{' · '.join(links)}</p>" if links else ""


async def overview(stores: Stores) -> str:
    """The index page's section: the first namespaces, linked, and a link to all of them."""
    parts = ["<h2>LangGraph memory</h2>"]
    store = stores.memory()
    if store is None:
        parts.append(f'<p class="muted">not installed: {esc(stores.missing["memory"])}</p>')
        return "".join(parts)
    found = await store.alist_namespaces(limit=OVERVIEW + 1)
    if not found:
        parts.append('<p class="muted">no memory namespaces</p>')
        return "".join(parts)
    rows = [[_link(ns), esc(len(ns))] for ns in found[:OVERVIEW]]
    parts.append(_html.table(["namespace", "labels"], rows, cls="memory-namespaces"))
    more = " (more there)" if len(found) > OVERVIEW else ""
    parts.append(f'<p><a class="memory" href="/memory">all namespaces{more}</a></p>')
    return "".join(parts)


async def namespaces(stores: Stores, request: web.Request) -> Page:
    """Every namespace (under ``ns``, when given), sorted, a page at a time."""
    prefix = labels_of(request.query)
    offset = _offset(request)
    store = stores.need_memory()
    found = await store.alist_namespaces(
        prefix=prefix or None, limit=NAMESPACES_PER_PAGE, offset=offset
    )
    title = "Memory namespaces" + (f" under {format_namespace(prefix)}" if prefix else "")
    parts = [f"<h1>{esc(title)}</h1>"]
    if found:
        rows = [[_link(ns), esc(len(ns))] for ns in found]
        parts.append(_html.table(["namespace", "labels"], rows, cls="memory-namespaces"))
    else:
        parts.append('<p class="muted">no namespaces</p>')
    parts.append(_pager("/memory", prefix, offset, NAMESPACES_PER_PAGE, len(found)))
    parts.append(f'<p><a href="{_items_href(())}">every item</a></p>')
    return Page(title, "".join(parts))


def _items_href(labels: Sequence[str]) -> str:
    return f"/memory/items?{esc(namespace_query(labels))}"


async def items(stores: Stores, request: web.Request) -> Page:
    """The items of a namespace and the namespaces under it (``search``), values shown."""
    labels = labels_of(request.query)
    offset = _offset(request)
    store = stores.need_memory()
    found = await store.asearch(labels, limit=ITEMS_PER_PAGE, offset=offset, refresh_ttl=False)
    name = format_namespace(labels) or "(all)"
    parts = ['<p><a href="/memory">← namespaces</a></p>', f"<h1>Namespace {esc(name)}</h1>"]
    if not found and not offset:
        raise Refused(404, f"no memory items under namespace {name!r}")
    rows = []
    for one in found:
        href = f"/memory/item?{esc(namespace_query(one.namespace, key=one.key))}"
        more = "/memory/item?" + namespace_query(one.namespace, key=one.key, full=1)
        rows.append(
            [
                esc(format_namespace(tuple(one.namespace))),
                f'<a class="item" href="{href}">{esc(one.key)}</a>',
                esc(jsonable(one.updated_at)),
                _html.value_block(one.value, full=False, more=more),
            ]
        )
    parts.append(_html.table(["namespace", "key", "updated", "value"], rows, cls="memory-items"))
    parts.append(_pager("/memory/items", labels, offset, ITEMS_PER_PAGE, len(found)))
    return Page(f"Namespace {name}", "".join(parts))


async def item(stores: Stores, request: web.Request) -> Page:
    """One item: namespace, key, times and the whole value."""
    labels = labels_of(request.query)
    key = request.query.get("key", "")
    if not labels or not key:
        raise Refused(400, "name the item: ns (one per label) and key")
    store = stores.need_memory()
    found = await store.aget(labels, key, refresh_ttl=False)
    name = format_namespace(labels)
    if found is None:
        raise Refused(404, f"namespace {name!r} has no item {key!r}")
    full = request.query.get("full") == "1"
    info = [
        ["namespace", _link(labels)],
        ["labels", esc(jsonable(list(labels)))],
        ["key", f'<span class="id">{esc(key)}</span>'],
        ["created_at", esc(jsonable(found.created_at))],
        ["updated_at", esc(jsonable(found.updated_at))],
        ["preview", esc(value_preview(found.value, width=120))],
    ]
    more = "?" + namespace_query(labels, key=key, full=1)
    body = (
        f'<p><a href="{_items_href(labels)}">← namespace {esc(name)}</a></p>'
        f"<h1>Item {esc(key)}</h1>"
        + _html.table(["field", "value"], info, cls="info")
        + "<h2>Value</h2>"
        + _html.value_block(found.value, full=full, more=more)
    )
    return Page(f"Item {key}", body)
