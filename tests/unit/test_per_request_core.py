"""The core's per-request identity rule, and reads of unknown threads that create no store."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import pytest
from azure.ai.agentserver.core import FoundryAgentRequestContext, get_request_context

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint._store._backend import Caller
from foundry_checkpoint._store._embedded import EmbeddedBackend
from foundry_checkpoint._store._hosted import HostedBackend
from foundry_checkpoint._store._sdk_local import SdkLocalBackend
from foundry_checkpoint_maf import FoundryCheckpointStorage
from tests._request import in_request
from tests.conftest import StoreEnv


def request(call_id: str | None = None, user_id: str | None = None) -> AbstractContextManager[None]:
    return in_request(FoundryAgentRequestContext(call_id=call_id, user_id=user_id))


_BACKENDS: dict[str, type[HostedBackend | EmbeddedBackend | SdkLocalBackend]] = {
    "hosted": HostedBackend,
    "local-sqlite": EmbeddedBackend,
    "local-sdk": SdkLocalBackend,
}


def current_caller(kind: str, user_id: str | None = None) -> Caller:
    """Who a call is for now on the built-in backend ``kind`` (as a core captures it)."""
    return _BACKENDS[kind].caller(user_id, get_request_context())


def test_hosted_caller_rule() -> None:
    """Hosted: within a request (a call id) the request's identity wins over ``user_id=``."""
    assert current_caller("hosted") == Caller("self")
    assert current_caller("hosted", "ann") == Caller("delegated:ann")
    with request(call_id="c1"):
        assert current_caller("hosted").key == "call:c1"
        assert current_caller("hosted", "ann").key == "call:c1"  # the call id wins
    with request(call_id="c1", user_id="bob"):
        assert current_caller("hosted").key == "user:bob"  # stable across bob's requests
        assert current_caller("hosted", "ann").key == "user:bob"
    with request(user_id="bob"):  # no call id: the service sees nothing but the token
        assert current_caller("hosted").key == "self"
        assert current_caller("hosted", "ann").key == "delegated:ann"
    with request(user_id=""):
        assert current_caller("hosted") == Caller("self")
    for kind in ("hosted", "local-sqlite", "local-sdk"):
        assert current_caller(kind).partition == ("local" if kind == "local-sqlite" else "")


def test_local_caller_rule() -> None:
    """Local: context user id > ``user_id=`` > "local"; a call id alone changes nothing."""
    assert current_caller("local-sqlite") == Caller("user:local", "local")
    assert current_caller("local-sqlite", "ann") == Caller("user:ann", "ann")
    with request(call_id="c1"):
        assert current_caller("local-sqlite", "ann") == Caller("user:ann", "ann")
        assert current_caller("local-sqlite") == Caller("user:local", "local")
    with request(call_id="c1", user_id="bob"):
        assert current_caller("local-sqlite", "ann") == Caller("user:bob", "bob")
    with request(user_id="bob"):
        assert current_caller("local-sqlite", "ann") == Caller("user:bob", "bob")
        assert current_caller("local-sdk", "ann") == Caller("user:bob", "")


def test_the_call_id_wins_over_user_id_in_the_cache_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A hosted saver built with delegation keys its caches by the request, not user_id=."""
    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "unit")
    saver = FoundryCheckpointer(
        user_id="frontdoor",
        trusted_delegation=True,
        endpoint="https://example.invalid",
        retry_total=0,
    )
    try:
        core = saver._core
        assert core.user_key() == "delegated:frontdoor"
        with request(call_id="alice-call"):
            assert core.user_key() == "call:alice-call"
            assert core.caller() == Caller("call:alice-call")
        with request(call_id="bob-call", user_id="bob"):
            assert core.user_key() == "user:bob"
    finally:
        saver.close()


def test_reads_of_unknown_threads_create_no_store(store_env: StoreEnv) -> None:
    emu = store_env.emulator
    if emu is not None:
        emu.reset_counts()
    config: Any = {"configurable": {"thread_id": "never-written"}}
    with FoundryCheckpointer(**store_env.kwargs()) as saver:
        assert saver.get_tuple(config) is None
        assert list(saver.list(config)) == []
        assert list(saver.list(None)) == []
        saver.delete_thread("never-written")
        saver.prune(["never-written"])
        saver.delete_for_runs(["r"])
        saver.copy_thread("never-written", "target")
        assert saver.gc(grace_seconds=0).scanned_scopes == 0
        assert saver.get_tuple({"configurable": {"thread_id": "target"}}) is None
        if emu is not None:
            assert emu.requests["create_store"] == 0
            assert emu.requests["put_item"] == 0
        else:
            from azure.ai.agentserver.core.storage import FoundryStorageNotFoundError

            from foundry_checkpoint._store._embedded import default_engine
            from foundry_checkpoint._store._naming import store_name

            core = saver._core
            names = [core.name_for("never-written"), core.name_for("target")]
            for name in [*names, store_name(core.prefix, "index")]:
                with pytest.raises(FoundryStorageNotFoundError):
                    default_engine().get_store(name)
    with FoundryCheckpointStorage("never-used", **store_env.kwargs()) as storage:
        import asyncio

        from agent_framework import WorkflowCheckpointException

        async def reads() -> None:
            assert await storage.get_latest(workflow_name="w") is None
            assert await storage.list_checkpoints(workflow_name="w") == []
            assert await storage.list_checkpoint_ids(workflow_name="w") == []
            assert await storage.delete("c") is False
            with pytest.raises(WorkflowCheckpointException):
                await storage.load("c")

        asyncio.run(reads())
        if emu is not None:
            assert emu.requests["create_store"] == 0


def test_hosted_user_id_without_declared_delegation_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every adapter constructor: ``user_id=`` in hosted mode needs ``trusted_delegation``."""
    from foundry_checkpoint.errors import InvalidArgumentError, UntrustedDelegationError
    from foundry_checkpoint_autogen import AutoGenStateStore
    from foundry_checkpoint_maf import FoundryCheckpointStorageProvider

    monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "unit")
    hosted = {"endpoint": "https://example.invalid", "retry_total": 0}
    makers: list[Any] = [
        FoundryCheckpointer,
        FoundryCheckpointStorage,
        FoundryCheckpointStorageProvider,
        AutoGenStateStore,
    ]
    for make in makers:
        with pytest.raises(UntrustedDelegationError) as caught:
            make(user_id="frontdoor", **hosted)
        assert isinstance(caught.value, InvalidArgumentError)
        message = str(caught.value)
        assert "call id" in message and "trusted_delegation=True" in message
        made = make(user_id="frontdoor", trusted_delegation=True, **hosted)
        made.close()
        make(**hosted).close()  # no user_id: the request context isolates users
    with pytest.raises(InvalidArgumentError):
        FoundryCheckpointer(trusted_delegation="yes", **hosted)  # type: ignore[arg-type]
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT")
    FoundryCheckpointer(user_id="frontdoor").close()  # local mode: the partition name


def test_local_partition_follows_the_context_user_then_user_id(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The embedded store: a context user id wins over ``user_id=``; a call id alone does not."""
    from langgraph.checkpoint.base import empty_checkpoint

    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path))
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

    def write(saver: FoundryCheckpointer, who: str) -> None:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"who": who}
        checkpoint["channel_versions"] = {"who": 1}
        saver.put(config, checkpoint, {"source": "loop", "step": 0}, {"who": 1})

    def who(saver: FoundryCheckpointer) -> str | None:
        found = saver.get_tuple(config)
        return None if found is None else str(found.checkpoint["channel_values"]["who"])

    with FoundryCheckpointer(user_id="ann") as saver:
        with request(call_id="c1", user_id="bob"):
            write(saver, "bob")
        with request(call_id="c2"):  # a call id alone: still ann's partition
            write(saver, "ann")
        assert who(saver) == "ann"
        with request(user_id="bob"):
            assert who(saver) == "bob"
            assert [t for t in saver.list_threads()] == ["t"]
        with request(user_id="cy"):
            assert who(saver) is None and saver.list_threads() == []
    with FoundryCheckpointer() as saver, request(call_id="c3"):
        assert who(saver) is None  # the "local" user's partition: nobody wrote there
