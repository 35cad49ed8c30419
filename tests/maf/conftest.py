"""Fixtures of the MAF tests: storages and history providers built from ``store_env`` and closed
afterwards, and numbered messages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from agent_framework import Message

from foundry_checkpoint_maf import FoundryCheckpointStorage, FoundryHistoryProvider

MakeStorage = Callable[..., FoundryCheckpointStorage]
MakeHistory = Callable[..., FoundryHistoryProvider]


@pytest.fixture
async def make_storage(store_env: Any) -> AsyncIterator[MakeStorage]:
    """Build ``FoundryCheckpointStorage(**store_env.kwargs(user=...), **options)``; closes all."""
    made: list[FoundryCheckpointStorage] = []

    def _make(
        context_id: str | None = "conv-42", *, user: str = "alice", **options: Any
    ) -> FoundryCheckpointStorage:
        storage = FoundryCheckpointStorage(context_id, **store_env.kwargs(user=user, **options))
        made.append(storage)
        return storage

    yield _make
    for storage in made:
        await storage.aclose()


@pytest.fixture
def storage(make_storage: MakeStorage) -> FoundryCheckpointStorage:
    """Alice's storage of context ``conv-42``."""
    return make_storage()


@pytest.fixture
async def make_history(store_env: Any) -> AsyncIterator[MakeHistory]:
    """Build ``FoundryHistoryProvider(**store_env.kwargs(user=...), **options)``; closes all."""
    made: list[FoundryHistoryProvider] = []

    def _make(*, user: str = "alice", **options: Any) -> FoundryHistoryProvider:
        provider = FoundryHistoryProvider(**store_env.kwargs(user=user, **options))
        made.append(provider)
        return provider

    yield _make
    for provider in made:
        await provider.aclose()


def numbered(start: int, count: int, prefix: str = "m") -> list[Message]:
    """Messages ``prefix-start`` .. ``prefix-(start+count-1)``, user and assistant in turn."""
    role = ("user", "assistant")
    return [
        Message(role[i % 2], [f"{prefix}-{i}"], message_id=f"{prefix}-{i}")
        for i in range(start, start + count)
    ]
