"""Fixtures of the memory store tests: ``FoundryStore`` objects bound to ``store_env``.

``memory_store`` is one store in the test's mode (local, or hosted on the session's
emulator), closed after the test; ``make_memory_store`` builds more (other users, options such
as ``tag_fields=`` or ``ttl=``), all closed at teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from foundry_checkpoint import FoundryStore


@pytest.fixture
def make_memory_store(store_env: Any) -> Iterator[Callable[..., FoundryStore]]:
    """Build stores for ``store_env`` (closed at teardown); keyword arguments pass through."""
    made: list[FoundryStore] = []

    def factory(user: str = "alice", **extra: Any) -> FoundryStore:
        store = FoundryStore(**store_env.kwargs(user=user, **extra))
        made.append(store)
        return store

    yield factory
    for store in made:
        store.close()


@pytest.fixture
def memory_store(make_memory_store: Callable[..., FoundryStore]) -> FoundryStore:
    """One ``FoundryStore`` in the test's store mode (local or hosted), closed after."""
    return make_memory_store()
