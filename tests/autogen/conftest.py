"""Fixtures of the AutoGen tests: state stores built from ``store_env`` and closed afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from foundry_checkpoint_autogen import AutoGenStateStore

MakeStore = Callable[..., AutoGenStateStore]


@pytest.fixture
async def make_store(store_env: Any) -> AsyncIterator[MakeStore]:
    """Build ``AutoGenStateStore(**store_env.kwargs(user=...), **options)``; closes all."""
    made: list[AutoGenStateStore] = []

    def _make(*, user: str = "alice", **options: Any) -> AutoGenStateStore:
        store = AutoGenStateStore(**store_env.kwargs(user=user, **options))
        made.append(store)
        return store

    yield _make
    for store in made:
        await store.aclose()


@pytest.fixture
def store(make_store: MakeStore) -> AutoGenStateStore:
    """Alice's state store."""
    return make_store()
