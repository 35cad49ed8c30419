"""The wire contract seen from a raw HTTPS client: statuses, headers, envelopes, parameters."""

from __future__ import annotations

import base64
import json
import os
import ssl
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from azure.ai.agentserver.core.storage import (
    FoundryStateStore,
    FoundryStorageBadRequestError,
    JSONValue,
)
from langgraph.checkpoint.base import empty_checkpoint

from foundry_checkpoint import CheckpointTooLargeError, FoundryCheckpointer
from foundry_checkpoint._codec import INLINE_BUDGET, ITEM_LIMIT, encode
from foundry_checkpoint._store._limits import MAX_VALUE_BYTES
from foundry_checkpoint.emulator import FoundryEmulator
from foundry_checkpoint.emulator._credential import token_for_user
from tests.langgraph._util import cfg

from ._harness import client_kwargs, hosted_env


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


class Raw:
    """A minimal client of the emulator's REST surface."""

    def __init__(self, emu: FoundryEmulator, session: aiohttp.ClientSession) -> None:
        self.base = emu.endpoint + "/storage/"
        self.session = session
        self.auth = {"Authorization": f"Bearer {token_for_user('alice')}"}

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        raw_body: bytes | None = None,
        query: str = "api-version=v1",
        headers: dict[str, str] | None = None,
        auth: bool = True,
        base: str | None = None,
    ) -> tuple[int, Any, Any]:
        sent = dict(self.auth if auth else {})
        sent.update(headers or {})
        data = (
            raw_body
            if raw_body is not None
            else (json.dumps(body).encode() if body is not None else None)
        )
        if data is not None:
            sent["Content-Type"] = "application/json"
        url = (base or self.base) + path + (f"?{query}" if query else "")
        async with self.session.request(method, url, data=data, headers=sent) as response:
            text = await response.text()
            return response.status, json.loads(text) if text else None, response.headers

    async def new_store(self, **fields: Any) -> str:
        name = f"wire/{uuid.uuid4().hex}"
        status, body, _ = await self.call("POST", "state_stores", body={"name": name, **fields})
        assert status == 201, body
        return name


@pytest.fixture
async def raw(emu: FoundryEmulator) -> AsyncIterator[Raw]:
    context = ssl.create_default_context(cafile=emu.ca_file)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        yield Raw(emu, session)


def _error(body: Any) -> tuple[str, str | None]:
    error = body["error"]
    assert isinstance(error["message"], str) and error["message"]
    return error["code"], error.get("param")


async def test_store_crud_statuses_and_defaults(raw: Raw) -> None:
    name = await raw.new_store()
    status, store, _ = await raw.call("GET", f"state_stores/{b64(name)}")
    assert status == 200 and store["object"] == "state_store" and store["name"] == name
    assert store["user_isolation"] is False and store["item_ttl_seconds"] == 2_592_000
    status, body, headers = await raw.call("POST", "state_stores", body={"name": name})
    assert status == 409 and _error(body)[0] == "conflict" and "Retry-After" not in headers

    path = f"state_stores/{b64(name)}"
    status, store, _ = await raw.call("PATCH", path, body={"description": "d", "tags": {"a": "b"}})
    assert status == 200 and store["description"] == "d" and store["tags"] == {"a": "b"}
    status, store, _ = await raw.call("PATCH", path, body={"tags": None})
    assert status == 200 and store["description"] == "d" and not store.get("tags")
    status, store, _ = await raw.call("PATCH", path, body={"description": None})
    assert status == 200 and store.get("description") is None

    status, deleted, _ = await raw.call("DELETE", path)
    assert status == 200 and deleted["deleted"] is True and deleted["id"] == store["id"]
    status, deleted, _ = await raw.call("DELETE", path)
    assert status == 200 and deleted == {"object": "state_store", "name": name, "deleted": True}
    status, body, headers = await raw.call("GET", path)
    assert status == 404 and _error(body)[0] == "not_found" and "Retry-After" not in headers


async def test_put_is_201_then_200_with_etag_headers(raw: Raw) -> None:
    name = await raw.new_store(user_isolation=True, item_ttl_seconds=-1)
    item_path = f"state_stores/{b64(name)}/items/{b64('ключ/1')}"
    status, ref, headers = await raw.call(
        "PUT", item_path, body={"value": {"a": 1}, "tags": {"t": "1"}}
    )
    assert status == 201 and headers["ETag"] == ref["etag"] and ref["key"] == "ключ/1"
    status, ref2, headers = await raw.call("PUT", item_path, body={"value": {"a": 2}})
    assert status == 200 and headers["ETag"] == ref2["etag"] != ref["etag"]
    status, item, headers = await raw.call("GET", item_path)
    assert status == 200 and headers["ETag"] == item["etag"] == ref2["etag"]
    assert item["value"] == {"a": 2} and not item.get("tags")  # missing tags clear them

    status, body, headers = await raw.call(
        "PUT", item_path, body={"value": {}}, headers={"If-Match": ref["etag"]}
    )
    assert status == 412 and _error(body)[0] == "precondition_failed"
    assert headers["ETag"] == ref2["etag"] and "Retry-After" not in headers
    missing = f"state_stores/{b64(name)}/items/{b64('missing')}"
    status, body, headers = await raw.call(
        "PUT", missing, body={"value": {}}, headers={"If-Match": "*"}
    )
    assert status == 412 and "ETag" not in headers
    status, body, headers = await raw.call("DELETE", item_path, headers={"If-Match": ref["etag"]})
    assert status == 412 and headers["ETag"] == ref2["etag"]
    status, deleted, _ = await raw.call("DELETE", item_path, headers={"If-Match": ref2["etag"]})
    assert status == 200 and deleted == {
        "id": ref["id"],
        "object": "state_store.item",
        "key": "ключ/1",
        "deleted": True,
    }
    status, body, headers = await raw.call("GET", item_path)
    assert status == 404 and "ETag" not in headers


async def test_create_item_201_and_409(raw: Raw) -> None:
    name = await raw.new_store()
    path = f"state_stores/{b64(name)}/items"
    status, ref, headers = await raw.call("POST", path, body={"key": "k", "value": {}})
    assert status == 201 and ref["object"] == "state_store.item" and "value" not in ref
    assert headers["ETag"] == ref["etag"]  # as a put answers it
    status, body, headers = await raw.call("POST", path, body={"key": "k", "value": {}})
    assert status == 409 and "Retry-After" not in headers
    status, body, _ = await raw.call("POST", path, body={"value": {}})
    assert status == 400 and _error(body)[1] == "key"
    status, body, _ = await raw.call("POST", path, body={"key": "k2", "value": [1]})
    assert status == 400 and _error(body)[1] == "value"
    missing_store = f"state_stores/{b64('no-such-store-' + uuid.uuid4().hex)}/items"
    status, body, _ = await raw.call("POST", missing_store, body={"key": "k", "value": {}})
    assert status == 404


async def test_list_keys_query(raw: Raw) -> None:
    name = await raw.new_store()
    base = f"state_stores/{b64(name)}"
    for index in range(4):
        tags = {"p": str(index % 2), "all": "y"}
        await raw.call("PUT", f"{base}/items/{b64(f'k{index}')}", body={"value": {}, "tags": tags})
    status, page, _ = await raw.call(
        "GET", f"{base}/items:keys", query="api-version=v1&tags.p=1&tags.all=y&order=asc"
    )
    assert status == 200 and page["object"] == "list"
    assert sorted(entry["key"] for entry in page["data"]) == ["k1", "k3"]
    assert page["first_id"] == page["data"][0]["id"] and page["last_id"] == page["data"][-1]["id"]
    assert all(entry["tags"]["p"] == "1" for entry in page["data"])
    status, page, _ = await raw.call("GET", f"{base}/items:keys", query="api-version=v1&limit=3")
    assert status == 200 and len(page["data"]) == 3 and page["has_more"] is True
    status, page, _ = await raw.call(
        "GET", f"{base}/items:keys", query=f"api-version=v1&after={page['last_id']}"
    )
    assert status == 200 and len(page["data"]) == 1 and page["has_more"] is False
    for bad in ("abc", "0", "101", "1.5", "-1", ""):
        status, body, headers = await raw.call(
            "GET", f"{base}/items:keys", query=f"api-version=v1&limit={bad}"
        )
        assert status == 400 and _error(body)[1] == "limit" and "Retry-After" not in headers
    status, body, _ = await raw.call("GET", f"{base}/items:keys", query="api-version=v1&order=up")
    assert status == 400 and _error(body)[1] == "order"
    status, page, _ = await raw.call("GET", f"{base}/items:keys", query="api-version=v1&after=nope")
    assert status == 200 and page["data"] == [] and page["first_id"] is None


async def test_api_version_is_required(raw: Raw, emu: FoundryEmulator) -> None:
    for query in ("", "api-version=v2", "api-version="):
        status, body, headers = await raw.call("GET", f"state_stores/{b64('x')}", query=query)
        assert status == 400 and _error(body)[1] == "api-version" and "Retry-After" not in headers


async def test_bearer_token_is_required(raw: Raw) -> None:
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer "}):
        status, body, response_headers = await raw.call(
            "GET", f"state_stores/{b64('x')}", auth=False, headers=headers
        )
        assert status == 401 and _error(body)[0] == "unauthorized"
        assert "Retry-After" not in response_headers


async def test_malformed_bodies(raw: Raw) -> None:
    name = await raw.new_store()
    item = f"state_stores/{b64(name)}/items/{b64('k')}"
    for data in (b"{not json", b"", b"[1, 2]", b'"text"', b'{"value": NaN}', b"\xff\xfe"):
        status, body, _ = await raw.call("PUT", item, raw_body=data)
        assert status == 400, data
        assert _error(body)[0] in ("invalid_json", "invalid_request")
    status, body, _ = await raw.call("PUT", item, body={"value": {}, "tags": {"a": 1}})
    assert status == 400 and _error(body)[1] == "tags"
    status, body, _ = await raw.call("POST", "state_stores", body={"name": 5})
    assert status == 400 and _error(body)[1] == "name"
    status, body, _ = await raw.call(
        "POST", "state_stores", body={"name": "n", "user_isolation": "yes"}
    )
    assert status == 400 and _error(body)[1] == "user_isolation"
    status, body, _ = await raw.call(
        "POST", "state_stores", body={"name": "n", "item_ttl_seconds": "1"}
    )
    assert status == 400 and _error(body)[1] == "item_ttl_seconds"


async def test_names_and_keys_must_be_unpadded_base64url(raw: Raw) -> None:
    name = await raw.new_store()
    padded = base64.urlsafe_b64encode(b"k").decode()  # "aw=="
    # padded, impossible length, bad alphabet, not UTF-8, decodable but not canonical ("aQ" is)
    for segment in (padded, "a", "not*b64", "_w", "aX"):
        status, body, _ = await raw.call("GET", f"state_stores/{b64(name)}/items/{segment}")
        assert status == 400 and _error(body)[1] == "key", segment
    status, body, _ = await raw.call("GET", f"state_stores/{b64('x')}==")
    assert status == 400 and _error(body)[1] == "name"


async def test_routes_prefixes_and_methods(raw: Raw, emu: FoundryEmulator) -> None:
    name = await raw.new_store()
    host_root = emu.endpoint.split("/api/")[0]
    for prefix in ("/storage/", "/a/b/c/storage/", "/api/projects/other/storage/"):
        status, store, _ = await raw.call(
            "GET", f"state_stores/{b64(name)}", base=host_root + prefix
        )
        assert status == 200 and store["name"] == name
    status, body, _ = await raw.call("GET", "elsewhere")
    assert status == 404 and _error(body)[0] == "not_found"
    status, body, _ = await raw.call("PUT", f"state_stores/{b64(name)}")
    assert status == 405
    status, body, _ = await raw.call("POST", f"state_stores/{b64(name)}/items:keys")
    assert status == 405
    emu.reset_counts()
    await raw.call("GET", "elsewhere")
    await raw.call("GET", f"state_stores/{b64(name)}/items:keys", query="")
    assert emu.requests == {"list_keys": 1}


async def test_a_no_op_item_delete_omits_id(raw: Raw) -> None:
    name = await raw.new_store(user_isolation=True)
    path = f"state_stores/{b64(name)}/items/{b64('never-written')}"
    status, deleted, _ = await raw.call("DELETE", path)
    assert status == 200
    assert deleted == {"object": "state_store.item", "key": "never-written", "deleted": True}


async def test_store_description_limit(raw: Raw) -> None:
    status, body, _ = await raw.call(
        "POST", "state_stores", body={"name": f"wire/{uuid.uuid4().hex}", "description": "d" * 1025}
    )
    assert status == 400 and _error(body)[1] == "description"
    name = await raw.new_store(description="d" * 1024)  # at the limit
    path = f"state_stores/{b64(name)}"
    status, body, headers = await raw.call("PATCH", path, body={"description": "é" * 1025})
    assert status == 400 and _error(body)[1] == "description" and "Retry-After" not in headers
    status, store, _ = await raw.call("GET", path)
    assert status == 200 and store["description"] == "d" * 1024  # unchanged


@pytest.mark.parametrize(
    ("field", "value"),
    [("user_isolation", False), ("item_ttl_seconds", 60), ("name", "renamed")],
)
async def test_patch_naming_an_immutable_field_is_400(raw: Raw, field: str, value: Any) -> None:
    name = await raw.new_store(user_isolation=True, item_ttl_seconds=-1)
    path = f"state_stores/{b64(name)}"
    for body in ({field: value}, {"description": "d", field: value}):
        status, answer, headers = await raw.call("PATCH", path, body=body)
        assert status == 400 and _error(answer) == ("invalid_request", field)
        assert "Retry-After" not in headers
    status, store, _ = await raw.call("GET", path)
    assert (store["name"], store["user_isolation"], store["item_ttl_seconds"]) == (name, True, -1)
    assert "description" not in store  # the refused PATCH changed nothing


async def test_list_stores_by_created_at_then_id() -> None:
    """``GET state_stores``: every store, ordered by ``(created_at, id)`` (so stores created
    within one second come back by id, not by creation order), in the list envelope, paged with
    ``limit`` and ``after`` in either order."""
    now = [1_000.0]
    async with FoundryEmulator(seed=3, clock=lambda: now[0]) as emu:
        context = ssl.create_default_context(cafile=emu.ca_file)
        connector = aiohttp.TCPConnector(ssl=context)
        async with aiohttp.ClientSession(connector=connector) as session:
            raw = Raw(emu, session)
            created: list[dict[str, Any]] = []
            for second, count in ((1_000.0, 6), (1_001.0, 1), (1_002.0, 5)):
                now[0] = second
                for index in range(count):
                    status, store, _ = await raw.call(
                        "POST", "state_stores", body={"name": f"s{second:.0f}-{index}"}
                    )
                    assert status == 201
                    created.append(store)
            expected = sorted(created, key=lambda s: (s["created_at"], s["id"]))
            assert [s["name"] for s in expected] != [s["name"] for s in created]  # ids decide

            status, page, _ = await raw.call("GET", "state_stores")
            assert status == 200 and page["object"] == "list"
            assert page["data"] == expected[::-1]  # desc by default; the full descriptors
            assert page["first_id"] == expected[-1]["id"] and page["last_id"] == expected[0]["id"]
            assert page["has_more"] is False

            for order, want in (("asc", expected), ("desc", expected[::-1])):
                seen: list[str] = []
                query = f"api-version=v1&order={order}&limit=5"
                while True:
                    status, page, _ = await raw.call("GET", "state_stores", query=query)
                    assert status == 200 and len(page["data"]) <= 5
                    seen.extend(s["id"] for s in page["data"])
                    if not page["has_more"]:
                        break
                    query = f"api-version=v1&order={order}&limit=5&after={page['last_id']}"
                assert seen == [s["id"] for s in want]

            status, page, _ = await raw.call(
                "GET", "state_stores", query="api-version=v1&after=nope"
            )
            assert status == 200 and page["data"] == [] and page["first_id"] is None
            for bad, param in (("limit=0", "limit"), ("limit=101", "limit"), ("order=up", "order")):
                status, body, _ = await raw.call(
                    "GET", "state_stores", query=f"api-version=v1&{bad}"
                )
                assert status == 400 and _error(body)[1] == param
            status, body, _ = await raw.call("GET", "state_stores", query="")
            assert status == 400 and _error(body)[1] == "api-version"
            status, body, _ = await raw.call("GET", "state_stores", auth=False)
            assert status == 401
            assert emu.requests["list_stores"] == 13  # every one routed and counted


async def test_the_sdk_client_reads_the_spec_answers(
    emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's own client against the spec's answers: an ``ETag`` on create, ``id`` omitted
    from a no-op delete (its model reads None), the description limit as a typed 400."""
    hosted_env(monkeypatch)
    name = f"wire/{uuid.uuid4().hex}"
    store = await FoundryStateStore.get_or_create(
        name, user_isolation=True, item_ttl_seconds=-1, description="d" * 1024,
        **client_kwargs(emu),
    )  # fmt: skip
    try:
        ref = await store.create_item("k", {"a": 1})
        assert ref.etag.startswith('"') and ref.key == "k"
        absent = await store.delete_item("absent")
        assert absent.id is None and absent.deleted is True and absent.key == "absent"
        deleted = await store.delete_item("k")
        assert deleted.id == ref.id
        with pytest.raises(FoundryStorageBadRequestError) as info:
            await store.update(description="d" * 1025)
        assert info.value.param == "description"
        assert (await store.get()).description == "d" * 1024
        assert (await store.update(description="shorter")).description == "shorter"
    finally:
        gone = await store.delete()
        assert gone.id is not None
        assert (await store.delete()).id is None  # a no-op store delete: id omitted
        await store.aclose()
    with pytest.raises(FoundryStorageBadRequestError) as info:
        await FoundryStateStore.get_or_create(
            f"wire/{uuid.uuid4().hex}", description="d" * 1025, **client_kwargs(emu)
        )
    assert info.value.param == "description"


def test_our_hosted_client_with_no_op_deletes(
    emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting what is not there (a second delete, a thread never written) goes through the
    hosted client without an error, now that such deletes omit ``id``."""
    hosted_env(monkeypatch)
    with FoundryCheckpointer(
        store_prefix=f"w{uuid.uuid4().hex[:10]}",
        credential=emu.credential(user="alice"),
        endpoint=emu.endpoint,
        connection_verify=emu.ca_file,
    ) as saver:
        config = saver.put(cfg("t1"), empty_checkpoint(), {"source": "input", "step": -1}, {})
        saver.put_writes(config, [("c", 1)], "task-1")
        emu.reset_counts()
        saver.delete_thread("t1")
        assert emu.requests["delete_item"] >= 2
        saver.delete_thread("t1")
        saver.delete_thread("never-written")
        assert saver.get_tuple(cfg("t1")) is None
        assert list(saver.list(None)) == []


async def test_the_item_limit_is_1_000_000_bytes_and_the_budget_fits_it(
    emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "1 MB" on its stricter reading: the emulator (and the embedded engine) refuse a value
    of 1,000,001 bytes, and the largest value the codec writes inline is accepted."""
    assert MAX_VALUE_BYTES == ITEM_LIMIT == INLINE_BUDGET == 1_000_000
    hosted_env(monkeypatch)
    store = await FoundryStateStore.get_or_create(
        f"wire/{uuid.uuid4().hex}", user_isolation=True, item_ttl_seconds=-1, **client_kwargs(emu)
    )
    try:
        key = "k" * 128
        size = (INLINE_BUDGET // 4) * 3  # find the largest raw payload the budget takes inline
        noise = os.urandom(size)
        while True:
            try:
                value = await encode(
                    noise[:size], key=key, tags=None, extra=None, spill=None, namespace=None,
                    where="x", compress=False,
                )  # fmt: skip
                break
            except CheckpointTooLargeError:
                size -= 1
        body = len(json.dumps({"key": key, "value": value}).encode("utf-8"))
        assert body <= INLINE_BUDGET
        assert body > INLINE_BUDGET - 8  # the very largest inline value
        await store.create_item(key, value)
        item = await store.get_item(key)
        assert item is not None and item.value == value
        over: dict[str, JSONValue] = {"d": "x" * (MAX_VALUE_BYTES - len(json.dumps({"d": ""})) + 1)}
        assert len(json.dumps(over).encode("utf-8")) == 1_000_001
        with pytest.raises(FoundryStorageBadRequestError) as info:
            await store.set_item("over", over)
        assert info.value.param == "value"
    finally:
        await store.delete()
        await store.aclose()
