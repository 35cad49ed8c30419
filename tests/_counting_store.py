"""A store wrapper that counts item-API calls, for request-budget tests of every adapter."""

from __future__ import annotations

from collections import Counter
from typing import Any


class CountingStore:
    """Wraps a store and counts item-API calls."""

    _COUNTED = frozenset(
        {"get_item", "set_item", "create_item", "delete_item", "list_keys", "greatest", "get"}
    )

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self._COUNTED:
            return attr

        async def _counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await attr(*args, **kwargs)

        return _counted
