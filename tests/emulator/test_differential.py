"""The same scenarios through every face of the store, with the same observable results.

The reference is the real client in the SDK's local mode; the others are the real client
against the emulator, the embedded engine's store face (the local default), and the SDK's
local mode under the inter-process lock (``local_backend="sdk"``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from azure.ai.agentserver.core.storage import _local_state

from foundry_checkpoint._engine import StateEngine
from foundry_checkpoint._local_store import EngineStore
from foundry_checkpoint._protocol import StateStoreLike
from foundry_checkpoint._sdk_local import LockedSdkStore
from foundry_checkpoint.emulator import FoundryEmulator

from ._harness import emulator_factory, local_env, local_factory
from .scenarios import SCENARIOS, ScenarioClock, StoreFactory


@asynccontextmanager
async def engine_factory(clock: ScenarioClock) -> AsyncIterator[StoreFactory]:
    """Stores of the embedded engine (in memory) reading ``clock``."""
    engine = StateEngine(None, clock=clock)

    async def open_store(
        name: str, *, user_isolation: bool = True, item_ttl_seconds: int = -1
    ) -> StateStoreLike:
        return await EngineStore.get_or_create(
            engine, name, user_isolation=user_isolation, item_ttl_seconds=item_ttl_seconds
        )

    try:
        yield open_store
    finally:
        engine.close()


@asynccontextmanager
async def locked_sdk_factory(
    monkeypatch: pytest.MonkeyPatch, root: Path, clock: ScenarioClock
) -> AsyncIterator[StoreFactory]:
    """Stores of the SDK's local mode under the file lock, reading ``clock``."""
    local_env(monkeypatch, root)
    monkeypatch.setattr(_local_state, "_now", lambda: int(clock()))

    async def open_store(
        name: str, *, user_isolation: bool = True, item_ttl_seconds: int = -1
    ) -> StateStoreLike:
        return await LockedSdkStore.get_or_create(
            name, user_isolation=user_isolation, item_ttl_seconds=item_ttl_seconds
        )

    yield open_store


@pytest.mark.parametrize("face", ["emulator", "engine", "locked-sdk"])
@pytest.mark.parametrize("scenario_name", sorted(SCENARIOS))
async def test_every_face_agrees_with_the_sdk_local_mode(
    face: str,
    scenario_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    clocked_emulator: tuple[FoundryEmulator, ScenarioClock],
) -> None:
    scenario = SCENARIOS[scenario_name]
    local_clock = ScenarioClock()
    async with local_factory(monkeypatch, tmp_path / "reference", local_clock) as open_local:
        reference = await scenario(open_local, local_clock)
    if face == "emulator":
        emu, clock = clocked_emulator
        async with emulator_factory(monkeypatch, emu) as open_remote:
            observed = await scenario(open_remote, clock)
    elif face == "engine":
        clock = ScenarioClock()
        async with engine_factory(clock) as open_engine:
            observed = await scenario(open_engine, clock)
    else:
        clock = ScenarioClock()
        async with locked_sdk_factory(monkeypatch, tmp_path / "locked", clock) as open_locked:
            observed = await scenario(open_locked, clock)
    assert observed == reference
