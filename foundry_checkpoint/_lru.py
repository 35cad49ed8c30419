"""A bounded least-recently-used mapping: every cache of the core uses it.

Example:
    >>> cache: Lru[str, int] = Lru(1)
    >>> cache.put("a", 1); cache.put("b", 2)
    >>> cache.get("a"), cache.get("b")
    (None, 2)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

from .errors import InvalidArgumentError

__all__ = ["Lru"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lru(Generic[K, V]):
    """A mapping that keeps at most ``bound`` entries, dropping the least recently used.

    Example:
        >>> cache: Lru[str, int] = Lru(2)
        >>> cache.put("a", 1); cache.put("b", 2); cache.get("a"); cache.put("c", 3)
        1
        >>> cache.get("b") is None, len(cache)
        (True, 2)
    """

    def __init__(self, bound: int) -> None:
        if bound < 1:
            raise InvalidArgumentError(f"bound must be positive, got {bound}")
        self.bound = bound
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value of ``key`` (now the most recently used), or None."""
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def peek(self, key: K) -> V | None:
        """The value of ``key``, or None, leaving the order as it is: one atomic dict read, so
        safe from a thread other than the one that changes the mapping."""
        return self._data.get(key)

    def put(self, key: K, value: V) -> None:
        """Set ``key``; drops the least recently used entry beyond the bound."""
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.bound:
            self._data.popitem(last=False)

    def pop(self, key: K) -> V | None:
        """Remove ``key``; its value, or None."""
        return self._data.pop(key, None)

    def values(self) -> list[V]:
        """Every value, least recently used first."""
        return list(self._data.values())

    def clear(self) -> None:
        """Remove everything."""
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
