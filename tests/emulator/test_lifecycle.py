"""Starting and stopping the emulator: forms, threads, persistence, the command line."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import FoundryStateStore

from foundry_checkpoint.emulator import EmulatorCredential, FoundryEmulator
from foundry_checkpoint.emulator._credential import user_for_token

from ._harness import client_kwargs, hosted_env

REPO_ROOT = Path(__file__).resolve().parents[2]


async def _put_get(endpoint: str, ca_file: str, key: str, value: dict[str, Any]) -> Any:
    credential = EmulatorCredential("alice")
    store = await FoundryStateStore.get_or_create(
        "lifecycle", credential, endpoint, user_isolation=True, connection_verify=ca_file
    )
    try:
        if value:
            await store.set_item(key, value)
        return await store.get_item(key)
    finally:
        await store.aclose()


@pytest.mark.emulator
def test_sync_context_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    hosted_env(monkeypatch)
    with FoundryEmulator() as emu:
        ca_file = Path(emu.ca_file)
        assert ca_file.is_file() and emu.running
        assert emu.endpoint == f"https://127.0.0.1:{emu.port}/api/projects/emulator"
        item = asyncio.run(_put_get(emu.endpoint, emu.ca_file, "k", {"v": 1}))
        assert item.value == {"v": 1}
        assert emu.requests["put_item"] == 1
    assert not ca_file.parent.exists()
    assert not emu.running
    emu.stop()  # idempotent
    with pytest.raises(RuntimeError, match="not running"):
        _ = emu.endpoint


@pytest.mark.emulator
async def test_async_context_manager_and_restart_of_one_instance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hosted_env(monkeypatch)
    emu = FoundryEmulator(seed=3)
    async with emu:
        first_ca = Path(emu.ca_file)
        assert (await _put_get(emu.endpoint, emu.ca_file, "k", {"v": 1})).value == {"v": 1}
    assert not await asyncio.to_thread(first_ca.exists)
    emu.start()
    emu.start()  # already running: a no-op
    try:
        assert Path(emu.ca_file) != first_ca
        # in memory: a new start is a new, empty store
        assert await _put_get(emu.endpoint, emu.ca_file, "k", {}) is None
        assert emu.requests["put_item"] == 1  # counts survive the restart
    finally:
        emu.stop()
        emu.stop()


async def test_server_survives_a_caller_that_blocks_its_own_loop(
    emu: FoundryEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync bridge blocks this loop while another thread's loop talks to the emulator."""
    hosted_env(monkeypatch)
    result: dict[str, Any] = {}

    def worker() -> None:
        result["item"] = asyncio.run(_put_get(emu.endpoint, emu.ca_file, "blocking", {"v": 2}))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(60)  # blocks the test's event loop, as a synchronous caller would
    assert not thread.is_alive()
    assert result["item"].value == {"v": 2}


@pytest.mark.emulator
async def test_restart_on_the_same_data_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosted_env(monkeypatch)
    data = tmp_path / "state" / "emulator.sqlite"
    name = f"persist/{uuid.uuid4().hex}"
    async with FoundryEmulator(data=data) as first:
        store = await FoundryStateStore.get_or_create(
            name, user_isolation=True, item_ttl_seconds=-1, **client_kwargs(first)
        )
        try:
            refs = [await store.set_item(f"k{i}", {"i": i}, tags={"n": str(i)}) for i in range(3)]
            before = await store.list_keys(order="asc")
        finally:
            await store.aclose()
    assert data.is_file()
    async with FoundryEmulator(data=data) as second:
        assert second.data == data
        store = await FoundryStateStore.get_or_create(
            name, user_isolation=False, item_ttl_seconds=5, **client_kwargs(second)
        )
        try:
            descriptor = await store.get()
            assert (descriptor.user_isolation, descriptor.item_ttl_seconds) == (True, -1)
            for index, ref in enumerate(refs):
                item = await store.get_item(f"k{index}")
                assert item is not None and item.value == {"i": index}
                assert item.etag == ref.etag and item.tags == {"n": str(index)}
            after = await store.list_keys(order="asc")
            assert [k.id for k in after.keys] == [k.id for k in before.keys]
        finally:
            await store.aclose()
        assert second.requests["put_item"] == 0


async def test_credential() -> None:
    async with EmulatorCredential("dana") as credential:
        token = await credential.get_token("https://ai.azure.com/.default")
    assert user_for_token(token.token) == "dana"
    assert token.expires_on > time.time() + 3000
    assert user_for_token("something else") != user_for_token("something else 2")
    with pytest.raises(ValueError):
        EmulatorCredential("")


def test_only_loopback_hosts() -> None:
    with pytest.raises(ValueError, match="loopback"):
        FoundryEmulator(host="0.0.0.0")


def _start_cli(*args: str) -> tuple[subprocess.Popen[str], str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "foundry_checkpoint.emulator", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline().strip() for _ in range(2)]
    if not all(lines):
        proc.kill()
        raise AssertionError(f"emulator did not start: {lines} {proc.communicate()[1]}")
    endpoint_line, ca_line = lines
    assert endpoint_line.startswith("endpoint: https://127.0.0.1:")
    assert endpoint_line.endswith("/api/projects/emulator")
    assert ca_line.startswith("ca_file: ")
    return proc, endpoint_line.removeprefix("endpoint: "), ca_line.removeprefix("ca_file: ")


def _stop_cli(proc: subprocess.Popen[str], signum: int) -> None:
    try:
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr


@pytest.mark.emulator
def test_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosted_env(monkeypatch)
    data = tmp_path / "cli.sqlite"
    proc, endpoint, ca_file = _start_cli("--data", str(data), "--seed", "5")
    try:
        item = asyncio.run(_put_get(endpoint, ca_file, "k", {"from": "cli"}))
        assert item.value == {"from": "cli"}
    finally:
        _stop_cli(proc, signal.SIGTERM)
    assert not Path(ca_file).exists()

    proc, endpoint, ca_file = _start_cli("--data", str(data))
    try:
        item = asyncio.run(_put_get(endpoint, ca_file, "k", {}))
        assert item is not None and item.value == {"from": "cli"}
    finally:
        _stop_cli(proc, signal.SIGINT)


@pytest.mark.emulator
def test_command_line_refuses_what_it_cannot_serve(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(  # a directory is no database
        [sys.executable, "-m", "foundry_checkpoint.emulator", "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.startswith("error: "), done.stderr
    assert "endpoint:" not in done.stdout
