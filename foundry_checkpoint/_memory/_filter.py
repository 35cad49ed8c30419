"""LangGraph's search filters, exactly as ``InMemoryStore`` evaluates them, and their tag part.

A filter maps top-level fields of an item's value to a condition: a plain value (equality; a
dict without ``$`` keys compares nested fields, a list compares element-wise with the same
length) or a dict of operators (``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``; the
ordering ones compare ``float()`` of both sides, so a value ``float()`` refuses raises as it
does in ``InMemoryStore``). :func:`matches` is that evaluation, line for line.

:func:`split` finds the part the store's tags can answer: equality (plain or ``$eq``) on a
field declared in ``tag_fields`` whose filter value is a string, number or bool. Those become
exact tag filters of the key listing; the rest is evaluated on each item read.

Example:
    >>> matches({"n": 3, "who": {"name": "ann"}}, {"n": {"$gt": 2}, "who": {"name": "ann"}})
    True
    >>> split({"kind": "note", "n": {"$eq": 1, "$lt": 5}}, ("kind", "n"))
    ({'f.kind': 's:note', 'f.n': 'n:1'}, {'n': {'$lt': 5}})
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ._layout import FIELD_TAG, field_tag

__all__ = ["matches", "split"]


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether an item whose value is ``value`` passes ``filter`` (None or empty: every item).

    Example:
        >>> matches({"a": [1, 2]}, {"a": [1, 2]}), matches({"a": 1}, {"a": {"$ne": 1}})
        (True, False)
    """
    if not filter:
        return True
    return all(_compare_values(value.get(key), wanted) for key, wanted in filter.items())


def _compare_values(item_value: Any, filter_value: Any) -> bool:
    """InMemoryStore's ``_compare_values``: JSONB-like comparison, nested objects included."""
    if isinstance(filter_value, dict):
        if any(k.startswith("$") for k in filter_value):
            return all(
                _apply_operator(item_value, op_key, op_value)
                for op_key, op_value in filter_value.items()
            )
        if not isinstance(item_value, dict):
            return False
        return all(_compare_values(item_value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, list | tuple):
        return (
            isinstance(item_value, list | tuple)
            and len(item_value) == len(filter_value)
            and all(
                _compare_values(iv, fv) for iv, fv in zip(item_value, filter_value, strict=False)
            )
        )
    return bool(item_value == filter_value)


def _apply_operator(value: Any, operator: str, op_value: Any) -> bool:
    """InMemoryStore's ``_apply_operator`` (its errors included)."""
    if operator == "$eq":
        return bool(value == op_value)
    if operator == "$gt":
        return float(value) > float(op_value)
    if operator == "$gte":
        return float(value) >= float(op_value)
    if operator == "$lt":
        return float(value) < float(op_value)
    if operator == "$lte":
        return float(value) <= float(op_value)
    if operator == "$ne":
        return bool(value != op_value)
    raise ValueError(f"Unsupported operator: {operator}")


def split(
    filter: Mapping[str, Any] | None, tag_fields: Collection[str]
) -> tuple[dict[str, str], dict[str, Any]]:
    """``filter`` as exact tag filters (tag key -> value) and the rest, to evaluate on read.

    An item passes ``filter`` exactly when it carries the tags and passes the rest: a tag
    field's tag holds :func:`~._layout.field_tag` of the item's value, which is equal for
    equal values and absent for values no scalar equals.

    Example:
        >>> split({"kind": {"$ne": "x"}, "other": 1}, ("kind",))
        ({}, {'kind': {'$ne': 'x'}, 'other': 1})
        >>> split({"kind": {"$eq": "x", "bad": 1}}, ("kind",))  # raises on read, as it would
        ({}, {'kind': {'$eq': 'x', 'bad': 1}})
    """
    tags: dict[str, str] = {}
    rest: dict[str, Any] = {}
    for key, wanted in (filter or {}).items():
        if key not in tag_fields:
            rest[key] = wanted
            continue
        if isinstance(wanted, dict):
            operators = all(isinstance(k, str) and k.startswith("$") for k in wanted)
            if operators and "$eq" in wanted and (tag := field_tag(wanted["$eq"])) is not None:
                tags[FIELD_TAG + key] = tag
                others = {k: v for k, v in wanted.items() if k != "$eq"}
                if others:
                    rest[key] = others
            else:
                rest[key] = wanted
        elif not isinstance(wanted, list | tuple) and (tag := field_tag(wanted)) is not None:
            tags[FIELD_TAG + key] = tag
        else:
            rest[key] = wanted
    return tags, rest
