"""The same scenarios through the real client: SDK local mode versus the emulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundry_checkpoint.emulator import FoundryEmulator

from ._harness import emulator_factory, local_factory
from .scenarios import SCENARIOS, ScenarioClock


@pytest.mark.parametrize("scenario_name", sorted(SCENARIOS))
async def test_local_mode_and_emulator_agree(
    scenario_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    clocked_emulator: tuple[FoundryEmulator, ScenarioClock],
) -> None:
    scenario = SCENARIOS[scenario_name]
    local_clock = ScenarioClock()
    async with local_factory(monkeypatch, tmp_path, local_clock) as open_local:
        local = await scenario(open_local, local_clock)
    emu, clock = clocked_emulator
    async with emulator_factory(monkeypatch, emu) as open_remote:
        remote = await scenario(open_remote, clock)
    assert remote == local
