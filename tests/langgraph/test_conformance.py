"""The external acceptance suite (langgraph-checkpoint-conformance): 58 base + 23 extended."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint.errors import FoundryCheckpointError

BASE = {"put": 17, "put_writes": 10, "get_tuple": 10, "list": 16, "delete_thread": 5}
EXTENDED = {"delete_for_runs": 7, "copy_thread": 8, "prune": 8}


async def _run(store_env: Any, **options: Any) -> dict[str, Any]:
    @checkpointer_test(name=f"foundry-{store_env.mode}-{uuid.uuid4().hex[:6]}")
    async def factory() -> AsyncIterator[FoundryCheckpointer]:
        # A fresh prefix per factory call: every capability suite starts on empty stores.
        saver = FoundryCheckpointer(
            **store_env.kwargs(store_prefix=f"cf{uuid.uuid4().hex[:12]}", **options)
        )
        try:
            yield saver
        finally:
            await saver.aclose()

    report = await validate(factory)
    assert report.passed_all_base()
    results: dict[str, Any] = report.to_dict()["results"]
    return results


def _check(results: dict[str, Any]) -> None:
    for cap, count in {**BASE, **EXTENDED}.items():
        result = results[cap]
        assert result["detected"], cap
        assert result["failures"] == [], (cap, result["failures"])
        assert (result["tests_passed"], result["tests_failed"]) == (count, 0), cap
    assert sum(results[c]["tests_passed"] for c in BASE) == 58
    assert sum(results[c]["tests_passed"] for c in EXTENDED) == 23


async def test_conformance_81_of_81(store_env: Any) -> None:
    _check(await _run(store_env))


async def test_conformance_sdk_local_backend(store_env: Any) -> None:
    if store_env.mode == "hosted":
        # hosted mode always talks to the service: asking for a local backend is an error.
        with pytest.raises(FoundryCheckpointError, match="only available when it is unset"):
            FoundryCheckpointer(**store_env.kwargs(local_backend="sdk"))
        return
    saver = FoundryCheckpointer(**store_env.kwargs(local_backend="sdk"))
    try:
        assert saver.kind == "local-sdk"
    finally:
        saver.close()
    _check(await _run(store_env, local_backend="sdk"))
