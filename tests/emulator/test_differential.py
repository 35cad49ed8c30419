"""The same scenarios through every face of the store, with the same observable results.

The reference is the real client in the SDK's local mode; the others are the real client
against the emulator, the embedded engine's store face (the local default), and the SDK's
local mode under the inter-process lock (``local_backend="sdk"``).

The ``emulator-per-request`` face is the real client as a hosted agent uses it: one client
signed with the agent's own identity, every call made in a new request context whose platform
call id the emulator resolves to the end user (and which sets ``x-agent-user-id``), as the
hosts do per inbound request. The scenarios must come out the same, and the agent's own
partition must stay empty.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from azure.ai.agentserver.core import (
    FoundryAgentRequestContext,
)
from azure.ai.agentserver.core.storage import (
    FoundryStateStore,
    FoundryStorageNotFoundError,
    _local_state,
)

from foundry_checkpoint._store._embedded import EngineStore
from foundry_checkpoint._store._engine import StateEngine
from foundry_checkpoint._store._protocol import StateStoreLike
from foundry_checkpoint._store._sdk_local import LockedSdkStore
from foundry_checkpoint.emulator import FoundryEmulator
from tests._request import in_request as request_context

from ._harness import client_kwargs, emulator_factory, hosted_env, local_env, local_factory
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


class _PerRequest:
    """A store client whose every call is a new request of ``user`` (a fresh call id)."""

    def __init__(self, inner: FoundryStateStore, emu: FoundryEmulator, user: str) -> None:
        self._inner = inner
        self._emu = emu
        self._user = user

    @staticmethod
    async def in_request(
        emu: FoundryEmulator, user: str, call: Callable[[], Awaitable[Any]]
    ) -> Any:
        """Await ``call()`` as a new request of ``user``."""
        with request_context(FoundryAgentRequestContext(call_id=emu.mint_call(user), user_id=user)):
            return await call()

    @property
    def name(self) -> str:
        return self._inner.name

    def __getattr__(self, attr: str) -> Any:
        method = getattr(self._inner, attr)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self.in_request(self._emu, self._user, lambda: method(*args, **kwargs))

        return call


@asynccontextmanager
async def per_request_factory(
    monkeypatch: pytest.MonkeyPatch, emu: FoundryEmulator
) -> AsyncIterator[tuple[StoreFactory, list[FoundryStateStore]]]:
    """The agent's client (token user ``agent``), each call a request of one end user."""
    hosted_env(monkeypatch)
    user = f"end-user-{uuid.uuid4().hex[:8]}"
    opened: list[FoundryStateStore] = []

    async def open_store(
        name: str, *, user_isolation: bool = True, item_ttl_seconds: int = -1
    ) -> StateStoreLike:
        store = await _PerRequest.in_request(
            emu,
            user,
            lambda: FoundryStateStore.get_or_create(
                name,
                user_isolation=user_isolation,
                item_ttl_seconds=item_ttl_seconds,
                **client_kwargs(emu, "agent"),
            ),
        )
        opened.append(store)
        return cast(StateStoreLike, _PerRequest(store, emu, user))

    try:
        yield open_store, opened
    finally:
        for store in opened:
            await store.aclose()


@pytest.mark.parametrize("face", ["emulator", "emulator-per-request", "engine", "locked-sdk"])
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
    elif face == "emulator-per-request":
        emu, clock = clocked_emulator
        async with per_request_factory(monkeypatch, emu) as (open_remote, opened):
            observed = await scenario(open_remote, clock)
            for store in opened:  # the agent's own partition saw none of it
                with contextlib.suppress(FoundryStorageNotFoundError):  # deleted by the scenario
                    assert (await store.list_keys()).keys == []
    elif face == "engine":
        clock = ScenarioClock()
        async with engine_factory(clock) as open_engine:
            observed = await scenario(open_engine, clock)
    else:
        clock = ScenarioClock()
        async with locked_sdk_factory(monkeypatch, tmp_path / "locked", clock) as open_locked:
            observed = await scenario(open_locked, clock)
    assert observed == reference
