"""The platform's task API on the emulator, driven by the SDK's own ``HostedTaskProvider``.

The resilient task runtime of azure-ai-agentserver-core keeps its tasks at
``{FOUNDRY_PROJECT_ENDPOINT}/tasks`` in hosted mode. These tests run the SDK's client over HTTPS
against the emulator: create, get, patch under ``If-Match`` (a stale etag is the conflict the
client raises), lease acquire, renew, takeover after expiry on the emulator's clock, delete, list
with paging and filters, per-caller isolation, and persistence across restarts with ``--data``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from azure.ai.agentserver.core.tasks._client import HostedTaskProvider, TransportClassifiedError
from azure.ai.agentserver.core.tasks._exceptions import TaskNotFound
from azure.ai.agentserver.core.tasks._exceptions_internal import _HostedConflict
from azure.ai.agentserver.core.tasks._models import (
    TaskCreateRequest,
    TaskPatchRequest,
    TaskStatus,
)
from azure.core.pipeline.policies import HeadersPolicy
from azure.core.pipeline.transport import AioHttpTransport
from typing_extensions import Unpack

from foundry_checkpoint.emulator import FoundryEmulator

from .scenarios import ScenarioClock

pytestmark = pytest.mark.emulator


def _provider(
    emu: FoundryEmulator, *, user: str = "hosted-agent", call_id: str | None = None
) -> HostedTaskProvider:
    """The SDK's client as the task manager builds it, trusting the emulator's CA."""
    provider = HostedTaskProvider(
        emu.endpoint,
        emu.credential(user=user),
        transport=AioHttpTransport(connection_verify=emu.ca_file),
    )
    if call_id is not None:
        # the platform's call id on every request, as a request-scoped client would send it
        headers = next(p for p in provider.policies if isinstance(p, HeadersPolicy))
        headers.add_header("x-agent-foundry-call-id", call_id)
    return provider


@pytest.fixture
def clocked(
    clocked_emulator: tuple[FoundryEmulator, ScenarioClock],
) -> Iterator[tuple[FoundryEmulator, ScenarioClock]]:
    emu, clock = clocked_emulator
    emu.reset_counts()
    yield emu, clock


@pytest.fixture
async def provider(
    clocked: tuple[FoundryEmulator, ScenarioClock], request: pytest.FixtureRequest
) -> AsyncIterator[HostedTaskProvider]:
    # a user of its own per test: the module's emulator is shared
    client = _provider(clocked[0], user=f"agent-{request.node.name}")
    yield client
    await client.close()


class _Lease(TypedDict):
    lease_owner: str
    lease_instance_id: str


class _Fields(TypedDict, total=False):
    status: TaskStatus
    payload: dict[str, Any]
    tags: dict[str, str]
    lease_owner: str
    lease_instance_id: str
    lease_duration_seconds: int


def _create(task_id: str, **fields: Unpack[_Fields]) -> TaskCreateRequest:
    return TaskCreateRequest(
        agent_name="agent", session_id="session-1", id=task_id, title="work", **fields
    )


async def test_create_get_patch_delete_round_trip(provider: HostedTaskProvider) -> None:
    created = await provider.create(_create("t-1", payload={"input": {"n": 1}}, tags={"k": "v"}))
    assert (created.id, created.status, created.payload) == ("t-1", "pending", {"input": {"n": 1}})
    assert created.etag and created.created_at and created.lease is None

    got = await provider.get("t-1")
    assert got is not None and got.etag == created.etag and got.tags == {"k": "v"}
    assert await provider.get("t-missing") is None

    patched = await provider.update(
        "t-1",
        # a None tag value removes the tag (merge-patch), which the SDK's annotation omits
        TaskPatchRequest(payload={"output": 2}, tags={"k": None}, if_match=got.etag),  # type: ignore[dict-item]
    )
    assert patched.payload == {"input": {"n": 1}, "output": 2}  # shallow merge
    assert patched.tags is None and patched.etag != got.etag

    done = await provider.update("t-1", TaskPatchRequest(status="completed"))
    assert done.status == "completed" and done.completed_at
    with pytest.raises(_HostedConflict) as immutable:
        await provider.update("t-1", TaskPatchRequest(payload={"x": 1}))
    assert (immutable.value._code, immutable.value.status_code) == ("task_immutable", 409)

    await provider.delete("t-1")
    assert await provider.get("t-1") is None
    with pytest.raises(TaskNotFound):
        await provider.delete("t-1")
    with pytest.raises(TaskNotFound):
        await provider.update("t-1", TaskPatchRequest(payload={"x": 1}))


async def test_a_stale_etag_is_the_clients_conflict(provider: HostedTaskProvider) -> None:
    first = await provider.create(_create("t-etag"))
    await provider.update("t-etag", TaskPatchRequest(payload={"a": 1}, if_match=first.etag))
    with pytest.raises(_HostedConflict) as stale:
        await provider.update("t-etag", TaskPatchRequest(payload={"a": 2}, if_match=first.etag))
    assert (stale.value._code, stale.value.status_code) == ("etag_mismatch", 412)
    current = await provider.get("t-etag")
    assert current is not None and current.payload == {"a": 1}  # the stale write changed nothing

    with pytest.raises(_HostedConflict) as exists:
        await provider.create(_create("t-etag"))
    assert (exists.value._code, exists.value.status_code) == ("task_already_exists", 409)
    with pytest.raises(_HostedConflict) as unforced:
        await provider.delete("t-etag")  # not completed: needs force
    assert unforced.value._code == "invalid_request"
    await provider.delete("t-etag", force=True)


async def test_lease_acquire_renew_expire_and_takeover(
    clocked: tuple[FoundryEmulator, ScenarioClock], provider: HostedTaskProvider
) -> None:
    _, clock = clocked
    mine: _Lease = {"lease_owner": "session:s1", "lease_instance_id": "proc-a"}
    task = await provider.create(
        _create("t-lease", status="in_progress", lease_duration_seconds=30, **mine)
    )
    assert task.lease is not None and task.lease.generation == 0 and task.started_at
    assert (task.lease.owner, task.lease.instance_id) == ("session:s1", "proc-a")

    # another owner while the lease is live: refused, nothing changes
    other: _Lease = {"lease_owner": "session:s2", "lease_instance_id": "proc-b"}
    with pytest.raises(_HostedConflict) as held:
        await provider.update("t-lease", TaskPatchRequest(lease_duration_seconds=30, **other))
    assert (held.value._code, held.value.status_code) == ("lease_held_by_another", 409)

    # renewal by the holder moves expires_at with the clock
    clock.advance(20)
    renewed = await provider.update("t-lease", TaskPatchRequest(lease_duration_seconds=30, **mine))
    assert renewed.lease is not None and renewed.lease.expires_at > task.lease.expires_at
    assert renewed.lease.generation == 0

    clock.advance(25)  # 25 s after the renewal: still live
    assert await provider.list(lease_expired=True, agent_name="agent") == []
    clock.advance(10)  # past expires_at
    expired = await provider.list(lease_expired=True, status="in_progress")
    assert [t.id for t in expired] == ["t-lease"]

    taken = await provider.update("t-lease", TaskPatchRequest(lease_duration_seconds=60, **other))
    assert taken.lease is not None and taken.lease.owner == "session:s2"
    assert (taken.lease.generation, taken.lease.expiry_count) == (1, 1)
    # the same owner from a new process (recovery at start-up) bumps the generation
    recovered = await provider.update(
        "t-lease",
        TaskPatchRequest(
            lease_owner="session:s2", lease_instance_id="proc-c", lease_duration_seconds=60
        ),
    )
    assert recovered.lease is not None and recovered.lease.generation == 2

    # force-expire by the holder, then complete (the lease goes with it)
    expired_now = await provider.update(
        "t-lease",
        TaskPatchRequest(
            lease_owner="session:s2", lease_instance_id="proc-c", lease_duration_seconds=0
        ),
    )
    assert expired_now.lease is not None
    assert [t.id for t in await provider.list(lease_expired=True)] == ["t-lease"]
    done = await provider.update("t-lease", TaskPatchRequest(status="completed"))
    assert done.lease is None and done.status == "completed"


async def test_bad_requests_are_refused_with_the_sdks_codes(provider: HostedTaskProvider) -> None:
    with pytest.raises(_HostedConflict) as short:
        await provider.create(
            _create(
                "t-bad",
                status="in_progress",
                lease_owner="o",
                lease_instance_id="i",
                lease_duration_seconds=5,  # under the 10 s minimum
            )
        )
    assert (short.value._code, short.value.status_code) == ("invalid_request", 400)
    await provider.create(_create("t-bad"))
    with pytest.raises(_HostedConflict) as renew:
        await provider.update(
            "t-bad",
            TaskPatchRequest(lease_owner="o", lease_instance_id="i", lease_duration_seconds=30),
        )
    assert renew.value._code == "invalid_request"  # renewal needs in_progress
    with pytest.raises(_HostedConflict) as transition:
        await provider.update("t-bad", TaskPatchRequest(status="suspended"))
    assert transition.value._code == "invalid_state_transition"


async def test_list_pages_filters_and_orders(provider: HostedTaskProvider) -> None:
    for n in range(7):
        await provider.create(_create(f"t-page-{n}", tags={"parity": str(n % 2)}))
    await provider.create(
        TaskCreateRequest(agent_name="other-agent", session_id="session-1", id="t-elsewhere")
    )
    everything = await provider.list(agent_name="agent", limit=3)  # three pages
    assert [t.id for t in everything] == [f"t-page-{n}" for n in reversed(range(7))]
    oldest_first = await provider.list(agent_name="agent", limit=2, order="asc")
    assert [t.id for t in oldest_first] == [f"t-page-{n}" for n in range(7)]
    odd = await provider.list(tag={"parity": "1"}, order="asc")
    assert [t.id for t in odd] == ["t-page-1", "t-page-3", "t-page-5"]
    assert [t.id for t in await provider.list(agent_name="other-agent")] == ["t-elsewhere"]
    after = await provider.list(agent_name="agent", order="asc", after="t-page-4")
    assert [t.id for t in after] == ["t-page-5", "t-page-6"]
    before = await provider.list(agent_name="agent", order="asc", before="t-page-2", limit=1)
    assert [t.id for t in before] == ["t-page-1"]  # then `after` it, up to `before`: nothing
    window = await provider.list(
        agent_name="agent", order="asc", after="t-page-1", before="t-page-4"
    )
    assert [t.id for t in window] == ["t-page-2", "t-page-3"]
    with pytest.raises(_HostedConflict) as bad:
        await provider.list(limit=0)
    assert (bad.value._code, bad.value.status_code) == ("invalid_request", 400)


async def test_each_caller_sees_only_its_own_tasks(
    clocked: tuple[FoundryEmulator, ScenarioClock],
) -> None:
    emu, _ = clocked
    alice_call, bob_call = emu.mint_call("task-alice"), emu.mint_call("task-bob")
    alice = _provider(emu, call_id=alice_call)
    bob = _provider(emu, call_id=bob_call)
    try:
        await alice.create(_create("t-shared-id", payload={"owner": "alice"}))
        await bob.create(_create("t-shared-id", payload={"owner": "bob"}))  # another partition
        await alice.create(_create("t-alice-only"))
        got = await bob.get("t-shared-id")
        assert got is not None and got.payload == {"owner": "bob"}
        assert await bob.get("t-alice-only") is None
        assert sorted(t.id for t in await alice.list()) == ["t-alice-only", "t-shared-id"]
        assert [t.id for t in await bob.list()] == ["t-shared-id"]
        with pytest.raises(TaskNotFound):
            await bob.delete("t-alice-only", force=True)
        stranger = _provider(emu, call_id="call-nobody-bound")
        with pytest.raises(TransportClassifiedError) as refused:
            await stranger.list()
        assert refused.value.status == 403
        await stranger.close()
    finally:
        await alice.close()
        await bob.close()
    assert emu.platform_requests["create_task"] >= 3 and emu.requests["put_item"] == 0


def test_tasks_survive_a_restart_with_a_data_file(tmp_path: Path) -> None:
    async def create(emu: FoundryEmulator) -> None:
        client = _provider(emu)
        await client.create(_create("t-durable", payload={"step": 3}))
        await client.close()

    async def read(emu: FoundryEmulator) -> object:
        client = _provider(emu)
        try:
            task = await client.get("t-durable")
            return None if task is None else task.payload
        finally:
            await client.close()

    data = tmp_path / "state.sqlite"
    with FoundryEmulator(data=data) as emu:
        asyncio.run(create(emu))
    with FoundryEmulator(data=data) as emu:
        assert asyncio.run(read(emu)) == {"step": 3}
    with FoundryEmulator() as emu:  # memory: nothing kept
        asyncio.run(create(emu))
        emu.stop()
        emu.start()
        assert asyncio.run(read(emu)) is None
