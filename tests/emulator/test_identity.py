"""The emulator's caller-resolution rule: call id, then ``x-ms-user-id`` (trusted callers only),
then token.

Requests go through the real ``FoundryStateStore`` client, which forwards the call id from the
request context (``azure.ai.agentserver.core.set_request_context``) exactly as in a hosted agent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from azure.ai.agentserver.core import (
    FoundryAgentRequestContext,
)
from azure.ai.agentserver.core.storage import FoundryStateStore, FoundryStorageApiError

from foundry_checkpoint.emulator import FoundryEmulator
from tests._request import in_request

from ._harness import client_kwargs, hosted_env


def request_for(call_id: str | None, user_id: str | None = None) -> AbstractContextManager[None]:
    """Run the body as the hosts do: inside a request context carrying the platform headers."""
    return in_request(FoundryAgentRequestContext(call_id=call_id, user_id=user_id))


@pytest.fixture
def open_store(emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """Open an isolated store as the agent's own identity (token user ``agent``, or ``as_``)."""
    hosted_env(monkeypatch)

    @asynccontextmanager
    async def _open(
        name: str, as_: str = "agent", **extra: Any
    ) -> AsyncIterator[FoundryStateStore]:
        store = await FoundryStateStore.get_or_create(
            name, user_isolation=True, **client_kwargs(emu, as_, **extra)
        )
        try:
            yield store
        finally:
            await store.aclose()

    return _open


async def test_call_ids_partition_one_client_by_user(emu: FoundryEmulator, open_store: Any) -> None:
    name = f"id/{uuid.uuid4().hex}"
    alice_call, bob_call = emu.mint_call("alice"), emu.mint_call("bob")
    async with open_store(name) as store:
        with request_for(alice_call):
            await store.set_item("main", {"owner": "alice"})
        with request_for(bob_call):
            assert await store.get_item("main") is None
            await store.set_item("main", {"owner": "bob"})
        with request_for(alice_call):
            item = await store.get_item("main")
            assert item is not None and item.value == {"owner": "alice"}
            assert [k.key for k in (await store.list_keys()).keys] == ["main"]
        # without a call id the request is the agent's own: its partition is empty
        assert await store.get_item("main") is None
        assert (await store.list_keys()).keys == []
    # a second call id bound to alice reaches the same partition (a later request of hers)
    later = emu.mint_call("alice")
    async with open_store(name) as store:
        with request_for(later):
            item = await store.get_item("main")
            assert item is not None and item.value == {"owner": "alice"}


async def test_call_id_wins_over_the_delegated_user_and_the_token(
    emu: FoundryEmulator, open_store: Any, trusted_caller: str
) -> None:
    name = f"id/{uuid.uuid4().hex}"
    async with open_store(name, trusted_caller, user_id="carol") as store:
        await store.set_item("k", {"owner": "carol"})  # delegated x-ms-user-id, no call id
        with request_for(emu.mint_call("dave")):
            assert await store.get_item("k") is None
            await store.set_item("k", {"owner": "dave"})
    async with open_store(name, trusted_caller) as store:  # the token alone: its own partition
        assert await store.get_item("k") is None
    async with open_store(name, "carol") as store:  # carol's own token: the same partition
        item = await store.get_item("k")
        assert item is not None and item.value == {"owner": "carol"}
    async with open_store(name, trusted_caller, user_id="carol") as store:
        item = await store.get_item("k")
        assert item is not None and item.value == {"owner": "carol"}


async def test_an_untrusted_caller_s_delegated_user_is_ignored(
    emu: FoundryEmulator, open_store: Any
) -> None:
    """Strict (default) mode: ``x-ms-user-id`` from a caller nobody trusted falls back to the
    caller's token, as the SDK's TypeSpec says the service does."""
    assert not emu.trusted_callers
    name = f"id/{uuid.uuid4().hex}"
    async with open_store(name, user_id="carol") as for_carol, open_store(name) as agent:
        await for_carol.set_item("k", {"owner": "whoever"})
        item = await agent.get_item("k")  # the agent's own partition: the header was ignored
        assert item is not None and item.value == {"owner": "whoever"}
        async with open_store(name, user_id="dave") as for_dave:
            assert [k.key for k in (await for_dave.list_keys()).keys] == ["k"]
    async with open_store(name, "carol") as carol:
        assert await carol.get_item("k") is None


async def test_trusting_every_caller_restores_delegation_from_anyone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hosted_env(monkeypatch)
    name = f"id/{uuid.uuid4().hex}"
    async with FoundryEmulator(trusted_callers=["*"]) as emu:
        assert emu.trusted_callers == {"*"}
        for_carol = await FoundryStateStore.get_or_create(
            name, user_isolation=True, **client_kwargs(emu, "anyone", user_id="carol")
        )
        carol = await FoundryStateStore.get_or_create(
            name, user_isolation=True, **client_kwargs(emu, "carol")
        )
        try:
            await for_carol.set_item("k", {"for": "carol"})
            item = await carol.get_item("k")
            assert item is not None and item.value == {"for": "carol"}
        finally:
            await for_carol.aclose()
            await carol.aclose()
    with pytest.raises(ValueError):
        FoundryEmulator(trusted_callers=[""])


async def test_the_context_user_id_is_not_sent_to_the_store(
    emu: FoundryEmulator, open_store: Any
) -> None:
    """``x-agent-user-id`` is container-side only: without a call id it changes nothing."""
    name = f"id/{uuid.uuid4().hex}"
    async with open_store(name) as store:
        with request_for(None, user_id="erin"):
            await store.set_item("k", {"owner": "agent"})
        item = await store.get_item("k")
        assert item is not None and item.value == {"owner": "agent"}


async def test_unknown_call_id_is_forbidden_on_every_call_type(
    emu: FoundryEmulator, open_store: Any
) -> None:
    name = f"id/{uuid.uuid4().hex}"
    async with open_store(name) as store:
        await store.set_item("k", {"v": 1})
        with request_for("call-the-platform-never-minted"):
            for attempt in (
                store.get(),
                store.get_item("k"),
                store.set_item("k", {"v": 2}),
                store.delete_item("k"),
                store.list_keys(),
            ):
                with pytest.raises(FoundryStorageApiError) as info:
                    await attempt
                assert info.value.status_code == 403
        item = await store.get_item("k")
        assert item is not None and item.value == {"v": 1}  # nothing changed


@pytest.mark.emulator
def test_bind_call_checks_its_input() -> None:
    emu = FoundryEmulator()
    emu.bind_call("c-1", "alice")
    emu.bind_call("c-1", "alice")  # the same binding again is fine
    with pytest.raises(ValueError, match="already bound"):
        emu.bind_call("c-1", "bob")
    for call_id, user in (("", "alice"), ("  ", "alice"), ("c-2", "")):
        with pytest.raises(ValueError):
            emu.bind_call(call_id, user)
    assert emu.user_for_call("c-2") is None
    minted = {emu.mint_call("alice") for _ in range(50)}
    assert len(minted) == 50 and all(emu.user_for_call(c) == "alice" for c in minted)


@pytest.mark.emulator
def test_bindings_survive_a_restart() -> None:
    emu = FoundryEmulator()
    call_id = emu.mint_call("alice")
    with emu:
        pass
    with emu:
        assert emu.user_for_call(call_id) == "alice"


@pytest.mark.emulator
def test_emulator_command_binds_call_ids(tmp_path: Path) -> None:
    """``python -m foundry_checkpoint.emulator --bind CALL_ID=USER`` serves that binding, and
    ``--trust-delegation CALLER`` honours that caller's ``x-ms-user-id`` (no one else's)."""
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        "AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING": "true",
    }
    bad = subprocess.run(
        [sys.executable, "-m", "foundry_checkpoint.emulator", "--bind", "no-user"],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "CALL_ID=USER" in bad.stderr
    empty = subprocess.run(
        [sys.executable, "-m", "foundry_checkpoint.emulator", "--trust-delegation", " "],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )  # fmt: skip
    assert empty.returncode == 2 and "caller" in empty.stderr
    server = subprocess.Popen(
        [sys.executable, "-m", "foundry_checkpoint.emulator", "--port", "0",
         "--bind", "call-a=alice", "--bind", "call-b=bob", "--trust-delegation", "front"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        endpoint = server.stdout.readline().strip().removeprefix("endpoint: ")
        ca_file = server.stdout.readline().strip().removeprefix("ca_file: ")
        script = (
            "import asyncio, sys\n"
            "from azure.ai.agentserver.core import FoundryAgentRequestContext, "
            "set_request_context\n"
            "from azure.ai.agentserver.core.storage import FoundryStateStore\n"
            "from foundry_checkpoint.emulator import EmulatorCredential\n"
            "async def main():\n"
            "    store = await FoundryStateStore.get_or_create('s', EmulatorCredential('agent'),"
            " sys.argv[1], user_isolation=True, connection_verify=sys.argv[2])\n"
            "    for call, value in (('call-a', 'A'), ('call-b', 'B')):\n"
            "        set_request_context(FoundryAgentRequestContext(call_id=call))\n"
            "        await store.set_item('k', {'v': value})\n"
            "    seen = []\n"
            "    for call in ('call-a', 'call-b'):\n"
            "        set_request_context(FoundryAgentRequestContext(call_id=call))\n"
            "        seen.append((await store.get_item('k')).value['v'])\n"
            "    await store.aclose()\n"
            "    set_request_context(FoundryAgentRequestContext())\n"
            "    for user in ('front', 'agent'):\n"
            "        store = await FoundryStateStore.get_or_create('s', EmulatorCredential(user),"
            " sys.argv[1], user_isolation=True, connection_verify=sys.argv[2], user_id='zed')\n"
            "        await store.set_item('d', {'v': user})\n"
            "        await store.aclose()\n"
            "    zed = await FoundryStateStore.get_or_create('s', EmulatorCredential('zed'),"
            " sys.argv[1], user_isolation=True, connection_verify=sys.argv[2])\n"
            "    seen.append((await zed.get_item('d')).value['v'])\n"
            "    await zed.aclose()\n"
            "    print(''.join(seen))\n"
            "asyncio.run(main())\n"
        )
        hosted = {**env, "FOUNDRY_HOSTING_ENVIRONMENT": "1"}
        run = subprocess.run(
            [sys.executable, "-c", script, endpoint, ca_file],
            capture_output=True, text=True, env=hosted, check=False, timeout=120,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "ABfront"  # only the trusted caller delegated to zed
    finally:
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=60) == 0
