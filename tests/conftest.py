"""Shared fixtures: the two store modes every adapter test runs in.

``store_env`` (parametrised by ``store_mode``) prepares the environment and gives the keyword
arguments an adapter needs: local mode uses a fresh ``AGENTSERVER_STATE_ROOT``; hosted mode
points the real ``FoundryStateStore`` client at the session's loopback emulator with a fresh
store prefix per test.

``pytest_collection_modifyitems`` marks every test by what it needs (the markers are declared in
``pyproject.toml``): a test that reaches the emulator (the ``emulator`` fixture, a hosted
``store_env``) is ``emulator``, one that reaches Azurite is ``azurite``, one that runs several
processes is ``multiprocess``. Tests whose needs no fixture shows carry explicit marks.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint._store import _embedded
from tests._azurite_fixtures import azurite  # noqa: F401  (session fixture)
from tests._emulator_fixtures import emulator, trusted_caller  # noqa: F401  (fixtures)

#: Fixtures and the markers a test using them gets (directly or through another fixture).
FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "emulator": ("emulator",),
    "emu": ("emulator",),  # tests/emulator: the session emulator, faults cleared
    "trusted_caller": ("emulator",),  # a caller the session emulator trusts to delegate
    "clocked_emulator": ("emulator",),  # tests/emulator: an emulator on a manual clock
    "emulator_proc": ("emulator", "multiprocess"),  # tests/reliability: the emulator's own process
    "platform": ("emulator", "multiprocess"),  # tests/hosts: sample apps as hosted agents
    "worker_ctx": ("multiprocess",),  # tests/reliability: workers killed and resumed
    "azurite": ("azurite",),
}

#: Parametrised cases whose fixture asks for a service at run time (``getfixturevalue``).
PARAM_MARKS: dict[tuple[str, object], tuple[str, ...]] = {
    ("store_mode", "hosted"): ("emulator",),
    ("stored_env", "hosted"): ("emulator",),  # tests/samples: the CLI on what samples stored
    ("kill_env", "emulator"): ("emulator",),  # tests/reliability: workers on the emulator
    ("harness", "azure"): ("azurite",),  # tests/blob: the Azurite-backed spill harness
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the services and processes it needs (see ``FIXTURE_MARKS``).

    A module whose hosted cases also reach Azurite (a shared blob container for spilled values)
    says so with ``HOSTED_MARKS = ("azurite",)``.
    """
    for item in items:
        names: set[str] = set()
        for fixture in getattr(item, "fixturenames", ()):
            names.update(FIXTURE_MARKS.get(fixture, ()))
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        for key, value in params.items():
            if isinstance(value, str):
                names.update(PARAM_MARKS.get((key, value), ()))
        if params.get("store_mode") == "hosted":
            names.update(getattr(getattr(item, "module", None), "HOSTED_MARKS", ()))
        for name in sorted(names):
            item.add_marker(name)


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


@pytest.fixture(autouse=True)
def _close_the_tests_engines(request: pytest.FixtureRequest) -> Iterator[None]:
    """Close the embedded engines a test opened under its own ``tmp_path``, once it is done.

    The embedded store keeps one engine per database file for the life of the process (the
    adapters of a process share it), and every test has a state root of its own: without this,
    each test's engine (three open files) would stay open until the run ends, and the run would
    pass the 1,024 file descriptors ``select()`` handles. Autouse fixtures are torn down last,
    after the test's own adapters closed.
    """
    if "tmp_path" not in request.fixturenames:
        yield
        return
    root = Path(request.getfixturevalue("tmp_path")).resolve()
    yield
    with _embedded._ENGINES_GUARD:
        engines = [e for (_, path), e in _embedded._ENGINES.items() if path.is_relative_to(root)]
    for engine in engines:
        engine.close()


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
