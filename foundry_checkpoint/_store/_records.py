"""Light records of the store's answers: what the embedded and the hosted store return.

They have the attributes of the SDK's model objects (``StateStoreItemRef``,
``StateStoreItemKey``, ``StateStoreItem``, ``StateStoreItemKeyPage``) that callers read (the
shapes are stated in :mod:`._protocol`), without building the models: a generated model costs
more per key than the SQLite call or the JSON parse behind it.

Example:
    >>> key = KeyRecord.of({"id": "i", "key": "k", "etag": "e", "created_at": 1,
    ...                     "updated_at": 2, "tags": {"t": "1"}})
    >>> key.tags, PageRecord.of_wire({"data": [], "has_more": False}).keys
    ({'t': '1'}, [])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

__all__ = ["ItemRecord", "KeyRecord", "PageRecord", "RefRecord"]

_R = TypeVar("_R", bound="RefRecord")
_NAMES: dict[type, tuple[str, ...]] = {}


@dataclass(frozen=True, slots=True)
class RefRecord:
    """An item reference (the shape of ``StateStoreItemRef``)."""

    id: str
    key: str
    etag: str
    created_at: int
    updated_at: int

    @classmethod
    def of(cls: type[_R], wire: Mapping[str, Any]) -> _R:
        """The record of a wire-shaped answer (absent optional fields become None)."""
        names = _NAMES.get(cls)
        if names is None:
            names = _NAMES[cls] = tuple(f.name for f in fields(cls))
        values: list[Any] = [wire.get(name) for name in names]
        return cls(*values)


@dataclass(frozen=True, slots=True)
class KeyRecord(RefRecord):
    """A key listing entry (the shape of ``StateStoreItemKey``)."""

    tags: Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class ItemRecord(KeyRecord):
    """An item read back (the shape of ``StateStoreItem``)."""

    value: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PageRecord:
    """One page of keys (the shape of ``StateStoreItemKeyPage``)."""

    keys: Sequence[KeyRecord]
    first_id: str | None
    last_id: str | None
    has_more: bool

    @classmethod
    def of_wire(cls, wire: Mapping[str, Any]) -> PageRecord:
        """The record of a wire-shaped page (``data``, ``first_id``, ``last_id``,
        ``has_more``; absent fields read as empty)."""
        return cls(
            [KeyRecord.of(entry) for entry in wire.get("data") or ()],
            wire.get("first_id"),
            wire.get("last_id"),
            bool(wire.get("has_more")),
        )
