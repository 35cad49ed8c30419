"""Fixtures of the emulator tests (the session ``emulator`` comes from the root conftest)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from foundry_checkpoint.emulator import FoundryEmulator

from .scenarios import ScenarioClock


@pytest.fixture(scope="module")
def clocked_emulator() -> Iterator[tuple[FoundryEmulator, ScenarioClock]]:
    """An emulator of its own whose engine reads a manual clock."""
    clock = ScenarioClock()
    with FoundryEmulator(seed=7, clock=clock) as emu:
        yield emu, clock


@pytest.fixture
def emu(emulator: FoundryEmulator) -> Iterator[FoundryEmulator]:
    """The session emulator, with no fault left armed and counts from zero."""
    emulator.clear_faults()
    emulator.reset_counts()
    yield emulator
    emulator.clear_faults()
