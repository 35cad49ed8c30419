"""Fixtures of the LangGraph saver tests: a saver factory bound to ``store_env``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from foundry_checkpoint import FoundryCheckpointer


@pytest.fixture
def make_saver(store_env: Any) -> Iterator[Callable[..., FoundryCheckpointer]]:
    """Build savers for ``store_env`` (closed at teardown); keyword arguments pass through.

    ``fresh_prefix=True`` gives the saver a store prefix of its own (hosted mode shares one
    emulator for the whole session).
    """
    made: list[FoundryCheckpointer] = []

    def factory(
        user: str = "alice", fresh_prefix: bool = False, **extra: Any
    ) -> FoundryCheckpointer:
        if fresh_prefix:
            extra.setdefault("store_prefix", f"lg{uuid.uuid4().hex[:12]}")
        saver = FoundryCheckpointer(**store_env.kwargs(user=user, **extra))
        made.append(saver)
        return saver

    yield factory
    for saver in made:
        saver.close()
