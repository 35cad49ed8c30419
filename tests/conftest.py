"""Shared fixtures: the two store modes every adapter test runs in.

``store_env`` (parametrised by ``store_mode``) prepares the environment and gives the keyword
arguments an adapter needs: local mode uses a fresh ``AGENTSERVER_STATE_ROOT``; hosted mode
points the real ``FoundryStateStore`` client at the session's loopback emulator with a fresh
store prefix per test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests._azurite_fixtures import azurite  # noqa: F401  (session fixture)
from tests._emulator_fixtures import emulator  # noqa: F401  (session fixture)


@dataclass
class StoreEnv:
    """What a test needs to build an adapter in one store mode."""

    mode: str
    root: Path
    emulator: Any = None
    prefix: str = "test"
    _users: dict[str, Any] = field(default_factory=dict)

    def kwargs(self, user: str = "alice", **extra: Any) -> dict[str, Any]:
        """Keyword arguments for ``FoundryCheckpointer``/``FoundryCheckpointStorage``."""
        out: dict[str, Any] = {}
        if self.mode == "hosted":
            if user not in self._users:
                self._users[user] = self.emulator.credential(user=user)
            out.update(
                store_prefix=self.prefix,
                credential=self._users[user],
                endpoint=self.emulator.endpoint,
                connection_verify=self.emulator.ca_file,
            )
        elif user != "alice":
            out["user_id"] = user
        out.update(extra)
        return out

    def call_id(self, user: str = "alice") -> str:
        """A fresh platform call id for a request of ``user``.

        Hosted mode: minted by the emulator, so the store resolves it to ``user``'s partition
        (an unknown call id is refused with 403). Local mode: any fresh id.
        """
        if self.mode == "hosted":
            return str(self.emulator.mint_call(user))
        return f"call-{uuid.uuid4().hex}"


@pytest.fixture(params=["local", "hosted"])
def store_mode(request: pytest.FixtureRequest) -> str:
    """``"local"`` or ``"hosted"``; tests using ``store_env`` run once in each."""
    return str(request.param)


@pytest.fixture
def store_env(
    store_mode: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> Iterator[StoreEnv]:
    """A fresh store environment in ``store_mode``."""
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    for name in (
        "FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING",
        "FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    if store_mode == "hosted":
        emu = request.getfixturevalue("emulator")
        monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
        monkeypatch.setenv("FOUNDRY_PROJECT_ENDPOINT", emu.endpoint)
        yield StoreEnv("hosted", tmp_path, emu, prefix=f"t{uuid.uuid4().hex[:12]}")
    else:
        monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
        yield StoreEnv("local", tmp_path)
