"""The wire contract seen from a raw HTTPS client: statuses, headers, envelopes, parameters."""

from __future__ import annotations

import base64
import json
import ssl
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from foundry_checkpoint.emulator import FoundryEmulator
from foundry_checkpoint.emulator._credential import token_for_user


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
    assert status == 200 and deleted["deleted"] is True and deleted.get("id") is None
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
    status, ref, _ = await raw.call("POST", path, body={"key": "k", "value": {}})
    assert status == 201 and ref["object"] == "state_store.item" and "value" not in ref
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
