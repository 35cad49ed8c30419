"""``HostedStore``: the SDK's requests, its ``list_keys`` read into light records.

Every listing is made twice, by the SDK's ``FoundryStateStore`` and by ``HostedStore`` on the
same store, and the pages must agree field by field; a listing stays one request. The shared
session trusts the environment (proxies, ``.netrc``) only when it names some.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import FoundryStateStore, FoundryStorageNotFoundError

from foundry_checkpoint._store._hosted import (
    HostedClients,
    HostedStore,
    env_settings_present,
    page_of,
)
from foundry_checkpoint._store._records import KeyRecord, PageRecord
from foundry_checkpoint.emulator import FoundryEmulator

from ._harness import client_kwargs, hosted_env

_FIELDS = ("id", "key", "etag", "created_at", "updated_at", "tags")


def _view(page: Any) -> tuple[Any, ...]:
    keys = tuple(
        tuple(dict(getattr(k, f) or {}) if f == "tags" else getattr(k, f) for f in _FIELDS)
        for k in page.keys
    )
    return keys, page.first_id, page.last_id, page.has_more


async def _pair(emu: FoundryEmulator, name: str) -> tuple[FoundryStateStore, HostedStore]:
    sdk = await FoundryStateStore.get_or_create(
        name, user_isolation=True, item_ttl_seconds=-1, **client_kwargs(emu)
    )
    ours = HostedStore(name, **client_kwargs(emu))
    return sdk, ours


async def test_pages_match_the_sdk(monkeypatch: pytest.MonkeyPatch, emu: FoundryEmulator) -> None:
    hosted_env(monkeypatch)
    sdk, ours = await _pair(emu, f"hs/{uuid.uuid4().hex}")
    try:
        for i in range(7):
            tags = {"parity": "even" if i % 2 == 0 else "odd"}
            if i == 3:
                tags = {}
            await sdk.create_item(f"k{i}", {"i": i}, tags=tags or None)
        first = await sdk.list_keys(limit=3)
        cases: list[dict[str, Any]] = [
            {},
            {"order": "asc"},
            {"limit": 2},
            {"limit": 3, "after": first.last_id},
            {"before": first.last_id, "order": "asc"},
            {"tags": {"parity": "even"}},
            {"tags": {"parity": "odd"}, "limit": 1, "order": "asc"},
            {"tags": {"parity": "none"}},
            {"after": "it_does_not_exist"},
        ]
        emu.reset_counts()
        for case in cases:
            theirs = _view(await sdk.list_keys(**case))
            mine = await ours.list_keys(**case)
            assert isinstance(mine, PageRecord)
            assert all(isinstance(k, KeyRecord) for k in mine.keys)
            assert _view(mine) == theirs, case
        assert emu.requests["list_keys"] == 2 * len(cases)
        assert sum(emu.requests.values()) == 2 * len(cases)
        untagged = [k for k in (await ours.list_keys()).keys if k.key == "k3"]
        assert len(untagged) == 1 and untagged[0].tags is None
    finally:
        await sdk.delete()
        await sdk.aclose()
        await ours.aclose()


async def test_errors_match_the_sdk(monkeypatch: pytest.MonkeyPatch, emu: FoundryEmulator) -> None:
    hosted_env(monkeypatch)
    name = f"hs/{uuid.uuid4().hex}"
    sdk = FoundryStateStore(name, **client_kwargs(emu))
    ours = HostedStore(name, **client_kwargs(emu))
    try:
        with pytest.raises(FoundryStorageNotFoundError):
            await sdk.list_keys()
        with pytest.raises(FoundryStorageNotFoundError):
            await ours.list_keys()
        with pytest.raises(ValueError, match="mutually exclusive"):
            await ours.list_keys(after="a", before="b")
    finally:
        await sdk.aclose()
        await ours.aclose()


async def test_hosted_clients_are_hosted_stores(
    monkeypatch: pytest.MonkeyPatch, emu: FoundryEmulator
) -> None:
    hosted_env(monkeypatch)
    kwargs = client_kwargs(emu)
    clients = HostedClients(
        endpoint=kwargs.pop("endpoint"),
        user_id=None,
        item_ttl_seconds=-1,
        credential=kwargs.pop("credential"),
        client_kwargs=kwargs,
    )
    name = f"hs/{uuid.uuid4().hex}"
    try:
        created = await clients.get_or_create(name)
        bound = clients.client(name)
        assert type(created) is HostedStore and type(bound) is HostedStore
        await created.set_item("k", {"v": 1}, tags={"t": "1"})
        page = await bound.list_keys(tags={"t": "1"})
        assert [(k.key, dict(k.tags or {})) for k in page.keys] == [("k", {"t": "1"})]
        await created.delete()
        await created.aclose()
        await bound.aclose()
    finally:
        await clients.aclose()


def test_page_record_reads_an_empty_body() -> None:
    page = page_of("")
    assert (list(page.keys), page.first_id, page.last_id, page.has_more) == ([], None, None, False)


_PROXY_VARS = ("http_proxy", "https_proxy", "ws_proxy", "wss_proxy", "all_proxy")


def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in _PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


async def _session_trusts_env(**client: Any) -> bool:
    clients = HostedClients(
        endpoint="https://example.invalid",
        user_id=None,
        item_ttl_seconds=-1,
        credential=None,
        client_kwargs=client,
    )
    try:
        clients.pipeline_kwargs()
        return bool(clients._session.trust_env)
    finally:
        await clients.aclose()


@pytest.mark.parametrize(
    ("setting", "trusted"),
    [("none", False), ("https_proxy", True), ("HTTP_PROXY", True), ("netrc", True)],
)
async def test_session_trusts_the_environment_only_when_it_names_something(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str, trusted: bool
) -> None:
    _clean_env(monkeypatch, tmp_path)
    if setting == "netrc":
        netrc = tmp_path / "netrc"
        netrc.write_text("machine example.invalid login a password b\n")
        netrc.chmod(0o600)
        monkeypatch.setenv("NETRC", str(netrc))
    elif setting != "none":
        monkeypatch.setenv(setting, "http://proxy.invalid:3128")
    assert env_settings_present() is trusted
    assert await _session_trusts_env() is trusted
    assert await _session_trusts_env(use_env_settings=False) is False
