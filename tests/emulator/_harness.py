"""Helpers shared by the emulator tests: store factories for the real client in both modes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import FoundryStateStore, _local_state
from azure.core.pipeline import PipelineRequest
from azure.core.pipeline.policies import SansIOHTTPPolicy

from foundry_checkpoint.emulator import FoundryEmulator

from .scenarios import ScenarioClock, StoreFactory


class NoBackoff(SansIOHTTPPolicy[Any, Any]):
    """Per-call policy: azure-core's retry policy reads ``retry_backoff_factor`` from the
    request context, so retries happen at once (``Retry-After`` is still honoured)."""

    def on_request(self, request: PipelineRequest[Any]) -> None:
        request.context.options["retry_backoff_factor"] = 0


def hosted_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``FoundryStateStore`` construct in hosted mode."""
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "1")
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")


def local_env(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """Make ``FoundryStateStore`` construct in the SDK's local mode under ``root``."""
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(root))
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")


def client_kwargs(emu: FoundryEmulator, user: str = "alice", **extra: Any) -> dict[str, Any]:
    """Keyword arguments that point the real client at ``emu`` as ``user``."""
    return {
        "credential": emu.credential(user=user),
        "endpoint": emu.endpoint,
        "connection_verify": emu.ca_file,
        "per_call_policies": [NoBackoff()],
        **extra,
    }


@asynccontextmanager
async def local_factory(
    monkeypatch: pytest.MonkeyPatch, root: Path, clock: ScenarioClock
) -> AsyncIterator[StoreFactory]:
    """Stores of the SDK's local mode reading ``clock`` (its only time source is ``_now``)."""
    local_env(monkeypatch, root)
    monkeypatch.setattr(_local_state, "_now", lambda: int(clock()))
    opened: list[FoundryStateStore] = []

    async def open_store(
        name: str, *, user_isolation: bool = True, item_ttl_seconds: int = -1
    ) -> FoundryStateStore:
        store = await FoundryStateStore.get_or_create(
            name, user_isolation=user_isolation, item_ttl_seconds=item_ttl_seconds
        )
        opened.append(store)
        return store

    try:
        yield open_store
    finally:
        for store in opened:
            await store.aclose()


@asynccontextmanager
async def emulator_factory(
    monkeypatch: pytest.MonkeyPatch, emu: FoundryEmulator, user: str = "alice"
) -> AsyncIterator[StoreFactory]:
    """Stores of the real client in hosted mode against ``emu``."""
    hosted_env(monkeypatch)
    opened: list[FoundryStateStore] = []

    async def open_store(
        name: str, *, user_isolation: bool = True, item_ttl_seconds: int = -1
    ) -> FoundryStateStore:
        store = await FoundryStateStore.get_or_create(
            name,
            user_isolation=user_isolation,
            item_ttl_seconds=item_ttl_seconds,
            **client_kwargs(emu, user),
        )
        opened.append(store)
        return store

    try:
        yield open_store
    finally:
        for store in opened:
            await store.aclose()
