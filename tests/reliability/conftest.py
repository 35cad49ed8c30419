"""Fixtures of the reliability tests: the worker fork server and an emulator process."""

from __future__ import annotations

from collections.abc import Iterator
from multiprocessing.context import ForkServerContext

import pytest

from ._harness import EmulatorProcess, emulator_process, worker_context


@pytest.fixture(scope="session")
def worker_ctx() -> ForkServerContext:
    """The fork-server context workers start from (the worker module preloaded)."""
    return worker_context()


@pytest.fixture(scope="module")
def emulator_proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    """``python -m foundry_checkpoint.emulator --port 0 --data <file>`` as its own process."""
    data = tmp_path_factory.mktemp("emulator") / "state.sqlite3"
    with emulator_process(data) as emu:
        yield emu
