"""Session fixture: one loopback Foundry state-store emulator for the whole test run.

Import it into a ``conftest.py`` (``from tests._emulator_fixtures import emulator``). Tests that
inject faults must clear them (``emulator.clear_faults()``); tests that count requests should
call ``emulator.reset_counts()`` first or compare differences, since other tests share it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from foundry_checkpoint.emulator import FoundryEmulator

__all__ = ["emulator"]


@pytest.fixture(scope="session")
def emulator() -> Iterator[FoundryEmulator]:
    """A running :class:`FoundryEmulator` (in memory, seed 0), stopped at the end of the session.

    Point the real client at it with ``endpoint=emulator.endpoint``,
    ``credential=emulator.credential(user="alice")`` and ``connection_verify=emulator.ca_file``
    (and ``FOUNDRY_HOSTING_ENVIRONMENT`` set).
    """
    emu = FoundryEmulator(seed=0)
    emu.start()
    try:
        yield emu
    finally:
        emu.clear_faults()
        emu.stop()
