"""Hostile request bodies get 413/400, never 500, only a few bodies are read at once, and a
slow engine call does not hold up the requests that do not need it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest

from foundry_checkpoint._store._engine import StateEngine
from foundry_checkpoint.emulator import FoundryEmulator
from foundry_checkpoint.emulator._app import _CONCURRENT_BODY_READS, CLIENT_MAX_BODY_BYTES

from .test_wire import Raw, _error, b64, raw  # noqa: F401  (raw is a fixture)


async def test_an_oversized_body_is_413(raw: Raw) -> None:  # noqa: F811
    name = await raw.new_store(user_isolation=True)
    path = f"state_stores/{b64(name)}/items/{b64('k')}"
    body = b'{"value": {"x": "' + b"a" * (CLIENT_MAX_BODY_BYTES + 10) + b'"}}'
    status, answer, _ = await raw.call("PUT", path, raw_body=body)
    assert status == 413 and _error(answer)[0] == "payload_too_large"


async def test_an_oversized_chunked_body_is_413(raw: Raw) -> None:  # noqa: F811
    name = await raw.new_store(user_isolation=True)
    url = raw.base + f"state_stores/{b64(name)}/items/{b64('k')}?api-version=v1"
    chunk = b"a" * (1 << 20)

    async def stream() -> AsyncIterator[bytes]:  # no Content-Length: read until the cap
        yield b'{"value": {"x": "'
        for _ in range(CLIENT_MAX_BODY_BYTES // len(chunk) + 2):
            yield chunk
        yield b'"}}'

    headers = {**raw.auth, "Content-Type": "application/json"}
    async with raw.session.put(url, data=stream(), headers=headers) as response:
        assert response.status == 413
        assert _error(json.loads(await response.text()))[0] == "payload_too_large"


@pytest.mark.parametrize("depth", [100_000, 1_000_000])
async def test_json_nested_too_deeply_is_400(raw: Raw, depth: int) -> None:  # noqa: F811
    name = await raw.new_store(user_isolation=True)
    path = f"state_stores/{b64(name)}/items/{b64('k')}"
    body = b'{"value": {"x": ' + b"[" * depth + b"]" * depth + b"}}"
    status, answer, _ = await raw.call("PUT", path, raw_body=body)
    assert status == 400 and _error(answer)[0] == "invalid_json"


async def test_only_a_few_bodies_are_read_at_once(
    raw: Raw,  # noqa: F811
    emu: FoundryEmulator,
) -> None:
    name = await raw.new_store(user_isolation=True)
    release = asyncio.Event()
    headers = {**raw.auth, "Content-Type": "application/json"}

    async def upload(i: int) -> int:
        url = raw.base + f"state_stores/{b64(name)}/items/{b64(f'k{i}')}?api-version=v1"

        async def stream() -> AsyncIterator[bytes]:
            yield b'{"value": {"x": '
            await release.wait()  # hold the body open until every upload has started
            yield b"1}}"

        async with raw.session.put(url, data=stream(), headers=headers) as response:
            return response.status

    uploads = [asyncio.create_task(upload(i)) for i in range(3 * _CONCURRENT_BODY_READS)]
    for _ in range(600):  # wait until the server has as many readers as it allows
        if emu._app.body_reads[0] >= _CONCURRENT_BODY_READS:
            break
        await asyncio.sleep(0.05)
    in_flight, _ = emu._app.body_reads
    release.set()
    statuses = await asyncio.gather(*uploads)
    assert in_flight == _CONCURRENT_BODY_READS
    assert emu._app.body_reads[1] == _CONCURRENT_BODY_READS  # never more, however many wait
    assert sorted(set(statuses)) == [201]


async def test_a_slow_engine_call_does_not_stall_the_loop(
    raw: Raw,  # noqa: F811
    emu: FoundryEmulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = await raw.new_store(user_isolation=True)
    engine = emu._app._engine
    assert isinstance(engine, StateEngine)
    get_store = engine.get_store
    entered = asyncio.Event()
    loop = asyncio.get_running_loop()

    def blocking_get_store(name: str) -> dict[str, object]:
        if name == slow:
            loop.call_soon_threadsafe(entered.set)
            time.sleep(1.5)  # a call that blocks, like one waiting for SQLite's write lock
        return get_store(name)

    monkeypatch.setattr(engine, "get_store", blocking_get_store)
    slow_call = asyncio.create_task(raw.call("GET", f"state_stores/{b64(slow)}"))
    await asyncio.wait_for(entered.wait(), timeout=10)
    started = time.monotonic()
    other = f"state_stores/{b64('other')}"
    status, answer, _ = await raw.call("GET", other, query="api-version=v0")
    elapsed = time.monotonic() - started
    assert status == 400 and _error(answer)[0] == "invalid_request"
    assert not slow_call.done() and elapsed < 1.0, elapsed
    status, _, _ = await slow_call
    assert status == 200
