"""The core's clients in hosted mode: one transport, a bounded number open, one TLS context.

A Foundry-hosted agent serves thousands of threads from one process; the clients it opens for
them must share one connection pool and stay bounded (see also ``test_resources.py``).
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint._core import MAX_OPEN_STORES, CheckpointCore
from foundry_checkpoint._options import StoreOptions
from tests.conftest import StoreEnv


def _hosted_core(env: StoreEnv, **client: Any) -> CheckpointCore:
    kwargs = env.kwargs()
    options = StoreOptions(
        store_prefix=kwargs["store_prefix"],
        credential=kwargs["credential"],
        endpoint=kwargs["endpoint"],
        client_kwargs=client,
    )
    return CheckpointCore(options, scope_word="thread")


@pytest.mark.parametrize("store_mode", ["hosted"])
@pytest.mark.parametrize("verify", ["ca-file", "default", "off"])
def test_every_client_shares_one_transport(store_env: StoreEnv, verify: str) -> None:
    client: dict[str, Any] = {}
    if verify == "ca-file":
        client["connection_verify"] = store_env.emulator.ca_file
    elif verify == "off":
        client["connection_verify"] = False
    core = _hosted_core(store_env, **client)

    async def transports() -> set[int]:
        seen = set()
        for i in range(5):
            hosted = core.backend.inner  # type: ignore[attr-defined]  # behind the store seam
            kwargs = hosted.clients.pipeline_kwargs()
            assert "connection_verify" not in kwargs
            seen.add(id(kwargs["transport"]))
            store = core.client(f"{store_env.prefix}/t/{i}", "").inner  # type: ignore[attr-defined]
            seen.add(id(store._client._pipeline._transport))
        return seen

    try:
        assert len(core.run(transports())) == 1
    finally:
        core.close()


@pytest.mark.parametrize("store_mode", ["hosted"])
def test_open_clients_are_bounded(store_env: StoreEnv) -> None:
    core = _hosted_core(store_env, connection_verify=store_env.emulator.ca_file)

    async def serve(threads: int) -> None:
        for i in range(threads):
            scope = await core.scope(f"bounded-{i}")
            await scope.store.set_item("k", {"i": i})
        # a thread whose client was dropped still works (a new client; no store request)
        store_env.emulator.reset_counts()
        scope = await core.scope("bounded-0")
        item = await scope.store.get_item("k")
        assert item is not None and item.value == {"i": 0}
        assert store_env.emulator.requests["get_store"] == 0

    try:
        core.run(serve(MAX_OPEN_STORES + 20))
        assert len(core._stores) == MAX_OPEN_STORES
    finally:
        core.close()
    assert len(core._stores) == 0


async def _roundtrip(core: CheckpointCore, scope_id: str) -> object:
    scope = await core.scope(scope_id)
    await scope.store.set_item("k", {"v": 1})
    item = await scope.store.get_item("k")
    return None if item is None else item.value


def test_a_ca_file_is_loaded_once_not_per_request(
    emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # azure-core would build an SSL context (and so a TLS connection) for every request
    # given connection_verify=<CA file>; the core builds one and reuses its connections.
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    store_env = StoreEnv("hosted", tmp_path, emulator, prefix=f"ca{os.getpid()}")

    made: list[object] = []
    original = ssl.create_default_context

    def counting(*args: object, **kwargs: object) -> ssl.SSLContext:
        made.append(kwargs.get("cafile"))
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl, "create_default_context", counting)
    core = _hosted_core(store_env, connection_verify=store_env.emulator.ca_file)
    try:
        for i in range(20):
            assert core.run(_roundtrip(core, f"t{i % 2}")) == {"v": 1}
        assert made == [store_env.emulator.ca_file]
    finally:
        core.close()
