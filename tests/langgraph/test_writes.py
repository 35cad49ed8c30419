"""put_writes: one item per task, merged (special channels upsert, ordinary insert-if-absent)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import FoundryStoragePreconditionError
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME

from foundry_checkpoint import ConcurrentWriteError, FoundryCheckpointer
from tests.langgraph._util import cfg

SEQUENCE: list[tuple[str, list[tuple[str, Any]], str]] = [
    ("t1", [("a", 1), ("b", 2)], "p/2"),
    ("t1", [("a", 9), ("c", 3)], "p/2"),  # idx 0 and 1 exist: ignored
    ("t1", [("a", 1), ("b", 2), ("d", 4)], "p/2"),  # idx 2 is new: inserted
    ("t2", [(ERROR, "first")], "p/1"),
    ("t2", [(ERROR, "second")], "p/1"),  # special channels upsert
    ("t0", [("z", 0)], "p/3"),
]


def _replay(saver: BaseCheckpointSaver[Any]) -> list[tuple[str, str, Any]]:
    stored = saver.put(cfg("w"), empty_checkpoint(), {"source": "loop", "step": 0}, {})
    for task_id, writes, path in SEQUENCE:
        saver.put_writes(stored, writes, task_id, path)
    got = saver.get_tuple(stored)
    assert got is not None and got.pending_writes is not None
    return got.pending_writes


def test_writes_merge_like_the_reference(make_saver: Callable[..., FoundryCheckpointer]) -> None:
    expected = _replay(InMemorySaver())
    assert _replay(make_saver()) == expected
    # (task_path, task_id, idx) order: p/1 before p/2 before p/3.
    assert [w[0] for w in expected] == ["t2", "t1", "t1", "t1", "t0"]
    assert expected[0] == ("t2", ERROR, "second")


async def test_concurrent_writes_of_one_task_all_land(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    saver = make_saver()
    stored = await saver.aput(cfg("cw"), empty_checkpoint(), {"source": "loop", "step": 0}, {})
    # Concurrent calls for the same task race on one item: 409 on create, then if_match merges.
    await asyncio.gather(
        saver.aput_writes(stored, [(INTERRUPT, {"ask": 1})], "task"),
        saver.aput_writes(stored, [(RESUME, "yes")], "task"),
        saver.aput_writes(stored, [(ERROR, "boom")], "task"),
    )
    got = await saver.aget_tuple(stored)
    assert got is not None
    assert sorted((c, v) for _, c, v in got.pending_writes or []) == sorted(
        [(INTERRUPT, {"ask": 1}), (RESUME, "yes"), (ERROR, "boom")]
    )


class _LosingStore:
    """Every conditional write loses, as if another writer always changed the item first."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def set_item(self, key: str, value: Any, **kwargs: Any) -> Any:
        if kwargs.get("if_match"):
            raise FoundryStoragePreconditionError("changed", status_code=412)
        return await self._inner.set_item(key, value, **kwargs)


def test_a_merge_that_always_loses_is_a_concurrent_write_error(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    saver = make_saver()
    stored = saver.put(cfg("lost"), empty_checkpoint(), {"source": "loop", "step": 0}, {})
    saver.put_writes(stored, [("a", 1)], "task")

    async def pin() -> None:
        scope = await saver._core.scope("lost")
        scope.store = _LosingStore(scope.store)

    saver._core.run(pin())
    with pytest.raises(ConcurrentWriteError, match="concurrent writers"):
        saver.put_writes(stored, [("a", 1), ("b", 2)], "task")
    got = saver.get_tuple(stored)
    assert got is not None and [(c, v) for _, c, v in got.pending_writes or []] == [("a", 1)]
