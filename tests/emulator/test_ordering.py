"""Same-second order is seeded, deterministic, and deliberately not insertion order."""

from __future__ import annotations

import pytest
from azure.ai.agentserver.core.storage import FoundryStateStore

from foundry_checkpoint.emulator import FoundryEmulator

from ._harness import client_kwargs, hosted_env

KEYS = [f"step-{index}" for index in range(8)]


async def _listed_order(seed: int) -> list[str]:
    async with FoundryEmulator(seed=seed, clock=lambda: 1_800_000_000.0) as emu:
        store = await FoundryStateStore.get_or_create("ties", **client_kwargs(emu))
        try:
            for key in KEYS:
                await store.create_item(key, {})
            asc = [entry.key for entry in (await store.list_keys(order="asc")).keys]
            desc = [entry.key for entry in (await store.list_keys(order="desc")).keys]
        finally:
            await store.aclose()
    assert desc == asc[::-1]
    return asc


@pytest.mark.emulator
async def test_tie_order_depends_on_the_seed_only(monkeypatch: pytest.MonkeyPatch) -> None:
    hosted_env(monkeypatch)
    first, second, first_again = (
        await _listed_order(1),
        await _listed_order(2),
        await _listed_order(1),
    )
    assert sorted(first) == sorted(second) == KEYS
    assert first != KEYS and second != KEYS and KEYS[::-1] not in (first, second)
    assert first != second
    assert first == first_again
