"""Local mode loads no hosted-only code: the blob spill client, its HTTP stack, the SDK backend.

Each module kept out is memory every local process would carry for nothing (peak RSS is one of
the benchmark targets). The check runs in a fresh interpreter, since this test process has
imported everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import foundry_checkpoint
import foundry_checkpoint.spill

ROOT = Path(__file__).resolve().parents[2]

#: Modules (and their submodules) that a local-mode write and read must not import.
HOSTED_ONLY = (
    "aiohttp",
    "azure.core.pipeline.transport._aiohttp",
    "azure.identity",
    "azure.storage",
    "cryptography",
    "filelock",
    "foundry_checkpoint._store._sdk_local",
    "foundry_checkpoint.spill._azure",
    "foundry_checkpoint.spill._azure_clients",
)

_LOCAL_ROUND_TRIP = """
import asyncio, json, sys
from foundry_checkpoint import FoundryCheckpointer
from langgraph.checkpoint.base import empty_checkpoint

async def main():
    saver = FoundryCheckpointer()
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    stored = await saver.aput(config, checkpoint, {"source": "input", "step": -1}, {})
    found = await saver.aget_tuple(stored)
    await saver.aclose()
    return repr(saver), found is not None and found.checkpoint["id"] == checkpoint["id"]

shown, read_back = asyncio.run(main())
print(json.dumps({"repr": shown, "read_back": read_back, "modules": sorted(sys.modules)}))
"""


def _local_env(state_root: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FOUNDRY_HOSTING", "FOUNDRY_PROJECT", "FOUNDRY_CHECKPOINT_BLOB"))
    }
    env["AGENTSERVER_STATE_ROOT"] = str(state_root)
    env["AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING"] = "true"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def test_a_local_write_and_read_import_no_hosted_only_module(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LOCAL_ROUND_TRIP],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_local_env(tmp_path / "state"),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["read_back"]
    assert "backend='local-sqlite'" in report["repr"], report["repr"]
    modules: list[str] = report["modules"]
    assert "foundry_checkpoint._store._embedded" in modules  # the round trip did run locally
    loaded = [m for m in modules if any(m == h or m.startswith(h + ".") for h in HOSTED_ONLY)]
    assert not loaded


def test_the_blob_spill_is_still_reachable_by_its_public_paths() -> None:
    from foundry_checkpoint.spill import AzureBlobSpill
    from foundry_checkpoint.spill._azure import AzureBlobSpill as defined

    assert AzureBlobSpill is defined
    assert foundry_checkpoint.AzureBlobSpill is defined
    assert foundry_checkpoint.spill.AzureBlobSpill is defined
    assert "AzureBlobSpill" in dir(foundry_checkpoint.spill)
