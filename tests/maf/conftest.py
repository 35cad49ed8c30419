"""Fixtures of the MAF storage tests: storages built from ``store_env`` and closed afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from foundry_checkpoint_maf import FoundryCheckpointStorage

MakeStorage = Callable[..., FoundryCheckpointStorage]


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
