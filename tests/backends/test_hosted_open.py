"""Opening a hosted store costs one round trip, and the one private SDK call it uses is guarded.

``HostedClients.get_or_create`` reads an existing store with one GET (whose descriptor the
isolation check uses) and creates a store a GET just found missing with one POST (whose answer
is the descriptor). The POST is the SDK's own ``FoundryStateStore._create_properties``, called
only by ``_store._hosted.create_store``: the first test fails when the SDK changes that call,
and the last one shows the public path taken then.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import (
    FoundryStateStore,
    FoundryStorageNotFoundError,
    StateStore,
)

from foundry_checkpoint._options import StoreOptions
from foundry_checkpoint._store._backends import choose_backend, open_isolated
from foundry_checkpoint._store._hosted import HostedClients, create_store
from foundry_checkpoint.errors import IsolationRefusedError
from tests._trips import Trips

pytestmark = pytest.mark.emulator


@pytest.fixture
def hosted_env(emulator: Any) -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
        patch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
        yield emulator


@pytest.fixture
async def clients(hosted_env: Any) -> AsyncIterator[tuple[HostedClients, Trips]]:
    trips = Trips()
    made = HostedClients(
        endpoint=hosted_env.endpoint,
        user_id=None,
        item_ttl_seconds=-1,
        credential=hosted_env.credential(user="alice"),
        client_kwargs={"connection_verify": hosted_env.ca_file, "per_call_policies": [trips]},
    )
    try:
        yield made, trips
    finally:
        await made.aclose()


def _name() -> str:
    return f"open-{uuid.uuid4().hex[:12]}"


def _calls(trips: Trips) -> list[str]:
    return [name for name, _, _ in trips.take()]


def test_the_sdk_still_has_the_create_call_create_store_relies_on() -> None:
    create = FoundryStateStore._create_properties
    assert inspect.iscoroutinefunction(create)
    assert list(inspect.signature(create).parameters) == ["self"]
    assert "StateStore" in str(inspect.signature(create).return_annotation)


async def test_create_store_is_one_request_that_answers_the_isolated_descriptor(
    clients: tuple[HostedClients, Trips],
) -> None:
    made, trips = clients
    store = made.client(_name())
    try:
        descriptor = await create_store(store)
        assert isinstance(descriptor, StateStore)
        assert descriptor.name == store.name and descriptor.user_isolation
        assert _calls(trips) == ["create_store"]
        assert (await store.get()).user_isolation
    finally:
        await store.aclose()


async def test_opening_a_store_is_one_request_when_it_exists_or_was_just_seen_missing(
    clients: tuple[HostedClients, Trips],
) -> None:
    made, trips = clients
    name = _name()
    looked = made.client(name)
    with pytest.raises(FoundryStorageNotFoundError):
        await looked.get()
    await looked.aclose()
    trips.take()

    created = await made.get_or_create(name)  # seen missing: created without looking again
    assert _calls(trips) == ["create_store"]
    assert created.opened_descriptor is not None and created.opened_descriptor.user_isolation
    await created.aclose()

    existing = await made.get_or_create(name)  # exists: one GET, its descriptor kept
    assert _calls(trips) == ["get_store"]
    assert existing.opened_descriptor is not None and existing.opened_descriptor.user_isolation
    await existing.aclose()

    fresh = await made.get_or_create(_name())  # never seen: looked up, then created
    assert _calls(trips) == ["get_store", "create_store"]
    await fresh.aclose()


async def test_a_store_created_meanwhile_is_read_and_one_made_without_isolation_refused(
    clients: tuple[HostedClients, Trips], hosted_env: Any
) -> None:
    made, trips = clients
    name = _name()
    looked = made.client(name)
    with pytest.raises(FoundryStorageNotFoundError):
        await looked.get()
    await looked.aclose()
    # another writer creates it first, without isolation
    other = await FoundryStateStore.get_or_create(
        name,
        hosted_env.credential(user="bob"),
        hosted_env.endpoint,
        user_isolation=False,
        connection_verify=hosted_env.ca_file,
    )
    await other.aclose()
    trips.take()
    store = await made.get_or_create(name)  # the create answers 409: read instead
    assert _calls(trips) == ["create_store", "get_store"]
    assert store.opened_descriptor is not None and not store.opened_descriptor.user_isolation
    await store.aclose()

    backend = choose_backend(
        "sqlite",
        StoreOptions(
            store_prefix="x",
            endpoint=hosted_env.endpoint,
            credential=hosted_env.credential(user="alice"),
            client_kwargs={"connection_verify": hosted_env.ca_file, "per_call_policies": [trips]},
        ),
    )
    try:
        with pytest.raises(IsolationRefusedError):
            await open_isolated(backend, name, "", create=True)
        assert _calls(trips) == ["get_store"]  # the open's GET is the check: no second one
        assert await open_isolated(backend, _name(), "", create=False) is None
        assert _calls(trips) == ["get_store"]
    finally:
        await backend.aclose()


async def test_when_the_sdk_call_changes_the_public_path_creates_the_store_isolated(
    clients: tuple[HostedClients, Trips], monkeypatch: pytest.MonkeyPatch
) -> None:
    made, trips = clients
    original = FoundryStateStore._create_properties

    async def changed(self: FoundryStateStore, *, options: Any = None) -> StateStore:
        return await original(self)

    # the SDK changed the call (its own get_or_create still works): create_store sends nothing
    monkeypatch.setattr(FoundryStateStore, "_create_properties", changed)
    probe = made.client(_name())
    assert await create_store(probe) is None  # nothing sent
    await probe.aclose()
    assert _calls(trips) == []
    store = await made.get_or_create(_name())
    try:
        # our GET, then the SDK's get_or_create (GET, POST), then the descriptor
        assert _calls(trips) == ["get_store", "get_store", "create_store", "get_store"]
        assert store.opened_descriptor is not None and store.opened_descriptor.user_isolation
    finally:
        await store.aclose()
