"""Session fixture: one loopback Foundry state-store emulator for the whole test run.

Import it into a ``conftest.py`` (``from tests._emulator_fixtures import emulator``). Tests that
inject faults must clear them (``emulator.clear_faults()``); tests that count requests should
call ``emulator.reset_counts()`` first or compare differences, since other tests share it.

The session emulator runs in its default, strict identity mode: it ignores ``x-ms-user-id``
from every caller, as the service ignores it from untrusted ones. A test about delegation asks
for ``trusted_caller``: a fresh caller name trusted for that test only.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from foundry_checkpoint.emulator import FoundryEmulator

__all__ = ["emulator", "trusted_caller"]


@pytest.fixture(scope="session")
def emulator() -> Iterator[FoundryEmulator]:
    """A running :class:`FoundryEmulator` (in memory, seed 0), stopped at the end of the session.

    Point the real client at it with ``endpoint=emulator.endpoint``,
    ``credential=emulator.credential(user="alice")`` and ``connection_verify=emulator.ca_file``
    (and ``FOUNDRY_HOSTING_ENVIRONMENT`` set).
    """
    emu = FoundryEmulator(seed=0)
    assert not emu.trusted_callers  # strict by default
    emu.start()
    try:
        yield emu
    finally:
        emu.clear_faults()
        emu.stop()


@pytest.fixture
def trusted_caller(emulator: FoundryEmulator) -> Iterator[str]:
    """A fresh caller name whose ``x-ms-user-id`` the session emulator honours during the test.

    Use it as the token user of the delegating client (``emulator.credential(user=...)``); the
    trust is taken back afterwards, so every other test still runs strict.
    """
    caller = f"trusted-{uuid.uuid4().hex[:10]}"
    emulator.trust_caller(caller)
    try:
        yield caller
    finally:
        emulator.distrust_caller(caller)
        assert not emulator.trusted_callers
