"""The key listing of the SQLite engine: one page query over ``(created_at, id)``.

:func:`list_query` checks the arguments of ``list_keys`` and builds the page query (through
``item_tags`` when filtering by tags, else over ``items``); :func:`list_params` binds a store,
partition, clock and cursor to it. The index ``items_by_order`` and the ``item_tags`` table (kept
in tag value order) both end in ``(created_at, id)``, so a page costs the same for 10 and 100,000
items.

Example:
    >>> sql, params, cursor, tags = list_query(
    ...     "s", tags={"kind": "cp"}, limit=10, after=None, before=None, order="desc")
    >>> "FROM item_tags t" in sql, params, cursor, tags
    (True, {'k0': 'kind', 'v0': 'cp'}, None, {'kind': 'cp'})
    >>> sorted(list_params(params, "s", "u", 5, None))
    ['k0', 'now', 'part', 'store', 'v0']
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any, Final

from ._engine_checks import bad_request, validate_identifier, validate_limit, validate_tags

__all__ = [
    "CURSOR_SQL",
    "cursor_position",
    "among_values",
    "greatest_queries",
    "list_params",
    "list_query",
    "page",
]

_ITEM_COLUMNS: Final = "i.id, i.key, i.etag, i.created_at, i.updated_at, i.tags"
#: The item of tag row ``t`` (by key, and the order columns it was tagged with).
_ITEM_OF_TAG: Final = (
    "i.store = t.store AND i.part = t.part AND i.key = t.key"
    " AND i.created_at = t.created_at AND i.id = t.id"
)
#: A live cursor item (params: store, part, id, now).
CURSOR_SQL: Final = (
    "SELECT id, created_at, tags FROM items WHERE store = ? AND part = ? AND id = ?"
    " AND (expires_at IS NULL OR expires_at > ?)"
)


def cursor_position(
    conn: sqlite3.Connection,
    store: str,
    part: str,
    cursor: str,
    tags: dict[str, str] | None,
    now: int,
) -> tuple[int, str] | None:
    """``(created_at, id)`` of a live cursor item that passes the tag filter, else None."""
    row = conn.execute(CURSOR_SQL, (store, part, cursor, now)).fetchone()
    if row is None:
        return None
    if tags:
        own = json.loads(row["tags"]) if row["tags"] else {}
        if any(own.get(k) != v for k, v in tags.items()):
            return None
    return int(row["created_at"]), str(row["id"])


def list_query(
    name: str,
    *,
    tags: Mapping[str, str] | None,
    limit: int | None,
    after: str | None,
    before: str | None,
    order: str,
) -> tuple[str, dict[str, Any], str | None, dict[str, str] | None]:
    """Validate list arguments and build the page query.

    Args:
        name: The store name.
        tags: Exact tag filter (every pair must match).
        limit: Page size (None: the default).
        after: Item id to list after, in the chosen order.
        before: Item id to list before (from the start of the list).
        order: ``"asc"`` or ``"desc"``.

    Returns:
        The SQL (reading one row more than the page, to tell ``has_more``), the tag parameters
        (store, partition, clock and cursor parameters are added by :func:`list_params`), the
        cursor id, and the validated tag filter.

    Raises:
        FoundryStorageBadRequestError: A bad argument or combination.
    """
    validate_identifier(name, "name")
    size = validate_limit(limit)
    if order not in ("asc", "desc"):
        raise bad_request(f"order must be 'asc' or 'desc', got {order!r}.", "order")
    if after is not None and before is not None:
        raise bad_request("after and before cannot be used together.", "after")
    for cursor_param, cursor_value in (("after", after), ("before", before)):
        if cursor_value is not None and not isinstance(cursor_value, str):
            raise bad_request(f"{cursor_param} must be an item id string.", cursor_param)
    clean_tags = validate_tags(tags)
    direction = "DESC" if order == "desc" else "ASC"
    cursor = after if after is not None else before
    # "after" follows the chosen order; "before" is the opposite side of the cursor, still
    # read from the start of the list in the chosen order.
    less = (after is not None) == (order == "desc")
    params: dict[str, Any] = {}
    if clean_tags:
        (first_key, first_value), *rest = clean_tags.items()
        sql = (
            f"SELECT {_ITEM_COLUMNS} FROM item_tags t CROSS JOIN items i"
            f" ON {_ITEM_OF_TAG}"
            " WHERE t.store = :store AND t.part = :part"
            " AND t.tag_key = :k0 AND t.tag_value = :v0"
        )
        params.update(k0=first_key, v0=first_value)
        sql += _carrying(dict(rest), params, start=1)
        columns = ("t.created_at", "t.id")
    else:
        sql = f"SELECT {_ITEM_COLUMNS} FROM items i WHERE i.store = :store AND i.part = :part"
        columns = ("i.created_at", "i.id")
    sql += " AND (i.expires_at IS NULL OR i.expires_at > :now)"
    if cursor is not None:
        sql += f" AND ({columns[0]}, {columns[1]}) {'<' if less else '>'} (:c_at, :c_id)"
    sql += f" ORDER BY {columns[0]} {direction}, {columns[1]} {direction} LIMIT {size + 1}"
    return sql, params, cursor, clean_tags


def greatest_queries(
    by: str,
    tags: Mapping[str, str],
    among: Mapping[str, str] | None,
    *,
    count: int = 1,
    below: str | None = None,
) -> tuple[str, str, dict[str, Any]]:
    """The two queries of ``StateEngine.greatest``: the greatest ``by`` values, then their items.

    The first walks ``item_tags`` (kept in tag value order) down from the greatest value of
    ``by`` (or from below ``below``) and keeps the first ``count`` distinct values of live
    items carrying ``tags`` and ``among``; the second reads every live item carrying ``tags``
    with one of those values, bound as ``:top0``, ``:top1``, ... (format the SQL with
    :func:`among_values` first). Both use the store, partition and clock parameters of
    :func:`list_params`.

    Raises:
        FoundryStorageBadRequestError: A bad tag name or value, or a bad ``count``.

    Example:
        >>> top, group, params = greatest_queries("id", {"ns": "a"}, {"kind": "cp"}, count=2)
        >>> "ORDER BY t.tag_value DESC LIMIT 2" in top, "{values}" in group, sorted(params)
        (True, True, ['by', 'k1', 'k2', 'v1', 'v2'])
    """
    clean_tags = validate_tags(tags) or {}
    clean_among = validate_tags(among) or {}
    validate_tags({by: "x"})
    size = validate_limit(count)
    params: dict[str, Any] = {"by": by}
    base = (
        " FROM item_tags t CROSS JOIN items i"
        f" ON {_ITEM_OF_TAG}"
        " WHERE t.store = :store AND t.part = :part AND t.tag_key = :by"
    )
    live = " AND (i.expires_at IS NULL OR i.expires_at > :now)"
    carrying = _carrying(clean_tags, params, start=1)
    cut = ""
    if below is not None:
        if not isinstance(below, str):
            raise bad_request("below must be a tag value string.", "below")
        cut = " AND t.tag_value < :below"
        params["below"] = below
    top = (
        "SELECT DISTINCT t.tag_value"
        + base
        + cut
        + carrying
        + _carrying(clean_among, params, start=1 + len(clean_tags))
        + live
        + f" ORDER BY t.tag_value DESC LIMIT {size}"
    )
    group = f"SELECT {_ITEM_COLUMNS}" + base + " AND t.tag_value IN ({values})" + carrying + live
    return top, group, params


def among_values(group: str, values: list[str]) -> tuple[str, dict[str, str]]:
    """The group query of :func:`greatest_queries` for ``values``, and their parameters.

    Example:
        >>> among_values("x IN ({values})", ["a", "b"])
        ('x IN (:top0, :top1)', {'top0': 'a', 'top1': 'b'})
    """
    named = {f"top{index}": value for index, value in enumerate(values)}
    return group.format(values=", ".join(f":{name}" for name in named)), named


def _carrying(tags: Mapping[str, str], params: dict[str, Any], *, start: int) -> str:
    """``AND EXISTS`` clauses: the item of ``t`` carries every tag (parameters added)."""
    sql = ""
    for index, (tag_key, tag_value) in enumerate(tags.items(), start=start):
        sql += (
            " AND EXISTS (SELECT 1 FROM item_tags x WHERE x.store = t.store"
            f" AND x.part = t.part AND x.tag_key = :k{index} AND x.tag_value = :v{index}"
            " AND x.created_at = t.created_at AND x.id = t.id)"
        )
        params[f"k{index}"] = tag_key
        params[f"v{index}"] = tag_value
    return sql


def list_params(
    params: Mapping[str, Any],
    store: str,
    part: str,
    now: int,
    position: tuple[int, str] | None,
) -> dict[str, Any]:
    """The named parameters of a page query.

    Args:
        params: The tag parameters from :func:`list_query`.
        store: The store name.
        part: The partition.
        now: The clock, for the expiry filter.
        position: ``(created_at, id)`` of the cursor item, if any.

    Returns:
        Every parameter the query names.
    """
    named: dict[str, Any] = {**params, "store": store, "part": part, "now": now}
    if position is not None:
        named["c_at"], named["c_id"] = position
    return named


def page(data: list[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    """The wire shape of one page of keys.

    Example:
        >>> page([], has_more=False)["first_id"] is None
        True
    """
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
