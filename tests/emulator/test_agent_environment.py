"""``FoundryEmulator.agent_environment()``: a hosted agent's process, unchanged, on the emulator.

The process gets no credential and no CA file in code: ``DefaultAzureCredential`` obtains the
container's managed-identity token from the emulator, and ``SSL_CERT_FILE`` makes the process
trust the emulator's certificate.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from foundry_checkpoint.emulator import FoundryEmulator
from foundry_checkpoint.emulator._credential import token_for_user, user_for_token
from foundry_checkpoint.emulator._platform import AGENT_IDENTITY

pytestmark = pytest.mark.emulator

ROOT = Path(__file__).resolve().parents[2]

# Runs in the agent's process: the default credential path and a store call as a platform request.
_AGENT = """
import asyncio, json
from azure.ai.agentserver.core import FoundryAgentRequestContext, set_request_context
from azure.ai.agentserver.core.storage import FoundryStateStore
from azure.identity.aio import DefaultAzureCredential

async def main() -> None:
    async with DefaultAzureCredential() as credential:
        token = (await credential.get_token("https://ai.azure.com/.default")).token
    set_request_context(FoundryAgentRequestContext(call_id=CALL_ID, user_id="alice"))
    store = await FoundryStateStore.get_or_create("agent-env", user_isolation=True)
    async with store:
        await store.set_item("k", {"v": 1})
    print(json.dumps({"token": token}))

asyncio.run(main())
"""


def _get(url: str, ca_file: str, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    context = ssl.create_default_context(cafile=ca_file)
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_token_endpoint_requires_the_identity_header() -> None:
    with FoundryEmulator() as emu:
        env = emu.agent_environment()
        url = f"{env['IDENTITY_ENDPOINT']}?api-version=2019-08-01&resource=https://ai.azure.com"
        status, body = _get(url, emu.ca_file, {})
        assert status == 401 and "access_token" not in body
        status, body = _get(url, emu.ca_file, {"X-IDENTITY-HEADER": "wrong"})
        assert status == 401
        status, body = _get(url, emu.ca_file, {"X-IDENTITY-HEADER": env["IDENTITY_HEADER"]})
        assert status == 200
        assert user_for_token(str(body["access_token"])) == AGENT_IDENTITY
        assert body["resource"] == "https://ai.azure.com" and body["token_type"] == "Bearer"
        missing = env["IDENTITY_ENDPOINT"] + "?api-version=2019-08-01"
        assert _get(missing, emu.ca_file, {"X-IDENTITY-HEADER": env["IDENTITY_HEADER"]})[0] == 400
        assert sum(emu.requests.values()) == 0  # not a storage call


def test_an_agent_process_runs_unchanged_on_the_emulator(tmp_path: Path) -> None:
    with FoundryEmulator() as emu:
        call_id = emu.mint_call("alice")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AZURE_CLIENT")},
            **emu.agent_environment(session_id="s-1"),
            "AGENTSERVER_STATE_ROOT": str(tmp_path),
            "AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING": "true",
            "PYTHONPATH": str(ROOT),
        }
        assert env["FOUNDRY_AGENT_SESSION_ID"] == "s-1"
        assert env["FOUNDRY_PROJECT_ENDPOINT"] == emu.endpoint
        done = subprocess.run(
            [sys.executable, "-c", f"CALL_ID = {call_id!r}\n{_AGENT}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.splitlines()[-1]) == {"token": token_for_user(AGENT_IDENTITY)}
        assert emu.requests["put_item"] == 1


def test_agent_environment_needs_a_running_emulator() -> None:
    with pytest.raises(RuntimeError, match="not running"):
        FoundryEmulator().agent_environment()
