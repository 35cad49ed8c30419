"""The store seam's typed errors on the hosted path: the real client against the emulator.

Every client the chosen backend hands out (and its ``open``) turns the SDK's
``FoundryStorage*Error`` into a ``StoreError`` subclass that keeps the SDK's error as
``__cause__`` and whose message names neither the store nor the item key (a host may show
``str(error)`` to its client; the store name stays in ``error.store``, the SDK's text in
``error.message``). 404, 409 and 412 come from the emulator's own answers; 503 from its fault
injection, after the client's retries.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from azure.ai.agentserver.core.storage import (
    FoundryStorageApiError,
    FoundryStorageConflictError,
    FoundryStorageError,
    FoundryStorageNotFoundError,
    FoundryStoragePreconditionError,
)

from foundry_checkpoint._options import StoreOptions
from foundry_checkpoint._store._backend import Backend
from foundry_checkpoint._store._backends import choose_backend, open_isolated
from foundry_checkpoint._store._protocol import StateStoreLike
from foundry_checkpoint.emulator import FoundryEmulator
from foundry_checkpoint.errors import (
    FoundryCheckpointError,
    StoreConflictError,
    StoreError,
    StoreNotFoundError,
    StorePreconditionError,
    StoreServiceError,
)

#: Attempts of one call with the client's default retry settings (one try, three retries).
ATTEMPTS = 4


@pytest.fixture
def emu(emulator: FoundryEmulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[FoundryEmulator]:
    """The session emulator in hosted mode, with no fault left armed."""
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    emulator.clear_faults()
    emulator.reset_counts()
    yield emulator
    emulator.clear_faults()


@pytest.fixture
async def backend(emu: FoundryEmulator) -> AsyncIterator[Backend]:
    """The backend an adapter gets in hosted mode: the service, behind the store seam."""
    options = StoreOptions(
        store_prefix="typed",
        credential=emu.credential(user="alice"),
        endpoint=emu.endpoint,
        client_kwargs={"connection_verify": emu.ca_file, "retry_backoff_factor": 0},
    )
    chosen = choose_backend("sqlite", options)
    assert chosen.kind == "hosted"
    yield chosen
    await chosen.aclose()


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[StateStoreLike]:
    """A fresh isolated store of the service, opened as the core opens one."""
    opened = await open_isolated(backend, f"typed-{uuid.uuid4().hex[:12]}", "", create=True)
    assert opened is not None
    yield opened
    await opened.aclose()


def _check(
    info: pytest.ExceptionInfo[StoreError],
    ours: type[StoreError],
    sdk: type[FoundryStorageError],
    *,
    status: int,
    names: tuple[str, ...],
) -> StoreError:
    """``info`` is exactly ``ours``, caused by the SDK's ``sdk`` error, naming none of ``names``."""
    error = info.value
    assert type(error) is ours
    assert isinstance(error, StoreError) and isinstance(error, FoundryCheckpointError)
    assert isinstance(error, sdk)  # code catching the SDK's class still catches it
    cause = error.__cause__
    assert type(cause) is sdk and not isinstance(cause, FoundryCheckpointError)
    assert error.status_code == status == cause.status_code
    message = str(error)
    assert message.endswith(f"(HTTP {status})")
    for name in names:
        assert name not in message
    return error


async def test_a_deleted_store_is_a_typed_not_found(
    backend: Backend, store: StateStoreLike
) -> None:
    key = f"key-{uuid.uuid4().hex[:8]}"
    other = backend.bind(store.name, "")  # another client (another process) deletes it
    await other.delete()
    await other.aclose()
    with pytest.raises(StoreError) as info:
        await store.set_item(key, {"v": 1})
    error = _check(
        info, StoreNotFoundError, FoundryStorageNotFoundError, status=404, names=(key, store.name)
    )
    assert error.store == store.name


async def test_a_second_create_is_a_typed_conflict(store: StateStoreLike) -> None:
    key = f"key-{uuid.uuid4().hex[:8]}"
    await store.create_item(key, {"v": 1})
    with pytest.raises(StoreError) as info:
        await store.create_item(key, {"v": 2})
    _check(
        info, StoreConflictError, FoundryStorageConflictError, status=409, names=(key, store.name)
    )
    got = await store.get_item(key)
    assert got is not None and got.value == {"v": 1}  # nothing was written


async def test_a_stale_etag_is_a_typed_precondition_failure(store: StateStoreLike) -> None:
    key = f"key-{uuid.uuid4().hex[:8]}"
    first = await store.set_item(key, {"v": 1})
    await store.set_item(key, {"v": 2}, if_match=first.etag)
    with pytest.raises(StoreError) as info:
        await store.set_item(key, {"v": 3}, if_match=first.etag)
    _check(
        info,
        StorePreconditionError,
        FoundryStoragePreconditionError,
        status=412,
        names=(key, store.name),
    )
    got = await store.get_item(key)
    assert got is not None and got.value == {"v": 2}


async def test_an_unavailable_service_is_typed_after_the_retries(
    emu: FoundryEmulator, store: StateStoreLike
) -> None:
    key = f"key-{uuid.uuid4().hex[:8]}"
    await store.set_item(key, {"v": 1})
    emu.reset_counts()
    emu.inject("get_item", status=503, times=None, store=store.name)
    with pytest.raises(StoreError) as info:
        await store.get_item(key)
    _check(info, StoreServiceError, FoundryStorageApiError, status=503, names=(store.name,))
    assert emu.faults_served["get_item"] == ATTEMPTS  # the client retried before giving up
    emu.clear_faults()
    got = await store.get_item(key)
    assert got is not None and got.value == {"v": 1}


async def test_opening_a_store_while_the_service_is_unavailable_is_typed(
    emu: FoundryEmulator, backend: Backend
) -> None:
    name = f"typed-{uuid.uuid4().hex[:12]}"
    emu.inject("*", status=503, times=None, store=name)
    with pytest.raises(StoreError) as info:
        await open_isolated(backend, name, "", create=True)
    error = _check(info, StoreServiceError, FoundryStorageApiError, status=503, names=(name,))
    assert error.store == name
    assert sum(emu.faults_served.values()) == ATTEMPTS
    emu.clear_faults()
    opened = await open_isolated(backend, name, "", create=True)
    assert opened is not None
    await opened.aclose()
